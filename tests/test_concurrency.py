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

import multiprocessing
import os
import time
import traceback
from collections import Counter
from typing import Any

import pytest
from factories import assistant, usage, user

from turnstore import Store

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
                        loop_id, turn, [user(f"w{worker}-{i}-prompt"), assistant(f"w{worker}-{i}-reply", u=ASSISTANT_USAGE)]
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
        expected |= {f"w{w}-{i}-{part}" for w in range(WRITERS) for i in range(APPENDS) if i % 5 == 4 for part in ("prompt", "reply")}
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
