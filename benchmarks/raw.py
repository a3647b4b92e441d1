"""The floor: what a hand-written app would do with ``sqlite3`` and the same schema.

Same file, same schema (created by turnstore's migrations), same pragmas as
turnstore's SQLite connections, same transaction shape (autocommit driver,
explicit ``BEGIN IMMEDIATE`` / ``COMMIT`` per write transaction), same rows (a message row, and the session's ``updated_at`` moved to now, which
keeps ``sessions list`` in order of activity).
What the floor leaves out is everything a library adds on top: validation,
serializing pydantic models, computing seq and session_id in SQL, typed
results, pricing.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from datetime import datetime, timezone
from typing import Any

from turnstore.engine import SQLITE_PRAGMAS

PRAGMAS = {
    "busy_timeout": 5000,  # first, so switching a new file to WAL waits for a concurrent writer
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": "on",
}
assert PRAGMAS == SQLITE_PRAGMAS, f"turnstore's pragmas changed: {SQLITE_PRAGMAS}"

INSERT = (
    "INSERT INTO messages (session_id, loop_id, turn_index, seq, role, kind, message,"
    " input_tokens, output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, total_tokens,"
    " cost, model, provider, stop_reason, timestamp, source)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

TOUCH = "UPDATE sessions SET updated_at = ? WHERE session_id = ?"

LAST = "SELECT message FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT ?"

USAGE = (
    "SELECT SUM(input_tokens), SUM(output_tokens), SUM(reasoning_tokens), SUM(cache_read_tokens),"
    " SUM(cache_write_tokens), SUM(total_tokens), COUNT(*)"
    " FROM messages WHERE session_id = ? AND input_tokens IS NOT NULL"
)

_NO_USAGE = (None,) * 10


def connect(path: str) -> sqlite3.Connection:
    """A connection set up as turnstore sets up its own (engine.py)."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for name, value in PRAGMAS.items():
        connection.execute(f"PRAGMA {name}={value}")
    return connection


def _now() -> str:
    # The text form turnstore's SQLite DateTime columns use.
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def _dumps(message: dict[str, Any]) -> str:
    # Compact and UTF-8, so the stored text equals turnstore's model_dump_json() byte for byte.
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


class RawStore:
    """Appends and reads with plain sqlite3. The app knows each loop's session and counts seq itself."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.next_seq: defaultdict[str, int] = defaultdict(int)

    def _row(self, message: dict[str, Any], session_id: str, loop_id: str, turn_index: int) -> tuple[Any, ...]:
        if message["role"] == "assistant":
            usage = message["usage"]
            columns: tuple[Any, ...] = (
                usage["input"],
                usage["output"],
                usage["reasoning"],
                usage["cache_read"],
                usage["cache_write"],
                usage["total_tokens"],
                usage.get("cost"),
                message["model"],
                message["provider"],
                message["stopReason"],
            )
        else:
            columns = _NO_USAGE
        seq = self.next_seq[loop_id]
        self.next_seq[loop_id] = seq + 1
        return (
            session_id,
            loop_id,
            turn_index,
            seq,
            message["role"],
            None,
            _dumps(message),
            *columns,
            message.get("timestamp"),
            None,
        )

    def append(self, message: dict[str, Any], session_id: str, loop_id: str, turn_index: int) -> int:
        """One message, one transaction; returns its id."""
        connection = self.connection
        row = self._row(message, session_id, loop_id, turn_index)
        connection.execute("BEGIN IMMEDIATE")
        try:
            message_id = connection.execute(INSERT, row).lastrowid
            connection.execute(TOUCH, (_now(), session_id))
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return message_id  # type: ignore[return-value]

    def append_turn(self, messages: list[dict[str, Any]], session_id: str, loop_id: str, turn_index: int) -> list[int]:
        """A whole turn in one transaction; returns the ids."""
        connection = self.connection
        rows = [self._row(message, session_id, loop_id, turn_index) for message in messages]
        ids: list[int] = []
        connection.execute("BEGIN IMMEDIATE")
        try:
            for row in rows:
                ids.append(connection.execute(INSERT, row).lastrowid)  # type: ignore[arg-type]
            connection.execute(TOUCH, (_now(), session_id))
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return ids

    def last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        """The session's last n messages, oldest first, as dicts."""
        rows = self.connection.execute(LAST, (session_id, n)).fetchall()
        return [json.loads(row[0]) for row in reversed(rows)]

    def usage(self, session_id: str) -> tuple[Any, ...]:
        """(input, output, reasoning, cache_read, cache_write, total_tokens, requests) of a session."""
        return self.connection.execute(USAGE, (session_id,)).fetchone()
