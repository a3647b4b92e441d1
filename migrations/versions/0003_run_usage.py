"""Run usage: a loop's reported request count beside its reported usage.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-25

Some apps know usage per run only (``loops.end(loop_id, usage=...)``), and
some sources report how many model calls a run made (appam's
``request_count``, the OpenAI Agents SDK's ``requests``). ``loops.requests``
holds that count; usage totals count it as the loop's requests wherever the
loop's reported usage counts (none of its messages carry usage). NULL means
the source reported no count: such a loop counts as one request, as before
this revision. Existing rows stay NULL, so every total of an upgraded
database is what it was.

Rollback: downgrade() drops the column; the counts it held are lost (the
importers keep them in the loop's metadata too).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("loops", sa.Column("requests", sa.BigInteger, nullable=True))


def downgrade() -> None:
    op.drop_column("loops", "requests")
