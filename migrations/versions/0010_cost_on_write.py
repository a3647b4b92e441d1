"""Cost fixed per usage record when it is written: ``priced_cost``, ``cost_source`` and ``price_version``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04

Until this revision a usage total priced its token sums per model at read
time, from a hand-kept table matched by longest prefix (``gpt-4.1-nano`` took
``gpt-4.1``'s price), and a record without a price counted nowhere visible.
Now each usage record, of ``messages`` and of ``loops`` (a loop's reported
usage), holds what it cost:

* ``priced_cost``: USD, or NULL when no price is known;
* ``cost_source``: ``reported`` (the source's own cost, copied from ``cost``),
  ``override`` (the store's price for the model), ``catalog`` (genai-prices)
  or NULL;
* ``price_version``: the catalog data a ``catalog`` cost came from.

The new table ``prices`` holds overrides saved in the store (``store.prices``,
``turnstore prices``), which every process that opens the store prices with.

Totals are SQL sums of ``priced_cost``. The three usage indexes gain
``cost_source`` (after ``provider``: a group by source is read in index order)
and ``priced_cost`` (covered); ``ix_messages_cost``, which served the reported
part of every total, is no longer read and goes.

Rows already stored are priced here: a reported cost is copied; the rest are
priced from the genai-prices data installed with this revision's turnstore, at
each record's timestamp, with the request's own tier. The pricing is written
out below, not imported from turnstore: what upgrading does must not change
with later code. Overrides a process passed as ``Store(prices=...)`` are not
known here; ``turnstore reprice`` applies them. Messages are read and updated a
batch of ids at a time, so memory stays bounded whatever the store's size.

Rollback: downgrade() drops the three columns and the ``prices`` table (its overrides are lost) and puts 0009's indexes back;
``cost`` (the reported costs) was never changed.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

USAGE = ("input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_tokens", "total_tokens")
USAGE_ROWS = sa.text("input_tokens IS NOT NULL")
REPORTED_ROWS = sa.text("cost IS NOT NULL")
BEFORE = {
    "ix_messages_usage_session": ["session_id", "model", "provider", *USAGE, "timestamp", "loop_id"],
    "ix_messages_usage_loop": ["loop_id", "model", "provider", *USAGE, "timestamp", "turn_index"],
    "ix_messages_usage_model": ["model", "provider", *USAGE, "timestamp"],
}
AFTER = {
    "ix_messages_usage_session": [
        "session_id",
        "model",
        "provider",
        "cost_source",
        *USAGE,
        "priced_cost",
        "timestamp",
        "loop_id",
    ],
    "ix_messages_usage_loop": [
        "loop_id",
        "model",
        "provider",
        "cost_source",
        *USAGE,
        "priced_cost",
        "timestamp",
        "turn_index",
    ],
    "ix_messages_usage_model": ["model", "provider", "cost_source", *USAGE, "priced_cost", "timestamp"],
}
COST_INDEX = ["session_id", "loop_id", "turn_index", "model", "provider", *USAGE, "cost", "timestamp"]
COLUMNS = ("priced_cost", "cost_source", "price_version")
BATCH = 5000


def _catalog_cost(model: str | None, provider: str | None, tokens: Sequence[Any], when: datetime) -> float | None:
    """genai-prices' cost of one request, or None when it has no price for the model (frozen at this revision)."""
    from genai_prices import Usage, data_snapshot

    if not model:
        return None
    input, output, cache_read, cache_write = (int(value or 0) for value in tokens)
    snapshot = data_snapshot.get_snapshot()
    try:
        found = snapshot.find_provider_model(model, None, provider or None, None)
    except LookupError:
        if not provider or data_snapshot.find_provider_by_id(snapshot.providers, provider) is not None:
            return None
        try:
            found = snapshot.find_provider_model(model, None, None, None)
        except LookupError:
            return None
    prompt = input + cache_read + cache_write
    usage = Usage(
        input_tokens=prompt, output_tokens=output, cache_read_tokens=cache_read, cache_write_tokens=cache_write
    )
    try:
        cost = float(found[1].calc_price(usage, found[0], genai_request_timestamp=when).total_price)
    except (ValueError, ArithmeticError):
        return None
    return cost if cost < float("inf") else None


def _when_ms(value: Any) -> datetime:
    try:
        return datetime.fromtimestamp(int(value) / 1000, UTC)
    except (TypeError, OverflowError, OSError, ValueError):
        return datetime.now(UTC)


def _when_time(value: Any) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    try:
        parsed = datetime.fromisoformat(str(value))
    except ValueError:
        return datetime.now(UTC)
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _price_table(name: str, key: str, when_column: str, when: Any) -> None:
    """Price a table's usage rows without a reported cost, a batch of keys at a time."""
    from genai_prices import __version__

    version = f"genai-prices {__version__}"
    bind = op.get_bind()
    table = sa.table(
        name,
        sa.column(key),
        sa.column("model"),
        sa.column("provider"),
        sa.column(when_column),
        *(sa.column(column) for column in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")),
        *(sa.column(column) for column in COLUMNS),
    )
    pending = (
        sa.select(
            table.c[key],
            table.c.model,
            table.c.provider,
            table.c[when_column],
            table.c.input_tokens,
            table.c.output_tokens,
            table.c.cache_read_tokens,
            table.c.cache_write_tokens,
        )
        .where(table.c.input_tokens.is_not(None), table.c.cost_source.is_(None), table.c[key] > sa.bindparam("after"))
        .order_by(table.c[key])
        .limit(BATCH)
    )
    update = (
        sa.update(table)
        .where(table.c[key] == sa.bindparam("key"))
        .values(
            priced_cost=sa.bindparam("cost"), cost_source=sa.bindparam("source"), price_version=sa.bindparam("version")
        )
    )
    after: Any = -(2**63) if key == "id" else ""
    while True:
        rows = bind.execute(pending, {"after": after}).fetchall()
        if not rows:
            return
        changes = []
        for row in rows:
            cost = _catalog_cost(row[1], row[2], row[4:8], when(row[3]))
            if cost is not None:
                changes.append({"key": row[0], "cost": cost, "source": "catalog", "version": version})
        if changes:
            bind.execute(update, changes)
        after = rows[-1][0]


def upgrade() -> None:
    op.create_table(
        "prices",
        sa.Column("model", sa.String, nullable=False),
        sa.Column("provider", sa.String, nullable=False),
        sa.Column("since", sa.BigInteger, nullable=False),
        sa.Column("input", sa.Float, nullable=False),
        sa.Column("output", sa.Float, nullable=False),
        sa.Column("cache_read", sa.Float, nullable=False),
        sa.Column("cache_write", sa.Float, nullable=False),
        sa.PrimaryKeyConstraint("model", "provider", "since", name="pk_prices"),
    )
    for name in ("messages", "loops"):
        for column in COLUMNS:
            op.add_column(name, sa.Column(column, sa.Float if column == "priced_cost" else sa.String, nullable=True))
        op.execute(
            f"UPDATE {name} SET priced_cost = cost, cost_source = 'reported' "
            "WHERE cost IS NOT NULL AND input_tokens IS NOT NULL"
        )
    _price_table("messages", "id", "timestamp", _when_ms)
    _price_table("loops", "loop_id", "ended_at", _when_time)
    op.drop_index("ix_messages_cost", table_name="messages")
    for index, columns in AFTER.items():
        op.drop_index(index, table_name="messages")
        op.create_index(index, "messages", columns, sqlite_where=USAGE_ROWS, postgresql_where=USAGE_ROWS)


def downgrade() -> None:
    for index, columns in BEFORE.items():
        op.drop_index(index, table_name="messages")
        op.create_index(index, "messages", columns, sqlite_where=USAGE_ROWS, postgresql_where=USAGE_ROWS)
    op.create_index(
        "ix_messages_cost", "messages", COST_INDEX, sqlite_where=REPORTED_ROWS, postgresql_where=REPORTED_ROWS
    )
    for name in ("messages", "loops"):
        for column in reversed(COLUMNS):
            op.drop_column(name, column)
    op.drop_table("prices")
