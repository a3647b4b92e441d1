"""``Store``: one line to open a transcript store, four repositories to use it."""

from __future__ import annotations

import errno
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import IO, TYPE_CHECKING, Any

from typing_extensions import Self

from . import migrate
from .database import Database
from .engine import describe, open_engine, resolve_url, storage_error
from .errors import InvalidArgument, ReadOnlyStore, StorageError
from .limits import Limits
from .repositories import (
    LoopRepository,
    MessageRepository,
    PriceRepository,
    SessionRepository,
    UsageRepository,
    staging,
)
from .repositories._shared import Settings
from .usage import PriceTable

if TYPE_CHECKING:
    from .importers import ImportReport
    from .media import MediaMode

__all__ = ["Store", "TransactionSteps"]


class Store:
    """A session and transcript store on SQLite (default) or PostgreSQL.

    Example::

        store = Store("sqlite:///agent.db")
        session = store.sessions.create(title="demo")
        loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
        store.messages.append(Message.user("hi"), loop_id=loop.loop_id, turn_index=0)
        store.usage.session(session.session_id)

    Args:
        url: a SQLAlchemy URL or a file path; default ``$TURNSTORE_URL`` or
            ``sqlite:///turnstore.db``. ``postgresql://...`` uses psycopg 3.
        auto_upgrade: bring an older database schema up to date on open
            (default). With False, an out-of-date database raises
            :class:`~turnstore.errors.SchemaOutOfDate` naming the command to run.
        prices: per-model prices that win over the genai-prices catalog for the records this process writes
            (see :mod:`turnstore.pricing`).
        limits: size limits on messages and ids.
        pragmas: SQLite pragmas over the defaults (``journal_mode=wal``,
            ``synchronous=normal``, ``foreign_keys=on``, ``busy_timeout=5000``).
        busy_budget: seconds a write may wait in total for SQLite's write lock.
        read_only: open an existing store for reading only: nothing is created,
            upgraded or written (a write raises :class:`~turnstore.errors.ReadOnlyStore`);
            works on a file or folder the process may not write.

    A SQLite file that holds something other than a turnstore store is refused
    with :class:`~turnstore.errors.NotAStore` and left untouched; only a new,
    empty or turnstore file becomes a store.

    A store is safe to share between threads (each thread gets its own
    connection); open one per process.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        auto_upgrade: bool = True,
        prices: PriceTable | Mapping[str, Any] | None = None,
        limits: Limits | None = None,
        pragmas: Mapping[str, Any] | None = None,
        busy_budget: float = 60.0,
        echo: bool = False,
        read_only: bool = False,
    ) -> None:
        self.url = resolve_url(url)
        try:
            self.engine = open_engine(self.url, read_only=read_only, pragmas=pragmas, echo=echo)
        except OSError as error:  # the file or its folder could not be created
            raise storage_error(error, self.url) or _unopenable(self.url, error) from None
        try:
            migrate.ensure_schema(self.engine, auto_upgrade=auto_upgrade and not read_only, url=self.url)
        except BaseException as error:
            self.engine.dispose()
            raise storage_error(error, self.url) or error from None
        self._db = Database(self.engine, busy_budget=busy_budget)
        if not read_only:
            # A session a crashed import left staged is removed (invisible all along); a live one is left alone.
            try:
                staging.clean_up(self._db)
            except BaseException as error:
                self._db.close()
                self.engine.dispose()
                raise storage_error(error, self.url) or error from None
        self.settings = Settings(PriceTable().merged(prices), limits)
        self.sessions = SessionRepository(self._db, self.settings)
        self.loops = LoopRepository(self._db, self.settings)
        self.messages = MessageRepository(self._db, self.settings)
        self.usage = UsageRepository(self._db, self.settings)
        self.prices = PriceRepository(self._db, self.settings, self.usage)
        self.settings.load_saved_prices(self._db)
        self.loops._messages = self.messages
        self.messages._loops = self.loops

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self.engine.dialect.name

    def upgrade(self, revision: str = "head") -> None:
        """Upgrade the schema to ``revision`` (default: the newest)."""
        migrate.upgrade(self.engine, revision)

    def schema_version(self) -> str | None:
        """The schema revision the database is at."""
        return migrate.current(self.engine)

    def import_(
        self,
        format: str,
        *paths: str | os.PathLike[str],
        dry_run: bool = False,
        skip_invalid: bool = False,
        replace: bool = False,
        session_id: str | None = None,
        progress: Any = None,
        tune_process: bool = False,
    ) -> ImportReport:
        """Import histories of ``format`` from files or directories; see :mod:`turnstore.importers`.

        Each session is written in one transaction. Returns the count report;
        ``report.ok`` is False when a session was left out for a malformed record.

        Args:
            format: ``phi-core``, ``turnstore``, ... (``turnstore.importers.FORMATS``).
            paths: files or directories (walked); a leading ``~`` is the home folder, as in a shell.
            dry_run: validate and report, write nothing.
            skip_invalid: skip malformed records (listed in the report) instead of their sessions.
            replace: overwrite a session that exists with other content.
            session_id: the session id for sources that name none.
            progress: ``callable(file, done, total)`` called after each file.
            tune_process: let the import tune this process while it runs, as
                ``turnstore import`` does: pause Python's cyclic garbage collector
                while it reads and writes each file, and copy SQLite's write-ahead
                log into the database on a thread of its own. Both end with the call
                (the collector is switched back on only if it was on; the thread is
                joined). Off by default: the process is the app's, and an import
                then changes nothing of it (large imports run slower: docs/importers.md).

        Raises:
            InvalidArgument: a flag that is not True or False.
            ImportFailed: an unknown format, or a path that does not exist.
        """
        from .importers import ImportOptions
        from .importing import import_paths
        from .repositories.imports import ImportRepository  # loaded with the importers, on first use

        flags = {"dry_run": dry_run, "skip_invalid": skip_invalid, "replace": replace, "tune_process": tune_process}
        for name, value in flags.items():
            if not isinstance(value, bool):  # "no" would read as True
                raise InvalidArgument(name, f"must be True or False, got {value!r}")
        options = ImportOptions(dry_run=dry_run, skip_invalid=skip_invalid, replace=replace, session_id=session_id)
        return import_paths(
            self,
            ImportRepository(self._db, self.settings),
            format,
            [os.path.expanduser(os.fspath(p)) for p in paths],
            options,
            progress,
            tune_process=tune_process,
        )

    def export(
        self,
        session_id: str,
        format: str = "turnstore",
        file: str | os.PathLike[str] | IO[str] | None = None,
        *,
        media: MediaMode = "inline",
    ) -> str | None:
        """Export one session as ``phi-core``, ``phi-core-session`` or ``turnstore`` (lossless JSONL).

        Writes to ``file`` (a path or a text file object) when given, streaming;
        otherwise returns the text. A path gets a new file, mode 0600, put in
        place only when complete (:func:`~turnstore.export.write_export`).
        ``media="omit"`` or ``"ref"`` leaves the data of media kept out of line
        out of the export (see :data:`turnstore.MediaMode`); such an export is no
        longer lossless.

        Raises:
            SessionNotFound: no such session.
            ExportFailed: the file at ``file`` could not be written (it is left as it was).
            InvalidArgument: an unknown ``format``, or ``media`` is not a media mode.
        """
        from .export import iter_export, write_export

        chunks = iter_export(self, session_id, format, media=media)
        if file is None:
            return "".join(chunks)
        if isinstance(file, (str, os.PathLike)):
            write_export(file, chunks)
        else:
            file.writelines(chunks)
        return None

    @contextmanager
    def transaction(self) -> Iterator[Store]:
        """Group several writes into one transaction: all of them happen, or none.

        Example::

            with store.transaction():
                loop = store.loops.start(session_id)
                store.messages.append_turn(loop.loop_id, 0, [prompt, reply])
        """
        with self._db.write():
            yield self

    @property
    def steps(self) -> TransactionSteps:
        """Transactions begun and ended in separate calls, for callers that cannot hold a ``with`` block.

        The async store uses it: its transaction spans several awaits, and its
        import must be stoppable from the event loop between two sessions.
        Prefer :meth:`transaction`.
        """
        return TransactionSteps(self._db)

    def close(self) -> None:
        """Close every connection; the store cannot be used afterwards."""
        self._db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Store({self.engine.url.render_as_string(hide_password=True)!r})"


class TransactionSteps:
    """A store's transactions as separate steps, on the calling thread's connection.

    Pair every :meth:`begin` with one :meth:`commit` or :meth:`rollback`, on
    the same thread; a ``begin`` inside an open transaction joins it, and only
    the outermost pair ends it.
    """

    __slots__ = ("_database",)

    def __init__(self, database: Database) -> None:
        self._database = database

    def begin(self) -> None:
        """Open a write transaction on this thread's connection, or join the open one."""
        self._database.begin()

    def commit(self) -> None:
        """End one :meth:`begin`; the outermost one commits."""
        self._database.commit()

    def rollback(self) -> None:
        """End one :meth:`begin` after an error; the whole transaction is undone."""
        self._database.rollback()

    def stopping(self, stop: threading.Event) -> AbstractContextManager[None]:
        """For the block, on this thread: once ``stop`` is set, beginning a transaction raises ``Stopped``.

        A run of transactions (an import, one per session) then ends between two of them.
        """
        return self._database.stopping(stop)


def _unopenable(url: str, error: OSError) -> Exception:
    """A new database file that could not be created: read-only when permissions forbid it."""
    reason = error.strerror or str(error)
    if isinstance(error, PermissionError) or error.errno == errno.EROFS:
        return ReadOnlyStore(f"cannot create the database {describe(url)}: its folder is read-only here ({reason})")
    return StorageError(f"cannot create the database {describe(url)}: {reason}")
