"""PostgreSQL databases for one benchmark run: created fresh on the given server, dropped at the end.

The URL given to the suite names a server and a database it may connect to
(like the test suite's ``TURNSTORE_TEST_POSTGRES_URL``); from there the run
creates its own databases, one per system (so each writes into tables of its
own, as each SQLite system writes into a file of its own) and one for the
reads, and drops them all at the end. The server's settings are left as they
are (``synchronous_commit`` included: a commit waits for its WAL flush when
the server says ``on``, its default); the run reports them.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from turnstore import media

TABLES = "imports, messages, loops, sessions"
SETTINGS = ("server_version", "synchronous_commit", "fsync", "wal_sync_method", "shared_buffers", "wal_level")


def plain_url(url: str) -> str:
    """The URL as psycopg takes it (``postgresql+psycopg://`` and ``postgres://`` → ``postgresql://``)."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    if scheme.split("+")[0] not in {"postgresql", "postgres"}:
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    return f"postgresql://{rest}"


def unreachable(url: str) -> str | None:
    """None when the server answers, else why not."""
    try:
        with psycopg.connect(url, connect_timeout=3) as connection:
            connection.execute("SELECT 1")
    except Exception as error:  # any failure to connect means: not reachable
        return f"{hide_password(url)} is not reachable: {str(error).strip()}"
    return None


def hide_password(url: str) -> str:
    return make_url(url).render_as_string(hide_password=True)


class Server:
    """The run's databases on one server: created on demand, emptied between repetitions, dropped at the end."""

    def __init__(self, url: str) -> None:
        self.url = plain_url(url)
        self.prefix = f"turnstore_bench_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.created: list[str] = []
        self.admin = psycopg.connect(self.url, autocommit=True)

    def settings(self) -> dict[str, Any]:
        show = sql.SQL("SHOW {}")
        return {
            name: self.admin.execute(show.format(sql.Identifier(name))).fetchone()[0]  # type: ignore[index]
            for name in SETTINGS
        }

    def database(self, label: str) -> str:
        """URL of the run's database ``label``, created (empty, no schema) the first time."""
        name = f"{self.prefix}_{label}".lower().replace("-", "_")
        if name not in self.created:
            self.admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            self.created.append(name)
        return make_url(self.url).set(database=name).render_as_string(hide_password=False)

    def drop(self) -> None:
        for name in self.created:
            self.admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        self.created = []
        self.admin.close()


def empty(url: str) -> None:
    """Remove every row of turnstore's tables (the schema stays), restarting the id sequences."""
    with psycopg.connect(url, autocommit=True) as connection:
        present = {
            row[0] for row in connection.execute("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        }
        if "messages" in present:
            connection.execute(f"TRUNCATE {TABLES} RESTART IDENTITY CASCADE")


def analyze(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE")


SEARCH_COLUMNS = ("search_text", "search_thinking")
"""turnstore's search words: left out of row comparisons, as on SQLite (``common.SEARCH_COLUMNS``)."""


def message_rows(url: str) -> list[tuple[Any, ...]]:
    """Every column of every message row but the search words, in id order; the JSON as its exact stored text,
    with the media turnstore keeps out of line put back (``turnstore.media``), so a floor's rows compare equal."""
    with psycopg.connect(url) as connection:
        columns = [
            row[0]
            for row in connection.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = 'messages' "
                "AND table_schema = current_schema() ORDER BY ordinal_position"
            )
            if row[0] not in SEARCH_COLUMNS
        ]
        select = ", ".join(f"{c}::text" if c == "message" else c for c in columns)
        rows = connection.execute(f"SELECT {select} FROM messages ORDER BY id").fetchall()
        if connection.execute("SELECT to_regclass('media')").fetchone()[0] is None:  # type: ignore[index]
            return rows
        texts = [i for i, name in enumerate(columns) if name in ("message", "source")]

        def data(digest: str) -> str:
            return str(connection.execute("SELECT data FROM media WHERE sha256 = %s", (digest,)).fetchone()[0])  # type: ignore[index]

        def whole(row: tuple[Any, ...]) -> tuple[Any, ...]:
            values = list(row)
            for i in texts:
                if isinstance(values[i], str) and media.MARK in values[i]:
                    values[i] = media.join(values[i], "inline", data)
            return tuple(values)

        return [whole(row) for row in rows]
