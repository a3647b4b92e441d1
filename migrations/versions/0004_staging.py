"""Staging: a large imported session is written in batches, invisible until published.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25

A session with a row in ``staging`` is being written in several short
transactions (so other writers are not kept waiting for the whole import);
every read leaves it out until the row is removed, in the one short
transaction that publishes it. A staging whose owner is gone (a crash) is
removed, with the rows written so far, by the next writer that opens the
store. Existing databases have no staged session, so nothing they show changes.

Rollback: downgrade() drops the table. Run it only with no import under way:
a session staged at that moment would become visible half-written.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "staging",
        sa.Column("session_id", sa.String, nullable=False),
        sa.Column("owner", sa.String, nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("session_id", name="pk_staging"),
    )


def downgrade() -> None:
    op.drop_table("staging")
