"""``turnstore``: turnstore's own JSONL export (``turnstore export SESSION``, the default format).

One object per line: a ``session`` line opens each session, followed by its
``loop`` lines and ``message`` lines. Message ids in the file are the
exporting store's; fork points refer to them and are remapped here.
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from typing_extensions import TypedDict

from ..errors import InvalidRecord
from ..models import (
    MAX_INT,
    AgentMessage,
    ExtensionMessage,
    Message,
    Usage,
    WireAdapter,
)
from ..records import ContinuationKind, LoopStatus
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    parse_agent_message,
    parse_time,
    str_or_none,
)
from .reading import read_jsonl

__all__ = ["TurnstoreImporter"]


class _MessageLine(TypedDict, total=False):
    """A ``message`` line as this module reads it: the message typed, the rest as parsed JSON."""

    type: Any
    id: Any
    loop_id: Any
    turn_index: Any
    message: AgentMessage
    usage: Any
    priced_as: Any
    timestamp: Any
    usage_known: Any
    source: Any


_MESSAGE_LINE = WireAdapter(_MessageLine)

_MESSAGE_START = '{"type":"message",'
"""How every message line of an export starts."""


def _fast_message_line(line: str) -> dict[str, Any] | None:
    """A message line parsed and its message validated in one pass of pydantic's JSON reader.

    Nearly every line of an export is one; parsing it to Python objects first and
    validating those (as :func:`~turnstore.importers.reading.read_jsonl` does) builds
    every string and container twice. Returns None for any other line and for a
    line the one pass refuses, which then goes the general way and gets its
    precise error.
    """
    if not line.startswith(_MESSAGE_START):
        return None
    try:
        value: dict[str, Any] = _MESSAGE_LINE.validate_json(line)
    except (ValidationError, ValueError, RecursionError):
        return None
    # A repeated "type" key names the record by its last value: that line goes the general way.
    return value if value.get("type") == "message" and "message" in value else None


class TurnstoreImporter:
    """Reads turnstore JSONL exports."""

    format = "turnstore"

    def accepts(self, path: Path) -> bool:
        return path.suffix in {".jsonl", ".ndjson"}

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        bundle: SessionBundle | None = None
        index_of: dict[int, int] = {}
        forks: list[tuple[LoopRow, Any, Any]] = []
        for number, line, value in read_jsonl(path, _fast_message_line):
            place = f"{path}:{number}"
            if isinstance(value, InvalidRecord):
                if bundle is None:
                    raise value
                bundle.records += 1
                bundle.errors.append(RecordError(value.place, value.reason))
                continue
            kind = value.get("type") if isinstance(value, dict) else None
            if kind == "session":
                if bundle is not None:
                    yield _finish(bundle, index_of, forks)
                bundle, index_of, forks = _session(value, place, path), {}, []
                bundle.add_source(line)
                continue
            if bundle is None:
                raise InvalidRecord(place, "a turnstore export starts with a session line")
            bundle.records += 1
            bundle.add_source(line)
            try:
                if kind == "loop":
                    loop = _loop(value, place)
                    bundle.loops.append(loop)
                    forks.append((loop, value.get("fork_after"), value.get("keep_from")))
                elif kind == "message":
                    row = _message(value, place)
                    if isinstance(value.get("id"), int):
                        index_of[value["id"]] = len(bundle.messages)
                    bundle.messages.append(row)
                else:
                    raise InvalidRecord(place, f"unknown record type {kind!r}")
            except InvalidRecord as error:
                bundle.errors.append(RecordError(error.place, error.reason))
        if bundle is not None:
            yield _finish(bundle, index_of, forks)


def _finish(bundle: SessionBundle, index_of: dict[int, int], forks: list[tuple[LoopRow, Any, Any]]) -> SessionBundle:
    known = {loop.loop_id for loop in bundle.loops}
    orphans = [row for row in bundle.messages if row.loop_id not in known]
    if orphans:
        bundle.errors.append(
            RecordError(bundle.origin, f"{len(orphans)} message(s) name a loop the file does not define")
        )
        bundle.messages = [row for row in bundle.messages if row.loop_id in known]
        index_of.clear()
    for loop, fork_after, keep_from in forks:
        loop.fork_after = index_of.get(fork_after) if isinstance(fork_after, int) else None
        loop.keep_from = index_of.get(keep_from) if isinstance(keep_from, int) else None
    return bundle


def _session(value: dict[str, Any], place: str, path: Path) -> SessionBundle:
    session_id = value.get("session_id")
    if not isinstance(session_id, str) or not session_id:
        raise InvalidRecord(place, "session line without a session_id")
    if value.get("version", 1) != 1:
        raise InvalidRecord(place, f"unsupported turnstore export version {value.get('version')!r}")
    return SessionBundle(
        session_id=session_id,
        origin=str(path),
        agent_id=str_or_none(value.get("agent_id")),
        title=str_or_none(value.get("title")),
        metadata=value.get("metadata") if isinstance(value.get("metadata"), dict) else None,
        created_at=parse_time(value.get("created_at")),
        updated_at=parse_time(value.get("updated_at")),
        source=str_or_none(value.get("source")),
        source_format=str_or_none(value.get("source_format")),
    )


def _loop(value: dict[str, Any], place: str) -> LoopRow:
    loop_id = value.get("loop_id")
    if not isinstance(loop_id, str) or not loop_id:
        raise InvalidRecord(place, "loop line without a loop_id")
    reported = value.get("reported_usage")
    try:
        usage = Usage.model_validate(reported) if isinstance(reported, dict) else None
    except ValueError as error:
        raise InvalidRecord(place, f"invalid reported_usage: {error}") from None
    kind = _one_of(value, "continuation_kind", ContinuationKind, "initial", place)
    status = _one_of(value, "status", LoopStatus, "completed", place)
    return LoopRow(
        loop_id=loop_id,
        parent_loop_id=str_or_none(value.get("parent_loop_id")),
        continuation_kind=kind,
        config=value.get("config") if isinstance(value.get("config"), dict) else None,
        status=status,
        started_at=parse_time(value.get("started_at")),
        ended_at=parse_time(value.get("ended_at")),
        spawn_loop_id=str_or_none(value.get("spawn_loop_id")),
        spawn_tool_call_id=str_or_none(value.get("spawn_tool_call_id")),
        reported_usage=usage,
        reported_requests=_count_or_none(value.get("reported_requests"), place),
        metadata=value.get("metadata") if isinstance(value.get("metadata"), dict) else None,
        source=str_or_none(value.get("source")),
    )


def _count_or_none(value: Any, place: str) -> int | None:
    """A loop's ``reported_requests``: None, or a count a 64-bit column holds."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise InvalidRecord(place, f"invalid reported_requests {value!r}: not a count of requests")
    return value


def _one_of(value: dict[str, Any], key: str, choices: type[Enum], default: str, place: str) -> str:
    """``value[key]``, which must be one of ``choices``' values (``default`` when missing)."""
    found = value.get(key)
    if found is None:
        return default
    allowed = [choice.value for choice in choices]
    if found not in allowed:
        raise InvalidRecord(place, f"{key} must be one of {', '.join(allowed)}; got {found!r}")
    return str(found)


def _message(value: dict[str, Any], place: str) -> MessageRow:
    loop_id = value.get("loop_id")
    if not isinstance(loop_id, str):
        raise InvalidRecord(place, "message line without a loop_id")
    turn_index = value.get("turn_index")
    if turn_index is not None and (not isinstance(turn_index, int) or isinstance(turn_index, bool) or turn_index < 0):
        raise InvalidRecord(place, "turn_index must be a non-negative integer")
    message = value.get("message")
    if not isinstance(message, (Message, ExtensionMessage)):  # validated already by _fast_message_line
        message = parse_agent_message(message, place)
    usage = None
    if isinstance(value.get("usage"), dict):
        try:
            usage = Usage.model_validate(value["usage"])
        except ValueError as error:
            raise InvalidRecord(place, f"invalid usage: {error}") from None
    priced = value.get("priced_as")
    if not isinstance(priced, dict):
        priced = {}
    timestamp = value.get("timestamp")
    return MessageRow(
        message,
        loop_id,
        turn_index,
        source=str_or_none(value.get("source")),
        usage=usage,
        priced_as=(str_or_none(priced.get("model")), str_or_none(priced.get("provider"))),
        timestamp=timestamp if isinstance(timestamp, int) and not isinstance(timestamp, bool) else None,
        usage_known=value.get("usage_known") is not False,
        place=place,
    )
