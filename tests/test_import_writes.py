"""How an import writes (turnstore/repositories/import_writes.py, turnstore/repositories/imports.py).

What is checked: a large session's commit leaves its pages in the log and asks
the import's checkpoint thread, which copies them; everything else (small
writes, enclosing transactions, other journal modes, an application that
turned automatic checkpoints off, PostgreSQL) keeps SQLite's own behaviour;
failures are logged; no thread outlives ``import_``; the process's sqlite3
adapter registry and the collector's state are the same during the writes
and after; rows of every kind (some inserted without their NULL columns) are
stored as given, in order.
"""

from __future__ import annotations

import gc
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
import sqlalchemy as sa
from factories import assistant, extension, tool_result, user

from turnstore import Store
from turnstore.database import Database
from turnstore.importers.base import LoopRow, MessageRow, SessionBundle
from turnstore.repositories import import_writes, imports
from turnstore.repositories.import_writes import LARGE_SESSION_MESSAGES, ImportWrites

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
    return Path(str(store.engine.url.database)).stat().st_size


def write_export(path: Path, messages: int) -> Path:
    """A turnstore export of one session with ``messages`` messages (every kind), written by hand."""
    loop_id = "big.1"
    lines: list[dict[str, Any]] = [
        {"type": "session", "session_id": "big", "version": 1},
        {"type": "loop", "loop_id": loop_id, "config": {"model": "claude-sonnet-4-5", "provider": "anthropic"}},
    ]
    kinds = [
        lambda i: user(f"question {i}", timestamp=i),
        lambda i: assistant(f"answer {i}", calls=(f"c{i}",), timestamp=i),
        lambda i: tool_result(f"c{i - 1}", f"output {i}", timestamp=i),
        lambda i: extension("note", {"i": i}),
    ]
    for index in range(messages):
        message = kinds[index % 4](index)
        lines.append(
            {
                "type": "message",
                "loop_id": loop_id,
                "turn_index": index // 4,
                "message": message.model_dump(mode="json"),
            }
        )
    path.write_text("".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def requests(monkeypatch: pytest.MonkeyPatch) -> list[ImportWrites]:
    """Requests for a checkpoint on the import's thread, recorded instead of run."""
    made: list[ImportWrites] = []
    monkeypatch.setattr(ImportWrites, "_request", lambda self: made.append(self))
    return made


def test_a_plain_commit_checkpoints_itself(sqlite_store: Store) -> None:
    write_log_pages(sqlite_store)

    assert main_file_size(sqlite_store) > 5_000_000  # SQLite's automatic checkpoint copied the log


def test_a_large_session_leaves_the_pages_in_the_log_and_asks_the_thread(
    sqlite_store: Store, requests: list[ImportWrites]
) -> None:
    writes = ImportWrites(sqlite_store._db, checkpoint_thread=True)
    with writes.session(LARGE_SESSION_MESSAGES):
        assert sqlite_store._db.pragma("wal_autocheckpoint") == 0
        assert sqlite_store._db.pragma("cache_size") == -3 * LARGE_SESSION_MESSAGES
        session_id, _ = write_log_pages(sqlite_store)

    assert requests == [writes]
    assert main_file_size(sqlite_store) < 1_000_000
    assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000  # restored
    assert sqlite_store._db.pragma("cache_size") == -2000
    assert len(sqlite_store.messages.last(session_id, 50)) == 30  # committed and readable from the log


def test_the_thread_copies_the_log_and_ends_on_close(sqlite_store: Store) -> None:
    writes = ImportWrites(sqlite_store._db, checkpoint_thread=True)
    with writes.session(LARGE_SESSION_MESSAGES):
        session_id, _ = write_log_pages(sqlite_store)
    executor = writes._executor
    assert executor is not None
    threads = set(executor._threads)
    writes.close()

    assert threads and not any(thread.is_alive() for thread in threads)
    assert main_file_size(sqlite_store) > 5_000_000
    assert [message.text() for message in sqlite_store.messages.last(session_id, 2)] == [f"28 {BIG}", f"29 {BIG}"]
    writes.close()  # idempotent


def test_a_spilled_large_session_keeps_the_default_cache(sqlite_store: Store, requests: list[ImportWrites]) -> None:
    with ImportWrites(sqlite_store._db, checkpoint_thread=True).session(LARGE_SESSION_MESSAGES, spilled=True):
        assert sqlite_store._db.pragma("cache_size") == -2000
        assert sqlite_store._db.pragma("wal_autocheckpoint") == 0


def test_a_failed_write_restores_the_settings_and_asks_nothing(
    sqlite_store: Store, requests: list[ImportWrites]
) -> None:
    session_id = sqlite_store.sessions.create().session_id
    with pytest.raises(RuntimeError, match="stop"):
        with (
            ImportWrites(sqlite_store._db, checkpoint_thread=True).session(LARGE_SESSION_MESSAGES),
            sqlite_store.transaction(),
        ):
            sqlite_store.loops.start(session_id)
            raise RuntimeError("stop")

    assert requests == []
    assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000
    assert sqlite_store._db.pragma("cache_size") == -2000
    assert sqlite_store.loops.list(session_id) == []


@pytest.mark.parametrize(
    "pragmas",
    [{"wal_autocheckpoint": 0}, {"journal_mode": "delete"}],
    ids=["application turned automatic checkpoints off", "not in WAL mode"],
)
def test_deferral_leaves_other_settings_alone(
    tmp_path: Path, requests: list[ImportWrites], pragmas: dict[str, Any]
) -> None:
    with Store(tmp_path / "a.db", pragmas=pragmas) as store:
        before = store._db.pragma("wal_autocheckpoint")
        with ImportWrites(store._db, checkpoint_thread=True).session(LARGE_SESSION_MESSAGES):
            assert store._db.pragma("wal_autocheckpoint") == before
            write_log_pages(store)

        assert requests == []
        assert store._db.pragma("wal_autocheckpoint") == before


def test_small_sessions_and_enclosing_transactions_keep_sqlites_settings(
    sqlite_store: Store, requests: list[ImportWrites]
) -> None:
    writes = ImportWrites(sqlite_store._db, checkpoint_thread=True)
    with writes.session(LARGE_SESSION_MESSAGES - 1):
        assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000
        assert sqlite_store._db.pragma("cache_size") == -2000
    with sqlite_store.transaction():
        with writes.session(LARGE_SESSION_MESSAGES):
            assert sqlite_store._db.pragma("wal_autocheckpoint") == 1000  # the outer commit checkpoints

    assert requests == []


@pytest.mark.parametrize("messages", [LARGE_SESSION_MESSAGES - 1, LARGE_SESSION_MESSAGES])
@pytest.mark.parametrize("tune_process", [True, False])
def test_only_large_imports_that_may_tune_the_process_ask_for_a_checkpoint(
    store: Any, backend: str, tmp_path: Path, requests: list[ImportWrites], messages: int, tune_process: bool
) -> None:
    report = store.import_("turnstore", write_export(tmp_path / "big.jsonl", messages), tune_process=tune_process)

    assert report.ok and report.messages == messages
    large = messages >= LARGE_SESSION_MESSAGES
    # PostgreSQL has no WAL file; without tune_process the commit checkpoints itself, as SQLite does by default.
    assert len(requests) == (1 if large and tune_process and backend.startswith("sqlite") else 0)


def test_a_failed_checkpoint_is_logged(
    sqlite_store: Store, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = Database.pragma

    def refuse(self: Database, pragma: str) -> Any:
        if pragma.startswith("wal_checkpoint"):
            raise sqlite3.OperationalError("disk I/O error")
        return real(self, pragma)

    monkeypatch.setattr(Database, "pragma", refuse)
    with caplog.at_level(logging.WARNING, logger=import_writes.__name__):
        with ImportWrites(sqlite_store._db, checkpoint_thread=True) as writes:
            writes._request()

    assert "WAL checkpoint after an import failed: disk I/O error" in caplog.text


def test_no_thread_outlives_an_import(sqlite_store: Store, tmp_path: Path) -> None:
    before = set(threading.enumerate())
    folder = tmp_path / "in"
    folder.mkdir()
    for index in range(2):
        text = write_export(tmp_path / "x.jsonl", LARGE_SESSION_MESSAGES).read_text()
        (folder / f"{index}.jsonl").write_text(text.replace('"big', f'"big{index}'))
    seen: list[set[threading.Thread]] = []

    report = sqlite_store.import_(
        "turnstore", folder, progress=lambda *_: seen.append(set(threading.enumerate())), tune_process=True
    )

    assert report.ok and len(report.sessions_written) == 2
    assert any(thread not in before for thread in seen[0])  # the first file's checkpoint thread, during the call
    assert set(threading.enumerate()) == before


def test_an_import_starts_no_thread_unless_it_may_tune_the_process(sqlite_store: Store, tmp_path: Path) -> None:
    before = set(threading.enumerate())
    seen: list[set[threading.Thread]] = []
    path = write_export(tmp_path / "big.jsonl", LARGE_SESSION_MESSAGES + 1)

    report = sqlite_store.import_("turnstore", path, progress=lambda *_: seen.append(set(threading.enumerate())))

    assert report.ok and report.messages == LARGE_SESSION_MESSAGES + 1
    assert seen == [before] and set(threading.enumerate()) == before


@pytest.mark.parametrize("tune_process", [False, True])
def test_an_import_leaves_the_adapter_registry_and_the_collector_as_they_were(
    store: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tune_process: bool
) -> None:
    """Without tune_process the collector is as the app set it even while rows are written; with it, paused then."""
    adapters = dict(sqlite3.adapters)
    during: list[tuple[dict[Any, Any], bool]] = []
    real = imports._insert_messages

    def watch(db: Database, rows: list[dict[str, Any]]) -> None:
        during.append((dict(sqlite3.adapters), gc.isenabled()))
        real(db, rows)

    monkeypatch.setattr(imports, "_insert_messages", watch)
    text = write_export(tmp_path / "big.jsonl", 40).read_text()
    for enabled in (True, False):
        path = tmp_path / f"{enabled}.jsonl"
        path.write_text(text.replace('"big', f'"big-{enabled}'))
        (gc.enable if enabled else gc.disable)()
        try:
            during.clear()
            assert store.import_("turnstore", path, tune_process=tune_process).ok
            assert gc.isenabled() is enabled
            assert during and all(collector is (enabled and not tune_process) for _, collector in during)
            assert all(registry == adapters for registry, _ in during)
        finally:
            gc.enable()
    assert sqlite3.adapters == adapters


@pytest.mark.parametrize("messages", [8, LARGE_SESSION_MESSAGES + 3])
def test_rows_of_every_kind_are_stored_as_given_in_order(store: Any, tmp_path: Path, messages: int) -> None:
    path = write_export(tmp_path / "big.jsonl", messages)

    report = store.import_("turnstore", path)

    assert report.ok and report.sessions_written == ["big"]
    stored = list(store.messages.records("big"))
    assert [record.seq for record in stored] == list(range(messages))
    assert [record.message_id for record in stored] == sorted(record.message_id for record in stored)
    sources = [json.loads(line)["message"] for line in path.read_text().splitlines()[2:]]
    assert [record.message.model_dump(mode="json") for record in stored] == sources
    with store.engine.connect() as connection:
        columns = connection.execute(
            sa.text(
                "SELECT role, kind, model, stop_reason, input_tokens FROM messages WHERE session_id = 'big' ORDER BY id"
            )
        ).all()
    assert [tuple(row) for row in columns[:4]] == [
        ("user", None, None, None, None),
        (
            "assistant",
            None,
            stored[1].message.model,
            stored[1].message.stop_reason.value,
            stored[1].message.usage.input,
        ),
        ("toolResult", None, None, None, None),
        ("extension", "note", None, None, None),
    ]
    assert store.import_("turnstore", path).sessions_unchanged == ["big"]


def test_writing_lets_the_bundles_messages_go(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as store:
        bundle = SessionBundle(session_id="s", origin="here")
        bundle.loops.append(LoopRow(loop_id="s.1"))
        bundle.messages.extend(MessageRow(user(str(i)), "s.1", 0) for i in range(50))
        status = imports.write_bundle(
            store._db, bundle, "turnstore", replace=False, limits=store.settings.limits, report={}
        )
        assert status == imports.WRITTEN
        assert bundle.messages == []
        assert len(list(store.messages.records("s"))) == 50


def _import_and_wait(path: str, source: str, fd: int) -> None:
    """A child: import, say so, then wait to be killed."""
    store = Store(path)
    report = store.import_("turnstore", source)
    os.write(fd, b"R" if report.ok else b"E")
    time.sleep(60)
    os._exit(0)


def big_export(path: Path, messages: int) -> Path:
    """A turnstore export of one session of ``messages`` messages of ≈20 KB (a checkpoint of ≈20 MB)."""
    lines: list[dict[str, Any]] = [
        {"type": "session", "session_id": "big", "version": 1},
        {"type": "loop", "loop_id": "big.1"},
    ]
    lines += [
        {
            "type": "message",
            "loop_id": "big.1",
            "turn_index": index,
            "message": user(f"{index} " + "y" * 20_000, timestamp=index).model_dump(mode="json"),
        }
        for index in range(messages)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize("delay", [0.0, 0.03])
def test_a_writer_killed_after_its_import_keeps_the_import_whole(tmp_path: Path, delay: float) -> None:
    messages = LARGE_SESSION_MESSAGES
    source = big_export(tmp_path / "big.jsonl", messages)
    path = tmp_path / "a.db"
    read_fd, write_fd = os.pipe()
    child = multiprocessing.get_context("fork").Process(
        target=_import_and_wait, args=(str(path), str(source), write_fd)
    )
    child.start()
    os.close(write_fd)
    try:
        assert os.read(read_fd, 1) == b"R"  # import_ returned: committed and checkpointed
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


def test_the_checkpoint_thread_ends_when_an_import_raises(sqlite_store: Store, tmp_path: Path) -> None:
    before = set(threading.enumerate())
    path = write_export(tmp_path / "big.jsonl", LARGE_SESSION_MESSAGES)

    def stop(*_: Any) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        sqlite_store.import_("turnstore", path, progress=stop)

    assert set(threading.enumerate()) == before
    assert len(list(sqlite_store.messages.records("big"))) == LARGE_SESSION_MESSAGES


def test_a_store_starts_no_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    with Store(tmp_path / "a.db") as store:
        write_log_pages(store)
        assert set(threading.enumerate()) == before
    assert set(threading.enumerate()) == before
