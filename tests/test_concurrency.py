"""Several processes writing one session (and one loop) at once, on SQLite and PostgreSQL.

Every writer is a separate process with its own store, as several app
instances would be. Afterwards: no error reached a caller, no message is
lost or doubled, each loop's ``seq`` runs 0..n-1 without a gap, minted loop
ids are distinct, and the usage totals are exact. A reader process queries
usage and history all the while.

Counts are small by default so the suite stays quick; ``TURNSTORE_STRESS=1``
runs the full figures quoted in docs/reliability.md (8 writers × 500 appends).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import threading
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, usage, user

from turnstore import Store
from turnstore.repositories import imports as writer

STRESS = os.environ.get("TURNSTORE_STRESS") == "1"
WRITERS = 8 if STRESS else 4
APPENDS = 500 if STRESS else 40
ASSISTANT_USAGE = usage(100, 10, cache_read=5)


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def _writer(url: str, session_id: str, shared_loop: str, worker: int, appends: int, errors: Any) -> None:
    """Append single messages and whole turns, to a loop shared by all writers and to loops of its own."""
    try:
        with Store(url) as store:
            own = [
                store.loops.start(session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"}).loop_id
                for _ in range(2)
            ]
            for i in range(appends):
                loop_id = shared_loop if i % 2 == 0 else own[i % 4 // 2]
                # A loop refuses a turn index below one it holds: the writers interleave in the shared
                # loop, so they all write its turn 0; in their own loops turns rise with i.
                turn = 0 if loop_id == shared_loop else i
                if i % 5 == 4:
                    store.messages.append_turn(
                        loop_id,
                        turn,
                        [user(f"w{worker}-{i}-prompt"), assistant(f"w{worker}-{i}-reply", u=ASSISTANT_USAGE)],
                    )
                else:
                    store.messages.append(user(f"w{worker}-{i}"), loop_id=loop_id, turn_index=turn)
    except BaseException:
        errors.put(f"writer {worker}: {traceback.format_exc()}")


def _reader(url: str, session_id: str, shared_loop: str, stop: Any, errors: Any) -> None:
    """Read usage and history until the writers are done."""
    try:
        with Store(url) as store:
            while not stop.is_set():
                store.usage.session(session_id)
                store.usage.by_model(session_id)
                store.messages.last(session_id, 50)
                store.messages.context(shared_loop)
                time.sleep(0.005)
    except BaseException:
        errors.put(f"reader: {traceback.format_exc()}")


@pytest.fixture(params=["sqlite", "postgresql"])
def engine_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """An empty, migrated database on each engine."""
    if request.param == "postgresql":
        database = request.getfixturevalue("postgres")
        database.empty()
        return database.url
    path = tmp_path / "concurrent.db"
    Store(path).close()
    return str(path)


def test_processes_append_to_one_session_and_loop(engine_url: str) -> None:
    with Store(engine_url) as store:
        session_id = store.sessions.create(title="shared").session_id
        shared_loop = store.loops.start(session_id).loop_id
    context = _context()
    errors = context.Queue()
    stop = context.Event()
    reader = context.Process(target=_reader, args=(engine_url, session_id, shared_loop, stop, errors))
    writers = [
        context.Process(target=_writer, args=(engine_url, session_id, shared_loop, worker, APPENDS, errors))
        for worker in range(WRITERS)
    ]
    reader.start()
    for process in writers:
        process.start()
    for process in writers:
        process.join(timeout=600)
    stop.set()
    reader.join(timeout=60)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    assert [process.exitcode for process in writers] == [0] * WRITERS

    with Store(engine_url) as store:
        loops = store.loops.list(session_id)
        assert len(loops) == 1 + 2 * WRITERS
        assert len({loop.loop_id for loop in loops}) == len(loops)
        texts: Counter[str] = Counter()
        for loop in loops:
            stored = list(store.messages.records(loop_id=loop.loop_id))
            assert [m.seq for m in stored] == list(range(len(stored))), f"seq gap or duplicate in {loop.loop_id}"
            texts.update(m.message.text() for m in stored)
        turns = APPENDS // 5
        expected = {f"w{w}-{i}" for w in range(WRITERS) for i in range(APPENDS) if i % 5 != 4}
        expected |= {
            f"w{w}-{i}-{part}"
            for w in range(WRITERS)
            for i in range(APPENDS)
            if i % 5 == 4
            for part in ("prompt", "reply")
        }
        assert set(texts) == expected
        assert max(texts.values()) == 1, "a message was stored twice"
        totals = store.usage.session(session_id)
        assert totals.requests == WRITERS * turns
        assert (totals.input, totals.output, totals.cache_read) == (
            100 * WRITERS * turns,
            10 * WRITERS * turns,
            5 * WRITERS * turns,
        )


def _starter(url: str, session_id: str, count: int, errors: Any) -> None:
    try:
        with Store(url) as store:
            for _ in range(count):
                store.loops.start(session_id, config={"model": "gpt-5", "provider": "openai"})
    except BaseException:
        errors.put(traceback.format_exc())


def test_concurrent_loop_starts_mint_distinct_ids(engine_url: str) -> None:
    with Store(engine_url) as store:
        session_id = store.sessions.create().session_id
    context = _context()
    errors = context.Queue()
    processes = [context.Process(target=_starter, args=(engine_url, session_id, 10, errors)) for _ in range(4)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=300)
    failures = []
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    with Store(engine_url) as store:
        ids = [loop.loop_id for loop in store.loops.list(session_id)]
    assert len(ids) == 40
    assert sorted(int(loop_id.rsplit(".", 1)[1]) for loop_id in ids) == list(range(1, 41))


IMPORTERS = 6 if STRESS else 4
IMPORT_ROUNDS = 5 if STRESS else 2
IMPORT_SESSIONS = 12


@pytest.fixture(scope="module")
def import_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of turnstore JSONL sessions (1-3 loops, a branch in some), one file each."""
    root = tmp_path_factory.mktemp("concurrent-import")
    folder = root / "sessions"
    folder.mkdir()
    with Store(root / "scratch.db") as store:
        for i in range(IMPORT_SESSIONS):
            session_id = f"shared-{i:02d}"
            store.sessions.create(session_id, title=f"session {i}")
            for n in range(1 + i % 3):
                loop_id = store.loops.start(session_id, config={"model": "gpt-5", "provider": "openai"}).loop_id
                for turn in range(5 + i):
                    text = f"{session_id} {n} reply {turn}"
                    reply = assistant(text, model="gpt-5", provider="openai", u=usage(10 + turn, 2))
                    store.messages.append_turn(loop_id, turn, [user(f"{session_id} {n} prompt {turn}"), reply])
            if i % 4 == 0:
                message_id = next(iter(store.messages.records(loop_id=loop_id))).message_id
                branch = store.loops.start(
                    session_id, parent_loop_id=loop_id, continuation_kind="branch", fork_after=message_id
                ).loop_id
                store.messages.append_turn(branch, 0, [user("instead"), assistant("branched")])
            store.export(session_id, "turnstore", folder / f"{session_id}.jsonl")
    return folder


def _importer(url: str, folder: str, start: Any, results: Any) -> None:
    """Import the folder once, as soon as every importer is ready; report what the import said."""
    try:
        with Store(url) as store:
            start.wait()
            report = store.import_("turnstore", folder)
        results.put(("report", report.sessions_written, report.sessions_unchanged, [str(e) for e in report.errors]))
    except BaseException:
        results.put(("error", traceback.format_exc()))


def _snapshot(url: str) -> dict[str, Any]:
    """Every session's lossless export and the store's usage, without the message ids the
    database assigned (they follow the order the writers happened to run in)."""
    with Store(url) as store:
        sessions = [session.session_id for session in store.sessions.list(limit=1_000)]
        return {
            "exports": {sid: _without_ids(store.export(sid, "turnstore")) for sid in sorted(sessions)},
            "usage": store.usage.total().model_dump(),
            "by_day": [row.model_dump() for row in store.usage.by_day()],
        }


def test_processes_import_one_folder_at_once(engine_url: str, import_folder: Path, tmp_path: Path) -> None:
    """Every session is written by exactly one importer and reported unchanged by the others;
    the store ends as one import alone leaves it."""
    reference = tmp_path / "reference.db"
    with Store(reference) as store:
        assert sorted(store.import_("turnstore", import_folder).sessions_written) == [
            f"shared-{i:02d}" for i in range(IMPORT_SESSIONS)
        ]
    expected = _snapshot(str(reference))
    context = _context()
    for round in range(IMPORT_ROUNDS):
        if round:
            _empty(engine_url)
        results = context.Queue()
        start = context.Barrier(IMPORTERS)
        processes = [
            context.Process(target=_importer, args=(engine_url, str(import_folder), start, results))
            for _ in range(IMPORTERS)
        ]
        for process in processes:
            process.start()
        reports = [results.get(timeout=300) for _ in processes]
        for process in processes:
            process.join(timeout=60)
        assert [report for report in reports if report[0] != "report"] == []
        assert [report[3] for report in reports] == [[]] * IMPORTERS, "an importer reported an error"
        written: Counter[str] = Counter()
        for _, sessions_written, sessions_unchanged, _ in reports:
            assert sorted(sessions_written + sessions_unchanged) == sorted(expected["exports"])
            written.update(sessions_written)
        assert written == Counter(list(expected["exports"])), "a session was written twice, or by no importer"
        assert _snapshot(engine_url) == expected


def _empty(url: str) -> None:
    """Delete every session, so the next round imports into an empty store."""
    with Store(url) as store:
        for session in store.sessions.list(limit=1_000):
            store.sessions.delete(session.session_id)


def _without_ids(export: str | None) -> list[dict[str, Any]]:
    """The export's lines, each message's id dropped and each fork point named by (loop, seq)."""
    lines = [json.loads(line) for line in (export or "").splitlines()]
    places = {line["id"]: (line["loop_id"], line["seq"]) for line in lines if line["type"] == "message"}
    for line in lines:
        if line["type"] == "message":
            del line["id"]
        if line["type"] == "loop":
            line["fork_after"] = places.get(line["fork_after"])
            line["keep_from"] = places.get(line["keep_from"])
    return lines


# --- the import that loses the race, step by step on every backend ------------------------


@pytest.fixture
def one_session(tmp_path: Path) -> Path:
    """A turnstore JSONL export of one small session, ``raced``."""
    with Store(tmp_path / "scratch.db") as scratch:
        scratch.sessions.create("raced")
        loop_id = scratch.loops.start("raced", loop_id="raced-loop").loop_id
        for turn in range(3):
            reply = assistant(f"reply {turn}", u=usage(5, 1))
            scratch.messages.append_turn(loop_id, turn, [user(f"prompt {turn}"), reply])
        path = tmp_path / "raced.jsonl"
        scratch.export("raced", "turnstore", path)
    return path


def _look_stale_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer's next look finds the session absent, as when it looked just before another
    import of the session committed; every later look is real."""
    real = writer.check_bundle
    looks: list[str] = []

    def check(db: Any, bundle: Any, fmt: str, *, replace: bool) -> str:
        looks.append(bundle.session_id)
        return writer.WRITTEN if len(looks) == 1 else real(db, bundle, fmt, replace=replace)

    monkeypatch.setattr(writer, "check_bundle", check)


def test_an_import_that_loses_the_race_to_the_same_content_is_unchanged(
    store: Store, one_session: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.import_("turnstore", one_session).sessions_written == ["raced"]
    before = _without_ids(store.export("raced", "turnstore"))
    _look_stale_once(monkeypatch)
    report = store.import_("turnstore", one_session)
    assert (report.sessions_written, report.sessions_unchanged, report.errors) == ([], ["raced"], [])
    assert _without_ids(store.export("raced", "turnstore")) == before


def test_an_import_that_loses_the_race_to_other_content_is_refused_in_one_line(
    store: Store, one_session: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.import_("turnstore", one_session).sessions_written == ["raced"]
    before = _without_ids(store.export("raced", "turnstore"))
    changed = tmp_path / "changed.jsonl"
    changed.write_text(one_session.read_text().replace("prompt 1", "prompt one"))
    _look_stale_once(monkeypatch)
    report = store.import_("turnstore", changed)
    assert (report.sessions_written, report.sessions_unchanged, report.sessions_failed) == ([], [], ["raced"])
    [error] = report.errors
    assert "\n" not in str(error) and "'raced' already exists" in str(error)
    assert _without_ids(store.export("raced", "turnstore")) == before


def test_an_import_whose_loop_id_another_session_holds_is_refused_in_one_line(store: Store, one_session: Path) -> None:
    store.sessions.create("other")
    store.loops.start("other", loop_id="raced-loop")
    report = store.import_("turnstore", one_session)
    assert (report.sessions_written, report.sessions_failed) == ([], ["raced"])
    [error] = report.errors
    assert "\n" not in str(error) and "session 'raced' conflicts with stored data" in str(error)
    assert not store.sessions.exists("raced")


# --- threads: one connection each -----------------------------------------------------------------

THREADS = 20
"""More threads than SQLAlchemy's default pool holds (5 + 10 overflow)."""


def test_more_threads_than_a_default_pool_holds_all_get_through(sync_store: Store) -> None:
    """Each thread that uses a store holds a connection for its life: 20 alive at once all write (none waits
    out a pool timeout), and threads started after they ended get their connections back."""
    sync_store.sessions.create("s")
    loop_id = sync_store.loops.start("s").loop_id
    together = threading.Barrier(THREADS)
    errors: list[BaseException] = []

    def work(index: int) -> None:
        try:
            sync_store.messages.append(user(f"m{index}"), loop_id=loop_id, turn_index=0)
            together.wait(timeout=20)  # every thread alive, its connection held, at once
        except BaseException as error:  # reported below
            errors.append(error)

    for _round in range(2):  # the second round: the first round's threads have ended
        threads = [threading.Thread(target=work, args=(index,)) for index in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        together.reset()
    assert errors == []
    assert len(sync_store.messages.loop(loop_id)) == 2 * THREADS
