"""``store.messages``: appending what an agent loop produces, and reading it back by turn, loop or window.

What a caller may pass as a message, and how it is checked and made into its row, is
:mod:`.message_input`; how ``last()`` reads a path backwards is :mod:`.message_tail`; rows become
models in :mod:`.rows`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from .. import context as ctx
from .. import queries as q
from ..database import Database
from ..errors import (
    InvalidArgument,
    InvalidMessage,
    LoopNotFound,
    MessageNotFound,
    SessionNotFound,
    TurnNotFound,
    TurnstoreError,
)
from ..media import REF_PREFIX, MediaMode
from ..models import (
    ExtensionMessage,
    Message,
    TurnId,
    Usage,
)
from ..records import ContinuationKind, Loop, LoopConfig, SearchHit, StoredMessage, Turn
from . import media as out_of_line
from . import search_index
from ._shared import Settings, utcnow
from .loops import LoopRepository, is_message_id
from .media import check_mode
from .message_input import MessageInput, check_messages, parse_message, prepare_row
from .message_json import READ_DEPTH, dump_message
from .message_tail import newest_tail, path_tail
from .rows import (
    MAX_TURN_INDEX,
    ExportRow,
    SourceRow,
    path_stored_message,
    stored_message,
    tool_calls,
)
from .search import search as search_messages

__all__ = ["READ_DEPTH", "MessageInput", "MessageRepository", "dump_message", "parse_message"]


class MessageRepository:
    """Messages of one store."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        self._loops: LoopRepository | None = None
        self._indexed_to = 0  # the newest message id in the search index's batches, as last seen (search_index)

    # --- writing --------------------------------------------------------------

    def append(
        self,
        message: MessageInput,
        *,
        loop_id: str | None = None,
        turn_index: int | None = None,
        usage: Usage | Mapping[str, Any] | None = None,
        model: str | None = None,
        provider: str | None = None,
        timestamp: int | None = None,
        source: str | None = None,
    ) -> int:
        """Append one message to a loop, in one transaction; returns its id.

        The loop and turn come from the arguments or from the message's
        ``turnId``; an LLM message without a ``turnId`` is stored with one
        (``{loopId, turnIndex}``) when ``turn_index`` is given.

        Args:
            message: the message (model or JSON object).
            loop_id: the loop; default: the message's ``turnId.loopId``.
            turn_index: the turn within the loop; default: ``turnId.turnIndex``, else none.
            usage: usage to count for a non-assistant message (e.g. what a compaction
                summary cost), a :class:`Usage` or a dict of its fields; assistant messages
                count their own ``usage``.
            model: the model that produced ``usage`` (for pricing it).
            provider: that model's provider.
            timestamp: unix ms to date a message that has none of its own (an extension
                message, or a hand-written dict without ``timestamp``); default now.
            source: the record this message was made from, kept verbatim with the row
                (``StoredMessage.source``): what an integration gives back to its framework
                byte for byte. Default none.

        Raises:
            InvalidMessage: the message is invalid; nothing is written.
            TurnIdMismatch: its ``turnId`` disagrees with ``loop_id`` / ``turn_index``.
            InvalidArgument: the loop has ended (``loop_id``), or already holds a later
                turn (``turn_index``), or ``source`` is not a string free of NUL; nothing is written.
            LimitExceeded: the message or its source is over ``max_message_bytes``.
            LoopNotFound: no such loop.
        """
        params, found = prepare_row(
            message,
            loop_id,
            turn_index,
            usage,
            timestamp,
            source,
            model=model,
            provider=provider,
            limits=self._settings.limits,
        )
        statement = q.insert_message(not self._db.is_sqlite)
        touch = (q.touch_session_of_loop(), self._touch_params(params["loop_id"]))
        try:
            if self._db.is_sqlite and not found:
                message_id = self._db.insert(statement, params, touch)
            else:
                with self._db.write():
                    if self._db.is_postgresql:
                        self._lock_loop(params["loop_id"], params["turn_index"])
                    if found:
                        out_of_line.put(self._db, found)
                    message_id = self._db.insert(statement, params, touch)
                    if found:
                        out_of_line.link_loop(self._db, params["loop_id"], found)
        except self._db.IntegrityError as error:
            raise self._integrity(error, params["loop_id"], params["turn_index"]) from None
        self._indexed_to = search_index.keep_up(self._db, message_id, self._indexed_to)
        return message_id

    def append_turn(
        self,
        loop_id: str,
        turn_index: int,
        messages: Sequence[MessageInput],
        *,
        sources: Sequence[str | None] | None = None,
        usage_known: bool = True,
    ) -> list[int]:
        """Append a whole turn (prompt, response, tool results) atomically; returns the ids.

        Every message is validated before anything is written; all or nothing.
        ``sources``, if given, holds one verbatim source record (or None) per
        message, as :meth:`append`'s ``source`` (a framework adapter's original item).
        ``usage_known=False`` stores assistant messages with unknown usage (not
        counted as model calls): for apps that record usage per run instead.

        Raises:
            InvalidMessage / TurnIdMismatch: a message is invalid; nothing is written.
            InvalidArgument: the loop has ended (``loop_id``), or already holds a later
                turn (``turn_index``), or ``sources`` does not match ``messages``; nothing is written.
            LimitExceeded: a message or source is over ``max_message_bytes``.
            LoopNotFound: no such loop.
        """
        _check_loop_id(loop_id)
        rows, found = self._prepare_turn(loop_id, turn_index, messages, sources, usage_known)
        if not rows:  # nothing to write; an unknown loop is still one
            self._require_loop(loop_id)
            return []
        try:
            with self._db.write():
                if self._db.is_postgresql:
                    self._lock_loop(loop_id, turn_index)
                return self._insert_turn(loop_id, rows, found)
        except self._db.IntegrityError as error:
            raise self._integrity(error, loop_id, turn_index) from None

    def append_to_turn(
        self,
        loop_id: str,
        messages: Sequence[MessageInput],
        *,
        new_turn: bool,
        sources: Sequence[str | None] | None = None,
        usage_known: bool = True,
    ) -> TurnId:
        """Append messages to a loop's latest turn, or open the turn after it (``new_turn``); returns the turn.

        For an adapter whose framework hands over messages without turn numbers:
        the turn is decided under the loop's write lock, so concurrent appends
        to one loop never clash (each lands whole, in the latest turn at its
        time). A loop with no turn yet starts at turn 0. ``sources`` and
        ``usage_known`` as in :meth:`append_turn`; all or nothing.

        Raises:
            InvalidMessage / TurnIdMismatch: a message is invalid; nothing is written.
            InvalidArgument: the loop has ended, or ``sources`` does not match ``messages``; nothing is written.
            LimitExceeded: a message or source is over ``max_message_bytes``.
            LoopNotFound: no such loop.
        """
        _check_loop_id(loop_id)
        check_messages(messages)
        if not isinstance(new_turn, bool):
            raise InvalidArgument("new_turn", f"must be True or False, got {new_turn!r}")
        sources = _one_per_message(sources, len(messages))
        try:
            with self._db.write():
                if self._db.is_postgresql:  # a fresh read once the row is held: the turns others just wrote
                    self._db.fetchone(q.lock_loop(), {"loop_id": loop_id})
                state = self._db.fetchone(q.append_state(), {"loop_id": loop_id})
                error = _refused(loop_id, None, state)
                if error is not None:
                    raise error
                last = state[2]  # type: ignore[index]
                turn = 0 if last is None else last + 1 if new_turn else last
                rows, found = self._prepare_turn(loop_id, turn, messages, sources, usage_known)
                if rows:
                    self._insert_turn(loop_id, rows, found)
        except self._db.IntegrityError as error:
            raise self._integrity(error, loop_id, turn) from None
        return TurnId(loop_id=loop_id, turn_index=turn)

    def _prepare_turn(
        self,
        loop_id: str,
        turn_index: int | None,
        messages: Sequence[MessageInput],
        sources: Sequence[str | None] | None,
        usage_known: bool,
    ) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """The rows of a turn's messages, every one validated, and the media they hold (nothing is written)."""
        check_messages(messages)
        if turn_index is not None and (not isinstance(turn_index, int) or isinstance(turn_index, bool)):
            raise InvalidArgument("turn_index", f"must be an integer from 0 to {MAX_TURN_INDEX}, got {turn_index!r}")
        rows: list[dict[str, Any]] = []
        found: dict[str, str] = {}
        for message, source in zip(messages, _one_per_message(sources, len(messages))):
            params, more = prepare_row(
                message, loop_id, turn_index, None, None, source, usage_known, limits=self._settings.limits
            )
            rows.append(params)
            found.update(more)
        return rows, found

    def _insert_turn(self, loop_id: str, rows: list[dict[str, Any]], found: dict[str, str]) -> list[int]:
        """Insert prepared rows of one loop, their media first, and touch its session, in the caller's write transaction."""
        statement = q.insert_message(not self._db.is_sqlite)
        if found:
            out_of_line.put(self._db, found)
        ids = [self._db.insert(statement, params) for params in rows]
        if found:
            out_of_line.link_loop(self._db, loop_id, found)
        self._db.execute(q.touch_session_of_loop(), self._touch_params(loop_id))
        self._indexed_to = search_index.keep_up(self._db, ids[-1], self._indexed_to)
        return ids

    def rewind(
        self,
        loop_id: str,
        *,
        after: int,
        config: LoopConfig | Mapping[str, Any] | None = None,
        new_loop_id: str | None = None,
    ) -> Loop:
        """Start a branch of ``loop_id``'s history that forks after message ``after``; returns the new loop.

        Edit and regenerate: the new loop's context is ``loop_id``'s up to and
        including ``after``; append the edited prompt and the new reply to it.
        Nothing is deleted. ``after`` may belong to ``loop_id`` or to a loop
        its history comes from (the branch then forks from that loop); to
        edit a session's very first message, start an ``initial`` loop.

        Args:
            loop_id: the loop whose history is rewound.
            after: id of the last message to keep.
            config: the new loop's model settings; default: ``loop_id``'s.
            new_loop_id: an explicit id for the new loop.

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``after`` is not a message of ``loop_id``'s history; nothing is written.
        """
        assert self._loops is not None
        with self._db.write():
            loop = self._loops.get(loop_id)
            owner = self._owner_in_history(loop, after)
            return self._loops.start(
                loop.session_id,
                config=config if config is not None else loop.config,
                parent_loop_id=owner,
                continuation=ContinuationKind.BRANCH,
                fork_after=after,
                loop_id=new_loop_id,
            )

    def delete(self, message_id: int, *, with_later: bool = False) -> list[int]:
        """Delete a loop's last message (an undo, a session protocol's ``pop``); returns the ids deleted.

        Only a loop's tail can go: ``message_id`` must be its loop's last
        message, or, with ``with_later=True``, it and every later message of
        its loop are deleted. All in one transaction; the loop's ``seq`` stays
        gap-free. A message another loop forks from, keeps from, or continues
        after (a child loop continuing from the end) is refused: deleting it
        would change that loop's history.

        Raises:
            MessageNotFound: no such message.
            InvalidArgument: ``message_id`` is not the loop's last message (and
                ``with_later`` is not set), or another loop's history depends on it;
                nothing is deleted.
        """
        if not is_message_id(message_id):
            raise InvalidArgument("message_id", f"must be a message id (an integer), got {message_id!r}")
        with self._db.write():
            row = self._db.fetchone(q.get_message(), {"id": message_id})
            if row is None:
                raise MessageNotFound(f"message {message_id} not found")
            _id, session_id, loop_id, _turn_index, seq, _text, _source = row
            if self._db.is_postgresql:
                self._db.fetchone(q.lock_loop(), {"loop_id": loop_id})
            params = {"loop_id": loop_id, "seq": seq}
            ids = [tail_id for (tail_id,) in self._db.fetchall(q.loop_tail_ids(), params)]
            if len(ids) > 1 and not with_later:
                raise InvalidArgument(
                    "message_id",
                    f"message {message_id} is not the last of loop {loop_id!r} ({len(ids) - 1} later); "
                    "pass with_later=True to delete those too",
                )
            dependent = self._db.fetchone(q.loops_depending_on_tail(), params)
            if dependent is not None:
                dependent_loop, fork_point = dependent
                raise InvalidArgument(
                    "message_id",
                    f"loop {dependent_loop!r} continues from message {fork_point or ids[-1]} of loop {loop_id!r}; "
                    "delete or rewind that loop instead",
                )
            self._db.execute(q.delete_loop_tail(), params)
            self._db.execute(q.touch_session(), {"session_id": session_id, "updated_at": self._db.bind_time(utcnow())})
        return ids

    def _owner_in_history(self, loop: Loop, message_id: int) -> str:
        """The loop of ``loop``'s history that holds ``message_id`` (refused if none does)."""
        row = self._db.fetchone(q.get_message(), {"id": message_id}) if is_message_id(message_id) else None
        if row is None:
            raise InvalidArgument("after", f"{message_id!r} is not a message of loop {loop.loop_id!r}'s history")
        _id, session_id, owner, _turn_index, _seq, _text, _source = row
        if owner == loop.loop_id:
            return loop.loop_id
        if session_id == loop.session_id:
            tree = ctx.loop_nodes(self._db.fetchall(q.loop_tree(), {"session_id": loop.session_id}))
            segments, _ = ctx.plan(tree, loop.loop_id)
            for segment in segments:
                if segment.loop_id == owner and (segment.upper is None or message_id <= segment.upper):
                    return segment.loop_id
        raise InvalidArgument("after", f"{message_id!r} is not a message of loop {loop.loop_id!r}'s history")

    def _touch_params(self, loop_id: str) -> dict[str, Any]:
        return {"loop_id": loop_id, "updated_at": self._db.bind_time(utcnow())}

    def _lock_loop(self, loop_id: str, turn_index: int | None) -> None:
        """PostgreSQL: hold the loop row, and refuse the append as the insert's guard would."""
        error = _refused(loop_id, turn_index, self._db.fetchone(q.lock_loop(), {"loop_id": loop_id}))
        if error is not None:
            raise error

    def _integrity(self, error: Exception, loop_id: str, turn_index: int | None) -> Exception:
        """The error to raise for an insert the database refused: why its guard left the session NULL."""
        # On SQLite only the failed statement was undone, so the loop can still be looked up.
        # (PostgreSQL checked the same under the loop's lock, before the insert.)
        if self._db.is_sqlite:
            return _refused(loop_id, turn_index, self._db.fetchone(q.append_state(), {"loop_id": loop_id})) or error
        if getattr(error, "sqlstate", None) == NOT_NULL_VIOLATION and turn_index is not None:
            # The loop is held, found and open; its later turn was committed by an append that held it
            # first, after the check's snapshot (a read committed statement's snapshot predates its lock).
            return InvalidArgument(
                "turn_index", f"turn {turn_index} goes backwards: loop {loop_id!r} holds a later turn"
            )
        return error

    # --- reading ----------------------------------------------------------------

    def turn(self, loop_id: str, turn_index: int) -> Turn:
        """The messages of one turn, in order.

        Raises:
            LoopNotFound: no such loop.
            TurnNotFound: the loop has no message in that turn.
        """
        _check_loop_id(loop_id)
        if not isinstance(turn_index, int) or isinstance(turn_index, bool):
            raise InvalidArgument("turn_index", f"must be an integer, got {turn_index!r}")
        if not 0 <= turn_index <= MAX_TURN_INDEX:  # no stored turn (and no 64-bit value, past a point)
            self._require_loop(loop_id)
            raise TurnNotFound(f"loop {loop_id!r} has no turn {turn_index}")
        rows = self._db.fetchall(q.turn_messages(), {"loop_id": loop_id, "turn_index": turn_index})
        if not rows:
            self._require_loop(loop_id)
            raise TurnNotFound(f"loop {loop_id!r} has no turn {turn_index}")
        messages = out_of_line.parse_texts_of(self._db, rows)
        return Turn(loop_id=loop_id, turn_index=turn_index, messages=messages)

    def turns(self, loop_id: str, start: int = 0, stop: int | None = None) -> list[Turn]:
        """Turns ``start <= k < stop`` of a loop (``stop=None``: to the end), in order.

        Raises:
            LoopNotFound: no such loop.
        """
        params: dict[str, Any] = {"loop_id": loop_id, "start": start}
        if stop is not None:
            params["stop"] = stop
        rows = self._db.fetchall(q.turn_range_messages(stop is not None), params)
        if not rows:
            self._require_loop(loop_id)
            return []
        parsed = out_of_line.parse_texts_of(self._db, rows)
        turns: list[Turn] = []
        current: list[Any] = []
        for (_id, index, _text), message in zip(rows, parsed):
            if current and index != current[0]:
                turns.append(Turn(loop_id=loop_id, turn_index=current[0], messages=current[1:]))
                current = []
            if not current:
                current = [index]
            current.append(message)
        turns.append(Turn(loop_id=loop_id, turn_index=current[0], messages=current[1:]))
        return turns

    def loop(self, loop_id: str, *, media: MediaMode = "inline") -> list[Message | ExtensionMessage]:
        """Every message of a loop, in order (extension messages included).

        ``media``: ``"inline"`` (default) returns every message as written; ``"omit"`` or
        ``"ref"`` leave the data of media kept out of line out (see :data:`turnstore.MediaMode`).

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        rows = self._db.fetchall(q.loop_messages(), {"loop_id": loop_id})
        if not rows:
            self._require_loop(loop_id)
        return out_of_line.parse_texts_of(self._db, rows, mode)

    def last(
        self,
        session_id: str,
        n: int,
        *,
        loop_id: str | None = None,
        model: str | None = None,
        provider: str | None = None,
        media: MediaMode = "inline",
    ) -> list[Message]:
        """The last ``n`` messages of the session's current path, oldest first, ready to send.

        The path is that of the loop written most recently (the loop of the
        session's newest message), or of ``loop_id``: the result is the tail
        of ``context(loop_id, model=model, provider=provider)``, without a
        tool result cut from its call at the front (so it may hold fewer
        than ``n``). Reads the path backwards, only as far as the tail needs.

        ``media="omit"`` leaves the data of media kept out of line out (an image part
        reads ``"data":""``) and never reads it: a screenshot-heavy history costs what
        its text costs. ``"ref"`` names each by digest (see :data:`turnstore.MediaMode`).

        Raises:
            InvalidArgument: ``n`` is not a non-negative integer; ``provider`` without ``model``;
                ``media`` is not a media mode.
            SessionNotFound: no such session.
            LoopNotFound: ``loop_id`` is not a loop of that session.
        """
        _check_count(n)
        _check_model(model, provider)
        mode = check_mode(media)
        if loop_id is None and n > 0:
            messages = newest_tail(self._db, session_id, n, mode)
            if messages is not None:
                return ctx.for_model(ctx.tail(messages, n), model, provider)
        with self._db.read():
            tree: list[tuple[Any, ...]] = []
            newest = None
            for node_id, parent_loop_id, kind, fork_after, keep_from, newest in self._db.fetchall(  # noqa: B007 - every row repeats the session's newest loop; kept from the last
                q.loop_tree_and_newest(), {"session_id": session_id}
            ):
                tree.append((node_id, parent_loop_id, kind, fork_after, keep_from))
            if loop_id is None:
                loop_id = newest
                if loop_id is None:
                    self._require_session(session_id)
                    return []
            elif not any(node_id == loop_id for node_id, *_shape in tree):
                self._require_session(session_id)
                raise LoopNotFound(f"loop {loop_id!r} not found in session {session_id!r}")
            if n == 0:
                return []
            messages = path_tail(self._db, session_id, ctx.path_pieces(tuple(tree), loop_id), n, mode)
        return ctx.for_model(ctx.tail(messages, n), model, provider)

    def context(
        self, loop_id: str, *, model: str | None = None, provider: str | None = None, media: MediaMode = "inline"
    ) -> list[Message]:
        """What the next model call of ``loop_id`` should see, in a form every provider accepts.

        The ancestors' messages up to each fork point, then the loop's own;
        a compaction replaces what it summarised; extension messages are left
        out (compaction and branch summaries become user text). As pi sends
        history: an assistant message that stopped with ``error`` or
        ``aborted`` is left out with its results; a tool call that was never
        answered gets a synthetic error result (``No result provided``, not
        stored); a tool result without its call is left out.

        With ``model`` (and optionally ``provider``), the history is prepared
        for that model: assistant messages another model wrote keep their
        thinking as text and lose that model's signatures; messages of the
        same model are returned byte for byte. See ``docs/context.md``.

        ``media``: as in :meth:`last` (``"omit"``: media data left out, never read).

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: ``provider`` without ``model``, or either not a string;
                ``media`` is not a media mode.
        """
        _check_model(model, provider)
        mode = check_mode(media)
        with self._db.read():
            session_id, segments, min_id = self._locate(loop_id)
            rows = self._db.fetchall(q.context_messages(), {"session_id": session_id, "min_id": min_id})
            chosen = self._restore(ctx.choose(ctx.pieces(segments), rows), (4,), mode)
        return ctx.for_model(ctx.provider_safe(ctx.to_messages(chosen)), model, provider)

    def path(self, loop_id: str) -> list[StoredMessage]:
        """The stored messages ``context(loop_id)`` is built from, in context order, extension messages included.

        Each context message is one of these rows (a summary row rendered as
        user text), except the synthetic results of unanswered calls.

        Raises:
            LoopNotFound: no such loop.
        """
        with self._db.read():
            session_id, segments, min_id = self._locate(loop_id)
            rows = self._db.fetchall(q.path_messages(), {"session_id": session_id, "min_id": min_id})
            chosen = out_of_line.restore(self._db, ctx.choose(ctx.pieces(segments), rows), (4, 8))
        return [path_stored_message(row) for row in chosen]

    def _locate(self, loop_id: str) -> tuple[str, list[ctx.Segment], int]:
        """A loop's session, the segments of its path and the smallest message id they can hold."""
        session_id = self._db.scalar(q.loop_session(), {"loop_id": loop_id})
        if session_id is None:
            raise LoopNotFound(f"loop {loop_id!r} not found")
        segments, min_id = self._plan(session_id, loop_id)
        if min_id is None:
            min_id = self._db.scalar(q.first_message_of_loop(), {"loop_id": segments[0].loop_id}) or 0
        return session_id, segments, min_id

    def _plan(self, session_id: str, loop_id: str) -> tuple[list[ctx.Segment], int | None]:
        tree = ctx.loop_nodes(self._db.fetchall(q.loop_tree(), {"session_id": session_id}))
        return ctx.plan(tree, loop_id)

    def get(self, message_id: int, *, media: MediaMode = "inline") -> StoredMessage:
        """One stored message by id, with its loop, turn and seq (``media``: as in :meth:`last`).

        Raises:
            MessageNotFound: no such message.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        if not isinstance(message_id, int) or isinstance(message_id, bool):
            raise InvalidArgument("message_id", f"must be an integer (a message id), got {message_id!r}")
        row = self._db.fetchone(q.get_message(), {"id": message_id}) if is_message_id(message_id) else None
        if row is None:
            raise MessageNotFound(f"message {message_id} not found")
        (row,) = self._restore([row], (5, 6), mode)
        return stored_message(row)

    def media(self, digest: str) -> str:
        """The base64 data of a media reference (``media:sha256:<digest>``, as ``media="ref"`` reads it).

        Raises:
            MediaNotFound: no media has this digest.
        """
        if isinstance(digest, str) and digest.startswith(REF_PREFIX):
            digest = digest[len(REF_PREFIX) :]
        return out_of_line.fetch(self._db, digest)

    def _restore(self, rows: list[Any], columns: tuple[int, ...], mode: MediaMode) -> list[Any]:
        return out_of_line.restore(self._db, rows, columns, mode)

    def records(
        self, session_id: str | None = None, *, loop_id: str | None = None, media: MediaMode = "inline"
    ) -> Iterator[StoredMessage]:
        """Stream a session's (or a loop's) stored messages in order, without loading them all.

        Each model is built as the iteration reaches it: walking a long session
        this way, keeping none, costs about what parsing its rows does, while a
        ``list()`` of thousands of models is walked by the cyclic collector again
        and again (the more so in an app with a large heap). Rows are read a page
        (:data:`STREAM_BATCH`) at a time, each page a statement of its own, so the
        store can write while a walk is open; a page sees what was committed
        before it was read (in a transaction: what the transaction holds).
        ``media``: as in :meth:`last`, for the message and its source.

        Raises:
            SessionNotFound / LoopNotFound: no such session or loop.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        if (session_id is None) == (loop_id is None):
            raise InvalidMessage("records() takes a session_id or a loop_id", [("session_id", "one of two")])
        if loop_id is not None:
            self._require_loop(loop_id)
            pages = _pages(self._db, q.stored_messages(True), {"loop_id": loop_id}, key=4)  # by seq
        else:
            self._require_session(session_id)  # type: ignore[arg-type]
            pages = _pages(self._db, q.stored_messages(False), {"session_id": session_id}, key=0)  # by id
        return _stream(self._db, pages, mode)

    def rows(self, session_id: str, *, media: MediaMode = "inline") -> Iterator[ExportRow]:
        """Stream a session's message rows as stored, in order: JSON text, usage columns, source (what exports write).

        Unlike :meth:`records`, nothing is parsed: the message is its stored
        JSON text, byte for byte (``media``: as in :meth:`last`, for the message and its source).

        Raises:
            SessionNotFound: no such session.
            InvalidArgument: ``media`` is not a media mode.
        """
        mode = check_mode(media)
        self._require_session(session_id)
        return _export_rows(self._db, _pages(self._db, q.export_messages(), {"session_id": session_id}, key=0), mode)

    def sources(self, loop_id: str, *, last: int | None = None) -> list[SourceRow]:
        """A loop's messages as ids, turn indexes and verbatim sources, oldest first; ``last``: only the last ``last``.

        Nothing is parsed: what an adapter that keeps a framework's own objects as
        sources gives back. Turn indexes never go down within a loop, so the last
        row holds its highest.

        Raises:
            InvalidArgument: ``last`` is not a non-negative integer.
            LoopNotFound: no such loop.
        """
        rows = self._loop_rows(q.loop_message_sources, loop_id, last, 2)
        return [SourceRow(message_id, turn_index, source) for message_id, turn_index, source in rows]

    def source_texts(self, loop_id: str, *, last: int | None = None) -> list[str]:
        """A loop's verbatim sources alone, oldest first (rows without one left out); ``last``: only the last ``last``.

        :meth:`sources` without ids and turns: what an adapter that keeps a
        framework's own objects as sources hands back, read with nothing else.

        Raises:
            InvalidArgument: ``last`` is not a non-negative integer.
            LoopNotFound: no such loop.
        """
        return [text for (text,) in self._loop_rows(q.loop_source_texts, loop_id, last, 0)]

    def _loop_rows(
        self, query: Callable[[bool], Any], loop_id: str, last: int | None, source_column: int
    ) -> list[tuple[Any, ...]]:
        """The rows ``query`` selects of a loop, in order, their sources (at ``source_column``) as written;
        ``last``: only the last ``last`` (``query(True)`` gives them newest first, with a ``:limit``)."""
        if last is not None:
            _check_count(last)
        with self._db.read():
            self._require_loop(loop_id)
            if last is None:
                rows = self._db.fetchall(query(False), {"loop_id": loop_id})
            elif last == 0:
                return []
            else:
                rows = self._db.fetchall(query(True), {"loop_id": loop_id, "limit": last})[::-1]
            return out_of_line.restore(self._db, rows, (source_column,))

    def tool_names(self, session_id: str, call_ids: Iterable[str]) -> dict[str, str]:
        """The names of the tool calls with these ids in a session's assistant messages (the newest call of an id).

        For an adapter naming a tool result whose call an earlier write stored: one
        query, read newest first and only until every id is found. An id no
        stored call has is left out; an unknown session has none.
        """
        wanted = set(call_ids)
        names: dict[str, str] = {}
        if not wanted:
            return names
        cursor = self._db.execute(q.assistant_messages_newest_first(), {"session_id": session_id})
        try:
            while wanted and (batch := cursor.fetchmany(NAMES_BATCH)):
                for (text,) in out_of_line.restore(self._db, batch, (0,), "omit"):  # the text as written
                    for call_id, name in tool_calls(text):
                        if call_id in wanted:
                            names[call_id] = name
                            wanted.discard(call_id)
        finally:
            cursor.close()
        return names

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        loop_id: str | None = None,
        role: str | None = None,
        tool_name: str | None = None,
        since: datetime | int | None = None,
        until: datetime | int | None = None,
        limit: int = 20,
        offset: int = 0,
        thinking: bool = True,
        match: str = "all",
    ) -> list[SearchHit]:
        """Messages of every session whose text matches ``query``, best match first.

        Syntax (``docs/search.md``): words (all must match, any order),
        ``"exact phrases"``, ``-excluded`` words or phrases, ``prefix*``;
        case, accents and width are ignored, and CJK text is found by any
        substring. Searched: user and assistant text, thinking, tool-call names
        and arguments, tool results, extension message text; never image or
        file data or signatures. Sessions still being imported are left out.

        Args:
            query: what to find.
            session_id, loop_id: only messages of this session or loop.
            role: only messages of this role (``user``, ``assistant``, ``toolResult``, ``extension``, ``system``).
            tool_name: only tool calls of this tool (assistant messages) and its results.
            since, until: only messages from ``since`` (inclusive) to ``until`` (exclusive): a
                datetime (naive means UTC) or unix milliseconds.
            limit, offset: a page of the results (``limit`` from 1 to 1,000).
            thinking: ``False`` leaves thinking out: a message matches on its other text only.
            match: ``"all"``: a message must hold every word and phrase; ``"any"``: at least one
                (those holding more rank higher). Exclusions apply either way.

        Raises:
            InvalidQuery: the query cannot be searched for (says why); nothing is searched.
            InvalidArgument: a filter, ``limit`` or ``offset`` is not valid.
            SearchUnavailable: SQLite without FTS5.
        """
        filters: dict[str, Any] = {"session_id": session_id, "loop_id": loop_id, "role": role, "tool_name": tool_name}
        filters.update(since=since, until=until)
        return search_messages(self._db, query, filters, limit=limit, offset=offset, thinking=thinking, match=match)

    def _require_loop(self, loop_id: str) -> None:
        if self._db.scalar(q.loop_session(), {"loop_id": loop_id}) is None:
            raise LoopNotFound(f"loop {loop_id!r} not found")

    def _require_session(self, session_id: str) -> None:
        if self._db.fetchone(q.session_exists(), {"session_id": session_id}) is None:
            raise SessionNotFound(f"session {session_id!r} not found")


def _check_loop_id(loop_id: object) -> None:
    if not isinstance(loop_id, str):
        raise InvalidArgument("loop_id", f"must be a string, not {type(loop_id).__name__}")
    if "\x00" in loop_id:  # no loop id holds NUL (PostgreSQL could not even look one up)
        raise LoopNotFound(f"loop {loop_id!r} not found")


def _check_count(n: object) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise InvalidArgument("n", f"n must be a non-negative integer, got {n!r}")


def _check_model(model: object, provider: object) -> None:
    for name, value in (("model", model), ("provider", provider)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(name, f"{name} must be a string, got {type(value).__name__}")
    if provider is not None and model is None:
        raise InvalidArgument("model", "provider is given without model: name the model to prepare the history for")


def _one_per_message(sources: Sequence[str | None] | None, count: int) -> Sequence[str | None]:
    """``sources`` as one source (or None) per message."""
    if sources is None:
        return [None] * count
    if isinstance(sources, (str, bytes)) or len(sources) != count:
        raise InvalidArgument("sources", f"must hold one source (or None) per message, {count} in all")
    return sources


def _refused(loop_id: str, turn_index: int | None, state: Sequence[Any] | None) -> TurnstoreError | None:
    """Why a loop does not take a message at ``turn_index``, from its :func:`~turnstore.queries.append_state` row."""
    if state is None:
        return LoopNotFound(f"loop {loop_id!r} not found")
    _session_id, ended_at, last_turn = state
    if ended_at is not None:
        return InvalidArgument("loop_id", f"loop {loop_id!r} has ended; start a new loop to continue it")
    if turn_index is not None and last_turn is not None and turn_index < last_turn:
        return InvalidArgument(
            "turn_index", f"turn {turn_index} goes backwards: loop {loop_id!r} already holds turn {last_turn}"
        )
    return None


NOT_NULL_VIOLATION = "23502"
"""PostgreSQL's SQLSTATE for a NULL in a NOT NULL column: an insert's guard left the session NULL."""

STREAM_BATCH = 2_000
"""Rows :meth:`MessageRepository.records` and :meth:`MessageRepository.rows` read at a time, one statement each.

Between pages no statement is open, so the store's connection can write while
a walk is under way, and a page sees what was committed before it was read.

``records()`` builds each model only as it is yielded, never a batch of them:
models the caller has let go die before the cyclic collector sees them, so
walking a session costs about what ``json.loads`` of its rows does, however
large the app's heap (a list of thousands of live models is walked by the
collector again and again)."""

NAMES_BATCH = 16
"""Assistant messages :meth:`MessageRepository.tool_names` reads at a time: a call is most often among the newest."""


def _pages(db: Database, statement: Any, params: dict[str, Any], key: int) -> Iterator[list[Any]]:
    """The rows of a paged statement (``:after``, ``:limit``), a page at a time; ``key``: the column paged by."""
    after = -1
    while page := db.execute(statement, {**params, "after": after, "limit": STREAM_BATCH}).fetchall():
        yield page
        if len(page) < STREAM_BATCH:
            return
        after = page[-1][key]


def _export_rows(db: Database, pages: Iterator[list[Any]], mode: MediaMode) -> Iterator[ExportRow]:
    for page in pages:
        yield from map(ExportRow._make, out_of_line.restore(db, page, (5, 6), mode))


def _stream(db: Database, pages: Iterator[list[Any]], mode: MediaMode) -> Iterator[StoredMessage]:
    for page in pages:
        yield from map(stored_message, out_of_line.restore(db, page, (5, 6), mode))
