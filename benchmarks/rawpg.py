"""The PostgreSQL floor: what a hand-written app would do with ``psycopg`` and the same schema.

The same rows as the SQLite floor (``raw.py``, whose row building it reuses):
a message row, and the session's ``updated_at`` moved to now, in an explicit
``BEGIN`` … ``COMMIT`` on an autocommit connection (as turnstore runs its own
transactions), one reused cursor, the id back through ``RETURNING``. The
message JSON goes in as text (psycopg sends a ``str`` untyped, so the server
takes it as ``json``); reading it back, psycopg's own loader returns dicts.

What it leaves out besides what the SQLite floor leaves out: the floor knows
each loop's next ``seq`` and takes no lock, where turnstore locks the loop row
(``SELECT … FOR UPDATE``) so that concurrent appends to one loop take ``seq``
in turn — one more round trip per write transaction.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import psycopg
import raw

INSERT = raw.INSERT.replace("?", "%s") + " RETURNING id"
TOUCH = raw.TOUCH.replace("?", "%s")
LAST = raw.LAST.replace("?", "%s")
USAGE = raw.USAGE.replace("?", "%s")


def connect(url: str) -> psycopg.Connection[Any]:
    """An autocommit psycopg connection (the floor issues BEGIN / COMMIT itself)."""
    return psycopg.connect(url, autocommit=True)


class RawPgStore(raw.RawStore):
    """Appends and reads with plain psycopg. The app knows each loop's session and counts seq itself."""

    def __init__(self, connection: psycopg.Connection[Any]) -> None:
        super().__init__(connection)  # type: ignore[arg-type]
        self.cursor = connection.cursor()

    def append(self, message: dict[str, Any], session_id: str, loop_id: str, turn_index: int) -> int:
        """One message, one transaction; returns its id."""
        cursor = self.cursor
        row = self._row(message, session_id, loop_id, turn_index)
        cursor.execute("BEGIN")
        try:
            cursor.execute(INSERT, row)
            message_id = cursor.fetchone()[0]  # type: ignore[index]
            cursor.execute(TOUCH, (datetime.now(timezone.utc), session_id))
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")
        return message_id  # type: ignore[no-any-return]

    def append_turn(self, messages: list[dict[str, Any]], session_id: str, loop_id: str, turn_index: int) -> list[int]:
        """A whole turn in one transaction; returns the ids."""
        cursor = self.cursor
        rows = [self._row(message, session_id, loop_id, turn_index) for message in messages]
        ids: list[int] = []
        cursor.execute("BEGIN")
        try:
            for row in rows:
                cursor.execute(INSERT, row)
                ids.append(cursor.fetchone()[0])  # type: ignore[index]
            cursor.execute(TOUCH, (datetime.now(timezone.utc), session_id))
        except BaseException:
            cursor.execute("ROLLBACK")
            raise
        cursor.execute("COMMIT")
        return ids

    def last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        """The session's last n messages, oldest first, as dicts (psycopg parses json itself)."""
        rows = self.cursor.execute(LAST, (session_id, n)).fetchall()
        return [row[0] for row in reversed(rows)]

    def usage(self, session_id: str) -> tuple[Any, ...]:
        """(input, output, reasoning, cache_read, cache_write, total_tokens, requests) of a session."""
        return self.cursor.execute(USAGE, (session_id,)).fetchone()  # type: ignore[return-value]
