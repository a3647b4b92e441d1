"""The floor: what a hand-written app would do with ``sqlite3`` and the same schema.

Same file, same schema (created by turnstore's migrations), same pragmas as
turnstore's SQLite connections, same transaction shape (autocommit driver,
explicit ``BEGIN IMMEDIATE`` / ``COMMIT`` per write transaction), same rows (a message row, and the session's ``updated_at`` moved to now, which
keeps ``sessions list`` in order of activity).
What the floor leaves out is everything a library adds on top: validation,
serializing pydantic models, computing seq and session_id in SQL, typed
results, pricing.

A minimal floor, ``create_minimal``: the same messages table with two
indexes (a session's messages in order, a loop's turns) and no session touch:
what the least an app could keep would cost to append to.

A second floor, ``connect_default``, is the same code on a connection left
at SQLite's defaults (rollback journal, ``synchronous=FULL``, foreign keys
off): what an app gets that never sets a pragma.
"""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from turnstore import media
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
    " cost, model, provider, stop_reason, timestamp, source, search_text, search_thinking)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

SEARCH_WORDS: dict[tuple[str, int], tuple[str | None, str | None]] = {}
"""turnstore's search words of each workload message, by (loop id, seq): learned from turnstore's own
file of a warm-up repetition (:func:`learn_search_words`), so the floor stores and indexes the same
words without paying for finding them (finding them is turnstore's cost)."""


def learn_search_words(path: Path | str) -> None:
    """Fill :data:`SEARCH_WORDS` from a database turnstore wrote."""
    with closing(sqlite3.connect(path)) as connection:
        rows = connection.execute("SELECT loop_id, seq, search_text, search_thinking FROM messages")
        SEARCH_WORDS.update(((loop_id, seq), (text, thinking)) for loop_id, seq, text, thinking in rows)


SEARCH_TAIL = 128
"""turnstore's batch: the FTS5 index catches up once this many messages are not in it (imports: at once)."""

CATCH_UP = (
    "INSERT INTO message_search (rowid, search_text, search_thinking)"
    " SELECT id, search_text, search_thinking FROM messages"
    " WHERE id > (SELECT indexed_to FROM message_search_state)"
    " AND (search_text IS NOT NULL OR search_thinking IS NOT NULL)"
)

INDEXED_TO_NEWEST = "UPDATE message_search_state SET indexed_to = coalesce((SELECT max(id) FROM messages), 0)"

MEDIA = "SELECT data FROM media WHERE sha256 = ?"

TOUCH = "UPDATE sessions SET updated_at = ? WHERE session_id = ?"

LAST = "SELECT message FROM messages WHERE session_id = ? ORDER BY id DESC LIMIT ?"

USAGE = (
    "SELECT SUM(input_tokens), SUM(output_tokens), SUM(reasoning_tokens), SUM(cache_read_tokens),"
    " SUM(cache_write_tokens), SUM(total_tokens), COUNT(*)"
    " FROM messages WHERE session_id = ? AND input_tokens IS NOT NULL"
)

SESSION = (
    "SELECT id, session_id, loop_id, turn_index, seq, message, source FROM messages WHERE session_id = ? ORDER BY id"
)

TURN = "SELECT message FROM messages WHERE loop_id = ? AND turn_index = ? ORDER BY seq"

LOOP_USAGE = USAGE.replace("session_id = ?", "loop_id = ?")

BY_MODEL = (
    "SELECT model, provider, SUM(input_tokens), SUM(output_tokens), SUM(reasoning_tokens), SUM(cache_read_tokens),"
    " SUM(cache_write_tokens), SUM(total_tokens), COUNT(*)"
    " FROM messages WHERE input_tokens IS NOT NULL GROUP BY model, provider ORDER BY model, provider"
)

INSERT_SESSION = (
    "INSERT INTO sessions (session_id, agent_id, title, metadata, created_at, updated_at, source)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)

INSERT_LOOP = (
    "INSERT INTO loops (loop_id, session_id, parent_loop_id, continuation_kind, fork_after, keep_from, config,"
    " config_id, model, provider, status, started_at, ended_at, spawn_loop_id, spawn_tool_call_id,"
    " input_tokens, output_tokens, reasoning_tokens, cache_read_tokens, cache_write_tokens, total_tokens, cost,"
    " metadata, source)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

_USAGE_KEYS = ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens", "cost")

_NO_USAGE = (None,) * 10

_NO_WORDS = (None, None)


def whole_text(connection: sqlite3.Connection, text: str) -> str:
    """A stored text with the media turnstore keeps out of line put back (``turnstore.media``), as turnstore reads it."""
    if media.MARK not in text:
        return text
    return media.join(text, "inline", lambda digest: str(connection.execute(MEDIA, (digest,)).fetchone()[0]))


def connect(path: str) -> sqlite3.Connection:
    """A connection set up as turnstore sets up its own (engine.py)."""
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for name, value in PRAGMAS.items():
        connection.execute(f"PRAGMA {name}={value}")
    return connection


MINIMAL_INDEXES = (
    "CREATE INDEX ix_min_session ON messages (session_id, id)",
    "CREATE INDEX ix_min_turn ON messages (loop_id, turn_index, seq)",
)


def create_minimal(path: Path | str, columns: list[str]) -> sqlite3.Connection:
    """A new file holding only a messages table of ``columns`` (turnstore's, in order) and two indexes."""
    connection = connect(str(path))
    names = ", ".join(f"{name} INTEGER PRIMARY KEY" if name == "id" else name for name in columns)
    connection.execute(f"CREATE TABLE messages ({names})")
    for statement in MINIMAL_INDEXES:
        connection.execute(statement)
    return connection


def connect_default(path: str) -> sqlite3.Connection:
    """A connection that sets no pragma: SQLite's defaults (on a file in rollback-journal mode)."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


def use_rollback_journal(path: Path | str) -> None:
    """Switch a database file (WAL, as turnstore creates it) back to SQLite's default rollback journal."""
    connection = sqlite3.connect(path, isolation_level=None)
    try:
        mode = connection.execute("PRAGMA journal_mode=DELETE").fetchone()[0]
    finally:
        connection.close()
    if mode != "delete":
        raise SystemExit(f"{path}: could not leave WAL mode (journal_mode={mode})")


def pragmas(connection: sqlite3.Connection) -> dict[str, Any]:
    """The effective values of the pragmas turnstore sets."""
    return {name: connection.execute(f"PRAGMA {name}").fetchone()[0] for name in PRAGMAS}


def _now() -> str:
    # The text form turnstore's SQLite DateTime columns use.
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")


def _dumps(message: Any) -> str:
    # Compact and UTF-8, so the stored text equals turnstore's model_dump_json() byte for byte.
    return json.dumps(message, ensure_ascii=False, separators=(",", ":"))


def _time(value: str | None) -> str | None:
    # An export's "2025-11-13T08:00:59.108996Z" in the text form turnstore's SQLite DateTime columns use.
    return None if value is None else f"{value[:10]} {value[11:26]}"


class RawStore:
    """Appends and reads with plain sqlite3. The app knows each loop's session and counts seq itself."""

    def __init__(self, connection: sqlite3.Connection, touch: bool = True) -> None:
        self.connection = connection
        self.touch = touch  # move the session's updated_at on every append (the minimal floor does not)
        self.next_seq: defaultdict[str, int] = defaultdict(int)
        # The same search index upkeep as turnstore's, where the schema has it (the minimal table has none).
        self.indexed_to = 0
        self.batched = isinstance(connection, sqlite3.Connection) and (
            connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'message_search_state'").fetchone() is not None
        )  # PostgreSQL's floor (rawpg.py) shares this class: its GIN index needs no upkeep

    def _index(self, newest: int, at_once: bool = False) -> None:
        """Index the messages not in the FTS5 index yet, once there are :data:`SEARCH_TAIL` (or ``at_once``)."""
        if self.batched and (at_once or newest - self.indexed_to >= SEARCH_TAIL):
            self.connection.execute(CATCH_UP)
            self.connection.execute(INDEXED_TO_NEWEST)
            self.indexed_to = self.connection.execute("SELECT indexed_to FROM message_search_state").fetchone()[0]

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
            *SEARCH_WORDS.get((loop_id, seq), _NO_WORDS),
        )

    def append(self, message: dict[str, Any], session_id: str, loop_id: str, turn_index: int) -> int:
        """One message, one transaction; returns its id."""
        connection = self.connection
        row = self._row(message, session_id, loop_id, turn_index)
        connection.execute("BEGIN IMMEDIATE")
        try:
            message_id = connection.execute(INSERT, row).lastrowid
            if self.touch:
                connection.execute(TOUCH, (_now(), session_id))
            self._index(message_id)  # type: ignore[arg-type]
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
            if self.touch:
                connection.execute(TOUCH, (_now(), session_id))
            self._index(ids[-1])
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return ids

    def last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        """The session's last n messages, oldest first, as dicts."""
        rows = self.connection.execute(LAST, (session_id, n)).fetchall()
        return [self._loads(row[0]) for row in reversed(rows)]

    def usage(self, session_id: str) -> tuple[Any, ...]:
        """(input, output, reasoning, cache_read, cache_write, total_tokens, requests) of a session."""
        return self.connection.execute(USAGE, (session_id,)).fetchone()

    def session(self, session_id: str) -> list[tuple[Any, ...]]:
        """Every message row of a session in order: (id, session_id, loop_id, turn_index, seq, dict, source)."""
        loads = self._loads
        rows = self.connection.execute(SESSION, (session_id,)).fetchall()
        return [(r[0], r[1], r[2], r[3], r[4], loads(r[5]), r[6]) for r in rows]

    def walk(self, session_id: str) -> int:
        """Every message row of a session in order, each parsed as it is reached and let go; returns how many.

        What an app that walks a session (renders, exports, sums it) does by hand:
        one cursor, ``json.loads`` per row, nothing kept.
        """
        loads, walked = self._loads, 0
        for row in self.connection.execute(SESSION, (session_id,)):
            loads(row[5])
            walked += 1
        return walked

    def turn(self, loop_id: str, turn_index: int) -> list[dict[str, Any]]:
        """The messages of one turn, in order, as dicts."""
        return [self._loads(row[0]) for row in self.connection.execute(TURN, (loop_id, turn_index)).fetchall()]

    def _loads(self, text: str) -> Any:
        """A stored message text as a dict (the read database is written by turnstore: see :func:`whole_text`)."""
        return json.loads(whole_text(self.connection, text))

    def usage_loop(self, loop_id: str) -> tuple[Any, ...]:
        """(input, output, reasoning, cache_read, cache_write, total_tokens, requests) of a loop."""
        return self.connection.execute(LOOP_USAGE, (loop_id,)).fetchone()

    def by_model(self) -> list[tuple[Any, ...]]:
        """(model, provider, the sums above...) for every model across the database."""
        return self.connection.execute(BY_MODEL).fetchall()

    # --- bulk import -----------------------------------------------------------------

    def import_jsonl(self, path: Path | str) -> int:
        """Load a turnstore JSONL export: each session, its loops and messages in one transaction.

        Parses each line with ``json.loads`` and writes the rows turnstore's
        importer writes (``executemany`` per table); the message JSON is
        re-serialized compactly, which gives the stored text back byte for
        byte. Returns the number of messages.
        """
        count = 0
        session: tuple[Any, ...] | None = None
        loops: list[tuple[Any, ...]] = []
        rows: list[tuple[Any, ...]] = []
        loads, row_of = json.loads, self._row
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                record = loads(line)
                kind = record["type"]
                if kind == "message":
                    rows.append(row_of(record["message"], session[0], record["loop_id"], record["turn_index"]))
                elif kind == "loop":
                    loops.append(_loop_row(record, session[0]))
                elif kind == "session":
                    if session is not None:
                        count += self._write_session(session, loops, rows)
                    session, loops, rows = _session_row(record), [], []
        if session is not None:
            count += self._write_session(session, loops, rows)
        return count

    def _write_session(
        self, session: tuple[Any, ...], loops: list[tuple[Any, ...]], rows: list[tuple[Any, ...]]
    ) -> int:
        connection = self.connection
        connection.execute("BEGIN IMMEDIATE")
        try:
            connection.execute(INSERT_SESSION, session)
            connection.executemany(INSERT_LOOP, loops)
            connection.executemany(INSERT, rows)
            self._index(0, at_once=True)
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")
        return len(rows)


def _session_row(record: dict[str, Any]) -> tuple[Any, ...]:
    metadata = record.get("metadata")
    return (
        record["session_id"],
        record.get("agent_id"),
        record.get("title"),
        None if metadata is None else _dumps(metadata),
        _time(record["created_at"]),
        _time(record["updated_at"]),
        record.get("source"),
    )


def _loop_row(record: dict[str, Any], session_id: str) -> tuple[Any, ...]:
    if record.get("fork_after") is not None or record.get("keep_from") is not None:
        raise ValueError("the floor's import does not remap fork points (the benchmark workload has none)")
    config = record.get("config")
    usage = record.get("reported_usage")
    metadata = record.get("metadata")
    return (
        record["loop_id"],
        session_id,
        record.get("parent_loop_id"),
        record["continuation_kind"],
        None,
        None,
        None if config is None else _dumps(config),
        record.get("config_id"),
        (config or {}).get("model"),
        (config or {}).get("provider"),
        record["status"],
        _time(record["started_at"]),
        _time(record.get("ended_at")),
        record.get("spawn_loop_id"),
        record.get("spawn_tool_call_id"),
        *((usage.get(key) for key in _USAGE_KEYS) if usage else (None,) * len(_USAGE_KEYS)),
        None if metadata is None else _dumps(metadata),
        record.get("source"),
    )
