"""Checkpointing a SQLite write-ahead log on a helper thread after a large write.

In WAL mode SQLite appends each commit to the ``-wal`` file; once the log
holds ``wal_autocheckpoint`` pages (1,000 by default), the committing
connection copies them into the database file before its ``COMMIT``
returns. For an import of a 10,000-message session that copy is most of the
commit (≈60 of ≈75 ms here). SQLite's documentation suggests such writers
turn the automatic checkpoint off and checkpoint "in a separate thread"
(https://www.sqlite.org/wal.html#automatic_checkpoint), and that is what a
large import does: its commit runs with automatic checkpoints off, then a
helper thread with a connection of its own runs ``PRAGMA
wal_checkpoint(PASSIVE)``, during which the driver holds no Python lock.

Nothing is less durable or less visible: the import has committed when it
returns, and every connection reads the log. The checkpoint only moves the
pages into the main file; it overlaps whatever the application (or the next
file of the same import) does next. Requests made while one is waiting to
start are merged into it; :meth:`Checkpointer.close` (called by
``Store.close()``) waits for the last one. Small writes keep SQLite's own
automatic checkpoint, so the log never grows past what SQLite would let it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .database import Database

__all__ = ["Checkpointer"]

log = logging.getLogger(__name__)


class Checkpointer:
    """Runs one database's checkpoints on a helper thread (SQLite files in WAL mode; a no-op elsewhere)."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._queued: Future[None] | None = None
        self._wal: bool | None = None
        """Whether the database is in WAL mode (asked once, on first use)."""

    @contextmanager
    def deferred(self, when: bool = True) -> Iterator[None]:
        """A commit inside this block leaves the WAL checkpoint to the helper thread.

        Wrap a whole write transaction in it. It does nothing when ``when`` is
        false, inside an enclosing transaction (whose own commit checkpoints
        as usual), on PostgreSQL, for a database not in WAL mode, or when the
        application turned automatic checkpoints off itself.
        """
        database = self._database
        if not when or not database.is_sqlite or database.in_transaction or not self._in_wal_mode():
            yield
            return
        pages = database.pragma("wal_autocheckpoint")
        if not pages or pages <= 0:
            yield
            return
        with database.pragmas_during(wal_autocheckpoint=0):
            yield
        self.request()

    def request(self) -> None:
        """Checkpoint soon, on the helper thread (merged with a request still waiting to start)."""
        with self._lock:
            if self._queued is not None and not self._queued.running() and not self._queued.done():
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnstore-checkpoint")
            self._queued = self._executor.submit(self._checkpoint)

    def wait(self) -> None:
        """Return once every requested checkpoint has run."""
        with self._lock:
            queued = self._queued
        if queued is not None:
            queued.result()

    def close(self) -> None:
        """Wait for the last checkpoint and stop the helper thread."""
        with self._lock:
            executor, self._executor, self._queued = self._executor, None, None
        if executor is not None:
            executor.shutdown(wait=True)

    def reset_after_fork(self) -> None:
        """Forget the parent's helper thread (a forked child has none)."""
        self._lock = threading.Lock()
        self._executor = None
        self._queued = None

    def _in_wal_mode(self) -> bool:
        if self._wal is None:
            self._wal = str(self._database.pragma("journal_mode")).lower() == "wal"
        return self._wal

    def _checkpoint(self) -> None:
        try:
            self._database.pragma("wal_checkpoint(PASSIVE)")
        except Exception as error:  # the log stays whole; the next automatic checkpoint copies it
            log.warning("turnstore: a background WAL checkpoint failed: %s", error)
