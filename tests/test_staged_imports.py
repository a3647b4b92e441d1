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


def test_a_large_replace_is_staged_too_and_the_old_session_goes_while_hidden(
    tmp_path: Path, stage_everything: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--replace`` of a stored session: the old rows are removed in batches and the new ones written in
    batches, all under the marker; an app that never waits writes between them and never sees the session
    half replaced; afterwards only the new content is there."""
    path = tmp_path / "store.db"
    source = _pi_file(tmp_path / "big.jsonl", [f"text {n}" for n in range(3)])
    monkeypatch.setattr(staging, "DELETE_BATCH_ROWS", 2)
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
                    assert not app.sessions.exists("big") and app.sessions.count() == 1
                    yield [row]

        return rows()

    monkeypatch.setattr(writer, "_message_batches", interleaved)
    with Store(path) as importer:
        report = importer.import_("pi", source, replace=True)
    assert report.sessions_written == ["big"]
    assert [counts[0] for counts in seen] == [1] * 6  # staged all along, the old rows already gone
    texts = [m.message.text() or "" for m in app.messages.records("big")]
    assert texts[0] == "text 0" and len(texts) == 6
    assert not any(text.startswith("old") for text in texts)
    assert app.loops.list("big")[0].loop_id != old_loop and raw_counts(path)[0] == 0
    app.close()


def test_a_large_replace_that_fails_midway_leaves_nothing_visible(
    tmp_path: Path, stage_everything: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a failed (or killed) staged replace leaves: neither the old session nor a part of the new one."""
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
    assert raw_counts(path) == (0, 0, 0, 0)
