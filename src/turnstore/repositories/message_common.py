"""What the two halves of ``store.messages`` (:mod:`.message_writes`, :mod:`.message_reads`) share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import queries as q
from ..database import Database
from ..errors import InvalidArgument, LoopNotFound, SessionNotFound
from ._shared import Settings

if TYPE_CHECKING:
    from .loops import LoopRepository

__all__ = ["MessageRepositoryBase", "check_loop_id"]


class MessageRepositoryBase:
    """A store's database and settings, and the lookups both halves make before they act."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        self._loops: LoopRepository | None = None  # set by the store: rewind() starts a loop
        self._indexed_to = 0  # the newest message id in the search index's batches, as last seen (search_index)

    def _require_loop(self, loop_id: str) -> None:
        if self._db.scalar(q.loop_session(), {"loop_id": loop_id}) is None:
            raise LoopNotFound(f"loop {loop_id!r} not found")

    def _require_session(self, session_id: str) -> None:
        if self._db.fetchone(q.session_exists(), {"session_id": session_id}) is None:
            raise SessionNotFound(f"session {session_id!r} not found")


def check_loop_id(loop_id: object) -> None:
    if not isinstance(loop_id, str):
        raise InvalidArgument("loop_id", f"must be a string, not {type(loop_id).__name__}")
    if "\x00" in loop_id:  # no loop id holds NUL (PostgreSQL could not even look one up)
        raise LoopNotFound(f"loop {loop_id!r} not found")
