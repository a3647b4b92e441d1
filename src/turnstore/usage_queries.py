"""The usage statements: token sums per turn, loop, session, model or day, built once with SQLAlchemy Core.

Like :mod:`turnstore.queries` (same conventions: cached builders, named
bind parameters), kept apart because usage is a concept of its own: each
total is one ``UNION ALL`` of parts (``USAGE_PART_*``) that
:class:`turnstore.usage.Tally` adds up and prices.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from .queries import loop_visible, visible
from .schema import USAGE_COLUMNS, loops, messages

bp = sa.bindparam

COST_DECIMALS = 12
"""A reported cost counts rounded to this many decimals of a USD, record by record (:class:`reported_cost_sum`)."""


DAY_MS = 86_400_000
FIRST_DAY_MS = -62_135_596_800_000
"""Unix milliseconds of 0001-01-01T00:00:00Z, the first instant that has a day."""
LAST_DAY_MS = 253_402_300_799_999
"""Unix milliseconds of 9999-12-31T23:59:59.999Z, the last instant that has a day."""


class utc_day(FunctionElement[str]):
    """The UTC calendar day (``YYYY-MM-DD``) of a unix-milliseconds column; NULL outside years 1 to 9999.

    Both engines compute the day the same way, with integer arithmetic: the
    milliseconds are floored (not truncated) to whole seconds or days, so a
    negative timestamp falls on a day before 1970-01-01; a timestamp outside
    ``FIRST_DAY_MS..LAST_DAY_MS`` (no four-digit year) has no day, like a
    missing one. Without the range test SQLite would give no day where
    PostgreSQL gives one or fails the whole statement ("timestamp out of range").
    """

    type = sa.String()
    name = "utc_day"
    inherit_cache = True


def _argument(element: FunctionElement[Any], compiler: object, kw: dict[str, object]) -> str:
    """The SQL of a one-argument function's argument."""
    (column,) = element.clauses
    return compiler.process(column, **kw)  # type: ignore[attr-defined,no-any-return]


def _floor_div(value: str, divisor: int) -> str:
    """SQL for ``value`` divided by ``divisor`` rounded down (integer ``/`` truncates towards zero on both engines)."""
    return f"(CASE WHEN {value} >= 0 THEN {value} / {divisor} ELSE ({value} - {divisor - 1}) / {divisor} END)"


def _within_days(value: str, day: str) -> str:
    return f"CASE WHEN {value} BETWEEN {FIRST_DAY_MS} AND {LAST_DAY_MS} THEN {day} END"


@compiles(utc_day, "sqlite")
def _utc_day_sqlite(element: utc_day, compiler: object, **kw: object) -> str:
    value = _argument(element, compiler, kw)
    return _within_days(value, f"date({_floor_div(value, 1000)}, 'unixepoch')")


@compiles(utc_day, "postgresql")
def _utc_day_postgresql(element: utc_day, compiler: object, **kw: object) -> str:
    value = _argument(element, compiler, kw)
    days = f"CAST({_floor_div(value, DAY_MS)} AS INTEGER)"
    return _within_days(value, f"to_char(DATE '1970-01-01' + {days}, 'YYYY-MM-DD')")


class utc_day_of_time(FunctionElement[str]):
    """The UTC calendar day (``YYYY-MM-DD``) of a timestamp column."""

    type = sa.String()
    name = "utc_day_of_time"
    inherit_cache = True


@compiles(utc_day_of_time, "sqlite")
def _utc_day_of_time_sqlite(element: utc_day_of_time, compiler: object, **kw: object) -> str:
    return f"substr({_argument(element, compiler, kw)}, 1, 10)"


@compiles(utc_day_of_time, "postgresql")
def _utc_day_of_time_postgresql(element: utc_day_of_time, compiler: object, **kw: object) -> str:
    return f"to_char({_argument(element, compiler, kw)} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


USAGE_LEVELS = ("all", "session", "loop", "turn")
USAGE_GROUPS = ("none", "loop", "session", "day")


USAGE_PART_MESSAGES, USAGE_PART_LOOP = 0, 2
"""The ``part`` column of :func:`usage_rows`: what a row of a (model, provider, cost source) group holds.

* MESSAGES: the usage records of the group's messages; ``cost`` is the sum of their ``priced_cost``.
* LOOP: usage loops reported for themselves (counted where none of a loop's messages carry usage).
"""


SPLIT_BITS = 32
"""The halves of a split sum (see :func:`usage_rows`): ``value >> 32`` and ``value & (2**32 - 1)``."""


def _sums(table: sa.Table, cost: ColumnElement[Any], part: int, split: bool) -> list[ColumnElement[Any]]:
    """Six token sums (each as a high and a low half when ``split``; the total by :func:`_token_total`),
    a cost, the record count, the row's part (see USAGE_PART_*) and the requests.

    A message's usage record is one model call. A loop's reported usage is as many as
    its ``requests`` column says (the source's or app's count), or one when it says none.
    """
    # Literals, not parameters: PostgreSQL has ``bigint >> integer`` but no ``bigint >> bigint``.
    shift: ColumnElement[int] = sa.literal_column(str(SPLIT_BITS), sa.Integer)
    mask: ColumnElement[int] = sa.literal_column(str(2**SPLIT_BITS - 1), sa.BigInteger)
    sums: list[ColumnElement[Any]] = []
    for name in USAGE_COLUMNS:
        for half in _halves(split, shift, mask):
            value = _token_total(table, half) if name == "total_tokens" else half(table.c[name])
            sums.append(sa.func.coalesce(sa.func.sum(value), 0))
    requests = sa.func.count() if table is messages else sa.func.sum(sa.func.coalesce(table.c.requests, 1))
    return [*sums, cost, sa.func.count(), sa.literal(part, sa.Integer), requests]


TOKEN_PARTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens")
"""The columns a row's token total adds up where its source reported none (``reasoning`` is inside output)."""


Half = Callable[[ColumnElement[Any]], ColumnElement[Any]]


def _halves(split: bool, shift: ColumnElement[int], mask: ColumnElement[int]) -> list[Half]:
    """How a column is summed: whole, or as its high and its low half (``split``)."""
    if not split:
        return [lambda column: column]
    return [lambda column: column.op(">>")(shift), lambda column: column.op("&")(mask)]


def _token_total(table: sa.Table, half: Half) -> ColumnElement[Any]:
    """A row's token total (or one half of it): ``total_tokens`` as the source reported it, or where it
    reported none (stored as 0) the sum of :data:`TOKEN_PARTS` — decided row by row, so a total over
    rows that report one and rows that do not adds reported and derived totals.

    Split into halves, the parts are added half by half, which cannot pass 64 bits; whole, four counts
    near ``2**63`` can: PostgreSQL then fails the statement ("bigint out of range") and SQLite gives a
    float, and the repository reads the rows again split (see ``UsageRepository._rows``).
    """
    parts = [half(table.c[name]) for name in TOKEN_PARTS]
    derived = parts[0] + parts[1] + parts[2] + parts[3]
    return sa.func.coalesce(half(sa.func.nullif(table.c.total_tokens, 0)), derived)


def _cost(table: sa.Table, split: bool) -> ColumnElement[Any]:
    return reported_cost_sum(table.c.priced_cost, sa.literal_column("1" if split else "0", sa.Integer))


class reported_cost_sum(FunctionElement[Any]):
    """The ``sum()`` of a cost column (``priced_cost``: reported, override or catalog), each cost rounded to
    ``10**-COST_DECIMALS`` USD first; it cannot fail.

    Rounded record by record, so that every total and every group sums the same
    values and each is exactly the sum of its parts (see :class:`turnstore.usage.Tally`).
    PostgreSQL rounds and sums as ``numeric``, in whole units of ``10**-COST_DECIMALS``
    USD: exactly, and without the overflow of its ``sum(double precision)`` past
    the largest float. SQLite sums the units as 64-bit integers; a cost of
    :data:`COST_UNITS_LIMIT` units or more counts as :data:`COST_UNITS_LIMIT`,
    and such a sum (or one past ``2**63 - 1``, which fails with "integer
    overflow") is read again (``split``) as a sum of the rounded costs in USD,
    as floats, which reach infinity rather than fail.
    """

    name = "reported_cost_sum"
    inherit_cache = True


COST_UNITS_LIMIT = 9 * 10**18
"""SQLite: the units of a cost (or sum) past which a reported cost sum is read again as floats (9 million USD)."""

_SCALE = 10**COST_DECIMALS


@compiles(reported_cost_sum)
def _reported_cost_sum(element: reported_cost_sum, compiler: object, **kw: object) -> str:
    column, split = (compiler.process(clause, **kw) for clause in element.clauses)  # type: ignore[attr-defined]
    if split == "1":
        return f"sum(round({column}, {COST_DECIMALS}))"
    limit = COST_UNITS_LIMIT // _SCALE
    units = f"CAST(round({column} * {_SCALE}) AS INTEGER)"
    return f"sum(CASE WHEN {column} < {limit} THEN {units} ELSE {COST_UNITS_LIMIT} END)"


@compiles(reported_cost_sum, "postgresql")
def _reported_cost_sum_postgresql(element: reported_cost_sum, compiler: object, **kw: object) -> str:
    column, _split = (compiler.process(clause, **kw) for clause in element.clauses)  # type: ignore[attr-defined]
    return f"sum(round(CAST({column} AS NUMERIC) * {_SCALE}))"


def joined(row: Sequence[Any], start: int) -> tuple[Any, ...]:
    """A row of a split :func:`usage_rows` statement as the plain one returns it: each token sum
    (two columns from ``start`` on, high half then low half) rejoined into one exact integer."""
    halves = row[start : start + 2 * len(USAGE_COLUMNS)]
    sums = tuple((int(high) << SPLIT_BITS) + int(low) for high, low in zip(halves[::2], halves[1::2]))
    return (*row[:start], *sums, *row[start + 2 * len(USAGE_COLUMNS) :])


def _group_key(table: sa.Table, group: str) -> list[ColumnElement[Any]]:
    if group == "loop":
        return [table.c.loop_id]
    if group == "session":
        return [table.c.session_id]
    if group == "day":
        return [utc_day(table.c.timestamp) if table is messages else utc_day_of_time(table.c.started_at)]
    return []


def _by_level(statement: sa.Select[Any], level: str) -> sa.Select[Any]:
    """Filter messages by ``level``: all; visible (all but staged sessions); session (:session_id);
    loop (:loop_id); turn (:loop_id, :turn_index)."""
    if level == "visible":
        statement = statement.where(visible(messages.c.session_id))
    # A staged session's usage is left out: one probe per statement (the conditions are uncorrelated).
    if level == "session":
        statement = statement.where(messages.c.session_id == bp("session_id"), visible(bp("session_id")))
    if level in ("loop", "turn"):
        statement = statement.where(messages.c.loop_id == bp("loop_id"), loop_visible())
    if level == "turn":
        statement = statement.where(messages.c.turn_index == bp("turn_index"))
    return statement


@cache
def message_usage(level: str, group: str, split: bool = False) -> sa.Select[Any]:
    """Usage sums and costs of messages, grouped by (group key, model, provider, cost source) (part MESSAGES).

    Each level but ``turn`` is served by a covering usage index
    (``ix_messages_usage_*``) in GROUP BY order; a turn by the turn index.
    """
    keys = _group_key(messages, group)
    statement: sa.Select[Any] = sa.select(
        *keys,
        messages.c.model,
        messages.c.provider,
        messages.c.cost_source,
        *_sums(messages, _cost(messages, split), USAGE_PART_MESSAGES, split),
    ).where(messages.c.input_tokens.is_not(None))
    statement = _by_level(statement, level)
    if level == "turn":
        # A turn is a few rows: find them by turn, not by a walk of the loop's usage rows.
        # seq (always >= 0) is not in the covering usage index, so naming it steers
        # SQLite's planner to ix_messages_loop_id_turn_index_seq (measured 27 -> 6 µs).
        statement = statement.where(messages.c.seq >= 0)
    return statement.group_by(*keys, messages.c.model, messages.c.provider, messages.c.cost_source)


@cache
def loop_reported_usage(level: str, group: str, split: bool = False) -> sa.Select[Any]:
    """Usage a loop reported for itself, counted only where none of its messages carry usage (part LOOP)."""
    keys = _group_key(loops, group)
    has_message_usage = (
        sa.select(sa.literal(1))
        .where(
            messages.c.session_id == loops.c.session_id,
            messages.c.loop_id == loops.c.loop_id,
            messages.c.input_tokens.is_not(None),
        )
        .exists()
    )
    statement = sa.select(
        *keys,
        loops.c.model,
        loops.c.provider,
        loops.c.cost_source,
        *_sums(loops, _cost(loops, split), USAGE_PART_LOOP, split),
    ).where(loops.c.input_tokens.is_not(None), ~has_message_usage)
    if level == "visible":
        statement = statement.where(visible(loops.c.session_id))
    if level == "session":
        statement = statement.where(loops.c.session_id == bp("session_id"), visible(bp("session_id")))
    if level == "loop":
        statement = statement.where(loops.c.loop_id == bp("loop_id"), visible(loops.c.session_id))
    if level == "turn":
        statement = statement.where(sa.false())
    return statement.group_by(*keys, loops.c.model, loops.c.provider, loops.c.cost_source)


@cache
def usage_rows(level: str, group: str, split: bool = False) -> sa.CompoundSelect[Any]:
    """:func:`message_usage` and :func:`loop_reported_usage` in one statement (one round
    trip); :class:`turnstore.usage.Tally` adds the parts up.

    Rows come in no particular order; callers sort what they show. A turn has no
    reported usage of its own, so its statement leaves the loops part out.

    ``split`` makes sums that cannot overflow, for a second try of a read whose
    sums did: SQLite's ``sum()`` of 64-bit integers fails with "integer overflow"
    past ``2**63 - 1``, which a few accepted values reach, so each token column is
    summed as two halves (see :func:`joined`), which cannot for fewer than
    ``2**31`` records (PostgreSQL sums ``bigint`` into ``numeric`` anyway). Costs
    are summed so that they cannot fail either way (see :class:`reported_cost_sum`).
    """
    parts = [message_usage(level, group, split)]
    if level != "turn":
        parts.append(loop_reported_usage(level, group, split))
    return sa.union_all(*parts)


REPRICE_BATCH = 2000
"""Usage records read and rewritten per transaction by a reprice: memory and lock time stay bounded."""


@cache
def reprice_batch(table_name: str, session: bool, since: bool, model: bool) -> sa.Select[Any]:
    """The next usage records a reprice looks at, by key after ``:after``: all but those with a reported cost,
    optionally of one session (``:session_id``), from a time on (``:since``) and of one model (``:model``)."""
    table = messages if table_name == "messages" else loops
    key = table.c.id if table is messages else table.c.loop_id
    when = table.c.timestamp if table is messages else table.c.ended_at
    statement = sa.select(
        key,
        table.c.model,
        table.c.provider,
        when,
        table.c.input_tokens,
        table.c.output_tokens,
        table.c.cache_read_tokens,
        table.c.cache_write_tokens,
        table.c.priced_cost,
        table.c.cost_source,
        table.c.price_version,
    ).where(
        table.c.input_tokens.is_not(None),
        table.c.cost.is_(None),  # a reported cost stays what the source said
        key > bp("after"),
    )
    if session:
        statement = statement.where(table.c.session_id == bp("session_id"))
    if since:
        statement = statement.where(when >= bp("since"))
    if model:
        statement = statement.where(table.c.model == bp("model"))
    return statement.order_by(key).limit(REPRICE_BATCH)


@cache
def set_price(table_name: str) -> sa.Update:
    """Store one usage record's new cost, source and price version (``:key``)."""
    table = messages if table_name == "messages" else loops
    key = table.c.id if table is messages else table.c.loop_id
    return (
        sa.update(table)
        .where(key == bp("key"))
        .values(priced_cost=bp("priced_cost"), cost_source=bp("cost_source"), price_version=bp("price_version"))
    )
