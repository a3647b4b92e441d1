"""Every error turnstore raises on purpose.

The hierarchy::

    TurnstoreError
    ├── InvalidMessage          a message (or a loop/session value) fails validation
    │   └── TurnIdMismatch      a message's turnId disagrees with where it is appended
    ├── InvalidArgument         an argument that is not a message is wrong (names it)
    │   └── InvalidQuery        a search query that cannot be searched for (says why)
    ├── NotFound                (also a LookupError)
    │   ├── SessionNotFound
    │   ├── LoopNotFound
    │   ├── TurnNotFound
    │   ├── MessageNotFound
    │   └── MediaNotFound
    ├── AlreadyExists
    ├── LimitExceeded           a value is over a configured size limit
    ├── SchemaError
    │   ├── SchemaOutOfDate     the database needs ``turnstore db upgrade``
    │   ├── SchemaTooNew        the database was written by a newer turnstore
    │   └── NotAStore           the file or database is not a turnstore store; it is left alone
    ├── SearchUnavailable       full-text search is missing from this SQLite build (no FTS5)
    ├── StoreBusy               the database stayed locked past the retry budget (or its busy timeout)
    ├── ExportFailed            an export file could not be written (names the file and why)
    ├── StorageError            the database cannot be opened, read or written (I/O error)
    │   ├── ReadOnlyStore       a write to a database this process may only read
    │   └── StorageFull         the disk, or the database's size limit, is full
    ├── InvalidPrices           a price table or price file is malformed (also a ValueError)
    └── ImportFailed            an import source could not be read
        └── InvalidRecord       one source record is malformed (names file:line)

Catch :class:`TurnstoreError` to handle them all. Nothing raised from here
leaves a partial write behind: every write is one transaction.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = [
    "AlreadyExists",
    "ExportFailed",
    "ImportFailed",
    "InvalidArgument",
    "InvalidMessage",
    "InvalidPrices",
    "InvalidQuery",
    "InvalidRecord",
    "LimitExceeded",
    "LoopNotFound",
    "MediaNotFound",
    "MessageNotFound",
    "NotAStore",
    "NotFound",
    "ReadOnlyStore",
    "SchemaError",
    "SchemaOutOfDate",
    "SchemaTooNew",
    "SearchUnavailable",
    "SessionNotFound",
    "StorageError",
    "StorageFull",
    "StoreBusy",
    "StoreClosed",
    "TransactionOpen",
    "TurnIdMismatch",
    "TurnNotFound",
    "TurnstoreError",
]


class TurnstoreError(Exception):
    """Base of every error turnstore raises on purpose."""


class InvalidMessage(TurnstoreError, ValueError):
    """A value failed validation; ``errors`` lists each problem as ``(field path, message)``."""

    def __init__(self, message: str, errors: Iterable[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.errors = list(errors)

    @classmethod
    def from_pydantic(cls, error: Any, what: str = "message") -> InvalidMessage:
        """Build from a pydantic ``ValidationError``, naming each failing field."""
        problems = [(_field_path(item), item["msg"]) for item in error.errors(include_url=False)]
        shown = "; ".join(f"{path}: {msg}" if path else msg for path, msg in problems[:5])
        if len(problems) > 5:
            shown += f"; and {len(problems) - 5} more"
        return cls(f"invalid {what}: {shown}", problems)


class TurnIdMismatch(InvalidMessage):
    """A message's ``turnId`` names a different loop or turn than the one it is appended to."""


class InvalidArgument(TurnstoreError, ValueError):
    """An argument that is not a message is wrong: ``argument`` names it, the message says why.

    Appending to an ended loop, a branch without ``fork_after``, a fork point
    outside the parent loop, a turn index that goes backwards, deleting a
    message from the middle of a loop: nothing is written.
    """

    def __init__(self, argument: str, message: str) -> None:
        super().__init__(f"{argument}: {message}")
        self.argument = argument


class InvalidQuery(InvalidArgument):
    """A search query that cannot be searched for: an unbalanced quote, no word to find, too long.

    Nothing was searched; the message says what to change.
    """

    def __init__(self, message: str) -> None:
        super().__init__("query", message)


class SearchUnavailable(TurnstoreError):
    """Full-text search cannot run here: the SQLite library Python uses was built without FTS5.

    Everything else works; the searchable text is still recorded with each message.
    """


class NotFound(TurnstoreError, LookupError):
    """A session, loop, turn or message does not exist."""


class SessionNotFound(NotFound):
    """No session has this id."""


class LoopNotFound(NotFound):
    """No loop has this id."""


class TurnNotFound(NotFound):
    """The loop has no message in this turn."""


class MessageNotFound(NotFound):
    """No message has this id."""


class MediaNotFound(NotFound):
    """No media has this digest (``store.messages.media()``), or a stored reference lost its data."""


class AlreadyExists(TurnstoreError):
    """A session or loop with this id already exists."""


class LimitExceeded(InvalidMessage):
    """A value is larger than the store's configured limit."""


class SchemaError(TurnstoreError):
    """The database schema does not match this version of turnstore."""


class SchemaOutOfDate(SchemaError):
    """The database is behind this turnstore's schema; the message names the command to run."""


class SchemaTooNew(SchemaError):
    """The database was upgraded by a newer turnstore; this version refuses to use it."""


class NotAStore(SchemaError):
    """The database holds something other than a turnstore store (or nothing, where a store must exist).

    turnstore neither reads nor changes such a file: not even SQLite's journal mode.
    """


class StoreBusy(TurnstoreError):
    """The database stayed locked by other writers for longer than the retry budget.

    A write transaction waits ``busy_budget`` seconds, retrying its BEGIN; a
    statement turnstore does not retry (opening a store whose schema must be
    set up, say) waits SQLite's ``busy_timeout`` once.
    """


class StoreClosed(TurnstoreError, RuntimeError):
    """The store is closed, or closing: it takes no new call or transaction."""


class TransactionOpen(TurnstoreError, RuntimeError):
    """The call would wait for a transaction that only the caller itself can end (closing a store inside one)."""


class ExportFailed(TurnstoreError):
    """An export file could not be written (a full disk, a missing folder); the target is left as it was."""


class StorageError(TurnstoreError):
    """The database could not be opened, read or written: an I/O error, a damaged file, a missing folder."""


class ReadOnlyStore(StorageError):
    """A write was refused because the database is read-only (file or folder permissions, a read-only
    mount, a store opened with ``read_only=True``, a read-only PostgreSQL transaction)."""


class StorageFull(StorageError):
    """The disk holding the database is full, or the database reached its configured size limit."""


class InvalidPrices(TurnstoreError, ValueError):
    """A price table or price file is malformed: names the file, the model and the rate."""


class ImportFailed(TurnstoreError):
    """An import source could not be read at all (missing file, unknown format)."""


class InvalidRecord(ImportFailed):
    """One source record is malformed; ``place`` says where (``file:line``, ``file: record N``, ``table id=...``)."""

    def __init__(self, place: str, reason: str) -> None:
        super().__init__(f"{place}: {reason}")
        self.place = place
        self.reason = reason


_ROLE_TAGS = {"user", "assistant", "toolResult", "system", "extension"}
_CONTENT_TAGS = {"text", "image", "thinking", "toolCall", "audio", "file"}


_JSON_TAGS = {"dict", "list", "str", "int", "float", "bool", "none"}
_JSON_FIELDS = {"arguments", "data"}


def _field_path(item: Mapping[str, Any]) -> str:
    """Render a pydantic error location as ``content[0].text``.

    Tagged unions put the chosen tag into the location (``('assistant',
    'content', 0, 'toolCall', 'id')``), and JSON values put the type they tried
    (``('arguments', 'dict', 'x', 'float')``); neither is a field, so both are
    dropped. A bad or missing tag is reported as the discriminator field itself.
    """
    loc = list(item.get("loc", ()))
    if loc and loc[0] in _ROLE_TAGS:
        loc = loc[1:]
    parts: list[str] = []
    previous: object = None
    in_json = expect_type = False
    for part in loc:
        if in_json and expect_type and part in _JSON_TAGS:
            expect_type = False
            continue
        if isinstance(part, int):
            parts.append(f"[{part}]")
        elif not (isinstance(previous, int) and part in _CONTENT_TAGS and not in_json):
            parts.append(("." if parts else "") + str(part))
        if part in _JSON_FIELDS and not in_json:
            in_json = True
        expect_type = in_json
        previous = part
    path = "".join(parts)
    if item.get("type") in {"union_tag_invalid", "union_tag_not_found"}:
        tag = str(item.get("ctx", {}).get("discriminator", "role")).strip("'")
        path = f"{path}.{tag}" if path else tag
    return path
