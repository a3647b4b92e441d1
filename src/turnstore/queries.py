"""Every statement turnstore runs, built once with SQLAlchemy Core.

Each builder returns the same statement object on every call (``functools.cache``),
so :class:`turnstore.database.Database` compiles it once per dialect. Parameters
are named ``bindparam``s; the repositories pass plain values. Sync and async
stores run these same statements.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from .schema import PRICED_COLUMNS, USAGE_COLUMNS, imports, loops, messages, prices, sessions, staging

bp = sa.bindparam

SESSION_COLUMNS = (
    sessions.c.session_id,
    sessions.c.agent_id,
    sessions.c.title,
    sessions.c["metadata"],
    sessions.c.created_at,
    sessions.c.updated_at,
)

LOOP_COLUMNS = (
    loops.c.loop_id,
    loops.c.session_id,
    loops.c.parent_loop_id,
    loops.c.continuation_kind,
    loops.c.fork_after,
    loops.c.keep_from,
    loops.c.config,
    loops.c.config_id,
    loops.c.status,
    loops.c.started_at,
    loops.c.ended_at,
    loops.c.spawn_loop_id,
    loops.c.spawn_tool_call_id,
    *(loops.c[name] for name in USAGE_COLUMNS),
    loops.c.cost,
    loops.c["metadata"],
    loops.c.requests,
)

STORED_COLUMNS = (
    messages.c.id,
    messages.c.session_id,
    messages.c.loop_id,
    messages.c.turn_index,
    messages.c.seq,
    messages.c.message,
)

PATH_COLUMNS = (
    messages.c.id,
    messages.c.loop_id,
    messages.c.role,
    messages.c.kind,
    messages.c.message,
)
"""What the context walk reads of a row (``context.choose`` and ``context.to_messages`` take rows in this shape)."""


# --- staged sessions (see turnstore.repositories.staging) ---------------------


def visible(session_id: Any) -> Any:
    """A filter that leaves out a staged session: one probe of the ``staging`` primary key.

    The table is empty but while a large session is being written, so the probe
    finds nothing in a page already in the cache.
    """
    return ~sa.exists().where(staging.c.session_id == session_id)


def loop_visible() -> Any:
    """:func:`visible` for the session of the loop ``:loop_id``: uncorrelated, so probed once per statement,
    not once per message row."""
    return visible(sa.select(loops.c.session_id).where(loops.c.loop_id == bp("loop_id")).scalar_subquery())


# --- sessions -----------------------------------------------------------------


@cache
def insert_session() -> sa.Insert:
    return sa.insert(sessions).values(**{column: bp(column) for column in SESSION_INSERT_COLUMNS})


SESSION_INSERT_COLUMNS = ("session_id", "agent_id", "title", "metadata", "created_at", "updated_at", "source")


@cache
def create_session() -> sa.Insert:
    """:func:`insert_session` that inserts nothing when the id is taken (its rowcount says which).

    A taken id raises no error, so on PostgreSQL an enclosing transaction is
    not aborted by a session another connection created first. ``INSERT … ON
    CONFLICT DO NOTHING`` is the same on SQLite (3.24 and later) and PostgreSQL.
    """
    return (
        postgresql.insert(sessions)
        .values(**{column: bp(column) for column in SESSION_INSERT_COLUMNS})
        .on_conflict_do_nothing(index_elements=["session_id"])
    )


@cache
def unknown_usage() -> sa.Select[Any]:
    """Ids of a loop's assistant messages stored without usage (``usage_known=False``), in order."""
    return (
        sa.select(messages.c.id)
        .where(
            messages.c.loop_id == bp("loop_id"),
            messages.c.role == "assistant",
            messages.c.input_tokens.is_(None),
            loop_visible(),
        )
        .order_by(messages.c.id)
    )


@cache
def get_session() -> sa.Select[Any]:
    return sa.select(*SESSION_COLUMNS).where(sessions.c.session_id == bp("session_id"), visible(bp("session_id")))


@cache
def lock_session() -> sa.Select[Any]:
    """The session row, held until the transaction ends (PostgreSQL; SQLite's write lock covers it).

    Starting a loop takes it, so concurrent starts in one session see each other's loops.
    """
    return sa.select(sessions.c.session_id).where(sessions.c.session_id == bp("session_id")).with_for_update()


@cache
def session_exists() -> sa.Select[Any]:
    return sa.select(sa.literal(1)).where(sessions.c.session_id == bp("session_id"), visible(bp("session_id")))


SESSION_ORDERS = ("updated", "created", "title")
"""What :meth:`~turnstore.repositories.SessionRepository.list` sorts by: last activity, creation, title."""


@cache
def list_sessions(
    by_agent: bool,
    by_model: bool = False,
    since: bool = False,
    until: bool = False,
    order: str = "updated",
    descending: bool = True,
) -> sa.Select[Any]:
    loop_count = sa.select(sa.func.count()).where(loops.c.session_id == sessions.c.session_id).scalar_subquery()
    # seq runs 0..n-1 without a gap in every loop, so a session's message count is the sum
    # over its loops of max(seq) + 1: one index probe per loop, not a count of every message
    # (measured: 50 sessions of 10,000 messages listed in 23 ms by count(*)).
    last_seq = sa.select(sa.func.max(messages.c.seq)).where(messages.c.loop_id == loops.c.loop_id).scalar_subquery()
    message_count = (
        sa.select(sa.func.coalesce(sa.func.sum(last_seq + 1), 0))
        .where(loops.c.session_id == sessions.c.session_id)
        .scalar_subquery()
    )
    statement = sa.select(*SESSION_COLUMNS, loop_count, message_count).where(visible(sessions.c.session_id))
    if by_agent:
        statement = statement.where(sessions.c.agent_id == bp("agent_id"))
    if by_model:
        # The model a loop ran with (its config's): the session's loops are few, one probe each.
        statement = statement.where(
            sa.exists().where(loops.c.session_id == sessions.c.session_id, loops.c.model == bp("model"))
        )
    if since:
        statement = statement.where(sessions.c.updated_at >= bp("since"))
    if until:
        statement = statement.where(sessions.c.updated_at < bp("until"))
    column = {"updated": sessions.c.updated_at, "created": sessions.c.created_at, "title": sessions.c.title}[order]
    if order == "title":  # sessions without a title last, either way
        keys: tuple[Any, ...] = (column.is_(None), column.desc() if descending else column)
    else:
        keys = (column.desc() if descending else column,)
    tie = sessions.c.session_id.desc() if descending and order != "updated" else sessions.c.session_id
    return statement.order_by(*keys, tie).limit(bp("limit")).offset(bp("offset"))


@cache
def count_sessions() -> sa.Select[Any]:
    return sa.select(sa.func.count()).select_from(sessions).where(visible(sessions.c.session_id))


@cache
def delete_session() -> tuple[sa.Delete, ...]:
    """Delete a session's messages, loops, import record and row, in that order.

    Each table is deleted explicitly rather than through ``ON DELETE CASCADE``,
    so nothing is orphaned on a SQLite connection opened with foreign keys off.
    The session row goes last: its rowcount says whether the session existed.
    """
    return tuple(
        sa.delete(table).where(table.c.session_id == bp("session_id")) for table in (messages, loops, imports, sessions)
    )


@cache
def rename_session() -> sa.Update:
    return (
        sa.update(sessions)
        .where(sessions.c.session_id == bp("session_id"))
        .values(title=bp("title"), updated_at=bp("updated_at"))
    )


@cache
def update_session(fields: tuple[str, ...]) -> sa.Update:
    """Set the named columns (``title``, ``metadata``) of :session_id, and its ``updated_at``."""
    values: dict[str, Any] = {name: bp(name) for name in (*fields, "updated_at")}
    return sa.update(sessions).where(sessions.c.session_id == bp("session_id")).values(values)


@cache
def touch_session_of_loop() -> sa.Update:
    """Mark the session of :loop_id as updated at :updated_at (a message was appended)."""
    session = sa.select(loops.c.session_id).where(loops.c.loop_id == bp("loop_id")).scalar_subquery()
    return sa.update(sessions).where(sessions.c.session_id == session).values(updated_at=bp("updated_at"))


@cache
def touch_session() -> sa.Update:
    return sa.update(sessions).where(sessions.c.session_id == bp("session_id")).values(updated_at=bp("updated_at"))


# --- loops --------------------------------------------------------------------


@cache
def insert_loop() -> sa.Insert:
    names = [column.name for column in LOOP_COLUMNS] + ["model", "provider", "source", *PRICED_COLUMNS]
    return sa.insert(loops).values({name: bp(name) for name in names})


@cache
def get_loop() -> sa.Select[Any]:
    return sa.select(*LOOP_COLUMNS).where(loops.c.loop_id == bp("loop_id"), visible(loops.c.session_id))


@cache
def list_loops() -> sa.Select[Any]:
    return (
        sa.select(*LOOP_COLUMNS)
        .where(loops.c.session_id == bp("session_id"), visible(bp("session_id")))
        .order_by(loops.c.started_at, loops.c.loop_id)
    )


@cache
def child_loops() -> sa.Select[Any]:
    return (
        sa.select(*LOOP_COLUMNS)
        .where(sa.or_(loops.c.parent_loop_id == bp("loop_id"), loops.c.spawn_loop_id == bp("loop_id")))
        .order_by(loops.c.started_at, loops.c.loop_id)
    )


@cache
def latest_loop() -> sa.Select[Any]:
    return (
        sa.select(loops.c.loop_id)
        .where(loops.c.session_id == bp("session_id"))
        .order_by(loops.c.started_at.desc(), loops.c.loop_id.desc())
        .limit(1)
    )


@cache
def loop_ids_for_config(has_config: bool) -> sa.Select[Any]:
    config = loops.c.config_id == bp("config_id") if has_config else loops.c.config_id.is_(None)
    return sa.select(loops.c.loop_id).where(loops.c.session_id == bp("session_id"), config)


@cache
def loop_exists() -> sa.Select[Any]:
    return sa.select(loops.c.loop_id).where(loops.c.loop_id == bp("loop_id"), visible(loops.c.session_id))


@cache
def loop_session() -> sa.Select[Any]:
    return sa.select(loops.c.session_id).where(loops.c.loop_id == bp("loop_id"), visible(loops.c.session_id))


@cache
def loop_tree() -> sa.Select[Any]:
    """The shape of every loop of a session: enough to walk from a loop to its root."""
    return sa.select(
        loops.c.loop_id,
        loops.c.parent_loop_id,
        loops.c.continuation_kind,
        loops.c.fork_after,
        loops.c.keep_from,
    ).where(loops.c.session_id == bp("session_id"), visible(bp("session_id")))


@cache
def end_loop() -> sa.Update:
    return sa.update(loops).where(loops.c.loop_id == bp("loop_id")).values(status=bp("status"), ended_at=bp("ended_at"))


@cache
def count_assistant_messages() -> sa.Select[Any]:
    """How many assistant messages (model calls) a loop holds."""
    return sa.select(sa.func.count()).where(messages.c.loop_id == bp("loop_id"), messages.c.role == "assistant")


@cache
def loop_model() -> sa.Select[Any]:
    """A loop's model and provider, which price its reported usage."""
    return sa.select(loops.c.model, loops.c.provider).where(loops.c.loop_id == bp("loop_id"))


@cache
def saved_prices() -> sa.Select[Any]:
    """The price overrides saved in the store."""
    return sa.select(
        prices.c.model,
        prices.c.provider,
        prices.c.since,
        prices.c.input,
        prices.c.output,
        prices.c.cache_read,
        prices.c.cache_write,
    ).order_by(prices.c.model, prices.c.provider, prices.c.since)


@cache
def set_loop_usage() -> sa.Update:
    return (
        sa.update(loops)
        .where(loops.c.loop_id == bp("loop_id"))
        .values({name: bp(name) for name in (*USAGE_COLUMNS, "cost", *PRICED_COLUMNS, "requests")})
    )


# --- messages -----------------------------------------------------------------

MESSAGE_VALUES = (
    "loop_id",
    "turn_index",
    "role",
    "kind",
    "message",
    *USAGE_COLUMNS,
    "cost",
    *PRICED_COLUMNS,
    "model",
    "provider",
    "stop_reason",
    "timestamp",
    "source",
    "search_text",
    "search_thinking",
)


@cache
def insert_message(returning: bool) -> sa.Insert:
    """Insert one message; its seq is the loop's next, computed in the same statement.

    Writers hold the write lock (SQLite) or the loop row (PostgreSQL), so the
    subquery and the insert see the same loop; UNIQUE(loop_id, seq) is the backstop.
    """
    m = messages.alias("m")
    next_seq = (
        sa.select(sa.func.coalesce(sa.func.max(m.c.seq), -1) + 1).where(m.c.loop_id == bp("loop_id")).scalar_subquery()
    )
    later_turn = sa.select(sa.literal(1)).where(m.c.loop_id == bp("loop_id"), m.c.turn_index > bp("turn_index"))
    loop_session = (
        sa.select(loops.c.session_id)
        .where(loops.c.loop_id == bp("loop_id"), loops.c.ended_at.is_(None), ~later_turn.exists())
        .scalar_subquery()
    )
    values: dict[str, Any] = {name: bp(name) for name in MESSAGE_VALUES}
    values["seq"] = next_seq
    # The loop decides the session. A missing or ended loop, or a turn index below one the loop
    # already has, leaves it NULL, which the NOT NULL refuses (see MessageRepository._integrity).
    values["session_id"] = loop_session
    statement = sa.insert(messages).values(values)
    return statement.returning(messages.c.id) if returning else statement


@cache
def insert_message_at(without_nulls: bool = False) -> sa.Insert:
    """Insert one message with an explicit seq (imports, which number a whole loop at once).

    ``without_nulls``: leave out the columns that are NULL for a prompt or a tool
    result without usage (usage, cost, model, provider, stop reason, kind), so
    that no NULL parameter is bound for them.
    """
    names: tuple[str, ...] = (*MESSAGE_VALUES, "session_id", "seq")
    if without_nulls:
        names = tuple(name for name in names if name not in MESSAGE_NULL_COLUMNS)
    return sa.insert(messages).values({name: bp(name) for name in names})


MESSAGE_NULL_COLUMNS = frozenset(
    (*USAGE_COLUMNS, "cost", *PRICED_COLUMNS, "model", "provider", "stop_reason", "kind", "search_thinking")
)
"""The message columns that :func:`insert_message_at` leaves out with ``without_nulls``."""


@cache
def append_state() -> sa.Select[Any]:
    """What decides whether a loop takes a message: its session, ``ended_at`` and the highest turn index it holds."""
    last_turn = (
        sa.select(sa.func.max(messages.c.turn_index)).where(messages.c.loop_id == bp("loop_id")).scalar_subquery()
    )
    return sa.select(loops.c.session_id, loops.c.ended_at, last_turn).where(loops.c.loop_id == bp("loop_id"))


@cache
def lock_loop() -> sa.Select[Any]:
    """PostgreSQL: :func:`append_state`, holding the loop row so concurrent appends to one loop take seq in turn."""
    return append_state().with_for_update(of=loops)


@cache
def loop_tail_ids() -> sa.Select[Any]:
    """Ids of a loop's messages from :seq on, in order."""
    return (
        sa.select(messages.c.id)
        .where(messages.c.loop_id == bp("loop_id"), messages.c.seq >= bp("seq"))
        .order_by(messages.c.seq)
    )


@cache
def loops_depending_on_tail() -> sa.Select[Any]:
    """A loop whose history holds a message of :loop_id from :seq on: (its id, the message it forks at, or NULL).

    It forks or keeps from one of those messages, or continues :loop_id from its end
    (no fork point; a rerun without one replaces its parent and depends on none of it).
    """
    tail = sa.select(messages.c.id).where(messages.c.loop_id == bp("loop_id"), messages.c.seq >= bp("seq"))
    from_end = sa.and_(
        loops.c.parent_loop_id == bp("loop_id"),
        loops.c.fork_after.is_(None),
        loops.c.continuation_kind != "rerun",
        loops.c.continuation_kind != "initial",
    )
    return (
        sa.select(loops.c.loop_id, sa.func.coalesce(loops.c.fork_after, loops.c.keep_from))
        .where(sa.or_(loops.c.fork_after.in_(tail), loops.c.keep_from.in_(tail), from_end))
        .limit(1)
    )


@cache
def delete_loop() -> sa.Delete:
    return sa.delete(loops).where(loops.c.loop_id == bp("loop_id"))


@cache
def delete_loop_tail() -> sa.Delete:
    return sa.delete(messages).where(messages.c.loop_id == bp("loop_id"), messages.c.seq >= bp("seq"))


@cache
def turn_messages() -> sa.Select[Any]:
    return (
        sa.select(messages.c.id, messages.c.message)
        .where(
            messages.c.loop_id == bp("loop_id"),
            messages.c.turn_index == bp("turn_index"),
            loop_visible(),
        )
        .order_by(messages.c.seq)
    )


@cache
def turn_range_messages(bounded: bool, paged: bool = False) -> sa.Select[Any]:
    """Messages of turns ``:start`` to ``:stop`` (``bounded``) of a loop; ``paged``: ``:skip`` left out, ``:limit`` at most."""
    statement = (
        sa.select(messages.c.id, messages.c.turn_index, messages.c.message)
        .where(*_turn_range(bounded))
        .order_by(messages.c.turn_index, messages.c.seq)
    )
    return statement.offset(bp("skip")).limit(bp("limit")) if paged else statement


@cache
def turn_range_lengths(bounded: bool) -> sa.Select[Any]:
    """How many messages each turn from ``:start`` (to ``:stop``) of a loop holds: one index walk, nothing parsed."""
    return (
        sa.select(messages.c.turn_index, sa.func.count())
        .where(*_turn_range(bounded))
        .group_by(messages.c.turn_index)
        .order_by(messages.c.turn_index)
    )


def _turn_range(bounded: bool) -> list[Any]:
    condition = [
        messages.c.loop_id == bp("loop_id"),
        messages.c.turn_index >= bp("start"),
        loop_visible(),
    ]
    if bounded:
        condition.append(messages.c.turn_index < bp("stop"))
    return condition


@cache
def loop_messages() -> sa.Select[Any]:
    return (
        sa.select(messages.c.id, messages.c.message)
        .where(messages.c.loop_id == bp("loop_id"), loop_visible())
        .order_by(messages.c.seq)
    )


@cache
def first_message_of_loop() -> sa.Select[Any]:
    return sa.select(messages.c.id).where(messages.c.loop_id == bp("loop_id")).order_by(messages.c.seq).limit(1)


@cache
def context_messages() -> sa.Select[Any]:
    """Messages of a session from a lower id bound; the context walk filters them by loop."""
    return (
        sa.select(*PATH_COLUMNS)
        .where(messages.c.session_id == bp("session_id"), messages.c.id >= bp("min_id"))
        .order_by(messages.c.id)
    )


@cache
def context_shapes() -> sa.Select[Any]:
    """:func:`context_messages` without the texts: what choosing the rows of a page of a context needs."""
    return (
        sa.select(*PATH_COLUMNS[:4])
        .where(messages.c.session_id == bp("session_id"), messages.c.id >= bp("min_id"))
        .order_by(messages.c.id)
    )


ID_BATCH = 100
"""Ids :func:`path_rows_by_id` reads rows by: ``:id0`` to ``:id99`` (a shorter list padded with -1, no id)."""


@cache
def path_rows_by_id() -> sa.Select[Any]:
    """The rows of :func:`context_messages` with the ids ``:id0`` .. ``:id99``, in id order."""
    wanted = messages.c.id.in_([bp(f"id{n}", type_=sa.BigInteger) for n in range(ID_BATCH)])
    return sa.select(*PATH_COLUMNS).where(wanted).order_by(messages.c.id)


@cache
def path_messages() -> sa.Select[Any]:
    """Like :func:`context_messages`, plus the rest of a ``StoredMessage``: session, turn, seq, source."""
    return (
        sa.select(*PATH_COLUMNS, messages.c.session_id, messages.c.turn_index, messages.c.seq, messages.c.source)
        .where(messages.c.session_id == bp("session_id"), messages.c.id >= bp("min_id"))
        .order_by(messages.c.id)
    )


@cache
def newest_loop() -> sa.Select[Any]:
    """The loop of a session's newest message: the one written most recently."""
    return (
        sa.select(messages.c.loop_id)
        .where(messages.c.session_id == bp("session_id"))
        .order_by(messages.c.id.desc())
        .limit(1)
    )


@cache
def loop_tree_and_newest() -> sa.Select[Any]:
    """:func:`loop_tree` with :func:`newest_loop` in every row: ``last()``'s first read, in one statement."""
    return loop_tree().add_columns(newest_loop().scalar_subquery())


@cache
def session_tail() -> sa.Select[Any]:
    """A session's newest ``limit`` messages, newest first, with their id, loop and kind (``last()``'s first read)."""
    return (
        sa.select(messages.c.id, messages.c.loop_id, messages.c.kind, messages.c.message)
        .where(messages.c.session_id == bp("session_id"), visible(bp("session_id")))
        .order_by(messages.c.id.desc())
        .limit(bp("limit"))
    )


@cache
def loop_messages_backwards(without_summaries: bool) -> sa.Select[Any]:
    """Up to ``limit`` rows of one loop with ids from ``lower`` to ``upper``, newest first (``last()`` reads back).

    ``without_summaries``: compaction summaries left out, for a compaction loop, whose summaries
    open its share of a context, ahead of the history it keeps.
    """
    conditions = [
        messages.c.session_id == bp("session_id"),
        messages.c.loop_id == bp("loop_id"),
        messages.c.id <= bp("upper"),
        messages.c.id >= bp("lower"),
    ]
    if without_summaries:
        conditions.append(sa.or_(messages.c.kind.is_(None), messages.c.kind != "compaction_summary"))
    return (
        sa.select(messages.c.id, messages.c.message)
        .where(*conditions)
        .order_by(messages.c.id.desc())
        .limit(bp("limit"))
    )


@cache
def compaction_summaries() -> sa.Select[Any]:
    """A compaction loop's summary rows, in order."""
    return (
        sa.select(*PATH_COLUMNS)
        .where(
            messages.c.loop_id == bp("loop_id"),
            messages.c.role == "extension",
            messages.c.kind == "compaction_summary",
        )
        .order_by(messages.c.id)
    )


@cache
def stored_messages(by_loop: bool) -> sa.Select[Any]:
    """One page of a session's messages in global order (a loop's: in ``seq`` order), after ``:after``.

    ``:after`` is the last id (``seq``) of the page before, -1 for the first;
    ``:limit`` rows at most. Each page is a statement of its own, read to its
    end: nothing stays open between pages (an open SQLite read would keep its
    connection on an old snapshot, so that connection could not write).
    """
    statement = sa.select(*STORED_COLUMNS, messages.c.source)
    if by_loop:
        statement = statement.where(messages.c.loop_id == bp("loop_id"), messages.c.seq > bp("after"))
        return statement.order_by(messages.c.seq).limit(bp("limit"))
    statement = statement.where(messages.c.session_id == bp("session_id"), messages.c.id > bp("after"))
    return statement.order_by(messages.c.id).limit(bp("limit"))


@cache
def assistant_messages_newest_first() -> sa.Select[Any]:
    """A session's assistant message JSON, newest first: the ``(session_id, id)`` index read backwards."""
    return (
        sa.select(messages.c.message)
        .where(messages.c.session_id == bp("session_id"), messages.c.role == "assistant", visible(bp("session_id")))
        .order_by(messages.c.id.desc())
    )


@cache
def get_message() -> sa.Select[Any]:
    return sa.select(*STORED_COLUMNS, messages.c.source).where(
        messages.c.id == bp("id"), visible(messages.c.session_id)
    )


@cache
def message_usage_state() -> sa.Select[Any]:
    """A message's JSON, role and whether its usage is known (``input_tokens`` not NULL), by id."""
    return sa.select(
        messages.c.message, messages.c.role, messages.c.loop_id, messages.c.turn_index, messages.c.input_tokens
    ).where(messages.c.id == bp("id"), visible(messages.c.session_id))


@cache
def set_message_usage() -> sa.Update:
    """Give a message new JSON, model, provider and usage columns (``messages.set_usage``)."""
    columns = ("message", "model", "provider", *USAGE_COLUMNS, "cost", *PRICED_COLUMNS)
    return sa.update(messages).where(messages.c.id == bp("id")).values({name: bp(name) for name in columns})


@cache
def session_message_ids() -> sa.Select[Any]:
    return sa.select(messages.c.id).where(messages.c.session_id == bp("session_id")).order_by(messages.c.id)


@cache
def set_loop_fork() -> sa.Update:
    return (
        sa.update(loops)
        .where(loops.c.loop_id == bp("loop_id"))
        .values(fork_after=bp("fork_after"), keep_from=bp("keep_from"))
    )


@cache
def loop_message_sources(latest: bool) -> sa.Select[Any]:
    """A loop's message ids, turn indexes and verbatim sources in order; ``latest``: the last ``:limit``, newest first."""
    return _in_loop_order(
        sa.select(messages.c.id, messages.c.turn_index, messages.c.source).where(
            messages.c.loop_id == bp("loop_id"), loop_visible()
        ),
        latest,
    )


@cache
def loop_source_texts(latest: bool) -> sa.Select[Any]:
    """A loop's verbatim sources alone, in order (rows without one left out); ``latest``: the last ``:limit``,
    newest first."""
    return _in_loop_order(
        sa.select(messages.c.source).where(
            messages.c.loop_id == bp("loop_id"), messages.c.source.is_not(None), loop_visible()
        ),
        latest,
    )


def _in_loop_order(statement: sa.Select[Any], latest: bool) -> sa.Select[Any]:
    """``statement`` in a loop's order; ``latest``: its last ``:limit`` rows, newest first."""
    if latest:
        return statement.order_by(messages.c.seq.desc()).limit(bp("limit"))
    return statement.order_by(messages.c.seq)


@cache
def export_messages() -> sa.Select[Any]:
    """Every column an export needs, in global order: one page, as :func:`stored_messages` (by id)."""
    return (
        sa.select(
            *STORED_COLUMNS,
            messages.c.source,
            messages.c.role,
            *(messages.c[name] for name in USAGE_COLUMNS),
            messages.c.cost,
            messages.c.model,
            messages.c.provider,
            messages.c.timestamp,
        )
        .where(messages.c.session_id == bp("session_id"), messages.c.id > bp("after"))
        .order_by(messages.c.id)
        .limit(bp("limit"))
    )


# --- imports --------------------------------------------------------------------


@cache
def get_import() -> sa.Select[Any]:
    return sa.select(imports.c.format, imports.c.origin, imports.c.digest, imports.c.source_format).where(
        imports.c.session_id == bp("session_id")
    )


@cache
def insert_import() -> sa.Insert:
    return sa.insert(imports).values(
        session_id=bp("session_id"),
        format=bp("format"),
        source_format=bp("source_format"),
        origin=bp("origin"),
        digest=bp("digest"),
        imported_at=bp("imported_at"),
        report=bp("report"),
    )


@cache
def session_source() -> sa.Select[Any]:
    return sa.select(sessions.c.source).where(sessions.c.session_id == bp("session_id"))


@cache
def loop_sources() -> sa.Select[Any]:
    return (
        sa.select(loops.c.loop_id, loops.c.source)
        .where(loops.c.session_id == bp("session_id"))
        .order_by(loops.c.started_at, loops.c.loop_id)
    )
