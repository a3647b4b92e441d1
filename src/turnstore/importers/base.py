"""What every importer shares: the bundle it produces, the report, and the places records are named by.

An importer reads a source with plain JSON or SQL (never through today's
models of another framework) and turns each session it finds into a
:class:`SessionBundle`: the session, its loops and its messages, each message
already validated as a turnstore model and carrying its verbatim source
record. A malformed record becomes a :class:`RecordError` naming its place
(``file:line``, ``file: record N``, ``table id=...``); the bundle is then
marked invalid unless skipping is allowed, and the writer leaves it out.

Reading a source file's text (whole, by line, as JSON) is :mod:`turnstore.importers.reading`;
times and timestamps, and the small conversions more than one format needs, live here;
SQLite sources (appam, ADK, LangChain, OpenAI Agents SDK, Tau) are opened by
:mod:`turnstore.importers.sqlite_source`. How a
source's records become loops is in :mod:`turnstore.importers.derive` (linear
histories) and :mod:`turnstore.importers.tree` (entry trees).
"""

from __future__ import annotations

import hashlib
import json
import mimetypes
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from operator import attrgetter
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from ..errors import InvalidMessage, InvalidRecord
from ..ids import session_of_loop_id
from ..limits import Limits
from ..models import AGENT_MESSAGE, ExtensionMessage, Message, Usage

__all__ = [
    "ImportOptions",
    "ImportReport",
    "Importer",
    "LoopRow",
    "MessageRow",
    "RecordError",
    "SessionBundle",
    "first_turn_session",
    "guess_mime_type",
    "one_line",
    "path_stem",
    "path_text",
    "str_or_none",
    "time_ms",
]


@dataclass(slots=True)
class MessageRow:
    """One message to write: where it goes and the record it came from."""

    message: Message | ExtensionMessage | SpilledMessage
    loop_id: str
    turn_index: int | None
    source: str | None = None
    """The verbatim source record (the JSONL line, or the record's JSON)."""
    usage: Usage | None = None
    """Usage carried by a non-assistant record (a compaction summary, a tool's nested model call)."""
    priced_as: tuple[str | None, str | None] = (None, None)
    """(model, provider) that produced ``usage``, for pricing it."""
    timestamp: int | None = None
    """Unix ms of a record whose message has no timestamp of its own (extension messages)."""
    usage_known: bool = True
    """False when the source recorded no usage for this assistant message (appam, OpenAI Agents):
    its usage columns stay NULL, so the loop's reported usage counts instead of zeros."""
    ref: str | None = None
    """The source's own id for this record (pi/Tau entry id), for fork points."""
    place: str | None = None
    """Where the record is (``file:line``, ``file: record N``, ``table id=...``), for an error found on writing."""
    params: dict[str, Any] | None = field(default=None, repr=False)
    """The row's column values, once :func:`~turnstore.repositories.imports.screen_messages` has checked it."""


@dataclass(slots=True)
class SpilledMessage:
    """Stands in for a message of a large session whose row waits on disk (:mod:`turnstore.importers.spill`).

    It holds what building loops and turns, counting and dating read of a
    message; the row itself is read back when the session is written.
    """

    role: str
    kind: str | None
    model: str | None
    provider: str | None
    timestamp: int
    asks_tools: bool
    at: int = -1
    """Where the row starts in the spill file; -1 when the message cannot be stored (see ``reason``)."""
    size: int = 0
    reason: str | None = None
    """Why the store cannot hold the message (reported when the session is screened)."""


@dataclass(slots=True)
class LoopRow:
    """One loop to write."""

    loop_id: str
    parent_loop_id: str | None = None
    continuation_kind: str = "initial"
    fork_after: int | None = None
    """Index into the bundle's messages of the fork point (resolved to an id on write)."""
    keep_from: int | None = None
    """Index into the bundle's messages of the first kept message (compaction loops)."""
    config: dict[str, Any] | None = None
    status: str = "completed"
    started_at: datetime | None = None
    ended_at: datetime | None = None
    spawn_loop_id: str | None = None
    spawn_tool_call_id: str | None = None
    reported_usage: Usage | None = None
    reported_requests: int | None = None
    """How many model calls ``reported_usage`` covers (appam ``request_count``, OpenAI Agents ``requests``)."""
    metadata: dict[str, Any] | None = None
    source: str | None = None


@dataclass
class SessionBundle:
    """Everything one imported session becomes, written in one transaction."""

    session_id: str
    origin: str
    agent_id: str | None = None
    title: str | None = None
    metadata: dict[str, Any] | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    source: str | None = None
    loops: list[LoopRow] = field(default_factory=list)
    messages: list[MessageRow] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)
    notes: list[RecordError] = field(default_factory=list)
    """What was kept without being read, or not imported, though nothing is wrong (not errors)."""
    records: int = 0
    """Source records read for this session (lines, array items, rows)."""
    digest_parts: list[str] = field(default_factory=list)
    source_format: str | None = None
    """Format of the kept source records, when it is not the importer's own (turnstore re-imports)."""
    hash_format: str | None = None
    """The format the digest is for, when the importer names it on creating the bundle: each
    record is then hashed as it is added (:meth:`add_source`) and not kept."""
    _digests: dict[str, tuple[int, str]] = field(default_factory=dict, repr=False)
    _hasher: Any = field(default=None, repr=False)
    spill: Any = field(default=None, repr=False)
    """The :class:`~turnstore.importers.spill.Spill` holding the rows of spilled messages, if any."""

    def __post_init__(self) -> None:
        self.origin = path_text(self.origin)
        if self.hash_format is not None:
            self._hasher = hashlib.sha256(self.hash_format.encode())

    def add_source(self, text: str) -> None:
        """Feed a source record into the session's digest (hashed now when :attr:`hash_format` is set)."""
        if self._hasher is not None:
            self._hasher.update(f"\x1e{text}".encode("utf-8", "surrogatepass"))
        else:
            self.digest_parts.append(text)

    def digest(self, fmt: str) -> str:
        """sha256 of the format and every source record: equal digest, same import (computed once).

        The value is the same whether the records were hashed as they came
        (:attr:`hash_format`) or kept and hashed here.

        Raises:
            ValueError: the records were hashed as they came, for another format.
        """
        if self._hasher is not None:
            if fmt != self.hash_format:
                raise ValueError(f"the records of {self.origin} were hashed as {self.hash_format!r}, not {fmt!r}")
            return str(self._hasher.hexdigest())
        cached = self._digests.get(fmt)
        if cached is None or cached[0] != len(self.digest_parts):
            count = len(self.digest_parts)
            cached = self._digests[fmt] = (count, digest_of(fmt, self.digest_parts))
        return cached[1]

    def release(self) -> list[Any]:
        """Take the messages and the source records out of a written bundle, for the writer to free.

        The digests worked out so far stay: :meth:`digest` goes on answering them.
        """
        taken: list[Any] = [self.messages, self.digest_parts]
        self.messages, self.digest_parts = [], []
        self._digests = {fmt: (0, value) for fmt, (_, value) in self._digests.items()}
        return taken


_MESSAGE_OF = attrgetter("message")


def digest_of(fmt: str, parts: list[str]) -> str:
    """sha256 of a format and its source records: what :meth:`SessionBundle.digest` answers for them."""
    hasher = hashlib.sha256(fmt.encode())
    if parts:  # each record after a \x1e, hashed in one piece (joined once: no copy of a copy)
        hasher.update("\x1e".join(["", *parts]).encode("utf-8", "surrogatepass"))
    return hasher.hexdigest()


@dataclass(frozen=True)
class RecordError:
    """A source record that could not be imported, and where it is (or, in a report's notes, what an import
    kept without reading, and where)."""

    place: str
    reason: str

    def __str__(self) -> str:
        """``place: reason`` on one line (a file name or a quoted value may hold line breaks)."""
        return one_line(f"{self.place}: {self.reason}")


_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def path_text(text: str) -> str:
    """A file name as text the store can hold: the bytes of a name that is not UTF-8 (which Python
    keeps as lone surrogates, ``os.fsdecode``) written as ``\\xNN``; any other name unchanged."""
    return _ESCAPED_BYTE.sub(lambda found: f"\\x{ord(found.group()) - 0xDC00:02x}", text)


def path_stem(path: Path) -> str:
    """The name of ``path`` without its suffix, as :func:`path_text` (a session id derived from a file name)."""
    return path_text(path.stem)


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` with control characters and line separators escaped (``\\n``, ``\\x1b``, ``\\u2028``):
    a report line names hostile file names and values, and stays one line that cannot move the terminal."""
    return _CONTROL.sub(lambda found: found.group().encode("unicode_escape").decode("ascii"), text)


@dataclass
class ImportOptions:
    """How an import runs."""

    dry_run: bool = False
    skip_invalid: bool = False
    replace: bool = False
    session_id: str | None = None
    """Session id for sources that name none (phi-core arrays, yoagent, clark)."""
    limits: Limits | None = None
    """The store's limits, which large sessions are screened against as they are read (set by the import)."""
    row_values: RowValues | None = None
    """How a message becomes its row's column values, held to ``limits`` (the writer's, set by the import).
    Large sessions are spilled as they are read only when both are set."""

    @property
    def spills(self) -> bool:
        """Whether a large session's rows may wait on disk as they are read (:mod:`turnstore.importers.spill`)."""
        return self.limits is not None and self.row_values is not None


RowValues = Callable[["MessageRow", Limits], dict[str, Any]]
"""A message row's column values, its message dumped and held to the limits (raises InvalidMessage)."""


@dataclass(frozen=True)
class Counts:
    """What one bundle adds to an :class:`ImportReport`."""

    messages: int
    loops: int
    roles: Counter[str]
    kinds: Counter[str]


@dataclass
class ImportReport:
    """What an import did: counted per record, per message role or kind, per session."""

    format: str
    dry_run: bool = False
    files: int = 0
    records: int = 0
    messages: int = 0
    loops: int = 0
    by_role: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    sessions_written: list[str] = field(default_factory=list)
    sessions_unchanged: list[str] = field(default_factory=list)
    sessions_failed: list[str] = field(default_factory=list)
    skipped: list[RecordError] = field(default_factory=list)
    errors: list[RecordError] = field(default_factory=list)
    notes: list[RecordError] = field(default_factory=list)
    """Per file: what was kept without being read, or not imported, though nothing is wrong."""

    @property
    def ok(self) -> bool:
        """True when no session was left out because of an error."""
        return not self.errors and not self.sessions_failed

    @staticmethod
    def counts(bundle: SessionBundle) -> Counts:
        """A bundle's messages and loops, counted (before writing it: the writer lets its messages go)."""
        compact = getattr(bundle.messages, "counts", None)
        if compact is not None:  # a large session's rows, kept as columns (turnstore.importers.spill.SpilledRows)
            spilled_roles, spilled_kinds = compact()
            return Counts(len(bundle.messages), len(bundle.loops), spilled_roles, spilled_kinds)
        messages = list(map(_MESSAGE_OF, bundle.messages))
        classes = Counter(map(type, messages))  # counted at C speed; then a plain str per class
        roles: Counter[str] = Counter()
        kinds: Counter[str] = Counter()
        for cls, count in classes.items():
            if cls is not SpilledMessage:
                roles[cls.ROLE] += count  # type: ignore[attr-defined]  # every message class declares ROLE
        if SpilledMessage in classes:
            spilled = [message for message in messages if type(message) is SpilledMessage and message.at >= 0]
            roles.update(message.role for message in spilled)
            kinds.update(message.kind for message in spilled if message.kind is not None)
        if ExtensionMessage in classes:
            kinds.update(message.kind for message in messages if type(message) is ExtensionMessage)
        return Counts(len(messages), len(bundle.loops), roles, kinds)

    def add(self, counts: Counts) -> None:
        """Add a written bundle's :meth:`counts` to the report."""
        self.messages += counts.messages
        self.loops += counts.loops
        self.by_role.update(counts.roles)
        self.by_kind.update(counts.kinds)

    def as_dict(self) -> dict[str, Any]:
        """The report as JSON-ready data (``--json``)."""
        return {
            "format": self.format,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "files": self.files,
            "records": self.records,
            "messages": self.messages,
            "loops": self.loops,
            "by_role": dict(sorted(self.by_role.items())),
            "by_kind": dict(sorted(self.by_kind.items())),
            "sessions": {
                "written": self.sessions_written,
                "unchanged": self.sessions_unchanged,
                "failed": self.sessions_failed,
            },
            "skipped": [{"place": e.place, "reason": e.reason} for e in self.skipped],
            "errors": [{"place": e.place, "reason": e.reason} for e in self.errors],
            "notes": [{"place": e.place, "reason": e.reason} for e in self.notes],
        }


class Importer(Protocol):
    """One source format: turns files (or databases) into session bundles."""

    format: str
    """The FORMAT name on the command line."""

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """Every session in ``path`` (a file of this format); malformed records go into ``bundle.errors``."""
        ...

    def accepts(self, path: Path) -> bool:
        """Whether a file found while walking a directory is a source of this format."""
        ...


# --- reading sources ------------------------------------------------------------


def parse_agent_message(data: Any, place: str) -> Message | ExtensionMessage:
    """Validate a canonical (phi-core) message record.

    Raises:
        InvalidRecord: naming ``place`` and the failing fields.
    """
    if not isinstance(data, dict):
        raise InvalidRecord(place, f"expected a JSON object, got {type(data).__name__}")
    try:
        message: Message | ExtensionMessage = AGENT_MESSAGE.validate_python(data)
        return message
    except ValidationError as error:
        raise InvalidRecord(place, str(InvalidMessage.from_pydantic(error))) from None
    except RecursionError:
        raise InvalidRecord(place, "message nested too deeply") from None


def compact(data: Any) -> str:
    """A record's JSON in compact form (the verbatim store for records of whole-file JSON)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 string, unix seconds (float) or unix milliseconds (int > 10^11) as aware UTC."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = value / 1000 if value > 100_000_000_000 else value
        try:
            return datetime.fromtimestamp(seconds, tz=timezone.utc)
        except (OverflowError, OSError, ValueError):
            return None
    if isinstance(value, str):
        text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
        if "." in text:  # Python keeps microseconds; trim nanoseconds
            head, _, tail = text.partition(".")
            digits = "".join(ch for ch in tail if ch.isdigit())
            zone = tail[len(digits) :]
            text = f"{head}.{digits[:6]}{zone}"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)
    return None


def ms_timestamp(value: Any) -> int:
    """A message timestamp as integer unix milliseconds: ints are already ms, floats are seconds
    (×1000), strings are RFC 3339; missing (or unreadable) is 0, never invented."""
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return round(value * 1000)
    return time_ms(value)


def time_ms(value: Any) -> int:
    """:func:`parse_time` of ``value`` as integer unix milliseconds; 0 when it is missing or unreadable."""
    parsed = parse_time(value)
    return int(parsed.timestamp() * 1000) if parsed is not None else 0


def iter_records(values: Iterable[Any]) -> Iterator[tuple[int, Any]]:
    """``(record number from 1, value)`` pairs."""
    return enumerate(values, start=1)


def str_or_none(value: Any) -> str | None:
    """``value`` when it is a string, else None (an optional text field of parsed JSON)."""
    return value if isinstance(value, str) else None


def guess_mime_type(url: str) -> str | None:
    """The MIME type a URL's or file name's extension suggests (its query string ignored); None when unknown."""
    return mimetypes.guess_type(url.split("?")[0])[0] if url else None


def first_turn_session(messages: Iterable[Message | ExtensionMessage]) -> str | None:
    """The session part of the first ``turnId`` among ``messages``, if any (for sources that name no session)."""
    for message in messages:
        turn = message.turn_id()
        if turn is not None:
            return session_of_loop_id(turn.loop_id)
    return None


# --- SQLite sources (appam, OpenAI Agents SDK, Tau) ------------------------------------------------
