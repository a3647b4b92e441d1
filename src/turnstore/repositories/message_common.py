"""What the two halves of ``store.messages`` (:mod:`.message_writes`, :mod:`.message_reads`) share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..database import Database
from ..errors import InvalidArgument, LoopNotFound
from ._shared import Settings

if TYPE_CHECKING:
    from .loops import LoopRepository

__all__ = ["MessageRepositoryBase", "check_loop_id"]


class MessageRepositoryBase:
    """A store's database and settings, and what the halves keep between calls."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings
        self._loops: LoopRepository | None = None  # set by the store: rewind() starts a loop
        self._indexed_to = 0  # the newest message id in the search index's batches, as last seen (search_index)


def check_loop_id(loop_id: object) -> None:
    """Refuse a loop id that is not a string (:class:`InvalidArgument`), or that no loop can have (:class:`LoopNotFound`)."""
    if not isinstance(loop_id, str):
        raise InvalidArgument("loop_id", f"must be a string, not {type(loop_id).__name__}")
    if "\x00" in loop_id:  # no loop id holds NUL (PostgreSQL could not even look one up)
        raise LoopNotFound(f"loop {loop_id!r} not found")
