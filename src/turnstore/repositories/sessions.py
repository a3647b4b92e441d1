"""``store.sessions``: create, read, list, rename and delete conversations."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from .. import queries as q
from ..database import Database
from ..errors import AlreadyExists, InvalidArgument, SessionNotFound
from ..limits import check_json, check_text
from ..records import Session, SessionSummary
from . import media
from ._shared import Settings, json_object, loads, utcnow
from .rows import SessionSources, session_from_row, summary_from_row

__all__ = ["SessionRepository"]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Default of :meth:`SessionRepository.update`'s fields: leave the field as it is."""


class SessionRepository:
    """Sessions of one store. Every method is one transaction."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    def create(
        self,
        session_id: str | None = None,
        *,
        agent_id: str | None = None,
        title: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        exist_ok: bool = False,
        created_at: datetime | None = None,
    ) -> Session:
        """Create a session; a UUID v4 id is minted when none is given.

        ``created_at`` defaults to now (give it when recording a past conversation).

        Raises:
            AlreadyExists: the id is taken (unless ``exist_ok``, which returns the existing session).
        """
        if session_id is None:
            session_id = str(uuid.uuid4())
        self._settings.limits.check_id("session_id", session_id)
        self._settings.limits.check_name("agent_id", agent_id)
        check_text("title", title)
        check_json("metadata", metadata)
        metadata_text = json_object("metadata", metadata)
        now = created_at or utcnow()
        params = {
            "session_id": session_id,
            "agent_id": agent_id,
            "title": title,
            "metadata": metadata_text,
            "created_at": self._db.bind_time(now),
            "updated_at": self._db.bind_time(now),
            "source": None,
        }
        try:
            with self._db.write():
                if self._db.fetchone(q.session_exists(), {"session_id": session_id}) is not None:
                    raise AlreadyExists(f"session {session_id!r} already exists")
                # Another connection may create it between the check and the insert: then nothing is
                # inserted and nothing fails, so an enclosing transaction goes on (PostgreSQL aborts a
                # transaction at its first error).
                if self._db.execute(q.create_session(), params).rowcount != 1:
                    raise AlreadyExists(f"session {session_id!r} already exists")
        except AlreadyExists:
            if exist_ok:
                return self.get(session_id)
            raise
        return Session(
            session_id=session_id,
            agent_id=agent_id,
            title=title,
            metadata=loads(metadata_text),  # as a read gives it back (a tuple as a list)
            created_at=now,
            updated_at=now,
        )

    def get(self, session_id: str) -> Session:
        """The session with this id.

        Raises:
            SessionNotFound: no such session.
        """
        row = None if _holds_nul(session_id) else self._db.fetchone(q.get_session(), {"session_id": session_id})
        if row is None:
            raise SessionNotFound(f"session {session_id!r} not found")
        return self._session(row)

    def exists(self, session_id: str) -> bool:
        """Whether a session with this id exists."""
        if _holds_nul(session_id):
            return False
        return self._db.fetchone(q.session_exists(), {"session_id": session_id}) is not None

    def sources(self, session_id: str) -> SessionSources:
        """The verbatim source records an import kept for a session and its loops, and the source's format.

        What exports write back out; a session written through the API has none
        (every field None, each loop's source None).

        Raises:
            SessionNotFound: no such session.
        """
        with self._db.read():
            if not self.exists(session_id):
                raise SessionNotFound(f"session {session_id!r} not found")
            source = self._db.scalar(q.session_source(), {"session_id": session_id})
            imported = self._db.fetchone(q.get_import(), {"session_id": session_id})
            loops = dict(self._db.fetchall(q.loop_sources(), {"session_id": session_id}))  # loop_id -> source
        source_format = None
        if imported is not None:
            _format, _origin, _digest, source_format = imported
        return SessionSources(source, source_format, loops)

    def list(
        self,
        *,
        limit: int = 100,
        offset: int = 0,
        agent_id: str | None = None,
        model: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        order: str = "-updated",
    ) -> list[SessionSummary]:
        """Sessions, most recently updated first (or in ``order``), with their loop and message counts.

        Args:
            limit: at most this many sessions (a page).
            offset: skip this many first (the page start).
            agent_id: only this agent's sessions.
            model: only sessions with a loop that ran with this model (the loop's config).
            since: only sessions last updated at or after this time (naive: UTC).
            until: only sessions last updated before this time (naive: UTC).
            order: ``updated``, ``created`` or ``title``; a leading ``-`` sorts descending.

        Raises:
            InvalidArgument: a negative ``limit`` or ``offset``, an unknown ``order``, a time that is not a datetime.
        """
        if limit < 0 or offset < 0:
            raise InvalidArgument("limit" if limit < 0 else "offset", "limit and offset must not be negative")
        descending = isinstance(order, str) and order.startswith("-")
        key = order[1:] if descending else order
        if key not in q.SESSION_ORDERS:
            raise InvalidArgument("order", f"must be one of {', '.join(q.SESSION_ORDERS)} (a leading - for descending)")
        params: dict[str, Any] = {"limit": limit, "offset": offset}
        if agent_id is not None:
            params["agent_id"] = agent_id
        if model is not None:
            params["model"] = model
        for name, value in (("since", since), ("until", until)):
            if value is not None:
                params[name] = self._db.bind_time(_utc(name, value))
        statement = q.list_sessions(
            agent_id is not None, model is not None, since is not None, until is not None, key, descending
        )
        rows = self._db.fetchall(statement, params)
        return [self._summary(row) for row in rows]

    def count(self) -> int:
        """How many sessions the store holds."""
        return int(self._db.scalar(q.count_sessions()) or 0)

    def rename(self, session_id: str, title: str | None) -> Session:
        """Set (or clear, with None) a session's title.

        Raises:
            SessionNotFound: no such session.
            InvalidMessage: the title holds a NUL character.
        """
        check_text("title", title)
        with self._db.write():
            cursor = self._db.execute(
                q.rename_session(),
                {"session_id": session_id, "title": title, "updated_at": self._db.bind_time(utcnow())},
            )
            if cursor.rowcount == 0:
                raise SessionNotFound(f"session {session_id!r} not found")
        return self.get(session_id)

    def update(
        self,
        session_id: str,
        *,
        title: str | _Unset | None = UNSET,
        metadata: Mapping[str, Any] | _Unset | None = UNSET,
    ) -> Session:
        """Change a session's title and/or metadata; only the fields given change.

        ``metadata`` replaces the session's metadata as a whole (None clears
        it); to change one key, pass the old metadata with that key changed.
        ``title=None`` clears the title.

        Raises:
            SessionNotFound: no such session.
            InvalidArgument: ``metadata`` is not a JSON object, or nothing to change was given;
                nothing is written.
        """
        values: dict[str, Any] = {}
        if not isinstance(title, _Unset):
            if title is not None and not isinstance(title, str):
                raise InvalidArgument("title", f"must be a string or None, not {type(title).__name__}")
            values["title"] = title
        if not isinstance(metadata, _Unset):
            check_json("metadata", metadata)
            values["metadata"] = json_object("metadata", metadata)
        if not values:
            raise InvalidArgument("title", "update() needs title= or metadata= (or both)")
        with self._db.write():
            cursor = self._db.execute(
                q.update_session(tuple(values)),
                {"session_id": session_id, **values, "updated_at": self._db.bind_time(utcnow())},
            )
            if cursor.rowcount == 0:
                raise SessionNotFound(f"session {session_id!r} not found")
        return self.get(session_id)

    def delete(self, session_id: str) -> None:
        """Delete a session with all its loops and messages, and the media no other session refers to.

        Raises:
            SessionNotFound: no such session.
        """
        with self._db.write():
            for statement in q.delete_session():
                cursor = self._db.execute(statement, {"session_id": session_id})
            if cursor.rowcount == 0:
                raise SessionNotFound(f"session {session_id!r} not found")
            media.release(self._db, session_id)

    def _session(self, row: tuple[Any, ...]) -> Session:
        return session_from_row(row, self._db.load_time)

    def _summary(self, row: tuple[Any, ...]) -> SessionSummary:
        return summary_from_row(row, self._db.load_time)


def _utc(name: str, value: object) -> datetime:
    """A time bound as the store compares it: an aware UTC datetime (a naive one is taken as UTC)."""
    if not isinstance(value, datetime):
        raise InvalidArgument(name, f"must be a datetime, not {type(value).__name__}")
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value.astimezone(timezone.utc)


def _holds_nul(session_id: object) -> bool:
    """No stored session id holds NUL (refused on writing), and PostgreSQL cannot even look one up."""
    return isinstance(session_id, str) and "\x00" in session_id
