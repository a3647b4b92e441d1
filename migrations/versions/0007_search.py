"""Full-text search: each message's searchable words, and an index over them.

Revision ID: 0007
Revises: 0004
Create Date: 2026-11-26

Adds ``messages.search_text`` and ``messages.search_thinking``: the message's
words as :mod:`turnstore.search_text` folds them (thinking apart), written by
every write path from then on. Existing messages are filled in here, a batch
of :data:`BATCH` at a time in id order (bounded memory; progress is logged to
the ``turnstore.migrate`` logger, which ``turnstore db upgrade`` prints).

* SQLite: an FTS5 table ``message_search`` with external content (the two
  columns of ``messages``; rowid = message id), filled batch by batch as the
  columns are, then kept by three triggers on ``messages`` (insert, delete,
  update of the two columns). The triggers copy column values only (no JSON is
  parsed in SQL), so they hold for every write and every delete, a session's
  cascade included, in the writer's transaction. A SQLite built without FTS5
  gets the columns but no table: search then raises ``SearchUnavailable``.
* PostgreSQL: a GIN index ``ix_messages_search`` over the ``tsvector`` of the
  two columns (``simple`` configuration; text at weight A, thinking at B).

Rollback: downgrade() drops the triggers, the table or index, and the two
columns; the messages themselves are untouched.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 5_000
"""Messages read, indexed and written at a time."""

PROGRESS_EVERY = 100_000

log = logging.getLogger("turnstore.migrate")

FTS_TABLE = (
    "CREATE VIRTUAL TABLE message_search USING fts5("
    "search_text, search_thinking, content='messages', content_rowid='id', tokenize='ascii')"
)
HAS_WORDS = "{row}.search_text IS NOT NULL OR {row}.search_thinking IS NOT NULL"
ADD = (
    "INSERT INTO message_search (rowid, search_text, search_thinking) "
    "SELECT new.id, new.search_text, new.search_thinking WHERE " + HAS_WORDS.format(row="new") + ";"
)
REMOVE = (
    "INSERT INTO message_search (message_search, rowid, search_text, search_thinking) "
    "SELECT 'delete', old.id, old.search_text, old.search_thinking WHERE " + HAS_WORDS.format(row="old") + ";"
)
TRIGGERS = {
    "message_search_insert": f"AFTER INSERT ON messages BEGIN {ADD} END",
    "message_search_delete": f"AFTER DELETE ON messages BEGIN {REMOVE} END",
    "message_search_update": f"AFTER UPDATE OF search_text, search_thinking ON messages BEGIN {REMOVE} {ADD} END",
}
PG_INDEX = (
    "CREATE INDEX ix_messages_search ON messages USING gin (("
    "setweight(to_tsvector('simple'::regconfig, coalesce(search_text, '')), 'A') || "
    "setweight(to_tsvector('simple'::regconfig, coalesce(search_thinking, '')), 'B')))"
)


def upgrade() -> None:
    from turnstore.repositories.search import fts5_available

    bind = op.get_bind()
    sqlite = bind.dialect.name == "sqlite"
    op.add_column("messages", sa.Column("search_text", sa.Text, nullable=True))
    op.add_column("messages", sa.Column("search_thinking", sa.Text, nullable=True))
    fts = sqlite and fts5_available(bind)
    if fts:
        bind.exec_driver_sql(FTS_TABLE)
    backfill(bind, fts)
    if fts:
        for name, body in TRIGGERS.items():
            bind.exec_driver_sql(f"CREATE TRIGGER {name} {body}")
    elif not sqlite:
        bind.exec_driver_sql(PG_INDEX)


def backfill(bind: Any, fts: bool) -> None:
    """Fill the two columns of every message (and the FTS5 table), :data:`BATCH` messages at a time."""
    from turnstore.repositories.rows import parse_rows
    from turnstore.search_text import index_columns

    total = bind.execute(sa.text("SELECT count(*) FROM messages")).scalar() or 0
    text = "message" if bind.dialect.name == "sqlite" else "message::text"
    read = sa.text(f"SELECT id, {text} FROM messages WHERE id > :last ORDER BY id LIMIT {BATCH}")
    write = sa.text("UPDATE messages SET search_text = :text, search_thinking = :thinking WHERE id = :id")
    index = sa.text(
        "INSERT INTO message_search (rowid, search_text, search_thinking) "
        "SELECT id, search_text, search_thinking FROM messages WHERE id > :low AND id <= :high "
        "AND (search_text IS NOT NULL OR search_thinking IS NOT NULL)"
    )
    last = 0
    done = 0
    reported = 0
    if total:
        log.info("indexing %d messages for full-text search", total)
    while rows := bind.execute(read, {"last": last}).fetchall():
        updates = []
        for (message_id, _), model in zip(rows, _models(parse_rows, rows)):
            if model is not None:
                words, thinking = index_columns(model)
                if words is not None or thinking is not None:
                    updates.append({"id": message_id, "text": words, "thinking": thinking})
        if updates:
            bind.execute(write, updates)
        if fts:
            bind.execute(index, {"low": last, "high": rows[-1][0]})
        last = rows[-1][0]
        done += len(rows)
        if done - reported >= PROGRESS_EVERY or done == total:
            reported = done
            log.info("indexed %d of %d messages", done, total)


def _models(parse_rows: Any, rows: list[Any]) -> list[Any]:
    """The batch's message models (rows of id and JSON); one that no longer validates is left unindexed (None),
    not fatal. ``parse_rows`` raises ``StorageError`` for such a row (older versions: pydantic's ``ValueError``)."""
    from turnstore.errors import StorageError

    try:
        return list(parse_rows([message_id for message_id, _ in rows], [text for _, text in rows]))
    except (ValueError, StorageError):
        found: list[Any] = []
        for message_id, text in rows:
            try:
                found.extend(parse_rows([message_id], [text]))
            except (ValueError, StorageError):
                found.append(None)
        return found


def downgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name == "sqlite":
        for name in TRIGGERS:
            bind.exec_driver_sql(f"DROP TRIGGER IF EXISTS {name}")
        bind.exec_driver_sql("DROP TABLE IF EXISTS message_search")
        bind.exec_driver_sql("ALTER TABLE messages DROP COLUMN search_thinking")
        bind.exec_driver_sql("ALTER TABLE messages DROP COLUMN search_text")
    else:
        bind.exec_driver_sql("DROP INDEX IF EXISTS ix_messages_search")
        op.drop_column("messages", "search_thinking")
        op.drop_column("messages", "search_text")
