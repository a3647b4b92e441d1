"""The full-text search statements: the query over FTS5 or a PostgreSQL ``tsvector``, and the SQLite index's upkeep.

Like :mod:`turnstore.queries` (same conventions: cached builders, named
bind parameters), kept apart because search is a concept of its own: what
:mod:`turnstore.repositories.search` runs to find messages, and what
:mod:`turnstore.repositories.search_index` runs to keep SQLite's FTS5 table in
batches and to match the messages not in it yet.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from .queries import visible
from .schema import SEARCH_STATE, SEARCH_TABLE, SEARCH_TAIL, messages, search_vector

bp = sa.bindparam


SEARCH_FILTERS = ("session_id", "loop_id", "role", "tool_name", "since", "until")
"""The optional filters of :func:`search_messages`, in the order its cache key names them."""

_TOOL_FILTER = {
    # One CASE, not an OR: an OR beside MATCH makes SQLite plan the FTS5 lookup where it cannot run.
    False: (
        "CASE messages.role WHEN 'toolResult' THEN json_extract(messages.message, '$.toolName') = :tool_name "
        "WHEN 'assistant' THEN EXISTS (SELECT 1 FROM json_each(messages.message, '$.content') AS block "
        "WHERE json_extract(block.value, '$.type') = 'toolCall' AND json_extract(block.value, '$.name') = :tool_name) "
        "ELSE 0 END"
    ),
    True: (
        "(messages.role = 'toolResult' AND messages.message ->> 'toolName' = :tool_name) OR "
        "(messages.role = 'assistant' AND EXISTS (SELECT 1 FROM json_array_elements(CASE WHEN "
        "json_typeof(messages.message -> 'content') = 'array' THEN messages.message -> 'content' ELSE '[]'::json END) "
        "AS block WHERE block ->> 'type' = 'toolCall' AND block ->> 'name' = :tool_name))"
    ),
}
"""A message that calls the tool :tool_name (an assistant message) or answers it (a tool result)."""


@cache
def search_messages(postgresql_: bool, filters: tuple[str, ...], tail: bool = False) -> sa.Select[Any]:
    """Messages matching ``:query`` (FTS5 MATCH text, or ``tsquery`` text on PostgreSQL), best first.

    ``filters`` names the optional conditions bound (see :data:`SEARCH_FILTERS`).
    Ties go to the newer message. SQLite: ``tail`` matches the messages not yet
    in the index, through this connection's :data:`~turnstore.schema.SEARCH_TAIL`.
    """
    conditions: list[Any] = [visible(messages.c.session_id)]
    if postgresql_:
        tsquery = sa.cast(bp("query"), postgresql.TSQUERY)
        vector = search_vector()
        rank: Any = sa.func.ts_rank(vector, tsquery)
        source: Any = messages
        conditions.append(vector.op("@@")(tsquery))
        order: list[Any] = [rank.desc()]
    else:
        name = SEARCH_TAIL if tail else SEARCH_TABLE
        fts = sa.table(name, sa.column("rowid"), sa.column("rank"), schema="temp" if tail else None)
        rank = -fts.c.rank
        source = fts.join(messages, messages.c.id == fts.c.rowid)
        conditions.append(sa.literal_column(name).op("MATCH")(bp("query")))
        order = [fts.c.rank]
    for name in filters:
        if name == "since":
            conditions.append(messages.c.timestamp >= bp("since"))
        elif name == "until":
            conditions.append(messages.c.timestamp < bp("until"))
        elif name == "tool_name":
            # Parenthesized: text is not, and an OR beside the match's AND would escape it.
            conditions.append(sa.text(f"({_TOOL_FILTER[postgresql_]})").bindparams(bp("tool_name")))
        else:
            conditions.append(messages.c[name] == bp(name))
    return (
        sa.select(
            messages.c.id,
            messages.c.session_id,
            messages.c.loop_id,
            messages.c.turn_index,
            messages.c.seq,
            messages.c.role,
            messages.c.kind,
            messages.c.timestamp,
            messages.c.message,
            rank.label("rank"),
        )
        .select_from(source)
        .where(*conditions)
        .order_by(*order, messages.c.id.desc())
        .limit(bp("limit"))
        .offset(bp("offset"))
    )


@cache
def search_table_exists() -> sa.TextClause:
    """SQLite: the table :name (the FTS5 table, or its state), if it exists."""
    return sa.text("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = :name")


_HAS_WORDS = "(search_text IS NOT NULL OR search_thinking IS NOT NULL)"


@cache
def search_indexed_to() -> sa.TextClause:
    """SQLite: the newest message id in the FTS5 index's batches (see ``repositories/search_index.py``)."""
    return sa.text(f"SELECT indexed_to FROM {SEARCH_STATE}")


@cache
def search_catch_up() -> sa.TextClause:
    """SQLite: add every message above ``indexed_to`` that has words to the FTS5 index, in one statement."""
    return _index_words(SEARCH_TABLE, f"(SELECT indexed_to FROM {SEARCH_STATE})")


@cache
def search_state_to_newest() -> sa.TextClause:
    """SQLite: ``indexed_to`` set to the newest message, once every message is indexed.

    Down too, when the newest indexed messages were deleted: no message lies
    between, and new ones then get ids above it again (so they are indexed in
    batches, not one by one by the trigger for reused ids).
    """
    return sa.text(f"UPDATE {SEARCH_STATE} SET indexed_to = coalesce((SELECT max(id) FROM messages), 0)")


@cache
def newest_message_id() -> sa.Select[Any]:
    return sa.select(sa.func.max(messages.c.id))


@cache
def create_search_tail() -> sa.TextClause:
    """SQLite: this connection's FTS5 table for the messages not yet indexed, tokenized as the main one."""
    return sa.text(
        f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{SEARCH_TAIL} USING fts5(search_text, search_thinking, "
        "tokenize='ascii')"
    )


@cache
def clear_search_tail() -> sa.TextClause:
    return sa.text(f"DELETE FROM temp.{SEARCH_TAIL}")


@cache
def fill_search_tail() -> sa.TextClause:
    """SQLite: every message above ``:indexed_to`` that has words into this connection's tail table."""
    return _index_words(f"temp.{SEARCH_TAIL}", ":indexed_to")


def _index_words(table: str, above: str) -> sa.TextClause:
    """The words of every message with an id above ``above`` (SQL) into the FTS5 table ``table``, rowid = id."""
    return sa.text(
        f"INSERT INTO {table} (rowid, search_text, search_thinking) "
        f"SELECT id, search_text, search_thinking FROM messages WHERE id > {above} AND {_HAS_WORDS}"
    )
