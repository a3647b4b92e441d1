"""A large imported session is written in batches under a staging marker (turnstore.repositories.staging):
other writers take turns between the batches, no read sees the session until it is published, and a crash
leaves nothing visible, which the next writable open removes.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from factories import user
from test_large_imports import PI_FILES, _pi_file, report_of, stored

from turnstore import Store
from turnstore.errors import SessionNotFound, StoreBusy
from turnstore.repositories import imports as writer
from turnstore.repositories import staging

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture
def stage_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stage every imported session, one message per transaction."""
    monkeypatch.setattr(staging, "STAGED_SESSION_MESSAGES", 0)
    monkeypatch.setattr(staging, "BATCH_MESSAGES", 1)


def raw_counts(path: Path) -> tuple[int, int, int, int]:
    """Rows in staging, sessions, loops and messages, read past every filter."""
    with sqlite3.connect(path) as connection:
        return tuple(  # type: ignore[return-value]
            connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("staging", "sessions", "loops", "messages")
        )


@pytest.mark.parametrize("path", PI_FILES, ids=[path.name for path in PI_FILES])
def test_a_staged_session_is_stored_as_one_written_in_one_transaction(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Store(tmp_path / "one.db") as one:
        one_report = one.import_("pi", path, skip_invalid=True)
        one_rows = stored(one)
    monkeypatch.setattr(staging, "STAGED_SESSION_MESSAGES", 0)
    monkeypatch.setattr(staging, "BATCH_MESSAGES", 1)
    with Store(tmp_path / "staged.db") as staged:
        staged_report = staged.import_("pi", path, skip_invalid=True)
        assert stored(staged) == one_rows and one_rows
        assert report_of(staged_report) == report_of(one_report)
        assert staged.import_("pi", path, skip_invalid=True).sessions_unchanged == staged_report.sessions_written
    assert raw_counts(tmp_path / "staged.db")[0] == 0


@pytest.mark.parametrize("path", PI_FILES, ids=[path.name for path in PI_FILES])
def test_a_staged_replace_is_stored_as_a_session_written_in_one_transaction(
    path: Path, tmp_path: Path, stage_everything: None
) -> None:
    """Swapped in under the stored session's id, the staged rows (their loop ids, fork points, media, usage)
    read back as the same session imported in one transaction; the old one is gone whole."""
    with Store(tmp_path / "one.db") as one:
        written = one.import_("pi", path, skip_invalid=True).sessions_written
    with Store(tmp_path / "one.db") as one:
        one_rows = stored(one)
    with Store(tmp_path / "staged.db") as staged:
        for session_id in written:
            old_loop = staged.loops.start(staged.sessions.create(session_id=session_id).session_id).loop_id
            staged.messages.append(user("old"), loop_id=old_loop)
        assert staged.import_("pi", path, skip_invalid=True, replace=True).sessions_written == written
        assert stored(staged) == one_rows and one_rows
    assert raw_counts(tmp_path / "staged.db") == raw_counts(tmp_path / "one.db")


def test_writers_take_turns_between_batches_and_reads_do_not_see_the_staged_session(
    tmp_path: Path, stage_everything: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two batches an app's append gets the write lock at once (a store that never waits for it),
    and the rows committed so far are in the file, yet no read shows the session."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", [f"text {n}" for n in range(5)])
    app = Store(path, busy_budget=0, pragmas={"busy_timeout": 0})
    loop_id = app.loops.start(app.sessions.create(session_id="app").session_id).loop_id
    seen: list[tuple[int, ...]] = []
    original = writer._message_batches

    def interleaved(bundle: Any, limits: Any) -> Iterable[list[dict[str, Any]]]:
        def rows() -> Iterator[list[dict[str, Any]]]:
            for batch in original(bundle, limits):
                for row in batch:
                    app.messages.append(user(f"between {len(seen)}"), loop_id=loop_id)
                    seen.append(raw_counts(path))
                    with pytest.raises(SessionNotFound):
                        app.sessions.get("big")
                    assert [s.session_id for s in app.sessions.list()] == ["app"]
                    assert app.sessions.count() == 1 and not app.sessions.exists("big")
                    assert app.usage.total().requests == 0
                    assert [found.model for found in app.usage.by_model()] == []
                    yield [row]

        return rows()

    monkeypatch.setattr(writer, "_message_batches", interleaved)
    with Store(path) as importer:
        report = importer.import_("pi", source)
    assert report.sessions_written == ["big"]
    assert [counts[0] for counts in seen] == [1] * 10  # staged all along
    assert [counts[3] for counts in seen] == [2 * n + 1 for n in range(10)]  # each batch committed, and each append
    assert len(list(app.messages.records("big"))) == 10 and app.usage.total().requests == 5
    assert app.sessions.count() == 2 and raw_counts(path)[0] == 0
    app.close()


def test_one_transaction_keeps_other_writers_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What staging changes: below the threshold the session is one transaction, and an app that does not
    wait is refused while it runs."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", ["one", "two"])
    app = Store(path, busy_budget=0, pragmas={"busy_timeout": 0})
    loop_id = app.loops.start(app.sessions.create(session_id="app").session_id).loop_id
    refused: list[Exception] = []
    original = writer._message_batches

    def interleaved(bundle: Any, limits: Any) -> Iterable[list[dict[str, Any]]]:
        def rows() -> Iterator[list[dict[str, Any]]]:
            for batch in original(bundle, limits):
                try:
                    app.messages.append(user("during"), loop_id=loop_id)
                except StoreBusy as error:
                    refused.append(error)
                yield batch

        return rows()

    monkeypatch.setattr(writer, "_message_batches", interleaved)
    with Store(path) as importer:
        assert importer.import_("pi", source).sessions_written == ["big"]
    assert refused
    app.close()


def test_an_import_that_fails_mid_way_leaves_nothing(
    tmp_path: Path, stage_everything: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", ["one", "two", "three"])
    original = writer._message_batches

    def failing(bundle: Any, limits: Any) -> Iterable[list[dict[str, Any]]]:
        def rows() -> Iterator[list[dict[str, Any]]]:
            for n, batch in enumerate(original(bundle, limits)):
                yield batch
                if n == 0:
                    raise KeyboardInterrupt

        return rows()

    monkeypatch.setattr(writer, "_message_batches", failing)
    with Store(path) as importer, pytest.raises(KeyboardInterrupt):
        importer.import_("pi", source)
    assert raw_counts(path) == (0, 0, 0, 0)


def test_a_live_staging_is_not_taken_over(tmp_path: Path, stage_everything: None) -> None:
    """An import of a session another live writer is staging is refused; the staging is left alone."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", ["one"])
    with Store(path) as store:
        store.import_("pi", source)
        store.sessions.delete("big")
        db = store._db
        with db.write():
            db.execute(
                writer.q.insert_session(),
                {
                    "session_id": "big",
                    "agent_id": None,
                    "title": None,
                    "metadata": None,
                    "created_at": db.bind_time(staging._now()),
                    "updated_at": db.bind_time(staging._now()),
                    "source": None,
                },
            )
            staging.begin(db, "big", staging.new_owner())  # this process: live
        report = store.import_("pi", source)
        assert report.sessions_failed == ["big"] and "being imported" in str(report.errors[0])
        assert "\n" not in str(report.errors[0])
        report = store.import_("pi", source, replace=True)
        assert report.sessions_failed == ["big"]
    assert raw_counts(path)[:2] == (1, 1)


def test_a_staging_whose_lease_ran_out_is_removed_on_open(tmp_path: Path, stage_everything: None) -> None:
    path = tmp_path / "store.db"
    with Store(path) as store:
        store.sessions.create(session_id="gone")
        db = store._db
        with db.write():
            staging.begin(db, "gone", "another-host:1:token")
        assert store.sessions.count() == 0
    with Store(path):  # the lease is still running: left alone
        pass
    assert raw_counts(path)[:2] == (1, 1)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE staging SET heartbeat_at = '2000-01-01 00:00:00.000000'")
    with Store(path, read_only=True) as reader:  # a read-only open changes nothing
        assert reader.sessions.count() == 0
    assert raw_counts(path)[:2] == (1, 1)
    with Store(path):
        pass
    assert raw_counts(path) == (0, 0, 0, 0)


KILLED_IMPORT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from turnstore import Store
    from turnstore.repositories import imports as writer
    from turnstore.repositories import staging

    staging.STAGED_SESSION_MESSAGES = 0
    staging.BATCH_MESSAGES = 1
    original = writer._message_batches

    def stalled(bundle, limits):
        for n, batch in enumerate(row for rows in original(bundle, limits) for row in rows):
            if n == 3:
                Path(sys.argv[3]).write_text("ready")
                time.sleep(600)
            yield [batch]

    writer._message_batches = stalled
    with Store(sys.argv[1]) as store:
        store.import_("pi", sys.argv[2])
    """
)


def test_an_import_killed_mid_way_leaves_nothing_visible_and_the_next_open_removes_it(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", [f"text {n}" for n in range(5)])
    ready = tmp_path / "ready"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen([sys.executable, "-c", KILLED_IMPORT, str(path), str(source), str(ready)], env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, "the import ended before it was killed"
            assert time.monotonic() < deadline, "the import did not get going"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    staged, sessions, loops, messages = raw_counts(path)
    assert (staged, sessions, messages) == (1, 1, 3) and loops
    with Store(path, read_only=True) as reader:
        assert reader.sessions.count() == 0 and reader.sessions.list() == []
        assert not reader.sessions.exists("big") and reader.usage.total().requests == 0
    with Store(path) as store:
        assert store.sessions.count() == 0
    assert raw_counts(path) == (0, 0, 0, 0)
    with Store(path) as store:  # and the session imports whole afterwards
        assert store.import_("pi", source).sessions_written == ["big"]
        assert len(list(store.messages.records("big"))) == 10


STALLED_IMPORT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from turnstore import Store
    from turnstore.repositories import imports as writer
    from turnstore.repositories import staging

    staging.STAGED_SESSION_MESSAGES = 0
    staging.BATCH_MESSAGES = 1
    original = writer._message_batches
    ready, go = Path(sys.argv[3]), Path(sys.argv[4])

    def stalled(bundle, limits):
        for n, batch in enumerate(row for rows in original(bundle, limits) for row in rows):
            if n == 3:
                ready.write_text("ready")
                while not go.exists():
                    time.sleep(0.02)
            yield [batch]

    writer._message_batches = stalled
    with Store(sys.argv[1]) as store:
        report = store.import_("pi", sys.argv[2], replace=sys.argv[5] == "replace")
    sys.exit(0 if report.sessions_written == ["big"] else f"not written: {report.errors}")
    """
)


@contextmanager
def _stalled_import(tmp_path: Path, path: Path, source: Path, replace: bool = False) -> Iterator[tuple[Any, Path]]:
    """A child process importing ``source`` staged, stopped after 3 messages until the yielded file exists
    (killed on the way out if it still runs)."""
    ready, go = tmp_path / "ready", tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    arguments = [str(path), str(source), str(ready), str(go), "replace" if replace else "add"]
    child = subprocess.Popen([sys.executable, "-c", STALLED_IMPORT, *arguments], env=env)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert child.poll() is None, "the import ended before it was stopped"
            assert time.monotonic() < deadline, "the import did not get going"
            time.sleep(0.05)
        yield child, go
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()


def test_a_live_import_is_not_taken_over_by_a_process_that_cannot_see_its_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process in another PID namespace (a container with the same host name) finds no process with the
    importer's PID: opening the store or importing the session there must leave the live import alone."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", [f"text {n}" for n in range(5)])
    with _stalled_import(tmp_path, path, source) as (child, go):
        monkeypatch.setattr(staging, "_process_exists", lambda pid: False)
        with Store(path) as other:
            report = other.import_("pi", source)
            assert report.sessions_failed == ["big"] and "being imported" in str(report.errors[0])
        assert raw_counts(path)[0] == 1
        go.write_text("go")
        assert child.wait(timeout=120) == 0
    with Store(path) as store:
        assert len(list(store.messages.records("big"))) == 10
    assert [name for name in os.listdir(tmp_path) if "staging" in name] == []


def test_a_killed_import_is_removed_on_open_though_its_pid_now_names_another_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", [f"text {n}" for n in range(5)])
    with _stalled_import(tmp_path, path, source) as (child, _go):
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert raw_counts(path)[0] == 1
    monkeypatch.setattr(staging, "_process_exists", lambda pid: True)  # the PID was reused
    with Store(path):
        pass
    assert raw_counts(path) == (0, 0, 0, 0)
    assert [name for name in os.listdir(tmp_path) if "staging" in name] == []


def test_a_killed_staged_replace_leaves_the_old_session_whole(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    old = _pi_file(tmp_path / "old.jsonl", [f"old {n}" for n in range(4)])
    new = _pi_file(tmp_path / "new.jsonl", [f"new {n}" for n in range(5)])
    with Store(path) as store:
        store.import_("pi", old)
        before = [(m.id, m.message.text()) for m in store.messages.records("big")]
    counts = raw_counts(path)
    with _stalled_import(tmp_path, path, new, replace=True) as (child, _go):
        with Store(path, read_only=True) as reader:  # while the replace runs: the old session, whole
            assert [(m.id, m.message.text()) for m in reader.messages.records("big")] == before
        child.send_signal(signal.SIGKILL)
        child.wait()
    with Store(path, read_only=True) as reader:
        assert [(m.id, m.message.text()) for m in reader.messages.records("big")] == before
    with Store(path) as store:
        assert [(m.id, m.message.text()) for m in store.messages.records("big")] == before
        assert raw_counts(path) == counts
        assert store.import_("pi", new, replace=True).sessions_written == ["big"]
        assert [m.message.text() for m in store.messages.records("big")][::2] == [f"new {n}" for n in range(5)]


@pytest.mark.parametrize("large", [False, True], ids=["one-transaction", "staged-size"])
def test_appends_of_other_sessions_go_through_while_a_session_is_imported(
    backend: str, store_url: str, large: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite a session over the threshold is staged (writers take turns); on PostgreSQL every session is
    one transaction, which locks its own rows only: an app appending to its own session, with a lock
    timeout so that waiting would fail, is never held up by the import's open transaction."""
    if backend.endswith("async"):
        pytest.skip("the import runs on the sync store")
    if large:
        monkeypatch.setattr(staging, "STAGED_SESSION_MESSAGES", 0)
        monkeypatch.setattr(staging, "BATCH_MESSAGES", 1)
    elif backend == "sqlite":
        pytest.skip("shown by test_one_transaction_keeps_other_writers_out")
    postgresql = backend == "postgresql"
    app_url = f"{store_url}?options=-c%20lock_timeout%3D2000" if postgresql else store_url
    app = Store(app_url, busy_budget=0, pragmas=None if postgresql else {"busy_timeout": 0})
    loop_id = app.loops.start(app.sessions.create(session_id="app").session_id).loop_id
    source = _pi_file(tmp_path / "big.jsonl", ["one", "two", "three"])
    appended = []
    original = writer._message_batches

    def interleaved(bundle: Any, limits: Any) -> Iterable[list[dict[str, Any]]]:
        def rows() -> Iterator[list[dict[str, Any]]]:
            for batch in original(bundle, limits):
                for row in batch:
                    appended.append(app.messages.append(user("during"), loop_id=loop_id))
                    assert not app.sessions.exists("big") and app.sessions.count() == 1
                    yield [row]

        return rows()

    monkeypatch.setattr(writer, "_message_batches", interleaved)
    with Store(store_url) as importer:
        assert importer.import_("pi", source).sessions_written == ["big"]
        staged_rows = importer._db.scalar(staging._any()) if not postgresql else None
    assert len(appended) == 6 and staged_rows is None
    assert app.sessions.count() == 2 and len(list(app.messages.records("big"))) == 6
    app.close()


def test_message_reads_of_a_staged_session_find_nothing(tmp_path: Path, stage_everything: None) -> None:
    """A staged session's loop and message ids, if known, lead to nothing: every read says not found."""
    path = tmp_path / "store.db"
    with Store(path) as store:
        store.import_("pi", _pi_file(tmp_path / "big.jsonl", ["one", "two"]))
        loop_id = store.loops.list("big")[0].loop_id
        first = next(iter(store.messages.records("big"))).message_id
        db = store._db
        with db.write():
            staging.begin(db, "big", staging.new_owner())
        with pytest.raises(SessionNotFound):
            store.messages.last("big", 5)
        with pytest.raises(SessionNotFound):
            list(store.messages.records("big"))
        for read in (
            store.messages.loop,
            store.messages.turns,
            store.messages.context,
            store.loops.get,
            store.usage.loop,
            lambda loop: store.messages.turn(loop, 0),
        ):
            with pytest.raises(LookupError):
                read(loop_id)
        with pytest.raises(LookupError):
            store.messages.get(first)
        for session_read in (store.loops.list, store.usage.session, store.usage.by_loop, store.sessions.get):
            with pytest.raises(SessionNotFound):
                session_read("big")
        assert store.usage.by_session() == [] and store.usage.by_day() == []


def test_a_large_replace_is_staged_and_the_old_session_stays_until_the_new_one_is_swapped_in(
    tmp_path: Path, stage_everything: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--replace`` of a stored session: the new one is written in batches under another id, hidden, and takes
    the old one's place in the last transaction; an app that never waits writes between the batches and sees
    the old session, whole, all along; afterwards only the new content is there."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", [f"text {n}" for n in range(3)])
    app = Store(path, busy_budget=0, pragmas={"busy_timeout": 0})
    old_loop = app.loops.start(app.sessions.create(session_id="big").session_id).loop_id
    for n in range(5):
        app.messages.append(user(f"old {n}"), loop_id=old_loop)
    loop_id = app.loops.start(app.sessions.create(session_id="app").session_id).loop_id
    seen: list[tuple[int, ...]] = []
    original = writer._message_batches

    def interleaved(bundle: Any, limits: Any) -> Iterable[list[dict[str, Any]]]:
        def rows() -> Iterator[list[dict[str, Any]]]:
            for batch in original(bundle, limits):
                for row in batch:
                    app.messages.append(user("between"), loop_id=loop_id)
                    seen.append(raw_counts(path))
                    assert [m.message.text() for m in app.messages.records("big")] == [f"old {n}" for n in range(5)]
                    assert app.sessions.count() == 2 and app.usage.session("big").requests == 0
                    yield [row]

        return rows()

    monkeypatch.setattr(writer, "_message_batches", interleaved)
    with Store(path) as importer:
        report = importer.import_("pi", source, replace=True)
    assert report.sessions_written == ["big"]
    assert [counts[0] for counts in seen] == [1] * 6  # staged all along, beside the old session
    texts = [m.message.text() or "" for m in app.messages.records("big")]
    assert texts[0] == "text 0" and len(texts) == 6
    assert not any(text.startswith("old") for text in texts)
    assert app.loops.list("big")[0].loop_id != old_loop and raw_counts(path) == (
        0,
        2,
        1 + len(app.loops.list("big")),
        6 + 6,
    )
    assert app.usage.session("big").requests == 3
    app.close()


def test_a_large_replace_that_fails_midway_leaves_the_old_session_as_it_was(
    tmp_path: Path, stage_everything: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a failed staged replace leaves: the old session as it was, and nothing of the new one."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", ["one", "two"])
    with Store(path) as store:
        old_loop = store.loops.start(store.sessions.create(session_id="big").session_id).loop_id
        store.messages.append(user("old"), loop_id=old_loop)
    original = writer._message_batches

    def failing(bundle: Any, limits: Any) -> Iterable[list[dict[str, Any]]]:
        def rows() -> Iterator[list[dict[str, Any]]]:
            batches = iter(original(bundle, limits))
            yield next(batches)
            raise KeyboardInterrupt

        return rows()

    monkeypatch.setattr(writer, "_message_batches", failing)
    with Store(path) as store, pytest.raises(KeyboardInterrupt):
        store.import_("pi", source, replace=True)
    assert raw_counts(path) == (0, 1, 1, 1)
    with Store(path) as store:
        assert [m.message.text() for m in store.messages.records("big")] == ["old"]
