"""Writing ``store.messages``: appending what an agent loop produces, rewinding and deleting it.

What a caller may pass as a message, and how it is checked and made into its row, is
:mod:`.message_input`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .. import context as ctx
from .. import queries as q
from ..errors import InvalidArgument, LoopNotFound, MessageNotFound, TurnstoreError
from ..models import AGENT_MESSAGE, AssistantMessage, TurnId, Usage
from ..records import ContinuationKind, Loop, LoopConfig
from ..schema import PRICED_COLUMNS, USAGE_COLUMNS
from . import media as out_of_line
from . import search_index
from ._shared import require_loop, usage_argument, utcnow
from .loops import is_message_id
from .message_common import MessageRepositoryBase, check_loop_id
from .message_input import MessageInput, check_messages, prepare_row
from .message_json import dump_message
from .rows import MAX_TURN_INDEX, row_params

__all__ = ["MessageWrites"]


class MessageWrites(MessageRepositoryBase):
    """The writes of :class:`~.messages.MessageRepository`: each in one transaction, checked before anything is written."""

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
            pricing=self._settings.pricing,
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
        check_loop_id(loop_id)
        rows, found = self._prepare_turn(loop_id, turn_index, messages, sources, usage_known)
        if not rows:  # nothing to write; an unknown loop is still one
            require_loop(self._db, loop_id)
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
        check_loop_id(loop_id)
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
                message,
                loop_id,
                turn_index,
                None,
                None,
                source,
                usage_known,
                limits=self._settings.limits,
                pricing=self._settings.pricing,
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
                continuation_kind=ContinuationKind.BRANCH,
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
            if self._db.is_postgresql and not self._hold_for_delete(message_id, session_id, loop_id):
                raise MessageNotFound(f"message {message_id} not found")
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
            held = out_of_line.held_by_tail(self._db, params)
            self._db.execute(q.delete_loop_tail(), params)
            out_of_line.release_unreferenced(self._db, session_id, held)
            self._db.execute(q.touch_session(), {"session_id": session_id, "updated_at": self._db.bind_time(utcnow())})
        return ids

    def set_usage(
        self,
        message_id: int,
        usage: Usage | Mapping[str, Any] | None,
        *,
        model: str | None = None,
        provider: str | None = None,
    ) -> None:
        """Give an assistant message stored with unknown usage (``usage_known=False``) its usage, once known.

        For a framework that reports what each model call cost only after the
        items it produced were stored (an OpenAI Agents run's ``raw_responses``):
        the message's JSON and its usage columns get ``usage``, and its ``model``
        and ``provider`` when given (what the usage is priced as), in one
        transaction. Its text, turn and place are unchanged. ``usage=None`` sets
        only the model and provider, its usage staying unknown: another message of
        the same model call (its reasoning, say) carries that call's usage.

        Raises:
            MessageNotFound: no such message.
            InvalidArgument: it is not an assistant message, or its usage is already
                known; ``usage``, ``model`` or ``provider`` is malformed, or nothing is
                given to set. Nothing is written.
        """
        if not is_message_id(message_id):
            raise InvalidArgument("message_id", f"must be a message id (an integer), got {message_id!r}")
        counted = usage_argument(usage)
        if counted is None and model is None and provider is None:
            raise InvalidArgument("usage", "give a usage, or a model or provider to set")
        for name, value in (("model", model), ("provider", provider)):
            if value is not None and not isinstance(value, str):
                raise InvalidArgument(name, f"must be a string, got {type(value).__name__}")
        with self._db.write():
            row = self._db.fetchone(q.message_usage_state(), {"id": message_id})
            if row is None:
                raise MessageNotFound(f"message {message_id} not found")
            text, role, loop_id, turn_index, input_tokens = row
            if role != "assistant":
                raise InvalidArgument(
                    "message_id", f"message {message_id} is a {role} message, not an assistant message"
                )
            if input_tokens is not None:
                raise InvalidArgument("message_id", f"message {message_id} already has its usage")
            reply = AGENT_MESSAGE.validate_json(text)
            assert isinstance(reply, AssistantMessage)
            changes: dict[str, Any] = {} if counted is None else {"usage": counted}
            if model is not None:
                changes["model"] = model
            if provider is not None:
                changes["provider"] = provider
            updated = reply.model_copy(update=changes)
            params = row_params(updated, dump_message(updated), loop_id, turn_index, usage_known=counted is not None)
            self._settings.pricing.price_row(params)  # priced at its own timestamp, as an append prices it
            columns = ("message", "model", "provider", *USAGE_COLUMNS, "cost", *PRICED_COLUMNS)
            self._db.execute(q.set_message_usage(), {"id": message_id, **{name: params[name] for name in columns}})

    def _hold_for_delete(self, message_id: int, session_id: str, loop_id: str) -> bool:
        """PostgreSQL: hold the message's loop and session rows; whether the message is still there.

        The loop row orders deletes and appends of one loop; the session row is what
        starting a loop holds, so a loop forking from, keeping or continuing the tail
        either committed before (and the check of dependents sees it) or checks its
        fork point after this delete. The message is read again under both: a
        delete that held them first may have removed it (and an append refilled its place).
        """
        self._db.fetchone(q.lock_loop(), {"loop_id": loop_id})
        self._db.fetchone(q.lock_session(), {"session_id": session_id})
        return self._db.fetchone(q.get_message(), {"id": message_id}) is not None

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
