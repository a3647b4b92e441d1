"""WAL checkpoints that large writes leave to a helper thread (turnstore/checkpoint.py).

What is checked: a deferred commit leaves its pages in the log (the main file
stays small) and asks the helper, which then copies them; everything else
(small writes, nested transactions, other journal modes, an application that
turned automatic checkpoints off, PostgreSQL) keeps SQLite's own behaviour;
requests merge, failures are logged, ``close()`` waits, and data written while
a checkpoint runs is all there.
"""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from factories import user
from test_import_background import write_export

from turnstore import Store
from turnstore.checkpoint import Checkpointer
from turnstore.database import Database
from turnstore.importers import writer

BIG = "x" * 200_000
"""One message of ≈200 KB: 30 of them fill ≈1,500 log pages, over SQLite's automatic checkpoint (1,000)."""


def write_log_pages(store: Store) -> tuple[str, str]:
    """About 6 MB in one transaction; returns the session and loop written to."""
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    with store.transaction():
        for index in range(30):
            store.messages.append(user(f"{index} {BIG}"), loop_id=loop_id)
    return session_id, loop_id


def main_file_size(store: Store) -> int:
    return Path(store.engine.url.database).stat().st_size


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[Checkpointer]:
    """Requests for a helper checkpoint, recorded instead of run."""
    made: list[Checkpointer] = []
    monkeypatch.setattr(Checkpointer, "request", lambda self: made.append(self))
    return made


def test_a_plain_commit_checkpoints_itself(sqlite_store: Store) -> None:
    write_log_pages(sqlite_store)

    assert main_file_size(sqlite_store) > 5_000_000  # SQLite's automatic checkpoint copied the log


def test_a_deferred_commit_leaves_the_pages_in_the_log_and_asks_the_helper(
    sqlite_store: Store, requests: list[Checkpointer]
) -> None:
    checkpoints = sqlite_store._db.checkpoints
    with checkpoints.deferred():
        assert sqlite_store._db.pragma("wal_autocheckpoint") == 0
        session_id, _ = write_log_pages(sqlite_store)

    assert requests == [checkpoints]
    assert main_file_size(sqlite_store) < 1_000_000
    assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000  # restored
    assert len(sqlite_store.messages.last(session_id, 50)) == 30  # committed and readable from the log


def test_the_helper_copies_the_log_into_the_main_file(sqlite_store: Store) -> None:
    checkpoints = sqlite_store._db.checkpoints
    with checkpoints.deferred():
        session_id, _ = write_log_pages(sqlite_store)
    checkpoints.wait()

    assert main_file_size(sqlite_store) > 5_000_000
    assert [message.text() for message in sqlite_store.messages.last(session_id, 2)] == [f"28 {BIG}", f"29 {BIG}"]
    executor = checkpoints._executor
    assert executor is not None and all(thread.is_alive() for thread in executor._threads)  # kept for the next one


def test_a_failed_write_restores_the_setting_and_asks_nothing(
    sqlite_store: Store, requests: list[Checkpointer]
) -> None:
    session_id = sqlite_store.sessions.create().session_id
    with pytest.raises(RuntimeError, match="stop"):
        with sqlite_store._db.checkpoints.deferred(), sqlite_store.transaction():
            sqlite_store.loops.start(session_id)
            raise RuntimeError("stop")

    assert requests == []
    assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000
    assert sqlite_store.loops.list(session_id) == []


@pytest.mark.parametrize(
    "pragmas",
    [{"wal_autocheckpoint": 0}, {"journal_mode": "delete"}],
    ids=["application turned automatic checkpoints off", "not in WAL mode"],
)
def test_deferral_leaves_other_settings_alone(
    tmp_path: Path, requests: list[Checkpointer], pragmas: dict[str, Any]
) -> None:
    with Store(tmp_path / "a.db", pragmas=pragmas) as store:
        before = store._db.pragma("wal_autocheckpoint")
        with store._db.checkpoints.deferred():
            assert store._db.pragma("wal_autocheckpoint") == before
            write_log_pages(store)

        assert requests == []
        assert store._db.pragma("wal_autocheckpoint") == before


def test_deferral_is_off_when_asked_or_inside_an_enclosing_transaction(
    sqlite_store: Store, requests: list[Checkpointer]
) -> None:
    checkpoints = sqlite_store._db.checkpoints
    with checkpoints.deferred(False):
        assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000
    with sqlite_store.transaction():
        with checkpoints.deferred():
            assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000  # the outer commit checkpoints

    assert requests == []


@pytest.mark.parametrize("messages", [writer.LARGE_SESSION_MESSAGES - 1, writer.LARGE_SESSION_MESSAGES])
def test_only_large_imports_leave_the_checkpoint_to_the_helper(
    store: Any, backend: str, tmp_path: Path, requests: list[Checkpointer], messages: int
) -> None:
    report = store.import_("turnstore", write_export(tmp_path / "big.jsonl", messages))

    assert report.ok and report.messages == messages
    large = messages >= writer.LARGE_SESSION_MESSAGES
    assert len(requests) == (1 if large and backend.startswith("sqlite") else 0)  # PostgreSQL has no WAL file


def test_requests_made_while_one_waits_are_merged(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    started, release = threading.Event(), threading.Event()
    runs: list[float] = []

    def slow(self: Checkpointer) -> None:
        started.set()
        release.wait(10)
        runs.append(time.monotonic())

    monkeypatch.setattr(Checkpointer, "_checkpoint", slow)
    checkpoints = sqlite_store._db.checkpoints
    checkpoints.request()
    assert started.wait(10)
    for _ in range(3):  # the first of these waits behind the running one; the others join it
        checkpoints.request()
    release.set()
    checkpoints.wait()

    assert len(runs) == 2


def test_close_waits_for_the_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    done: list[bool] = []

    def slow(self: Checkpointer) -> None:
        time.sleep(0.2)
        done.append(True)

    monkeypatch.setattr(Checkpointer, "_checkpoint", slow)
    store = Store(tmp_path / "a.db")
    store._db.checkpoints.request()
    executor = store._db.checkpoints._executor
    assert executor is not None
    helpers = set(executor._threads)
    store.close()

    assert done == [True]
    assert helpers and not any(thread.is_alive() for thread in helpers)


def test_a_failed_checkpoint_is_logged(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = Database.pragma

    def refuse(self: Database, pragma: str) -> Any:
        if pragma.startswith("wal_checkpoint"):
            raise sqlite3.OperationalError("disk I/O error")
        return real(self, pragma)

    monkeypatch.setattr(Database, "pragma", refuse)
    with caplog.at_level(logging.WARNING, logger="turnstore.checkpoint"):
        sqlite_store._db.checkpoints.request()
        sqlite_store._db.checkpoints.wait()

    assert "background WAL checkpoint failed: disk I/O error" in caplog.text


def test_writes_during_a_checkpoint_are_all_kept(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    with Store(path) as store:
        for round_ in range(3):
            with store._db.checkpoints.deferred():
                _, loop_id = write_log_pages(store)
            for index in range(20):  # while the helper copies the log
                store.messages.append(user(f"after {round_} {index}"), loop_id=loop_id)
    with Store(path) as store:
        sessions = store.sessions.list()
        assert len(sessions) == 3
        for session in sessions:
            assert len(store.messages.last(session.session_id, 100)) == 50
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        connection.close()


def test_a_forked_child_forgets_the_parents_helper(sqlite_store: Store) -> None:
    checkpoints = sqlite_store._db.checkpoints
    checkpoints.request()
    checkpoints.wait()
    checkpoints.reset_after_fork()

    assert checkpoints._executor is None and checkpoints._queued is None
    checkpoints.request()  # a new helper
    checkpoints.wait()


def _import_and_wait(path: str, source: str, fd: int) -> None:
    """A child: import, say so, then wait to be killed (its helper thread checkpointing meanwhile).

    Killed 0 to 50 ms after it returned, it dies before, during or after the copy into the main file
    (seen: the main file 4 KB, then all 20 MB of it).
    """
    store = Store(path)
    report = store.import_("turnstore", source)
    os.write(fd, b"R" if report.ok else b"E")
    time.sleep(60)
    os._exit(0)


def big_export(path: Path, messages: int) -> Path:
    """A turnstore export of one session of ``messages`` messages of ≈20 KB (a checkpoint of ≈20 MB)."""
    lines = [{"type": "session", "session_id": "big", "version": 1}, {"type": "loop", "loop_id": "big.1"}]
    lines += [{"type": "message", "loop_id": "big.1", "turn_index": index,
               "message": user(f"{index} " + "y" * 20_000, timestamp=index).model_dump(mode="json")}
              for index in range(messages)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("delay", [0.0, 0.01, 0.03, 0.05])
def test_a_writer_killed_while_its_helper_checkpoints_keeps_the_import_whole(tmp_path: Path, delay: float) -> None:
    messages = writer.LARGE_SESSION_MESSAGES
    source = big_export(tmp_path / "big.jsonl", messages)
    path = tmp_path / "a.db"
    read_fd, write_fd = os.pipe()
    child = multiprocessing.get_context("fork").Process(target=_import_and_wait, args=(str(path), str(source), write_fd))
    child.start()
    os.close(write_fd)
    try:
        assert os.read(read_fd, 1) == b"R"  # import_ returned: committed; the helper is checkpointing
        time.sleep(delay)
        child.kill()
        child.join(30)
    finally:
        os.close(read_fd)
        if child.is_alive():
            child.kill()
    assert child.exitcode == -signal.SIGKILL

    with Store(path) as store:
        stored = list(store.messages.records("big"))
        assert len(stored) == messages and stored[-1].message.text().startswith(f"{messages - 1} ")
        assert store.import_("turnstore", source).sessions_unchanged == ["big"]
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        connection.close()
