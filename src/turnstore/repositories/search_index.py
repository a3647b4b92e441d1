"""Keeping SQLite's full-text index up to date, in batches; and searching the few messages not in it yet.

FTS5 writes a new index segment at every commit, and at every trigger that adds
a row: indexed one message at a time, the index cost about as much as the rest
of a one-message append. So the index is kept in batches (migration 0008):

* ``message_search_state.indexed_to``: every message with an id up to it is in
  the FTS5 table ``message_search``, none above it (the "tail"). The triggers on
  ``messages`` keep indexed messages in step on delete and update, and index at
  once a new message whose id is not above it (SQLite reuses the ids of deleted
  newest rows).
* Writers index the tail with one ``INSERT ... SELECT`` (:func:`catch_up`):
  appends once it holds :data:`TAIL` messages (:func:`keep_up`), imports after
  every batch of rows they write, in the same transaction. So the tail never
  holds more than ``TAIL - 1`` messages between writes, whoever wrote them.
* A search first indexes the tail itself when its store may write and no
  other writer holds the lock at that moment (:func:`index_if_free`; it never
  waits). Otherwise (a read-only store, a busy writer, a search inside a
  transaction) it also matches the tail, through a small FTS5 table of its
  connection's own (``temp.message_search_tail``) refilled from it
  (:func:`tail`): that writes only the temporary database, so it works on a
  read-only store. Tail hits are ranked by that small index's statistics,
  then merged with the main index's hits in rank order (:func:`merge_page`).

PostgreSQL needs none of this: its GIN index keeps a pending list of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .. import search_queries as sq
from ..database import Database
from ..errors import TurnstoreError
from ..schema import SEARCH_STATE

__all__ = ["NOTHING_TO_INDEX", "TAIL", "batched", "catch_up", "index_if_free", "keep_up", "merge_page", "tail"]

Row = TypeVar("Row")

log = logging.getLogger(__name__)

TAIL = 128
"""Messages left out of the FTS5 index at most, until a writer indexes them together."""

NOTHING_TO_INDEX = 2**63 - 1
"""What :func:`keep_up` answers when the store keeps no batched index (PostgreSQL, a SQLite without FTS5):
no message id reaches it, so the caller never asks again."""


def catch_up(db: Database) -> int:
    """Index every message above ``indexed_to`` and move it up to the newest; in the caller's write transaction.

    Returns the new ``indexed_to`` (:data:`NOTHING_TO_INDEX` if the store keeps no batched index).
    """
    if not batched(db):
        return NOTHING_TO_INDEX
    db.execute(sq.search_catch_up())
    db.execute(sq.search_state_to_newest())
    indexed: int = db.scalar(sq.search_indexed_to())
    return indexed


def keep_up(db: Database, newest: int, known: int) -> int:
    """After a write whose newest message has id ``newest``: index the tail if it holds :data:`TAIL` messages.

    ``known`` is the ``indexed_to`` the caller last saw. Another writer's batches
    only make it stale low, which indexes early (finding the tail short, it just
    refreshes it); a ``newest`` below it (a rollback undid the batch it saw, or
    the newest messages were deleted) makes it look again at once.

    Joins the caller's write transaction, or runs one of its own after the
    write committed: then a failure is logged, not raised (the write
    succeeded, and its messages are found in the tail until a later write
    indexes them). Returns the ``indexed_to`` to remember.
    """
    if not db.is_sqlite:
        return NOTHING_TO_INDEX
    # Ids that went back below what was seen mean a rolled-back write had moved indexed_to, or the newest
    # messages were deleted: either way, look now (indexed_to comes down to the newest message).
    if known <= newest < known + TAIL:
        return known
    if db.in_transaction:  # the write's own transaction: indexed with it, or not at all
        return catch_up(db)
    try:
        with db.write():
            return catch_up(db)
    except (TurnstoreError, db.DatabaseError) as error:
        # The message is committed and a search finds it in the tail: the write succeeded, so it must not
        # raise. The next write tries again.
        log.warning("turnstore: the search index could not take the newest messages yet: %s", error)
        return known


def index_if_free(db: Database) -> None:
    """Before a search on a :func:`batched` store: index the tail, if there is one, this connection may write,
    and no writer holds the lock.

    Then the whole search runs on the main index, ranked by its statistics. It
    never waits for another writer (nor writes on a read-only store, or inside
    the caller's transaction): the search then matches the tail through
    :func:`tail` instead.
    """
    if db.in_transaction or db.pragma("query_only"):
        return
    newest = db.scalar(sq.newest_message_id())
    if newest is None or newest <= db.scalar(sq.search_indexed_to()):
        return
    try:
        with db.write_if_free() as free:
            if free:
                catch_up(db)
    except (TurnstoreError, db.DatabaseError) as error:  # worth doing, not worth failing a search for
        log.warning("turnstore: the search index could not take the newest messages yet: %s", error)


def tail(db: Database) -> bool:
    """On a :func:`batched` store, fill this connection's ``temp.message_search_tail`` with the messages above
    ``indexed_to``; whether any.

    In the caller's read transaction, so the tail and the main index are read
    from one snapshot. Only the temporary database is written, on a read-only
    store too.
    """
    indexed = db.scalar(sq.search_indexed_to())
    newest = db.scalar(sq.newest_message_id())
    if newest is None or newest <= indexed:
        return False
    # A read-only store's connections are query_only, which refuses even the temp database: these three
    # statements name temp's table, so they may run with it off.
    with db.pragmas_during(query_only="off"):
        db.execute(sq.create_search_tail())
        db.execute(sq.clear_search_tail())
        db.execute(sq.fill_search_tail(), {"indexed_to": indexed})
    return True


def merge_page(
    fetch_main: Callable[[int, int], Sequence[Row]],
    tail_hits: Sequence[Row],
    key: Callable[[Row], Any],
    offset: int,
    limit: int,
) -> list[Row]:
    """The page ``[offset, offset + limit)`` of the main index's hits and the tail's, merged in ``key`` order.

    ``fetch_main(offset, limit)`` gives a page of the main index's hits, in
    ``key`` order; ``tail_hits`` are all of the tail's (at most :data:`TAIL`), in
    any order. Exact, with one main page of at most ``limit + len(tail_hits)``
    rows: the page's main hits are among the main hits from ``offset - T`` on
    (``T`` tail hits can come before them at most). Hits merged in after the
    window's last one are past the page, so their unknown places do not matter.
    """
    ranked = sorted(tail_hits, key=key)
    count = len(ranked)
    start = max(0, offset - count)
    window = list(fetch_main(start, limit + count))
    if start == 0:
        base, candidates = 0, ranked
    else:  # tail hits before the window's first are at positions below offset: not on the page
        before = sum(1 for hit in ranked if key(hit) < key(window[0])) if window else count
        base, candidates = start + before, ranked[before:]
    merged = sorted([*window, *candidates], key=key)
    return merged[offset - base : offset - base + limit]


def batched(db: Database) -> bool:
    """Whether this store keeps its FTS5 index in batches (SQLite with FTS5, migrated to 0008 or later; not a
    store downgraded to 0007 while open, whose triggers index every message)."""
    return db.is_sqlite and db.scalar(sq.search_table_exists(), {"name": SEARCH_STATE}) is not None
