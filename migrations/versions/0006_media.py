"""Media out of line: long base64 data of message texts, stored once per SHA-256.

Revision ID: 0006
Revises: 0004
Create Date: 2026-11-26

Creates ``media`` (each base64 run once, keyed by its SHA-256) and
``session_media`` (which sessions refer to which), then moves the media of
every stored message (its JSON and its verbatim source) out of line, as
:func:`turnstore.media.split` does on every write: the texts read back
byte for byte. Rows are read and rewritten in batches of
:data:`BATCH` by id, so memory stays bounded whatever the store holds.

Upgrade and downgrade each run in one transaction (Alembic's, on both
backends): a crash leaves the store at the revision it started from.

Rollback: downgrade() puts every run back into the texts that refer to it,
in batches again, then drops both tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from turnstore.media import MARK, join, split

revision: str = "0006"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 200
"""Message rows read and rewritten at a time (each may hold megabytes of base64)."""

_messages = sa.table(
    "messages",
    sa.column("id", sa.BigInteger),
    sa.column("session_id", sa.String),
    sa.column("message", sa.Text),
    sa.column("source", sa.Text),
)
_media = sa.table("media", sa.column("sha256", sa.String), sa.column("data", sa.Text))
_links = sa.table("session_media", sa.column("session_id", sa.String), sa.column("sha256", sa.String))


def upgrade() -> None:
    op.create_table(
        "media",
        sa.Column("sha256", sa.String, nullable=False),
        sa.Column("data", sa.Text, nullable=False),
        sa.PrimaryKeyConstraint("sha256", name="pk_media"),
    )
    op.create_table(
        "session_media",
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("sha256", sa.String, nullable=False),
        sa.PrimaryKeyConstraint("session_id", "sha256", name="pk_session_media"),
    )
    op.create_index("ix_session_media_sha256", "session_media", ["sha256"])
    connection = op.get_bind()
    stored: set[str] = set()
    linked: set[tuple[str, str]] = set()
    for rows in _batches(connection):
        updates: list[dict[str, Any]] = []
        for message_id, session_id, message, source in rows:
            new_message, found = split(message)
            new_source, from_source = split(source) if source is not None else (None, {})
            found.update(from_source)
            if new_message is message and new_source is source:
                continue
            updates.append({"row_id": message_id, "new_message": new_message, "new_source": new_source})
            fresh = [digest for digest in found if digest not in stored]
            if fresh:
                connection.execute(sa.insert(_media), [{"sha256": d, "data": found[d]} for d in fresh])
                stored.update(fresh)
            pairs = [(session_id, digest) for digest in found if (session_id, digest) not in linked]
            if pairs:
                connection.execute(sa.insert(_links), [{"session_id": s, "sha256": d} for s, d in pairs])
                linked.update(pairs)
        _rewrite(connection, updates)


def downgrade() -> None:
    connection = op.get_bind()
    fetch: Callable[[str], str] = lambda digest: connection.scalar(  # noqa: E731
        sa.select(_media.c.data).where(_media.c.sha256 == digest)
    )
    for rows in _batches(connection):
        updates = [
            {
                "row_id": message_id,
                "new_message": join(message, "inline", fetch),
                "new_source": join(source, "inline", fetch) if source is not None else None,
            }
            for message_id, _session_id, message, source in rows
            if MARK in message or (source is not None and MARK in source)
        ]
        _rewrite(connection, updates)
    op.drop_index("ix_session_media_sha256", table_name="session_media")
    op.drop_table("session_media")
    op.drop_table("media")


def _batches(connection: Any) -> Iterator[list[tuple[int, str, str, str | None]]]:
    """Every message row (id, session, message text, source), :data:`BATCH` at a time in id order."""
    text = sa.cast(_messages.c.message, sa.Text)
    after = -1
    while True:
        rows = connection.execute(
            sa.select(_messages.c.id, _messages.c.session_id, text, _messages.c.source)
            .where(_messages.c.id > after)
            .order_by(_messages.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        yield [tuple(row) for row in rows]
        after = rows[-1][0]


def _rewrite(connection: Any, updates: list[dict[str, Any]]) -> None:
    if not updates:
        return
    message: Any = sa.bindparam("new_message", type_=sa.Text)
    if connection.dialect.name == "postgresql":
        message = sa.cast(message, postgresql.JSON)  # the column is json: a bound text needs the cast
    connection.execute(
        sa.update(_messages)
        .where(_messages.c.id == sa.bindparam("row_id"))
        .values(message=message, source=sa.bindparam("new_source")),
        updates,
    )
