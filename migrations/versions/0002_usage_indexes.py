"""Usage indexes: the loop's in GROUP BY order, cost out of them, and one over the records with a reported cost.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-24

Schema version: 0002 (turnstore 0.1)

Usage of a loop is summed per (model, provider). With ``turn_index`` second in
``ix_messages_usage_loop`` SQLite had to sort the loop's usage rows into a
temporary B-tree for the GROUP BY on every call; with ``model, provider``
second the index delivers them already grouped (measured: loop usage of 400
rows 237 µs -> 140 µs). ``turn_index`` moves to the end.

``ix_messages_cost`` is a partial index over the usage records whose source
reported a cost (imports from pi, Tau, appam). Usage totals read the reported
part of each group from it, instead of testing ``cost`` on every record in
the main sums (measured: session usage of 1,600 records 525 µs -> 390 µs).
Appends through the API carry no cost and never touch it. ``cost`` leaves the
three usage indexes: the sums no longer read it, and an index that covered it
would tempt SQLite's planner away from the much smaller partial one. No data
changes.

Rollback: downgrade() drops ix_messages_cost and puts the 0001 loop index back;
no data is touched either way.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

USAGE = ("input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")
USAGE_ROWS = sa.text("input_tokens IS NOT NULL")
REPORTED_ROWS = sa.text("cost IS NOT NULL")
# The usage indexes at 0001 and here: name -> columns (all partial, over usage records).
BEFORE = {
    "ix_messages_usage_session": ["session_id", "model", "provider", *USAGE, "cost", "timestamp", "loop_id"],
    "ix_messages_usage_loop": ["loop_id", "turn_index", "model", "provider", *USAGE, "cost", "timestamp"],
    "ix_messages_usage_model": ["model", "provider", *USAGE, "cost", "timestamp"],
}
AFTER = {
    "ix_messages_usage_session": ["session_id", "model", "provider", *USAGE, "timestamp", "loop_id"],
    "ix_messages_usage_loop": ["loop_id", "model", "provider", *USAGE, "timestamp", "turn_index"],
    "ix_messages_usage_model": ["model", "provider", *USAGE, "timestamp"],
}


def _replace(indexes: dict[str, list[str]]) -> None:
    for name, columns in indexes.items():
        op.drop_index(name, table_name="messages")
        op.create_index(name, "messages", columns, sqlite_where=USAGE_ROWS, postgresql_where=USAGE_ROWS)


def upgrade() -> None:
    _replace(AFTER)
    op.create_index(
        "ix_messages_cost",
        "messages",
        ["session_id", "loop_id", "turn_index", "model", "provider", *USAGE, "cost", "timestamp"],
        sqlite_where=REPORTED_ROWS,
        postgresql_where=REPORTED_ROWS,
    )


def downgrade() -> None:
    op.drop_index("ix_messages_cost", table_name="messages")
    _replace(BEFORE)
