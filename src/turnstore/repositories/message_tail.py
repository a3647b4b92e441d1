"""The tail of a loop's context, read backwards: how ``store.messages.last()`` reads only as far as it needs."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from .. import context as ctx
from .. import queries as q
from ..database import Database
from ..media import MediaMode
from ..models import MAX_INT
from .media import parse_texts_of

__all__ = ["TAIL_SLACK", "newest_tail", "path_tail"]

TAIL_SLACK = 8
"""Rows ``store.messages.last()`` reads beyond ``n`` in its one-statement case."""


def newest_tail(db: Database, session_id: str, n: int, mode: MediaMode = "inline") -> list[Any] | None:
    """The context tail of the newest loop from the session's newest ``n`` rows alone, or None.

    Every loop's path ends with all of the loop's own rows, so when the
    newest ``n`` rows are all one loop's (no compaction summary among
    them, which opens its loop's share) and their context holds ``n``
    messages (or they are all the session holds), they decide the tail:
    one statement, as the session is being written. Otherwise (a branch
    just forked, a short loop) the caller walks the path.
    """
    # A few rows more than n: the oldest rows read are often tool results whose call is further
    # back (left out at the front), and one such row would otherwise send the caller the long way.
    limit = n + TAIL_SLACK
    rows = db.fetchall(q.session_tail(), {"session_id": session_id, "limit": limit})
    if not rows:
        return None
    _id, loop_id, _kind, _text = rows[0]
    if not all(row_loop == loop_id and kind != ctx.COMPACTION_SUMMARY for _id, row_loop, kind, _text in rows):
        return None
    # The newest n rows alone decide the tail when their context holds n messages: what the older
    # rows could add (tool results of an older call at the front, their synthetic results) comes
    # before the last n. So the older rows are validated only when that falls short.
    newest = parse_texts_of(db, rows[:n], mode)
    messages = ctx.provider_safe(reversed(newest))
    if len(messages) >= n:
        return messages
    if len(rows) > n:
        messages = ctx.provider_safe(reversed(newest + parse_texts_of(db, rows[n:], mode)))
    # Fewer rows than asked for: the session holds no other row, so no ancestor adds to the context.
    return messages if len(messages) >= n or len(rows) < limit else None


def path_tail(
    db: Database, session_id: str, pieces: Sequence[ctx.Piece], n: int, mode: MediaMode = "inline"
) -> list[Any]:
    """At least the last ``n`` context messages of a path (all of it when shorter), read newest first.

    The context of the messages read back from the end is a tail of the
    whole context once its leading tool results are left out (what
    decides a message's fate comes after it), so reading stops as soon
    as that tail holds ``n`` messages. Each row is validated once.
    """
    newest_first: list[Any] = []
    messages: list[Any] = []
    for piece in reversed(pieces):
        for batch in _backwards(db, session_id, piece, n, mode):
            newest_first.extend(batch)
            messages = ctx.provider_safe(reversed(newest_first))
            if len(messages) >= n:
                return messages
    return messages


def _backwards(db: Database, session_id: str, piece: ctx.Piece, limit: int, mode: MediaMode) -> Iterator[list[Any]]:
    """A piece's messages, newest first, in batches of ``limit`` rows, then twice as many each time."""
    if piece.summaries:
        rows = db.fetchall(q.compaction_summaries(), {"loop_id": piece.loop_id})
        yield list(reversed(parse_texts_of(db, list(filter(piece.admits, rows)), mode)))
        return
    params: dict[str, Any] = {
        "session_id": session_id,
        "loop_id": piece.loop_id,
        "upper": MAX_INT if piece.upper is None else piece.upper,
        "lower": 0 if piece.lower is None else piece.lower,
        "limit": limit,
    }
    while True:
        rows = db.fetchall(q.loop_messages_backwards(piece.summaries is False), params)
        yield parse_texts_of(db, rows, mode)
        if len(rows) < params["limit"]:
            return
        oldest, _text = rows[-1]
        params["upper"] = oldest - 1
        params["limit"] *= 2
