"""SQLite sources: a framework's database file, recognised by its header and opened read-only.

appam, ADK, LangChain, the OpenAI Agents SDK and Tau keep their sessions in
SQLite files. An importer opens one with :func:`open_sqlite` (``?mode=ro``:
never created, never changed) or asks :func:`sqlite_accepts` whether a file is
its own. Damage of any kind (a file that is not SQLite, a damaged schema, text
that is not UTF-8) comes out as ``sqlite3.Error`` (:data:`SQLITE_ERRORS`) or
:class:`~turnstore.errors.InvalidRecord` naming the file, never as a crash.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ..errors import InvalidRecord

__all__ = ["SQLITE_ERRORS", "connect_read_only", "is_sqlite", "open_sqlite", "sqlite_accepts", "table_names"]

_T = TypeVar("_T")

SQLITE_HEADER = b"SQLite format 3\x00"
"""The first bytes of every SQLite database file."""

SQLITE_ERRORS = (sqlite3.Error, UnicodeDecodeError)
"""What reading a damaged SQLite source can raise: the driver's errors, and ``UnicodeDecodeError``
when an error message of SQLite's quotes bytes of the file that are not UTF-8 (a damaged schema)."""


def is_sqlite(path: Path) -> bool:
    """Whether the file starts with SQLite's header (False when it cannot be read)."""
    try:
        with path.open("rb") as file:
            return file.read(len(SQLITE_HEADER)) == SQLITE_HEADER
    except OSError:
        return False


def connect_read_only(path: Path) -> sqlite3.Connection:
    """Open a SQLite database read-only (an ``?mode=ro`` URI), never creating or changing it.

    TEXT values that are not valid UTF-8 raise ``sqlite3.DataError`` when read,
    like any other damage the readers report, not ``UnicodeDecodeError``.

    Raises:
        sqlite3.Error: it cannot be opened.
    """
    connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    connection.text_factory = _decode_text
    return connection


def table_names(connection: sqlite3.Connection) -> set[str]:
    """The names of a database's tables."""
    return {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


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
def open_sqlite(path: Path, schema: Callable[[sqlite3.Connection], _T]) -> Iterator[tuple[sqlite3.Connection, _T]]:
    """The database at ``path`` opened read-only (rows as :class:`sqlite3.Row`), and ``schema(connection)``
    (what the importer needs to know of its tables); closed on leaving the block.

    Raises:
        InvalidRecord: the file cannot be opened as SQLite, or ``schema`` fails
            (not a readable SQLite database).
    """
    connection = _open_sqlite(path)
    try:
        try:
            found = schema(connection)
        except SQLITE_ERRORS as error:
            raise InvalidRecord(str(path), f"not a readable SQLite database: {error}") from None
        yield connection, found
    finally:
        connection.close()


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
