"""``store.loops``: agent runs, and the tree they form inside a session."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .. import queries as q
from ..database import Database
from ..deprecation import renamed
from ..errors import AlreadyExists, InvalidArgument, LoopNotFound, SessionNotFound
from ..ids import mint_loop_id, next_loop_number
from ..limits import check_json, check_text
from ..models import MAX_INT, ExtensionMessage, Usage
from ..records import ContinuationKind, Loop, LoopConfig, LoopStatus
from ..schema import PRICED_COLUMNS, USAGE_COLUMNS
from ._shared import Settings, json_object, problems, usage_argument, utcnow
from .rows import loop_from_row, usage_params

if TYPE_CHECKING:
    from .messages import MessageRepository

__all__ = ["LATEST", "LoopRepository"]


class _Latest:
    def __repr__(self) -> str:
        return "LATEST"


LATEST: Any = _Latest()
"""Default ``parent_loop_id`` of :meth:`LoopRepository.start`: the session's most recently started loop."""


class LoopRepository:
    """Loops of one store. Every method is one transaction."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        self._messages: MessageRepository | None = None

    def start(
        self,
        session_id: str,
        *,
        config: LoopConfig | Mapping[str, Any] | None = None,
        parent_loop_id: str | None = LATEST,
        continuation_kind: ContinuationKind | str | None = None,
        fork_after: int | None = None,
        keep_from: int | None = None,
        loop_id: str | None = None,
        spawn_loop_id: str | None = None,
        spawn_tool_call_id: str | None = None,
        status: LoopStatus | str = LoopStatus.RUNNING,
        metadata: Mapping[str, Any] | None = None,
        started_at: datetime | None = None,
        continuation: ContinuationKind | str | None = None,
    ) -> Loop:
        """Start a loop in a session.

        By default the new loop continues the session's latest loop
        (``continuation_kind="default"``), or is the first (``"initial"``). Pass
        ``continuation_kind="initial"`` for a fresh context, ``"branch"`` with
        ``fork_after=<message id>`` to fork from a parent's message,
        ``"rerun"`` to run the parent again, ``"compaction"`` (see :meth:`compact`).

        Args:
            session_id: the session the loop belongs to.
            config: the model settings (``model``, ``provider``, ``config_id``...).
            parent_loop_id: the loop this one continues; default: the latest.
            continuation_kind: how it continues the parent (the new loop's
                :attr:`~turnstore.Loop.continuation_kind`).
            fork_after: id of the parent's message after which this loop forks.
            keep_from: compaction loops: the first message still shown after the summary.
            loop_id: an explicit id; default ``"{session_id}.{config_id}.{N}"``.
            spawn_loop_id: sub-agent loops: the loop whose tool call started this one.
            spawn_tool_call_id: sub-agent loops: that tool call's id.
            status: initial status (default ``running``).
            metadata: any JSON object.
            started_at: default now.
            continuation: deprecated: the old name of ``continuation_kind`` (warns).

        Raises:
            SessionNotFound: no such session.
            LoopNotFound: the parent loop does not exist.
            AlreadyExists: ``loop_id`` is taken.
            InvalidArgument: an unknown ``continuation_kind`` or ``status``, both
                ``continuation_kind`` and ``continuation``, a branch without
                ``fork_after``, a fork point or kept message not where it must be
                (the error's ``argument`` names which); nothing is written.
        """
        config_dict = _config_dict(config)
        if continuation is not None:
            renamed("loops.start(continuation=...)", "continuation_kind=...")
            if continuation_kind is not None:
                raise InvalidArgument("continuation", "give continuation_kind only (continuation is its old name)")
            continuation_kind = continuation
        kind = (
            _enum(ContinuationKind, continuation_kind, "continuation_kind") if continuation_kind is not None else None
        )
        loop_status: LoopStatus = _enum(LoopStatus, status, "status")
        limits = self._settings.limits
        if loop_id is not None:
            limits.check_id("loop_id", loop_id)
        if spawn_loop_id is not None:
            limits.check_id("spawn_loop_id", spawn_loop_id)
        limits.check_name("model", (config_dict or {}).get("model"))
        limits.check_name("provider", (config_dict or {}).get("provider"))
        check_text("spawn_tool_call_id", spawn_tool_call_id)
        check_json("config", config_dict)
        check_json("metadata", metadata)
        config_text = json_object("config", config_dict)
        metadata_text = json_object("metadata", metadata)
        when = started_at or utcnow()
        with self._db.write():
            if self._db.fetchone(q.lock_session(), {"session_id": session_id}) is None:
                raise SessionNotFound(f"session {session_id!r} not found")
            parent, kind = self._resolve_parent(session_id, parent_loop_id, kind)
            self._check_fork(session_id, parent, kind, fork_after, keep_from)
            config_id = LoopConfig(**config_dict).effective_config_id() if config_dict else None
            if loop_id is None:
                loop_id = self._mint(session_id, config_id, limits.max_id_length)
            elif self._db.fetchone(q.loop_exists(), {"loop_id": loop_id}) is not None:
                raise AlreadyExists(f"loop {loop_id!r} already exists")
            params = {
                "loop_id": loop_id,
                "session_id": session_id,
                "parent_loop_id": parent,
                "continuation_kind": kind.value,
                "fork_after": fork_after,
                "keep_from": keep_from,
                "config": config_text,
                "config_id": config_id,
                "model": (config_dict or {}).get("model"),
                "provider": (config_dict or {}).get("provider"),
                "status": loop_status.value,
                "started_at": self._db.bind_time(when),
                "ended_at": None,
                "spawn_loop_id": spawn_loop_id,
                "spawn_tool_call_id": spawn_tool_call_id,
                **dict.fromkeys((*USAGE_COLUMNS, "cost", *PRICED_COLUMNS, "requests")),
                "metadata": metadata_text,
                "source": None,
            }
            try:
                self._db.execute(q.insert_loop(), params)
            except self._db.IntegrityError:
                # Another process took this explicit id between the check and the insert.
                raise AlreadyExists(f"loop {loop_id!r} already exists") from None
            self._db.execute(q.touch_session(), {"session_id": session_id, "updated_at": self._db.bind_time(when)})
        return self.get(loop_id)

    def compact(
        self,
        loop_id: str,
        summary: str,
        *,
        keep_from: int | None = None,
        tokens_before: int | None = None,
        usage: Usage | None = None,
        config: LoopConfig | Mapping[str, Any] | None = None,
        started_at: datetime | None = None,
    ) -> Loop:
        """Start a compaction loop after ``loop_id``: its context is ``summary``, then the kept tail.

        ``keep_from`` is the id of the first message to keep after the summary
        (None: keep nothing). ``usage`` is what producing the summary cost; it
        counts toward the session's totals.
        """
        assert self._messages is not None
        usage = usage_argument(usage)  # refused before the loop is started
        parent = self.get(loop_id)
        data: dict[str, Any] = {"summary": summary}
        if tokens_before is not None:
            data["tokens_before"] = tokens_before
        with self._db.write():
            loop = self.start(
                parent.session_id,
                config=config if config is not None else parent.config,
                parent_loop_id=loop_id,
                continuation_kind=ContinuationKind.COMPACTION,
                keep_from=keep_from,
                started_at=started_at,
            )
            self._messages.append(
                ExtensionMessage(kind="compaction_summary", data=data),
                loop_id=loop.loop_id,
                usage=usage,
                model=loop.model,
                provider=loop.provider,
                timestamp=int(loop.started_at.timestamp() * 1000),
            )
        return loop

    def end(
        self,
        loop_id: str,
        status: LoopStatus | str = LoopStatus.COMPLETED,
        *,
        usage: Usage | Mapping[str, Any] | None = None,
        requests: int | None = None,
        ended_at: datetime | None = None,
    ) -> Loop:
        """Mark a loop finished; an ended loop takes no more messages.

        ``usage`` is the run's usage, for apps that know it per run only (a
        ``RunResult``'s usage, pydantic-ai's ``result.usage``): it counts in
        every total where none of the loop's messages carry usage of their own,
        and never on top of theirs. ``requests`` is how many model calls it
        covers; default: the loop's assistant messages (one call each).

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: a bad ``status``, ``usage`` or ``requests``; nothing is written.
        """
        loop_status: LoopStatus = _enum(LoopStatus, status, "status")
        reported = usage_argument(usage)
        if requests is not None:
            if reported is None:
                raise InvalidArgument("requests", "counts the model calls of a run's usage: give usage too")
            if isinstance(requests, bool) or not isinstance(requests, int) or not 0 <= requests <= MAX_INT:
                raise InvalidArgument("requests", f"must be a count of model calls (an integer >= 0), got {requests!r}")
        when = ended_at or utcnow()
        with self._db.write():
            session_id = self._db.scalar(q.loop_session(), {"loop_id": loop_id})
            if session_id is None:
                raise LoopNotFound(f"loop {loop_id!r} not found")
            self._db.execute(
                q.end_loop(), {"loop_id": loop_id, "status": loop_status.value, "ended_at": self._db.bind_time(when)}
            )
            if reported is not None:
                if requests is None:
                    requests = self._db.scalar(q.count_assistant_messages(), {"loop_id": loop_id}) or None
                params = {"loop_id": loop_id, **usage_params(reported), "requests": requests}
                found = self._db.fetchone(q.loop_model(), {"loop_id": loop_id})
                params["model"], params["provider"] = found if found is not None else (None, None)
                self._settings.pricing.price_row(params, int(when.timestamp() * 1000))
                del params["model"], params["provider"]
                self._db.execute(q.set_loop_usage(), params)
            self._db.execute(q.touch_session(), {"session_id": session_id, "updated_at": self._db.bind_time(when)})
        return self.get(loop_id)

    def delete(self, loop_id: str) -> None:
        """Delete a loop that holds no message and that no other loop continues, branches from or was spawned by.

        For an undo that goes back past a loop's start (a session protocol's
        ``pop`` that emptied the loop and takes the message before it): the loop
        stood between that message and the end of its parent. The loop's reported
        usage (``end(usage=...)``) goes with it.

        Raises:
            LoopNotFound: no such loop.
            InvalidArgument: the loop holds messages, or another loop depends on it; nothing is deleted.
        """
        with self._db.write():
            state = self._db.fetchone(
                q.lock_loop() if self._db.is_postgresql else q.append_state(), {"loop_id": loop_id}
            )
            if state is None:
                raise LoopNotFound(f"loop {loop_id!r} not found")
            session_id = state[0]
            if self._db.fetchone(q.first_message_of_loop(), {"loop_id": loop_id}) is not None:
                raise InvalidArgument("loop_id", f"loop {loop_id!r} holds messages; delete them first")
            child = self._db.fetchone(q.child_loops(), {"loop_id": loop_id})
            if child is not None:
                raise InvalidArgument("loop_id", f"loop {child[0]!r} continues or was started by loop {loop_id!r}")
            self._db.execute(q.delete_loop(), {"loop_id": loop_id})
            self._db.execute(q.touch_session(), {"session_id": session_id, "updated_at": self._db.bind_time(utcnow())})

    def get(self, loop_id: str) -> Loop:
        """The loop with this id.

        Raises:
            LoopNotFound: no such loop.
        """
        row = self._db.fetchone(q.get_loop(), {"loop_id": loop_id})
        if row is None:
            raise LoopNotFound(f"loop {loop_id!r} not found")
        return self.from_row(row)

    def list(self, session_id: str) -> list[Loop]:
        """The loops of a session, in the order they started.

        Raises:
            SessionNotFound: no such session.
        """
        rows = self._db.fetchall(q.list_loops(), {"session_id": session_id})
        if not rows and self._db.fetchone(q.session_exists(), {"session_id": session_id}) is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return [self.from_row(row) for row in rows]

    def children(self, loop_id: str) -> list[Loop]:  # type: ignore[valid-type]
        """Loops that continue, branch from, compact or were spawned by ``loop_id``.

        Raises:
            LoopNotFound: no such loop.
        """
        rows = self._db.fetchall(q.child_loops(), {"loop_id": loop_id})
        if not rows:
            self.get(loop_id)
        return [self.from_row(row) for row in rows]

    def from_row(self, row: tuple[Any, ...]) -> Loop:
        """A :class:`Loop` from a row of ``queries.LOOP_COLUMNS``."""
        return loop_from_row(row, self._db.load_time)

    # --- helpers ------------------------------------------------------------------

    def _mint(self, session_id: str, config_id: str | None, limit: int) -> str:
        """The next free ``{session_id}.{config_id}.{N}`` (N counts per session and config).

        An id that would be over the id limit (a long session id or config)
        drops the config (``{session_id}.loop.{N}``), or else is a UUID.
        """
        if len(mint_loop_id(session_id, config_id, 1)) + 3 > limit:
            if config_id is None or len(mint_loop_id(session_id, None, 1)) + 3 > limit:
                return str(uuid.uuid4())
            config_id = None
        params = {"session_id": session_id, "config_id": config_id}
        taken = [taken_id for (taken_id,) in self._db.fetchall(q.loop_ids_for_config(config_id is not None), params)]
        number = next_loop_number(taken)
        while True:
            loop_id = mint_loop_id(session_id, config_id, number)
            # An explicitly named loop may already hold the id this counter arrives at.
            if self._db.fetchone(q.loop_exists(), {"loop_id": loop_id}) is None:
                return loop_id
            number += 1

    def _resolve_parent(
        self, session_id: str, parent_loop_id: str | None, kind: ContinuationKind | None
    ) -> tuple[str | None, ContinuationKind]:
        if parent_loop_id is LATEST:
            if kind == ContinuationKind.INITIAL:
                return None, kind
            latest = self._db.scalar(q.latest_loop(), {"session_id": session_id})
            if latest is None:
                if kind not in (None, ContinuationKind.INITIAL):
                    raise InvalidArgument(
                        "parent_loop_id",
                        f"a {kind.value} loop needs a parent, and session {session_id!r} has no loop yet",
                    )
                return None, ContinuationKind.INITIAL
            return latest, kind or ContinuationKind.DEFAULT
        if parent_loop_id is None:
            if kind not in (None, ContinuationKind.INITIAL):
                raise InvalidArgument("parent_loop_id", f"a {kind.value} loop needs a parent loop")
            return None, ContinuationKind.INITIAL
        if kind == ContinuationKind.INITIAL:
            raise InvalidArgument("parent_loop_id", "an initial loop has no parent")
        parent_session = self._db.scalar(q.loop_session(), {"loop_id": parent_loop_id})
        if parent_session is None:
            raise LoopNotFound(f"parent loop {parent_loop_id!r} not found")
        if parent_session != session_id:
            raise InvalidArgument(
                "parent_loop_id",
                f"parent loop {parent_loop_id!r} belongs to session {parent_session!r}, not {session_id!r}",
            )
        return parent_loop_id, kind or ContinuationKind.DEFAULT

    def _check_fork(
        self,
        session_id: str,
        parent: str | None,
        kind: ContinuationKind,
        fork_after: int | None,
        keep_from: int | None,
    ) -> None:
        if kind == ContinuationKind.BRANCH and fork_after is None:
            raise InvalidArgument("fork_after", "a branch forks after a message of its parent: give its id")
        if fork_after is not None and kind != ContinuationKind.BRANCH:
            raise InvalidArgument(
                "fork_after", f"only a branch forks after a message; a {kind.value} loop follows its parent's end"
            )
        if fork_after is not None:
            row = self._db.fetchone(q.get_message(), {"id": fork_after}) if is_message_id(fork_after) else None
            if row is None or _message_place(row)[1] != parent:
                raise InvalidArgument("fork_after", f"{fork_after!r} is not a message of the parent loop {parent!r}")
        if keep_from is not None:
            if kind != ContinuationKind.COMPACTION:
                raise InvalidArgument("keep_from", "applies to compaction loops only")
            row = self._db.fetchone(q.get_message(), {"id": keep_from}) if is_message_id(keep_from) else None
            if row is None or _message_place(row)[0] != session_id:
                raise InvalidArgument("keep_from", f"{keep_from!r} is not a message of session {session_id!r}")


def _message_place(row: Any) -> tuple[str, str]:
    """(session id, loop id) of a ``queries.get_message`` row."""
    _id, session_id, loop_id, _turn_index, _seq, _text, _source = row
    return session_id, loop_id


def _enum(kind: Any, value: Any, what: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise InvalidArgument(what, f"unknown {what} {value!r}; one of: {allowed}") from None


def is_message_id(value: Any) -> bool:
    """Whether ``value`` could be a message id (an integer a 64-bit column holds)."""
    return isinstance(value, int) and not isinstance(value, bool) and -MAX_INT - 1 <= value <= MAX_INT


def _config_dict(config: LoopConfig | Mapping[str, Any] | None) -> dict[str, Any] | None:
    if config is None:
        return None
    if isinstance(config, LoopConfig):
        # Validated again below: a config changed since it was built (``config.model = 5``) may hold anything.
        config = config.model_dump(exclude_none=True, warnings=False)
    elif not isinstance(config, Mapping):
        raise InvalidArgument("config", "a loop config must be a JSON object")
    try:
        LoopConfig(**config)
    except ValidationError as error:
        raise InvalidArgument("config", f"invalid loop config: {problems(error)}") from None
    except TypeError as error:  # keys that are not strings
        raise InvalidArgument("config", f"invalid loop config: {error}") from None
    return dict(config)
