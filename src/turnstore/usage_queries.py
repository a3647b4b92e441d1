"""The usage statements: token sums per turn, loop, session, model or day, built once with SQLAlchemy Core.

Like :mod:`turnstore.queries` (same conventions: cached builders, named
bind parameters), kept apart because usage is a concept of its own: each
total is one ``UNION ALL`` of parts (``USAGE_PART_*``) that
:class:`turnstore.usage.Tally` adds up and prices.
"""

from __future__ import annotations

from functools import cache

import sqlalchemy as sa
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ColumnElement
from sqlalchemy.sql.functions import FunctionElement

from .schema import USAGE_COLUMNS, loops, messages

bp = sa.bindparam


class utc_day(FunctionElement):
    """The UTC calendar day (``YYYY-MM-DD``) of a unix-milliseconds column."""

    type = sa.String()
    name = "utc_day"
    inherit_cache = True


@compiles(utc_day, "sqlite")
def _utc_day_sqlite(element: utc_day, compiler: object, **kw: object) -> str:
    (column,) = element.clauses
    return f"date({compiler.process(column, **kw)} / 1000, 'unixepoch')"  # type: ignore[attr-defined]


@compiles(utc_day, "postgresql")
def _utc_day_postgresql(element: utc_day, compiler: object, **kw: object) -> str:
    (column,) = element.clauses
    value = compiler.process(column, **kw)  # type: ignore[attr-defined]
    return f"to_char(to_timestamp({value} / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


class utc_day_of_time(FunctionElement):
    """The UTC calendar day (``YYYY-MM-DD``) of a timestamp column."""

    type = sa.String()
    name = "utc_day_of_time"
    inherit_cache = True


@compiles(utc_day_of_time, "sqlite")
def _utc_day_of_time_sqlite(element: utc_day_of_time, compiler: object, **kw: object) -> str:
    (column,) = element.clauses
    return f"substr({compiler.process(column, **kw)}, 1, 10)"  # type: ignore[attr-defined]


@compiles(utc_day_of_time, "postgresql")
def _utc_day_of_time_postgresql(element: utc_day_of_time, compiler: object, **kw: object) -> str:
    (column,) = element.clauses
    value = compiler.process(column, **kw)  # type: ignore[attr-defined]
    return f"to_char({value} AT TIME ZONE 'UTC', 'YYYY-MM-DD')"


USAGE_LEVELS = ("all", "session", "loop", "turn")
USAGE_GROUPS = ("none", "loop", "session", "day")


USAGE_PART_TOTAL, USAGE_PART_REPORTED, USAGE_PART_LOOP = 0, 1, 2
"""The ``part`` column of :func:`usage_rows`: what a row of a (model, provider) group holds.

* TOTAL: every usage record of the group's messages; ``cost`` is NULL.
* REPORTED: the subset of those records whose source reported a cost, with that cost.
* LOOP: usage loops reported for themselves; ``cost`` is their reported cost, or NULL
  for a row of loops that reported none (a group's loops with and without a cost come
  in separate rows).
"""


def _sums(table: sa.Table, cost: ColumnElement, part: int) -> list[ColumnElement]:
    """Six token sums, a cost, the record count, the row's part (see USAGE_PART_*) and the requests.

    A message's usage record is one model call. A loop's reported usage is as many as
    its ``requests`` column says (the source's or app's count), or one when it says none.
    """
    requests = sa.func.count() if table is messages else sa.func.sum(sa.func.coalesce(table.c.requests, 1))
    return [sa.func.coalesce(sa.func.sum(table.c[name]), 0) for name in USAGE_COLUMNS] + [
        cost,
        sa.func.count(),
        sa.literal(part, sa.Integer),
        requests,
    ]


def _group_key(table: sa.Table, group: str) -> list[ColumnElement]:
    if group == "loop":
        return [table.c.loop_id]
    if group == "session":
        return [table.c.session_id]
    if group == "day":
        return [utc_day(table.c.timestamp) if table is messages else utc_day_of_time(table.c.started_at)]
    return []


def _by_level(statement: sa.Select, level: str) -> sa.Select:
    """Filter messages by ``level``: all; session (:session_id); loop (:loop_id); turn (:loop_id, :turn_index)."""
    if level == "session":
        statement = statement.where(messages.c.session_id == bp("session_id"))
    if level in ("loop", "turn"):
        statement = statement.where(messages.c.loop_id == bp("loop_id"))
    if level == "turn":
        statement = statement.where(messages.c.turn_index == bp("turn_index"))
    return statement


@cache
def message_usage(level: str, group: str) -> sa.Select:
    """Usage sums of messages, grouped by (group key, model, provider) (part TOTAL).

    Each level but ``turn`` is served by a covering usage index
    (``ix_messages_usage_*``) in GROUP BY order; a turn by the turn index.
    """
    keys = _group_key(messages, group)
    statement = sa.select(
        *keys, messages.c.model, messages.c.provider, *_sums(messages, sa.null(), USAGE_PART_TOTAL)
    ).where(messages.c.input_tokens.is_not(None))
    statement = _by_level(statement, level)
    if level == "turn":
        # A turn is a few rows: find them by turn, not by a walk of the loop's usage rows.
        # seq (always >= 0) is not in the covering usage index, so naming it steers
        # SQLite's planner to ix_messages_loop_id_turn_index_seq (measured 27 -> 6 µs).
        statement = statement.where(messages.c.seq >= 0)
    return statement.group_by(*keys, messages.c.model, messages.c.provider)


@cache
def message_reported_cost(level: str, group: str) -> sa.Select:
    """The usage records with a source-reported cost, grouped like :func:`message_usage` (part REPORTED).

    Served by the partial index ``ix_messages_cost`` over those records only, so
    a store whose sources report no cost pays nothing here, and the main sums
    need no per-record test of ``cost``. A loop's or turn's session is found
    in the same statement, as the index leads with ``session_id``.
    """
    keys = _group_key(messages, group)
    statement = sa.select(
        *keys, messages.c.model, messages.c.provider,
        *_sums(messages, sa.func.sum(messages.c.cost), USAGE_PART_REPORTED),
    ).where(messages.c.cost.is_not(None))  # cost is only ever written with usage (input_tokens)
    if level in ("loop", "turn"):
        loop_session = sa.select(loops.c.session_id).where(loops.c.loop_id == bp("loop_id")).scalar_subquery()
        statement = statement.where(messages.c.session_id == loop_session)
    statement = _by_level(statement, level)
    return statement.group_by(*keys, messages.c.model, messages.c.provider)


@cache
def loop_reported_usage(level: str, group: str) -> sa.Select:
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
        *keys, loops.c.model, loops.c.provider, *_sums(loops, sa.func.sum(loops.c.cost), USAGE_PART_LOOP)
    ).where(loops.c.input_tokens.is_not(None), ~has_message_usage)
    if level == "session":
        statement = statement.where(loops.c.session_id == bp("session_id"))
    if level == "loop":
        statement = statement.where(loops.c.loop_id == bp("loop_id"))
    if level == "turn":
        statement = statement.where(sa.false())
    return statement.group_by(*keys, loops.c.model, loops.c.provider, loops.c.cost.is_(None))


@cache
def usage_rows(level: str, group: str) -> sa.CompoundSelect:
    """:func:`message_usage`, :func:`message_reported_cost` and :func:`loop_reported_usage`
    in one statement (one round trip); :class:`turnstore.usage.Tally` adds the parts up.

    Rows come in no particular order; callers sort what they show. A turn has no
    reported usage of its own, so its statement leaves the loops part out.
    """
    parts = [message_usage(level, group), message_reported_cost(level, group)]
    if level != "turn":
        parts.append(loop_reported_usage(level, group))
    return sa.union_all(*parts)
