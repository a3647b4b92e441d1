"""SQLite full-text search indexed in batches, not one message at a time.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-26

FTS5 writes a new index segment whenever a trigger adds a row (the trigger's
statement is a savepoint, and FTS5 flushes at each one), and again at each
commit: kept by an insert trigger, the index cost about as much as the rest of
a one-message append. From this revision the writers add new messages to the
index in batches instead (``turnstore.repositories.search_index``):

* ``message_search_state`` holds one row, ``indexed_to``: every message with an
  id up to it is in the FTS5 table, none above it. Writers index the messages
  above it once there are :data:`~turnstore.repositories.search_index.TAIL` of
  them (imports at the end of every batch they write), and move it up.
* The insert trigger now fires only for a message whose id is at or below
  ``indexed_to`` (SQLite reuses the ids of deleted newest rows); the delete and
  update triggers only for an indexed message.
* A search reads the indexed messages through FTS5 and the few above
  ``indexed_to`` through a small index of its own (``search_index.tail``).

On PostgreSQL and on a SQLite without FTS5 there is nothing to change.

Rollback: downgrade() indexes every message above ``indexed_to``, puts back
0007's three triggers and drops the table.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

HAS_WORDS = "({row}.search_text IS NOT NULL OR {row}.search_thinking IS NOT NULL)"
INDEXED_TO = "(SELECT indexed_to FROM message_search_state)"
ADD = (
    "INSERT INTO message_search (rowid, search_text, search_thinking) "
    "SELECT new.id, new.search_text, new.search_thinking WHERE " + HAS_WORDS.format(row="new") + ";"
)
REMOVE = (
    "INSERT INTO message_search (message_search, rowid, search_text, search_thinking) "
    "SELECT 'delete', old.id, old.search_text, old.search_thinking WHERE " + HAS_WORDS.format(row="old") + ";"
)
TRIGGERS = ("message_search_insert", "message_search_delete", "message_search_update")
BATCHED = {
    "message_search_insert": f"AFTER INSERT ON messages WHEN new.id <= {INDEXED_TO} BEGIN {ADD} END",
    "message_search_delete": f"AFTER DELETE ON messages WHEN old.id <= {INDEXED_TO} BEGIN {REMOVE} END",
    "message_search_update": (
        f"AFTER UPDATE OF search_text, search_thinking ON messages WHEN old.id <= {INDEXED_TO} BEGIN {REMOVE} {ADD} END"
    ),
}
EACH_ROW = {  # 0007's
    "message_search_insert": f"AFTER INSERT ON messages BEGIN {ADD} END",
    "message_search_delete": f"AFTER DELETE ON messages BEGIN {REMOVE} END",
    "message_search_update": f"AFTER UPDATE OF search_text, search_thinking ON messages BEGIN {REMOVE} {ADD} END",
}
CATCH_UP = (
    "INSERT INTO message_search (rowid, search_text, search_thinking) "
    "SELECT id, search_text, search_thinking FROM messages AS m "
    f"WHERE id > {INDEXED_TO} AND " + HAS_WORDS.format(row="m")
)


def upgrade() -> None:
    bind = op.get_bind()
    if not _has_fts_table(bind):
        return
    # 0007's triggers kept every message indexed: all of them are, up to the newest.
    bind.exec_driver_sql("CREATE TABLE message_search_state (indexed_to INTEGER NOT NULL)")
    bind.exec_driver_sql("INSERT INTO message_search_state (indexed_to) SELECT coalesce(max(id), 0) FROM messages")
    _set_triggers(bind, BATCHED)


def downgrade() -> None:
    bind = op.get_bind()
    if not _has_fts_table(bind):
        return
    bind.exec_driver_sql(CATCH_UP)
    _set_triggers(bind, EACH_ROW)
    bind.exec_driver_sql("DROP TABLE message_search_state")


def _has_fts_table(bind: Any) -> bool:
    if bind.dialect.name != "sqlite":
        return False
    found = bind.exec_driver_sql("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'message_search'")
    return found.first() is not None


def _set_triggers(bind: Any, triggers: dict[str, str]) -> None:
    for name in TRIGGERS:
        bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        bind.exec_driver_sql(f"CREATE TRIGGER {name} {triggers[name]}")
