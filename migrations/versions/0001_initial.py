"""Initial schema: sessions, loops, messages, imports.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22

Schema version: 0001 (turnstore 0.1)
Rollback: downgrade() drops every table, and with them all stored data.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

JSON = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")
USAGE = ("input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")
USAGE_ROWS = sa.text("input_tokens IS NOT NULL")


def usage_columns() -> list[sa.Column]:
    return [sa.Column(name, sa.BigInteger(), nullable=True) for name in USAGE] + [
        sa.Column("cost", sa.Float(), nullable=True)
    ]


def upgrade() -> None:
    op.create_table(
        "sessions",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("agent_id", sa.String(), nullable=True),
        sa.Column("title", sa.String(), nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("session_id", name="pk_sessions"),
    )
    op.create_index("ix_sessions_agent_id", "sessions", ["agent_id"])
    op.create_index("ix_sessions_updated_at", "sessions", ["updated_at"])

    op.create_table(
        "loops",
        sa.Column("loop_id", sa.String(), nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("parent_loop_id", sa.String(), nullable=True),
        sa.Column("continuation_kind", sa.String(), nullable=False),
        sa.Column("fork_after", sa.BigInteger(), nullable=True),
        sa.Column("keep_from", sa.BigInteger(), nullable=True),
        sa.Column("config", JSON, nullable=True),
        sa.Column("config_id", sa.String(), nullable=True),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("provider", sa.String(), nullable=True),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("spawn_loop_id", sa.String(), nullable=True),
        sa.Column("spawn_tool_call_id", sa.String(), nullable=True),
        *usage_columns(),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_loops_session_id_sessions", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("loop_id", name="pk_loops"),
    )
    op.create_index("ix_loops_session_id_started_at", "loops", ["session_id", "started_at"])
    op.create_index("ix_loops_parent_loop_id", "loops", ["parent_loop_id"])
    op.create_index("ix_loops_spawn_loop_id", "loops", ["spawn_loop_id"])
    # The few loops with reported (loop-level) usage, found without scanning the rest.
    op.create_index(
        "ix_loops_reported_usage", "loops", ["session_id"], sqlite_where=USAGE_ROWS, postgresql_where=USAGE_ROWS
    )

    op.create_table(
        "messages",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("loop_id", sa.String(), nullable=False),
        sa.Column("turn_index", sa.Integer(), nullable=True),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("role", sa.String(), nullable=False),
        sa.Column("kind", sa.String(), nullable=True),
        # PostgreSQL json, not jsonb: jsonb re-sorts keys, so messages would not come back byte for byte.
        sa.Column("message", sa.JSON(), nullable=False),
        *usage_columns(),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("provider", sa.String(), nullable=True),
        sa.Column("stop_reason", sa.String(), nullable=True),
        sa.Column("timestamp", sa.BigInteger(), nullable=True),
        sa.Column("source", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(["loop_id"], ["loops.loop_id"], name="fk_messages_loop_id_loops", ondelete="CASCADE"),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_messages_session_id_sessions", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_messages"),
        # seq is unique per loop: the database, not the code, refuses a duplicate.
        sa.UniqueConstraint("loop_id", "seq", name="uq_messages_loop_id_seq"),
    )
    # last(session, n): newest messages of one session by global id.
    op.create_index("ix_messages_session_id_id", "messages", ["session_id", "id"])
    # turn(loop, k): one turn's messages in seq order, without walking the whole loop.
    op.create_index("ix_messages_loop_id_turn_index_seq", "messages", ["loop_id", "turn_index", "seq"])
    # Usage of a session, read from the index alone in GROUP BY (model, provider) order (usage rows only).
    op.create_index(
        "ix_messages_usage_session",
        "messages",
        ["session_id", "model", "provider", *USAGE, "cost", "timestamp", "loop_id"],
        sqlite_where=USAGE_ROWS,
        postgresql_where=USAGE_ROWS,
    )
    # Usage of a loop or one of its turns, the same way.
    op.create_index(
        "ix_messages_usage_loop",
        "messages",
        ["loop_id", "turn_index", "model", "provider", *USAGE, "cost", "timestamp"],
        sqlite_where=USAGE_ROWS,
        postgresql_where=USAGE_ROWS,
    )
    # Usage by model across all sessions, in GROUP BY order, read from the index alone.
    op.create_index(
        "ix_messages_usage_model",
        "messages",
        ["model", "provider", *USAGE, "cost", "timestamp"],
        sqlite_where=USAGE_ROWS,
        postgresql_where=USAGE_ROWS,
    )

    # One row per imported session: where it came from and a digest of its source records.
    op.create_table(
        "imports",
        sa.Column("session_id", sa.String(), nullable=False),
        sa.Column("format", sa.String(), nullable=False),
        sa.Column("source_format", sa.String(), nullable=True),
        sa.Column("origin", sa.String(), nullable=False),
        sa.Column("digest", sa.String(), nullable=False),
        sa.Column("imported_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("report", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["session_id"], ["sessions.session_id"], name="fk_imports_session_id_sessions", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("session_id", name="pk_imports"),
    )


def downgrade() -> None:
    op.drop_table("imports")
    op.drop_table("messages")
    op.drop_table("loops")
    op.drop_table("sessions")
