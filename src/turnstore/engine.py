"""Database URLs and engines: where a store lives and how its connections are set up.

A URL may be a full SQLAlchemy URL or a bare file path (which means SQLite).
``None`` means ``$TURNSTORE_URL``, else ``sqlite:///turnstore.db``.

SQLite connections get, by default: ``journal_mode=WAL`` (readers never block
the writer), ``synchronous=NORMAL`` (survives a process crash; the last
commits may roll back on power loss — pass ``synchronous="full"`` to survive
that too), ``foreign_keys=ON`` (deleting a session removes its loops and
messages) and ``busy_timeout=5000`` ms. turnstore issues ``BEGIN`` itself
(``BEGIN IMMEDIATE`` for writes), so the driver's implicit transactions are
switched off. A new database file is created readable by its owner only.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

__all__ = ["DEFAULT_URL", "SQLITE_PRAGMAS", "create_engine", "resolve_url"]

DEFAULT_URL = "sqlite:///turnstore.db"

SQLITE_PRAGMAS: dict[str, Any] = {
    "busy_timeout": 5000,
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": "on",
}
"""Pragmas applied to every SQLite connection, in this order (the busy timeout first, so
switching a new file to WAL waits for a concurrent writer instead of failing); any of
them can be overridden per store."""


def resolve_url(url: str | os.PathLike[str] | None = None) -> str:
    """Turn what a user typed into a SQLAlchemy URL string.

    ``None`` → ``$TURNSTORE_URL`` or ``sqlite:///turnstore.db``; a bare path →
    ``sqlite:///<path>``; ``postgresql://`` and ``postgres://`` → the psycopg 3
    driver (``postgresql+psycopg://``).
    """
    if url is None:
        url = os.environ.get("TURNSTORE_URL") or DEFAULT_URL
    text = os.fspath(url)
    if "://" not in text:
        return f"sqlite:///{text}"
    scheme, rest = text.split("://", 1)
    if scheme in {"postgresql", "postgres"}:
        return f"postgresql+psycopg://{rest}"
    return text


def sqlite_path(url: str) -> Path | None:
    """The database file of a SQLite URL, or None for in-memory and non-SQLite URLs."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    if parsed.database.startswith("file:"):  # a SQLite URI filename: file:PATH?mode=...
        path, _, query = parsed.database[5:].partition("?")
        if not path or path == ":memory:" or "mode=memory" in query or "mode=ro" in query:
            return None
        return Path(unquote(path))
    return Path(parsed.database)


def create_engine(url: str | None = None, *, pragmas: Mapping[str, Any] | None = None, echo: bool = False) -> Engine:
    """An Engine for ``url`` with turnstore's connection settings.

    ``pragmas`` overrides :data:`SQLITE_PRAGMAS` key by key (SQLite only).
    """
    resolved = resolve_url(url)
    backend = make_url(resolved).get_backend_name()
    if backend == "sqlite":
        merged = {**SQLITE_PRAGMAS, **(pragmas or {})}
        # busy_timeout goes first whatever the caller's order: later pragmas may need to wait.
        ordered = {"busy_timeout": merged.pop("busy_timeout"), **merged}
        return _sqlite_engine(resolved, ordered, echo)
    engine = sa.create_engine(resolved, echo=echo, pool_pre_ping=True)
    return engine


def _sqlite_engine(url: str, pragmas: Mapping[str, Any], echo: bool) -> Engine:
    path = sqlite_path(url)
    if path is not None:
        _create_private_file(path)
    engine = sa.create_engine(
        url,
        echo=echo,
        connect_args={"check_same_thread": False},
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # turnstore issues BEGIN itself; the driver's implicit transactions would fight that.
        dbapi_connection.isolation_level = None
        for name, value in pragmas.items():
            if name == "journal_mode":
                _set_journal_mode(dbapi_connection, str(value), int(pragmas.get("busy_timeout", 5000)))
            else:
                dbapi_connection.execute(f"PRAGMA {name}={_pragma_value(value)}")

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        # Transactions run through SQLAlchemy here are schema work: take the write lock up front.
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def _set_journal_mode(connection: Any, mode: str, timeout_ms: int) -> None:
    """Switch the journal mode, waiting out other writers.

    SQLite does not call the busy handler for a journal-mode change, so a new
    file being opened while another process writes to it would fail at once;
    retry until the busy timeout instead. A file already in the mode is left alone.
    """
    wanted = _pragma_value(mode).lower()
    if str(connection.execute("PRAGMA journal_mode").fetchone()[0]).lower() == wanted:
        return
    deadline = time.monotonic() + timeout_ms / 1000
    delay = 0.002
    while True:
        try:
            connection.execute(f"PRAGMA journal_mode={wanted}")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) and "busy" not in str(error) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _pragma_value(value: Any) -> str:
    text = str(value)
    if not text.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"invalid SQLite pragma value: {value!r}")
    return text


def _create_private_file(path: Path) -> None:
    """Create the database file (and its folder) with owner-only permissions if it does not exist."""
    if path.exists():
        return
    missing = [folder for folder in path.absolute().parents if not folder.exists()]
    for folder in reversed(missing):  # folders turnstore creates are the owner's only, whatever the umask
        folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)
