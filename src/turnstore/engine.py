"""Database URLs and engines: where a store lives and how its connections are set up.

A URL may be a full SQLAlchemy URL or a bare file path (which means SQLite).
``None`` means ``$TURNSTORE_URL``, else ``sqlite:///turnstore.db``.

SQLite connections get, by default: ``journal_mode=WAL`` (readers never block
the writer), ``synchronous=NORMAL`` (survives a process crash; the last
commits may roll back on power loss — pass ``synchronous="full"`` to survive
that too), ``foreign_keys=ON`` (deleting a session removes its loops and
messages) and ``busy_timeout=5000`` ms. turnstore issues ``BEGIN`` itself
(``BEGIN IMMEDIATE`` for writes), so the driver's implicit transactions are
switched off. A new database file is created readable by its owner only.

Before any of that, :func:`open_engine` looks at what the file holds, with a
connection that cannot write (:func:`sqlite_contents`): journal mode is
persistent in the file, so it is set only on a turnstore store or on an empty
or new file. Any other SQLite file is refused with
:class:`~turnstore.errors.NotAStore` and left byte-identical. A read-only
open (``read_only=True``) never creates a file, never sets the journal mode,
and reads a store the process may not write.

:func:`storage_error` turns the driver's "read-only", "disk full", I/O,
"cannot open" and "database is locked" errors into turnstore's typed errors;
every place that talks to the driver maps through it (a write transaction
retries a locked BEGIN for ``busy_budget`` first, in :mod:`turnstore.database`).
"""

from __future__ import annotations

import enum
import os
import sqlite3
import stat
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import sqlalchemy as sa
from sqlalchemy.engine import Engine, make_url

from .errors import InvalidArgument, NotAStore, ReadOnlyStore, StorageError, StorageFull, StoreBusy
from .pragmas import check_pragmas

__all__ = [
    "DEFAULT_URL",
    "SQLITE_PRAGMAS",
    "Contents",
    "create_engine",
    "open_engine",
    "resolve_url",
    "sqlite_contents",
    "storage_error",
]

DEFAULT_URL = "sqlite:///turnstore.db"

SQLITE_PRAGMAS: dict[str, Any] = {
    "busy_timeout": 5000,
    "journal_mode": "wal",
    "synchronous": "normal",
    "foreign_keys": "on",
}
"""Pragmas applied to every SQLite connection, in this order (the busy timeout first, so
switching a new file to WAL waits for a concurrent writer instead of failing); any of
them can be overridden per store."""


def resolve_url(url: str | os.PathLike[str] | None = None) -> str:
    """Turn what a user typed into a SQLAlchemy URL string.

    ``None`` → ``$TURNSTORE_URL`` or ``sqlite:///turnstore.db``; a bare path →
    ``sqlite:///<path>``, a leading ``~`` meaning the home folder as in a shell
    (its ``?``, ``#`` and ``%`` escaped, so they name the file and are not read
    as the URL's query, fragment or escapes; a name that is not UTF-8 kept as
    its surrogate escapes, which name the same bytes when the file is opened);
    ``postgresql://`` and ``postgres://`` → the psycopg 3 driver
    (``postgresql+psycopg://``).
    """
    if url is None:
        url = os.environ.get("TURNSTORE_URL") or DEFAULT_URL
    text = os.fspath(url)
    if "://" not in text:
        path = os.path.expanduser(text)
        try:
            return sa.URL.create("sqlite", database=path).render_as_string()
        except UnicodeEncodeError:  # a file name that is not UTF-8 (surrogate escapes), which URL quoting cannot take
            return "sqlite:///" + path.replace("%", "%25").replace("?", "%3F").replace("#", "%23")
    scheme, rest = text.split("://", 1)
    if scheme in {"postgresql", "postgres"}:
        return f"postgresql+psycopg://{rest}"
    return text


def sqlite_path(url: str | sa.URL) -> Path | None:
    """The database file a SQLite URL may create, or None for in-memory, existing-only and non-SQLite URLs."""
    parsed = make_url(url)
    path = sqlite_file(parsed)
    inline = (parsed.database or "").partition("?")[2]  # file:PATH?mode=ro written into the path itself
    if path is None or parsed.query.get("mode") in {"ro", "rw"} or "immutable" in parsed.query or "mode=r" in inline:
        return None  # mode=ro and mode=rw open an existing file only
    return path


def sqlite_file(url: str | sa.URL) -> Path | None:
    """The database file of a SQLite URL, whatever its open mode; None for in-memory and non-SQLite URLs."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    if parsed.database.startswith("file:"):  # a SQLite URI filename: file:PATH?mode=...
        path, _, query = parsed.database[5:].partition("?")
        if not path or path == ":memory:" or "mode=memory" in query or parsed.query.get("mode") == "memory":
            return None
        return Path(unquote(path, errors="surrogateescape"))  # %XX bytes that are not UTF-8: as os.fsdecode gives them
    return Path(parsed.database)


class Contents(enum.Enum):
    """What a database holds, as far as opening a store is concerned."""

    MISSING = "missing"
    """No file yet."""
    EMPTY = "empty"
    """An empty file or a database without tables (an ``alembic_version`` table alone counts as none)."""
    STORE = "store"
    """A turnstore store (at any revision)."""


STORE_TABLES = frozenset({"alembic_version", "sessions", "loops", "messages"})
"""The tables that make a SQLite database a turnstore store; it may hold tables of its app besides."""

_SQLITE_HEADER = b"SQLite format 3\x00"


def sqlite_contents(path: Path) -> Contents:
    """What the SQLite file at ``path`` holds, found without changing it or the files beside it.

    A file in WAL mode without a ``-wal`` file beside it is read as immutable
    (a read-only connection would leave ``-wal`` and ``-shm`` files behind);
    otherwise the connection is read-only (``mode=ro``).

    Raises:
        NotAStore: not a regular file, not a SQLite database, or a database
            holding tables of something other than turnstore.
        StorageError: the file cannot be read.
    """
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return Contents.MISSING
    except OSError as error:
        raise StorageError(f"cannot open database {path}: {error.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise NotAStore(f"{path} is not a regular file, so not a turnstore store")
    if info.st_size == 0:
        return Contents.EMPTY
    header = _header(path)
    if not header.startswith(_SQLITE_HEADER):
        raise NotAStore(f"{path} is not a SQLite database, so not a turnstore store; it was left untouched")
    tables = _sqlite_tables(path, immutable=_in_wal(header) and not Path(f"{path}-wal").exists())
    if not tables - {"alembic_version"}:
        return Contents.EMPTY
    if tables >= STORE_TABLES:
        return Contents.STORE
    shown = ", ".join(sorted(tables)[:4]) + (", ..." if len(tables) > 4 else "")
    raise NotAStore(f"{path} is not a turnstore store (it holds tables {shown}); it was left untouched")


def _header(path: Path) -> bytes:
    """The first 100 bytes of a file (a SQLite database's header), read without dropping this process's locks on it.

    Closing any descriptor of a file drops every POSIX lock the process holds
    on that file (``fcntl`` semantics), SQLite's included. Were this process
    already connected to the file (another ``Store`` on it, or the app's own
    ``sqlite3`` connection), that connection would go on without its shared
    lock, and another process closing its own connection would then take
    itself for the last one and delete the ``-wal`` file under it. So where a
    descriptor of the file is open here already, the header is read through
    it (``pread``: its offset does not move, and it stays open); only a file
    this process does not have open is opened and closed.
    """
    try:
        held = _held_descriptor(path)
        if held is not None:
            return held
        with open(path, "rb") as handle:
            return handle.read(100)
    except OSError as error:
        raise StorageError(f"cannot read database {path}: {error.strerror}") from None


def _held_descriptor(path: Path) -> bytes | None:
    """The header read through a descriptor of ``path`` this process holds open, or None when it holds none.

    The descriptors are listed in ``/proc/self/fd`` (Linux) or ``/dev/fd``; where
    neither exists (Windows, whose locks belong to a handle), None.
    """
    target = os.stat(path)
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            names = os.listdir(listing)
        except OSError:
            continue
        for name in names:
            try:
                descriptor = int(name)
                if _same_file(os.fstat(descriptor), target):
                    header = os.pread(descriptor, 100, 0)
                    if _same_file(os.fstat(descriptor), target):  # not closed and reused meanwhile
                        return header
            except (ValueError, OSError):
                continue
        return None
    return None


def _same_file(one: os.stat_result, other: os.stat_result) -> bool:
    return (one.st_dev, one.st_ino) == (other.st_dev, other.st_ino)


def _in_wal(header: bytes) -> bool:
    """Whether a SQLite header says the file is in WAL mode (its read and write versions are 2)."""
    return len(header) > 18 and header[18] == 2


def _sqlite_tables(path: Path, immutable: bool) -> set[str]:
    """The names of the tables in a SQLite file (SQLite's own excepted), read through a connection that cannot write.

    An immutable read takes no lock; should a writer that started meanwhile make it
    fail, the names are read again with a locking read-only connection.
    """
    uri = f"{_file_uri(path)}?{'immutable=1' if immutable else 'mode=ro'}"
    try:
        connection = sqlite3.connect(uri, uri=True)
        try:
            rows = connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        finally:
            connection.close()
    except sqlite3.Error as error:
        if immutable:
            return _sqlite_tables(path, immutable=False)
        raise storage_error(error, str(path)) or StorageError(f"cannot read database {path}: {error}") from None
    return {str(name) for (name,) in rows if not str(name).startswith("sqlite_")}


def _file_uri(path: Path) -> str:
    """``path`` as a SQLite URI filename, every character SQLite would read as syntax escaped."""
    return "file:" + quote(os.fsencode(path.absolute()), safe="/")  # its bytes: a name need not be UTF-8


def open_engine(
    url: str | os.PathLike[str] | None = None,
    *,
    read_only: bool = False,
    pragmas: Mapping[str, Any] | None = None,
    echo: bool = False,
) -> Engine:
    """An Engine for a store at ``url``, after checking that the database is one turnstore may use.

    SQLite: a file holding anything but a turnstore store, or nothing, is
    refused before any connection setting touches it. With ``read_only`` the
    file must exist and is opened read-only (immutable when it is in WAL mode
    without a ``-wal`` file and its folder cannot be written, since SQLite
    could not create the ``-shm`` file it needs otherwise): no file is
    created, the journal mode is not set, and every connection is
    ``query_only``. A store in a folder this process
    cannot write is opened that way too, so it can be read; writes to it
    raise :class:`~turnstore.errors.ReadOnlyStore`.

    Raises:
        NotAStore: the file is not a turnstore store, or (``read_only``) there is no file.
        StorageError: the file cannot be read.
    """
    resolved = resolve_url(url)
    path = sqlite_file(resolved)
    if path is None:
        _refuse_undecodable(resolved)
        return create_engine(resolved, pragmas=pragmas, echo=echo)
    if pragmas is not None:
        pragmas = check_pragmas(pragmas)
    contents = sqlite_contents(path)
    # SQLite could not make the -wal and -shm files a connection to a WAL file needs.
    stuck = (
        contents is Contents.STORE
        and not Path(f"{path}-wal").exists()
        and not os.access(path.absolute().parent, os.W_OK)
    )
    if not read_only and not stuck:
        return create_engine(resolved, pragmas=pragmas, echo=echo)
    if contents is Contents.MISSING:
        raise NotAStore(f"no database at {path}: a read-only store (and a command that only reads) does not create one")
    if stuck and _in_wal(_header(path)):
        mode = {"immutable": "1"}
    elif os.access(path, os.W_OK) and os.access(path.absolute().parent, os.W_OK):
        # A read-write connection that may not write (query_only): the last one to close removes the -wal and
        # -shm files as usual, where read-only connections would leave them behind.
        mode = {"mode": "rw"}
    else:
        mode = {"mode": "ro"}
    read_url = sa.URL.create("sqlite", database=_file_uri(path), query={**mode, "uri": "true"})
    merged = {**SQLITE_PRAGMAS, **(pragmas or {}), "query_only": "on"}
    merged.pop("journal_mode", None)  # persistent in the file: never set by a reader
    return _sqlite_engine(read_url, {"busy_timeout": merged.pop("busy_timeout"), **merged}, echo, begin="BEGIN")


def _refuse_undecodable(url: str) -> None:
    """A server URL must be text the driver can send: bytes that are not UTF-8 (an undecodable
    command-line argument arrives as lone surrogates) are refused here with a one-line error."""
    try:
        url.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        return
    where = ""
    try:
        parsed = make_url(url)
    except sa.exc.ArgumentError:  # not a URL SQLAlchemy parses: the URL as a whole is to blame
        parsed = None
    if parsed is not None:
        query = " ".join(
            f"{key} {' '.join(value) if isinstance(value, tuple) else value}" for key, value in parsed.query.items()
        )
        parts = {
            "user name": parsed.username,
            "password": parsed.password,
            "host": parsed.host,
            "database name": parsed.database,
            "query": query,
        }
        where = next((f"'s {name}" for name, value in parts.items() if value and not _is_utf8(value)), "")
    raise InvalidArgument("url", f"the database URL{where} holds bytes that are not UTF-8")


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


UNBOUNDED = -1
"""The pool's ``max_overflow``: no limit. Each thread that uses a store (an app's, or an
``AsyncStore`` worker, transaction or stream) holds one connection for its life, so a limit
would make the next thread wait out the pool's timeout and fail; ended threads' connections
are taken back before a new one is opened."""


def create_engine(url: str | None = None, *, pragmas: Mapping[str, Any] | None = None, echo: bool = False) -> Engine:
    """An Engine for ``url`` with turnstore's connection settings.

    ``pragmas`` overrides :data:`SQLITE_PRAGMAS` key by key (SQLite only; a
    PostgreSQL store ignores them, so one app's code opens either).

    Raises:
        InvalidArgument: a pragma SQLite does not take (:mod:`turnstore.pragmas`), a URL of
            another database than SQLite or PostgreSQL, or a PostgreSQL URL without its driver.
    """
    resolved = resolve_url(url)
    backend = make_url(resolved).get_backend_name()
    if backend == "sqlite":
        merged = {**SQLITE_PRAGMAS, **check_pragmas(pragmas or {})}
        # busy_timeout goes first whatever the caller's order: later pragmas may need to wait.
        ordered = {"busy_timeout": merged.pop("busy_timeout"), **merged}
        return _sqlite_engine(resolved, ordered, echo)
    if backend != "postgresql":
        raise InvalidArgument("url", f"turnstore keeps its data in SQLite or PostgreSQL, not {backend!r}")
    try:
        return sa.create_engine(resolved, echo=echo, pool_pre_ping=True, max_overflow=UNBOUNDED)
    except ImportError as error:
        raise InvalidArgument(
            "url", f"PostgreSQL needs its driver ({error.name or error}): pip install 'turnstore[postgres]'"
        ) from None


def _sqlite_engine(url: str | sa.URL, pragmas: Mapping[str, Any], echo: bool, begin: str = "BEGIN IMMEDIATE") -> Engine:
    path = sqlite_path(url)
    if path is not None:
        _create_private_file(path)
    engine = sa.create_engine(
        url,
        echo=echo,
        connect_args={"check_same_thread": False},
        **({"max_overflow": UNBOUNDED} if sqlite_file(url) is not None else {}),  # in memory: one per thread
    )

    @sa.event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # turnstore issues BEGIN itself; the driver's implicit transactions would fight that.
        dbapi_connection.isolation_level = None
        for name, value in pragmas.items():
            if name == "journal_mode":
                _set_journal_mode(dbapi_connection, str(value), int(pragmas.get("busy_timeout", 5000)))
            else:
                dbapi_connection.execute(f"PRAGMA {name}={_pragma_value(value)}")

    @sa.event.listens_for(engine, "begin")
    def _on_begin(connection: sa.Connection) -> None:
        # Transactions run through SQLAlchemy here are schema work: take the write lock up front
        # (a reader's engine only reads the schema, and begins a plain read transaction).
        connection.exec_driver_sql(begin)

    return engine


def _set_journal_mode(connection: Any, mode: str, timeout_ms: int) -> None:
    """Switch the journal mode, waiting out other writers.

    SQLite does not call the busy handler for a journal-mode change, so a new
    file being opened while another process writes to it would fail at once;
    retry until the busy timeout instead. A file already in the mode is left alone.
    """
    wanted = _pragma_value(mode).lower()
    if str(connection.execute("PRAGMA journal_mode").fetchone()[0]).lower() == wanted:
        return
    deadline = time.monotonic() + timeout_ms / 1000
    delay = 0.002
    while True:
        try:
            connection.execute(f"PRAGMA journal_mode={wanted}")
            return
        except sqlite3.OperationalError as error:
            if ("locked" not in str(error) and "busy" not in str(error)) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def _pragma_value(value: Any) -> str:
    text = str(value)
    if not text.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"invalid SQLite pragma value: {value!r}")
    return text


def _create_private_file(path: Path) -> None:
    """Create the database file (and its folder) with owner-only permissions if it does not exist."""
    if path.exists():
        return
    missing = [folder for folder in path.absolute().parents if not folder.exists()]
    for folder in reversed(missing):  # folders turnstore creates are the owner's only, whatever the umask
        folder.mkdir(mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.close(fd)


# SQLite's primary result codes that say the storage, not the statement, failed (or stayed locked:
# a statement the store does not retry for ``busy_budget``, such as opening a store another writer holds).
_SQLITE_READONLY, _SQLITE_IOERR, _SQLITE_CORRUPT, _SQLITE_FULL, _SQLITE_CANTOPEN, _SQLITE_NOTADB = 8, 10, 11, 13, 14, 26
_SQLITE_BUSY = 5

_SQLITE_KINDS: dict[int, tuple[type[Exception], str]] = {
    _SQLITE_BUSY: (StoreBusy, "the database{place} stayed locked by another writer"),
    _SQLITE_READONLY: (ReadOnlyStore, "the database{place} is read-only"),
    _SQLITE_FULL: (StorageFull, "the disk of the database{place} is full, or the database reached its size limit"),
    _SQLITE_IOERR: (StorageError, "disk I/O error on the database{place}"),
    _SQLITE_CANTOPEN: (StorageError, "cannot open the database file{place}"),
    _SQLITE_CORRUPT: (StorageError, "the database file{place} is damaged"),
    _SQLITE_NOTADB: (NotAStore, "the file{place} is not a SQLite database"),
}

# The same errors as SQLite words them, for Pythons whose sqlite3 errors carry no code (before 3.11).
_SQLITE_MESSAGES = {
    "database is locked": _SQLITE_BUSY,
    "readonly database": _SQLITE_READONLY,
    "disk is full": _SQLITE_FULL,
    "disk i/o error": _SQLITE_IOERR,
    "unable to open database": _SQLITE_CANTOPEN,
    "disk image is malformed": _SQLITE_CORRUPT,
    "file is not a database": _SQLITE_NOTADB,
}

# PostgreSQL SQLSTATEs of the same kinds.
_SQLSTATE_KINDS: dict[str, tuple[type[Exception], str]] = {
    "25006": (ReadOnlyStore, "the database{place} is read-only"),
    "53100": (StorageFull, "the disk of the database server{place} is full"),
    "58030": (StorageError, "I/O error on the database server{place}"),
}


def storage_error(error: BaseException, where: str | sa.URL | None = None) -> Exception | None:
    """The typed turnstore error for a driver error that says the storage failed (or stayed locked), else None.

    ``error`` may be the driver's own (``sqlite3``, psycopg) or SQLAlchemy's
    wrapper of it; ``where`` (a path or URL) is named in the message. The
    result is one line.
    """
    original = getattr(error, "orig", None) or error
    kind: tuple[type[Exception], str] | None = None
    if isinstance(original, sqlite3.Error):
        code = getattr(original, "sqlite_errorcode", None)
        if code is None:
            text = str(original).lower()
            code = next((value for words, value in _SQLITE_MESSAGES.items() if words in text), None)
        kind = _SQLITE_KINDS.get(code & 0xFF) if code is not None else None
    else:
        sqlstate = str(getattr(original, "sqlstate", "") or "")
        kind = _SQLSTATE_KINDS.get(sqlstate)
        if kind is None and _cannot_connect(original, sqlstate):
            kind = (StorageError, "cannot connect to the database server{place}")
    if kind is None:
        return None
    cls, summary = kind
    reason = " ".join(str(original).split()) or type(original).__name__
    place = f" {describe(where)}" if where is not None else ""
    return cls(f"{summary.format(place=place)} ({reason})")


def _cannot_connect(error: BaseException, sqlstate: str) -> bool:
    """Whether a PostgreSQL driver error says the server could not be reached or refused the login
    (no SQLSTATE: the connection failed before one; class 08: connection; 28: authorization;
    3D000: no such database)."""
    if not type(error).__module__.startswith("psycopg") or type(error).__name__ != "OperationalError":
        return False
    return not sqlstate or sqlstate.startswith(("08", "28")) or sqlstate == "3D000"


def describe(url: str | sa.URL | os.PathLike[str]) -> str:
    """A database for messages: its file for SQLite, its URL with the password masked otherwise."""
    if isinstance(url, os.PathLike):
        return os.fspath(url)
    try:
        parsed = make_url(url)
    except Exception:  # a bare path or something SQLAlchemy does not parse: shown as given
        return str(url)
    path = sqlite_file(parsed)
    if path is not None:
        return str(path)
    secrets = {key: "***" for key in parsed.query if key.lower() in SECRET_QUERY_KEYS}
    return parsed.update_query_dict(secrets).render_as_string(hide_password=True)


SECRET_QUERY_KEYS = frozenset({"password", "sslpassword"})
"""Query parameters of a server URL that hold a password (libpq takes ``?password=``); masked like the password."""


def holds_secret(url: str | sa.URL) -> bool:
    """Whether a URL carries a password, in its user part or its query."""
    parsed = make_url(url)
    return parsed.password is not None or any(key.lower() in SECRET_QUERY_KEYS for key in parsed.query)
