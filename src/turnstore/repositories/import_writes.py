"""How an import writes large sessions to SQLite: a bigger page cache, and WAL checkpoints on the import's own thread.

Both settings belong to one call of :meth:`turnstore.Store.import_` and end with it.

**Page cache.** A session of at least :data:`LARGE_SESSION_MESSAGES` messages
is written with a page cache that holds its pages until the commit (SQLite's
default, 2 MB, spills the transaction's pages to the log as it goes; a
10,000-message pi session writes ≈25 MB of pages, indexes included), which
then writes each page once. The setting is the writing connection's, put back
when the session is written; SQLite frees that cache afterwards.

**Checkpoints.** In WAL mode SQLite appends each commit to the ``-wal`` file;
once the log holds ``wal_autocheckpoint`` pages (1,000 by default), the
committing connection copies them into the database file before its
``COMMIT`` returns, and for a large session that copy is most of the commit.
SQLite's documentation suggests such writers turn the automatic checkpoint off
and checkpoint "in a separate thread"
(https://www.sqlite.org/wal.html#automatic_checkpoint). A large session's
commit therefore runs with automatic checkpoints off, and a thread that the
import starts (one per import call, at its first large session) runs ``PRAGMA
wal_checkpoint(PASSIVE)`` on a connection of its own while the import reads
its next file. :meth:`ImportWrites.close` waits for the last checkpoint and
ends the thread before ``import_`` returns: no thread outlives the call. The
thread is the app's to allow: only an import called with
``tune_process=True`` (as ``turnstore import`` is) starts it; otherwise each
large commit checkpoints itself, as SQLite does by default.

Nothing is less durable or less visible: a session has committed when it is
written, and every connection reads the log. Small sessions, spilled ones,
writes inside an application's transaction, PostgreSQL, a database not in WAL
mode and one whose application turned automatic checkpoints off keep SQLite's
own behaviour.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING

from typing_extensions import Self

if TYPE_CHECKING:
    from ..database import Database

__all__ = ["LARGE_SESSION_MESSAGES", "ImportWrites"]

log = logging.getLogger(__name__)

LARGE_SESSION_MESSAGES = 1_000
"""Sessions of at least this many messages are written as large writes."""

LARGE_WRITE_CACHE_KIB_PER_MESSAGE = 3
LARGE_WRITE_CACHE_KIB = 65_536
"""SQLite page cache while a large session is written: 3 KiB a message, at most 64 MiB."""


class ImportWrites:
    """The large-write settings of one import call; :meth:`close` (or leaving the ``with`` block) ends its thread."""

    def __init__(self, database: Database, *, checkpoint_thread: bool) -> None:
        self._database = database
        self._checkpoint_thread = checkpoint_thread
        """Whether large sessions commit with automatic checkpoints off and a thread of the import's copies the log."""
        self._executor: ThreadPoolExecutor | None = None
        self._queued: Future[None] | None = None
        self._wal: bool | None = None
        """Whether the database is in WAL mode (asked once, on first use)."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @contextmanager
    def session(self, messages: int, *, spilled: bool = False) -> Iterator[None]:
        """Settings for writing one session of ``messages`` messages; wrap its whole transaction in it."""
        database = self._database
        if messages < LARGE_SESSION_MESSAGES or not database.is_sqlite or database.in_transaction:
            yield
            return
        with ExitStack() as stack:
            if not spilled:  # a spilled session is read in bounded memory: its cache stays bounded too
                kib = min(LARGE_WRITE_CACHE_KIB, LARGE_WRITE_CACHE_KIB_PER_MESSAGE * messages)
                stack.enter_context(database.pragmas_during(cache_size=-kib))
            deferred = (
                self._checkpoint_thread and self._in_wal_mode() and (database.pragma("wal_autocheckpoint") or 0) > 0
            )
            if deferred:
                stack.enter_context(database.pragmas_during(wal_autocheckpoint=0))
            yield
        if deferred:
            self._request()

    def close(self) -> None:
        """Wait for the last checkpoint and end the thread (idempotent)."""
        executor, self._executor, self._queued = self._executor, None, None
        if executor is not None:
            executor.shutdown(wait=True)

    def _request(self) -> None:
        """Checkpoint soon, on the import's thread (merged with a request still waiting to start)."""
        queued = self._queued
        if queued is not None and not queued.running() and not queued.done():
            return
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnstore-import-checkpoint")
        self._queued = self._executor.submit(self._checkpoint)

    def _in_wal_mode(self) -> bool:
        if self._wal is None:
            self._wal = str(self._database.pragma("journal_mode")).lower() == "wal"
        return self._wal

    def _checkpoint(self) -> None:
        try:
            self._database.pragma("wal_checkpoint(PASSIVE)")
        except Exception as error:  # the log stays whole; the next automatic checkpoint copies it
            log.warning("turnstore: a WAL checkpoint after an import failed: %s", error)
