"""The tables, as SQLAlchemy Core metadata. Alembic migrations create them; nothing else does.

Three tables, one per level of an agent's history:

* ``sessions`` — one conversation.
* ``loops`` — one agent run inside a session; loops form a tree through
  ``parent_loop_id`` (continuations, branches, compactions) and
  ``spawn_loop_id`` (a sub-agent started by a tool call).
* ``imports`` — which source each imported session came from, and its digest,
  so importing the same source again changes nothing.
* ``messages`` — one row per message, in a global order (``id``) and a
  per-loop order (``seq``, unique and gap-free), with the message's JSON,
  typed usage columns and, for imports, the verbatim source record.
* ``media`` — long base64 data moved out of message texts, once per SHA-256,
  and ``session_media``, which sessions refer to which (see :mod:`turnstore.media`).

Every hot query filters on ``session_id`` or on a key that implies it
(``loop_id``), and each has an index that serves it; the two partial
"usage" indexes cover the usage aggregates so they never touch message JSON.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

__all__ = ["imports", "loops", "media", "messages", "metadata", "prices", "session_media", "sessions", "staging"]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
"""JSON on SQLite (stored as text), JSONB on PostgreSQL: session metadata, loop config, import reports."""

ExactJson = sa.JSON()
"""JSON kept exactly as written (PostgreSQL's ``json``, not ``jsonb``): the messages.

JSONB re-sorts object keys, drops duplicate keys and refuses ``\u0000``; any of
those would change a stored message, and tool-call arguments and thinking
signatures must come back byte for byte. ``json`` still supports ``->`` and ``->>``.
"""

Timestamp = sa.DateTime(timezone=True)
"""UTC wall-clock time (sessions and loops). Message times are unix milliseconds, as phi-core writes them."""

MessageId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
"""64-bit on PostgreSQL; INTEGER on SQLite so the id is the rowid (no extra index)."""

USAGE_COLUMNS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "total_tokens",
)
"""Typed token columns, in the order of :class:`turnstore.models.Usage`'s fields."""

PRICED_COLUMNS = ("priced_cost", "cost_source", "price_version")
"""What a usage record cost, fixed when it was written (see :mod:`turnstore.pricing`)."""


def _usage_columns() -> list[sa.Column[Any]]:
    """The typed usage columns shared by messages (per call) and loops (reported totals)."""
    return [sa.Column(name, sa.BigInteger, nullable=True) for name in USAGE_COLUMNS] + [
        # Provider-reported cost in USD, where the source recorded one (pi, Tau, appam).
        sa.Column("cost", sa.Float, nullable=True),
        # What the usage cost, fixed when it was written (migration 0010; see turnstore.pricing): the
        # reported cost, or its tokens at the store's override or the catalog's price; NULL: unknown.
        sa.Column("priced_cost", sa.Float, nullable=True),
        # Where priced_cost came from: "reported", "override", "catalog"; NULL: no price is known.
        sa.Column("cost_source", sa.String, nullable=True),
        # The price data a catalog cost came from ("genai-prices 0.2.3").
        sa.Column("price_version", sa.String, nullable=True),
    ]


sessions = sa.Table(
    "sessions",
    metadata,
    sa.Column("session_id", sa.String, primary_key=True),
    sa.Column("agent_id", sa.String, nullable=True),
    sa.Column("title", sa.String, nullable=True),
    sa.Column("metadata", Json, nullable=True),
    sa.Column("created_at", Timestamp, nullable=False),
    sa.Column("updated_at", Timestamp, nullable=False),
    # The verbatim session-level source record of an import (phi-core session header, pi header...).
    sa.Column("source", sa.Text, nullable=True),
    # Listing sessions newest first, and by agent.
    sa.Index(None, "updated_at"),
    sa.Index(None, "agent_id"),
)

loops = sa.Table(
    "loops",
    metadata,
    sa.Column("loop_id", sa.String, primary_key=True),
    sa.Column(
        "session_id",
        sa.String,
        sa.ForeignKey("sessions.session_id", ondelete="CASCADE"),
        nullable=False,
    ),
    # A plain value, not a foreign key: imports may reference a loop not stored yet.
    sa.Column("parent_loop_id", sa.String, nullable=True),
    sa.Column("continuation_kind", sa.String, nullable=False),
    # Message id in the parent after which this loop forks; NULL means the parent's end.
    sa.Column("fork_after", sa.BigInteger, nullable=True),
    # Compaction loops: the first message of the parent chain still shown after the summary.
    sa.Column("keep_from", sa.BigInteger, nullable=True),
    sa.Column("config", Json, nullable=True),
    sa.Column("config_id", sa.String, nullable=True),
    sa.Column("model", sa.String, nullable=True),
    sa.Column("provider", sa.String, nullable=True),
    sa.Column("status", sa.String, nullable=False),
    sa.Column("started_at", Timestamp, nullable=False),
    sa.Column("ended_at", Timestamp, nullable=True),
    # Sub-agent loops: the loop and tool call that spawned this one (plain values).
    sa.Column("spawn_loop_id", sa.String, nullable=True),
    sa.Column("spawn_tool_call_id", sa.String, nullable=True),
    # Loop-level usage a source reported without per-message usage (appam).
    *_usage_columns(),
    # How many model calls that usage covers, where the source or app said (migration 0003).
    sa.Column("requests", sa.BigInteger, nullable=True),
    sa.Column("metadata", Json, nullable=True),
    # The verbatim loop record of an import (phi-core LoopRecord without its messages).
    sa.Column("source", sa.Text, nullable=True),
    sa.Index(None, "session_id", "started_at"),
    sa.Index(None, "parent_loop_id"),
    sa.Index(None, "spawn_loop_id"),
    # The few loops with reported usage, found without scanning the rest.
    sa.Index(
        "ix_loops_reported_usage",
        "session_id",
        sqlite_where=sa.text("input_tokens IS NOT NULL"),
        postgresql_where=sa.text("input_tokens IS NOT NULL"),
    ),
)

messages = sa.Table(
    "messages",
    metadata,
    sa.Column("id", MessageId, primary_key=True, autoincrement=True),
    sa.Column(
        "session_id",
        sa.String,
        sa.ForeignKey("sessions.session_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column(
        "loop_id",
        sa.String,
        sa.ForeignKey("loops.loop_id", ondelete="CASCADE"),
        nullable=False,
    ),
    sa.Column("turn_index", sa.Integer, nullable=True),
    sa.Column("seq", sa.Integer, nullable=False),
    sa.Column("role", sa.String, nullable=False),
    # Extension messages: their kind ("compaction_summary", "system", an app's own kind...).
    sa.Column("kind", sa.String, nullable=True),
    sa.Column("message", ExactJson, nullable=False),
    *_usage_columns(),
    sa.Column("model", sa.String, nullable=True),
    sa.Column("provider", sa.String, nullable=True),
    sa.Column("stop_reason", sa.String, nullable=True),
    # Unix milliseconds, from the message itself (NULL for extension messages, which have none).
    sa.Column("timestamp", sa.BigInteger, nullable=True),
    # The verbatim source record of an imported message, or the one an app gave ``append(source=...)``; else NULL.
    sa.Column("source", sa.Text, nullable=True),
    # Full-text search (migration 0007): the message's searchable words, folded and joined by
    # spaces (turnstore.search_text), thinking apart; NULL when it has none. SQLite indexes them
    # in the FTS5 table ``message_search``, PostgreSQL in the GIN index ``ix_messages_search``.
    sa.Column("search_text", sa.Text, nullable=True),
    sa.Column("search_thinking", sa.Text, nullable=True),
    # Per-loop order, and the guarantee that seq is never taken twice.
    sa.UniqueConstraint("loop_id", "seq"),
    # last(session, n) and session scans in global order.
    sa.Index(None, "session_id", "id"),
    # turn(loop, k) and turns(loop, a, b), already in seq order: never a walk of the whole loop.
    sa.Index(None, "loop_id", "turn_index", "seq"),
    # Usage of a session, in GROUP BY (model, provider) order: a covering index over usage rows only.
    sa.Index(
        "ix_messages_usage_session",
        "session_id",
        "model",
        "provider",
        "cost_source",
        *USAGE_COLUMNS,
        "priced_cost",
        "timestamp",
        "loop_id",
        sqlite_where=sa.text("input_tokens IS NOT NULL"),
        postgresql_where=sa.text("input_tokens IS NOT NULL"),
    ),
    # Usage of a loop, the same way, in GROUP BY (model, provider) order; turn_index last
    # so one turn's usage is read from the index too (migration 0002).
    sa.Index(
        "ix_messages_usage_loop",
        "loop_id",
        "model",
        "provider",
        "cost_source",
        *USAGE_COLUMNS,
        "priced_cost",
        "timestamp",
        "turn_index",
        sqlite_where=sa.text("input_tokens IS NOT NULL"),
        postgresql_where=sa.text("input_tokens IS NOT NULL"),
    ),
    # Usage by model across all sessions: a covering index, already in GROUP BY order.
    sa.Index(
        "ix_messages_usage_model",
        "model",
        "provider",
        "cost_source",
        *USAGE_COLUMNS,
        "priced_cost",
        "timestamp",
        sqlite_where=sa.text("input_tokens IS NOT NULL"),
        postgresql_where=sa.text("input_tokens IS NOT NULL"),
    ),
)

imports = sa.Table(
    "imports",
    metadata,
    sa.Column(
        "session_id",
        sa.String,
        sa.ForeignKey("sessions.session_id", ondelete="CASCADE"),
        primary_key=True,
    ),
    sa.Column("format", sa.String, nullable=False),
    # The format of the verbatim source records kept with the messages (differs from
    # ``format`` when a turnstore export of an imported session is imported again).
    sa.Column("source_format", sa.String, nullable=True),
    # The file (and line or row) the session was read from.
    sa.Column("origin", sa.String, nullable=False),
    # sha256 of the session's source records: equal digest, nothing to do.
    sa.Column("digest", sa.String, nullable=False),
    sa.Column("imported_at", Timestamp, nullable=False),
    # The count report of the import that wrote the session.
    sa.Column("report", Json, nullable=True),
)

staging = sa.Table(
    "staging",
    metadata,
    # A session being written in batches (migration 0004): every read leaves it out until it is published.
    sa.Column("session_id", sa.String, primary_key=True),
    # Who writes it: ``host:pid:token``. The next writer to open the store removes a staging whose
    # owner is gone: nobody holds the lock file the token names (staging.OwnerLock); without one,
    # a process of this host that no longer runs, or a lease not renewed in time.
    sa.Column("owner", sa.String, nullable=False),
    # Renewed by every batch; a staging not renewed for the lease is abandoned.
    sa.Column("heartbeat_at", Timestamp, nullable=False),
)
"""Sessions being written in batches and not yet published (see :mod:`turnstore.repositories.staging`)."""

ALWAYS = -(2**63)
"""``prices.since`` of a price in force for records of any time."""

prices = sa.Table(
    "prices",
    metadata,
    # A store's own price of a model (migration 0010), over the catalog's, for every process that opens it:
    # the model as given (matched as turnstore.usage.PriceTable matches), "" for any provider, and the unix
    # milliseconds from which it is in force (ALWAYS: for records of any time).
    sa.Column("model", sa.String, primary_key=True),
    sa.Column("provider", sa.String, primary_key=True),
    sa.Column("since", sa.BigInteger, primary_key=True),
    # USD per million tokens.
    sa.Column("input", sa.Float, nullable=False),
    sa.Column("output", sa.Float, nullable=False),
    sa.Column("cache_read", sa.Float, nullable=False),
    sa.Column("cache_write", sa.Float, nullable=False),
)
"""Price overrides saved in the store (see :mod:`turnstore.repositories.prices`)."""

media = sa.Table(
    "media",
    metadata,
    # SHA-256 (hex) of the base64 text (migration 0006): equal data is stored once, whichever sessions hold it.
    sa.Column("sha256", sa.String, primary_key=True),
    # The base64 run exactly as it stood in the message text (text, not bytes: it goes back into that text).
    sa.Column("data", sa.Text, nullable=False),
)
"""Media out of line: each long base64 run of a stored text, once (see :mod:`turnstore.media`)."""

session_media = sa.Table(
    "session_media",
    metadata,
    # Plain values, deleted explicitly with the session (as the other tables), then the media no
    # other session refers to.
    sa.Column("session_id", sa.String, primary_key=True),
    sa.Column("sha256", sa.String, primary_key=True),
    # Whether any other session still refers to a digest, when a session goes.
    sa.Index(None, "sha256"),
)
"""Which session's messages refer to which media: a session's media is freed with it unless another refers to it."""


SEARCH_TABLE = "message_search"
"""SQLite: the FTS5 table over ``messages.search_text`` and ``search_thinking`` (external content, rowid = message
id), kept by triggers on ``messages``; it and its shadow tables (``message_search_*``) are not in :data:`metadata`."""


SEARCH_STATE = "message_search_state"
"""SQLite: one row, ``indexed_to``: messages up to this id are in :data:`SEARCH_TABLE`, none above it (migration
0008; ``turnstore.repositories.search_index`` keeps it). Not in :data:`metadata`, like the FTS5 table."""

SEARCH_TAIL = "message_search_tail"
"""SQLite: a connection's own FTS5 table in its ``temp`` database, refilled by each search with the messages above
``indexed_to``."""


SEARCH_INDEX = "ix_messages_search"
"""PostgreSQL: the GIN index over :func:`search_vector` (made by migration 0007, remade over
:data:`SEARCH_WORDS_FUNCTION` by 0009; not in :data:`metadata`)."""

SEARCH_WORDS_FUNCTION = "turnstore_search_words"
"""PostgreSQL: the SQL function (migration 0009) that makes a ``tsvector`` of stored words as they are.

``turnstore_search_words(words, weight)`` gives each space-separated word of
``words`` its position (from 2: a gap after the text's words, so that no phrase
runs on into the thinking) and ``weight``, through the ``tsvector`` input syntax:
no text search parser splits them and no dictionary lowercases them, so the
index holds exactly the words :mod:`turnstore.search_text` folded, whatever the
database's locale (``to_tsvector`` dropped characters its parser does not
count as letters and lowercased Cherokee, which Python case-folds to capitals).
Like FTS5's ``ascii`` tokenizer over the same words on SQLite."""

SEARCH_VECTOR_SQL = f"{SEARCH_WORDS_FUNCTION}(search_text, 'A') || {SEARCH_WORDS_FUNCTION}(search_thinking, 'B')"
"""PostgreSQL: a message row's ``tsvector``, text at weight A and thinking at B: what ``ix_messages_search``
indexes. A query uses this same expression (:func:`search_vector`), or the index cannot serve it."""


def search_vector() -> Any:
    """:data:`SEARCH_VECTOR_SQL` as a column expression of ``messages``."""
    return sa.literal_column("(" + SEARCH_VECTOR_SQL.replace("(search_", "(messages.search_") + ")")


def owned_by_metadata(name: str | None, type_: str, parent_names: Any) -> bool:
    """Whether a database object is described by :data:`metadata` (Alembic's ``include_name``): not the search
    index objects, which only the migration makes (an FTS5 virtual table and an expression index)."""
    if type_ == "table" and name is not None and name.startswith(SEARCH_TABLE):
        return False
    return not (type_ == "index" and name == SEARCH_INDEX)
