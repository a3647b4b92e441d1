"""SQLite settings while an imported session is written (repositories/import_writes.py).

A session of ``LARGE_SESSION_MESSAGES`` or more is written with a page cache
sized to hold it (3 KiB a message, at most 64 MiB); afterwards the
connection's own setting is back. Smaller sessions, and PostgreSQL, are
written with the connection as it is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_import_writes import write_export

from turnstore import Store
from turnstore.database import Database
from turnstore.repositories import import_writes as writer
from turnstore.repositories import imports


@pytest.fixture
def cache_seen(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The page cache setting each time an import inserts its messages (SQLite only; PostgreSQL: None)."""
    seen: list[Any] = []
    real = imports._insert_messages

    def recording(db: Database, rows: Any) -> None:
        seen.append(db.pragma("cache_size") if db.is_sqlite else None)
        real(db, rows)

    monkeypatch.setattr(imports, "_insert_messages", recording)
    return seen


@pytest.mark.parametrize("messages", [writer.LARGE_SESSION_MESSAGES - 1, writer.LARGE_SESSION_MESSAGES])
def test_a_large_session_is_written_with_a_page_cache_that_holds_it(
    store: Any, backend: str, tmp_path: Path, cache_seen: list[Any], messages: int
) -> None:
    report = store.import_("turnstore", write_export(tmp_path / "big.jsonl", messages))

    assert report.ok and report.messages == messages
    if not backend.startswith("sqlite"):
        assert cache_seen == [None]
        return
    large = messages >= writer.LARGE_SESSION_MESSAGES
    assert cache_seen == [-3 * messages if large else -2000]  # KiB; SQLite's default is 2,000 KiB
    assert len(list(store.messages.records("big"))) == messages


def test_the_page_cache_is_capped(
    sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_seen: list[Any]
) -> None:
    monkeypatch.setattr(writer, "LARGE_WRITE_CACHE_KIB", 3_000)  # as if the session were over 64 MiB's worth

    assert sqlite_store.import_("turnstore", write_export(tmp_path / "big.jsonl", 1_500)).ok
    assert cache_seen == [-3_000]


def test_the_connections_own_setting_is_back_afterwards(tmp_path: Path, cache_seen: list[Any]) -> None:
    with Store(tmp_path / "a.db", pragmas={"cache_size": -12_345}) as store:
        assert store.import_("turnstore", write_export(tmp_path / "big.jsonl", writer.LARGE_SESSION_MESSAGES)).ok

        assert cache_seen == [-3 * writer.LARGE_SESSION_MESSAGES]
        assert store._db.pragma("cache_size") == -12_345


def test_pragmas_during_puts_each_back_even_after_an_error(sqlite_store: Store) -> None:
    db = sqlite_store._db
    with pytest.raises(RuntimeError):
        with db.pragmas_during(cache_size=-4_096, wal_autocheckpoint=7):
            assert (db.pragma("cache_size"), db.pragma("wal_autocheckpoint")) == (-4_096, 7)
            raise RuntimeError("stop")

    assert (db.pragma("cache_size"), db.pragma("wal_autocheckpoint")) == (-2_000, 1_000)
