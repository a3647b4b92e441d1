"""SQLite sources: a framework's database file, recognised by its header and opened read-only.

appam, ADK, LangChain, the OpenAI Agents SDK and Tau keep their sessions in
SQLite files. An importer opens one with :func:`open_sqlite` (``?mode=ro``:
never created, never changed) or asks :func:`sqlite_accepts` whether a file is
its own. Damage of any kind (a file that is not SQLite, a damaged schema, text
that is not UTF-8) comes out as ``sqlite3.Error`` (:data:`SQLITE_ERRORS`) or
:class:`~turnstore.errors.InvalidRecord` naming the file, never as a crash.

A source file is hostile input, and SQLite can make much out of little: a
view, a generated column or a virtual table computes its values when read
(``printf('%.*c', 1000000000, 'x')`` in an 8 KB file is a gigabyte a row).
So the tables an importer reads must be plain tables: a view, a virtual
table, a generated or hidden column, or a trigger on one of them (no
framework's schema has any) refuses the file before a row is read
(:meth:`SqliteSource.refuse_computed`). Rows are read through
:meth:`SqliteSource.rows`, which measures each value in SQL before fetching
it: a value over :data:`MAX_VALUE_BYTES` is never fetched, and its row is an
invalid record; and the values read from one file may not add up to more
bytes than the file (and its write-ahead log) hold. The connection itself is
held to SQLite's per-connection limits (:func:`connect_read_only`).
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from ..errors import InvalidRecord
from .files import open_source
from .reading import MAX_WHOLE_FILE_BYTES

__all__ = [
    "MAX_VALUE_BYTES",
    "SQLITE_ERRORS",
    "SqliteSource",
    "connect_read_only",
    "is_sqlite",
    "open_sqlite",
    "sqlite_accepts",
    "table_names",
]

_T = TypeVar("_T")

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""

SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError)
"""What reading a damaged SQLite source can raise: the driver's errors, and ``UnicodeDecodeError``
when an error message of SQLite's quotes bytes of the file that are not UTF-8 (a damaged schema)."""


def is_sqlite(path: Path) -> bool:
    """Whether the file starts with SQLite's header (False when it cannot be read)."""
    try:
        with open_source(path) as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


MAX_VALUE_BYTES = MAX_WHOLE_FILE_BYTES
"""Largest value (TEXT or BLOB, in bytes) of a SQLite source's row that an importer fetches: a value
(a message, an event, appam's whole session) is parsed at once, like a whole-file JSON source."""

MAX_SCHEMA_SQL = 1 << 20
"""Longest statement of a source's schema (``sqlite_master.sql``) SQLite parses for an importer."""

_LIMIT_LENGTH, _LIMIT_SQL_LENGTH, _LIMIT_EXPR_DEPTH, _LIMIT_COMPOUND_SELECT, _LIMIT_ATTACHED = 0, 1, 3, 4, 7
"""SQLite's ``SQLITE_LIMIT_*`` codes (part of its C API; the ``sqlite3`` module names them from Python 3.11)."""

_SQL_LIMITS = (
    (_LIMIT_SQL_LENGTH, MAX_SCHEMA_SQL),
    (_LIMIT_EXPR_DEPTH, 200),
    (_LIMIT_COMPOUND_SELECT, 64),
    (_LIMIT_ATTACHED, 0),
)


def connect_read_only(path: Path) -> sqlite3.Connection:
    """Open a SQLite database read-only (an ``?mode=ro`` URI), never creating or changing it.

    TEXT values that are not valid UTF-8 raise ``sqlite3.DataError`` when read,
    like any other damage the readers report, not ``UnicodeDecodeError``.

    The connection is the importer's own, so SQLite's per-connection limits
    are set on it: no string or BLOB longer than twice :data:`MAX_VALUE_BYTES`
    (the measuring of a value over the limit stays possible; anything larger
    fails the statement with "string or blob too big"), no schema statement
    longer than :data:`MAX_SCHEMA_SQL`, shallow expressions, no attached
    database (on Python 3.11 and later, whose ``sqlite3`` can set them);
    ``query_only`` on, and ``trusted_schema`` off (the schema may call no
    function that has side effects).

    Raises:
        sqlite3.Error: it cannot be opened.
    """
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        connection.text_factory = _decode_text
        setlimit = getattr(connection, "setlimit", None)  # Python 3.11 and later
        if setlimit is not None:
            setlimit(_LIMIT_LENGTH, 2 * MAX_VALUE_BYTES)
            for limit, value in _SQL_LIMITS:
                setlimit(limit, value)
        connection.execute("PRAGMA query_only = ON")
        connection.execute("PRAGMA trusted_schema = OFF")
    except BaseException:
        connection.close()
        raise
    return connection


def table_names(connection: sqlite3.Connection) -> set[str]:
    """The names of a database's tables and views (an importer that finds its table to be a view
    refuses the file, :meth:`SqliteSource.refuse_computed`, rather than passing it over)."""
    query = "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
    return {row[0] for row in connection.execute(query)}


def sqlite_accepts(path: Path, test: Callable[[sqlite3.Connection], bool]) -> bool:
    """Whether ``path`` is a SQLite database for which ``test(connection)`` holds; False on any read error."""
    if not is_sqlite(path):
        return False
    try:
        connection = _open_sqlite(path)
    except (OSError, InvalidRecord):
        return False
    try:
        return test(connection)
    except SQLITE_ERRORS:
        return False
    finally:
        connection.close()


@contextmanager
def open_sqlite(
    path: Path, schema: Callable[[sqlite3.Connection], _T], reads: Callable[[_T], Iterable[str]]
) -> Iterator[tuple[SqliteSource, _T]]:
    """The database at ``path`` opened read-only (rows as :class:`sqlite3.Row`), and ``schema(connection)``
    (what the importer needs to know of its tables); closed on leaving the block.

    ``reads(found)`` names the tables the importer will read; each must be a
    plain table (:meth:`SqliteSource.refuse_computed`) before the block runs.

    Raises:
        InvalidRecord: the file cannot be opened as SQLite, ``schema`` fails
            (not a readable SQLite database), or a table it reads computes its values.
    """
    connection = _open_sqlite(path)
    try:
        source = SqliteSource(connection, path)
        try:
            found = schema(connection)
            source.refuse_computed(reads(found))
        except SQLITE_ERRORS as error:
            raise InvalidRecord(str(path), f"not a readable SQLite database: {error}") from None
        yield source, found
    finally:
        connection.close()


class SqliteSource:
    """One SQLite source file, open read-only, read within bounds (see the module docstring).

    Attributes:
        connection: the importer's own read-only connection.
        path: the file.
        holds: bytes the file and its write-ahead log take on disk: no stored
            value can be larger, nor all the values read from it together.
        read: bytes of TEXT and BLOB values read so far.
    """

    def __init__(self, connection: sqlite3.Connection, path: Path) -> None:
        self.connection = connection
        self.path = path
        self.holds = _disk_bytes(path)
        self.read = 0
        self._columns: dict[str, list[str]] = {}

    def refuse_computed(self, tables: Iterable[str]) -> None:
        """Refuse the file unless each of ``tables`` is a plain table: not a view, not a virtual table,
        no generated or hidden column (``PRAGMA table_xinfo``: ``hidden`` is not 0), no trigger.

        Reading a table never fires a trigger; but none of the frameworks' schemas has one, so a
        trigger on a table the importer reads means the file was made by something else.

        Raises:
            InvalidRecord: naming the file and the table or column, before any row is read.
            sqlite3.Error: the schema cannot be read.
        """
        for table in dict.fromkeys(tables):
            place = f"{self.path}: {table}"
            found = self.connection.execute(
                "SELECT type, sql FROM sqlite_master WHERE type IN ('table', 'view') AND name = ? COLLATE NOCASE",
                (table,),
            ).fetchone()
            if found is None:
                continue
            kind, sql = found
            if kind == "view":
                raise InvalidRecord(place, "is a view, whose values are computed when read: only a table is read")
            if isinstance(sql, str) and _VIRTUAL.match(sql):
                raise InvalidRecord(
                    place, "is a virtual table, whose values are computed when read: only a table is read"
                )
            columns = []
            for _, name, _, _, _, _, hidden in self.connection.execute(f"PRAGMA table_xinfo({quote(table)})"):
                if hidden:
                    what = "a generated column, computed when read" if hidden in (2, 3) else "a hidden column"
                    raise InvalidRecord(f"{place}.{name}", f"is {what}: only stored columns are read")
                columns.append(str(name))
            trigger = self.connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = ? COLLATE NOCASE", (table,)
            ).fetchone()
            if trigger is not None:
                raise InvalidRecord(place, f"has a trigger ({trigger[0]}), which no framework's schema has: not read")
            self._columns[table] = columns

    def columns(self, table: str) -> list[str]:
        """The columns of a table :meth:`refuse_computed` checked, in order (what ``SELECT *`` reads)."""
        return list(self._columns[table])

    def rows(
        self,
        table: str,
        columns: Sequence[str],
        rest: str = "",
        params: Sequence[Any] = (),
        *,
        rowid: str | None = None,
        as_blob: Collection[str] = (),
    ) -> Iterator[tuple[dict[str, Any], str | None]]:
        """``(values, problem)`` for each row of ``SELECT columns FROM table rest`` (``rest``: WHERE,
        ORDER BY, with ``params``); the table's ``rowid`` too, under the key ``rowid`` when given.

        Each TEXT or BLOB value is measured in SQL first (its bytes, without reading it where
        SQLite can) and fetched only within :data:`MAX_VALUE_BYTES`: over it, the value is None
        and ``problem`` says which column and how large (the importer reports the row as an
        invalid record at its place). Columns in ``as_blob`` come as bytes (``CAST AS BLOB``).

        Raises:
            InvalidRecord: the values read from this file add up to more bytes than it holds
                (values made up when read, not stored).
            sqlite3.Error: the table cannot be read.
        """
        limit = MAX_VALUE_BYTES
        select = [f"rowid AS {quote(rowid)}"] if rowid is not None else []
        for column in columns:
            name = quote(column)
            size = _size(name)
            value = f"CAST({name} AS BLOB)" if column in as_blob else name
            select.append(f"{size}, CASE WHEN {size} <= {limit} THEN {value} END AS {name}")
        query = f"SELECT {', '.join(select)} FROM {quote(table)} {rest}"
        first = 1 if rowid is not None else 0
        for row in self.connection.execute(query, tuple(params)):
            values: dict[str, Any] = {rowid: row[0]} if rowid is not None else {}
            problem = None
            for index, column in enumerate(columns):
                size, value = row[first + 2 * index], row[first + 2 * index + 1]
                if size > limit:
                    problem = problem or f"{column} is {size} bytes, over the limit of {limit} bytes for a value"
                else:
                    self.read += size
                values[column] = value
            if self.read > self.holds:
                raise InvalidRecord(
                    f"{self.path}: {table}",
                    f"the values read add up to more than the {self.holds} bytes the file holds "
                    "(values made up when read, not stored): not read further",
                )
            yield values, problem


def quote(name: str) -> str:
    """An SQL identifier, quoted (a table or column name as the schema spells it)."""
    return '"' + name.replace('"', '""') + '"'


def _size(column: str) -> str:
    """SQL for the bytes of a column's TEXT or BLOB value (0 for a number or NULL).

    ``octet_length`` (SQLite 3.43) reads only the record's header; before it, a BLOB's
    ``length`` does too, and a TEXT's bytes are counted in SQLite's memory (held to the
    connection's length limit), never in Python's.
    """
    if _OCTET_LENGTH:
        return f"(CASE WHEN typeof({column}) IN ('text', 'blob') THEN octet_length({column}) ELSE 0 END)"
    return (
        f"(CASE typeof({column}) WHEN 'blob' THEN length({column}) "
        f"WHEN 'text' THEN length(CAST({column} AS BLOB)) ELSE 0 END)"
    )


_OCTET_LENGTH = sqlite3.sqlite_version_info >= (3, 43, 0)
_VIRTUAL = re.compile(r"\s*CREATE\s+VIRTUAL\b", re.IGNORECASE)


def _disk_bytes(path: Path) -> int:
    """What a database file and its write-ahead log (``-wal``, where there is one) take on disk."""
    total = 0
    for part in (path, path.with_name(f"{path.name}-wal")):
        try:
            total += part.stat().st_size
        except OSError:
            pass
    return total


def _open_sqlite(path: Path) -> sqlite3.Connection:
    try:
        connection = connect_read_only(path)
    except SQLITE_ERRORS as error:
        raise InvalidRecord(str(path), f"cannot open as SQLite: {error}") from None
    connection.row_factory = sqlite3.Row
    return connection


def _decode_text(data: bytes) -> str:
    """A TEXT value as str; invalid UTF-8 (a damaged file) raises a ``sqlite3.Error``, which
    the readers already turn into an error naming the file and table."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise sqlite3.DataError(f"text is not valid UTF-8 ({error.reason} at byte {error.start})") from None
