"""``clark``: clark-agent transcripts, one AgentMessage per line (``.jsonl``) or a JSON array (``.json``).

clark-agent (``clark-labs-inc/clark-agent``) has no session store: its host
keeps one ``AgentMessage`` JSON per database row, in snake_case, tagged by
``role`` (``system``, ``user``, ``assistant``, ``tool_result``, ``custom``).
Each record is translated to turnstore's canonical form and its source is
kept verbatim beside the row (the JSONL line, or the array element as
compact JSON). ``docs/importers/clark.md`` has the full mapping; in short:

* ``system`` -> :class:`~turnstore.models.SystemMessage` with one text block.
* ``user``: a string becomes one text block; ``text``/``image`` blocks map
  one to one (a base64 data URL becomes inline image data, any other source a
  ``url`` with empty ``data``; ``alt`` is kept on the block).
* ``assistant``: clark's three reasoning channels become thinking blocks
  marked with ``clarkKind`` (``thinking`` = prompt-elicited ``<thought>``
  scratch, ``reasoning`` = provider-native text, ``reasoning_details`` =
  signed/encrypted provider items, kept whole under ``reasoningDetails``), so
  a block can go back to the channel it came from. clark names no model or
  provider: both are ``"unknown"``. An assistant without ``usage`` has zero
  usage in its message and NULL usage columns (it counts for no tokens).
* ``tool_result`` -> ``toolResult`` with ``details`` and ``narration``.
* ``custom`` -> an extension message of the same ``kind`` with ``payload`` as ``data``.

Timestamps are unix ms; a missing one is 0 (clark itself would fill in
*now* when loading, which turnstore never does). Loops and turns are derived
(:mod:`turnstore.importers.derive`); loop ids are ``{session_id}.clark.{N}``
and the session id is ``--session-id``, else the file stem.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import ExtensionMessage, Message
from .base import ImportOptions, MessageRow, RecordError, SessionBundle, compact, parse_agent_message, path_stem
from .derive import add_derived
from .files import EMPTY_ARRAY
from .reading import read_json, read_jsonl
from .spill import (
    SPILL_AFTER_MESSAGES,
    Places,
    Spill,
    StubTable,
    derived_rows,
    spill_from_start,
)

__all__ = ["STOP_REASONS", "UNKNOWN", "USAGE_FIELDS", "ClarkImporter", "convert"]

STOP_REASONS = {
    "end_turn": "stop",
    "tool_use": "toolUse",
    "max_tokens": "length",
    "error": "error",
    "aborted": "aborted",
    "other": "stop",
}
"""clark ``stop_reason`` -> canonical ``stopReason``. ``other`` has no canonical peer: it becomes
``stop`` and the message keeps ``"clarkStopReason": "other"``."""

USAGE_FIELDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_creation_input_tokens": "cache_write",
    "cache_read_input_tokens": "cache_read",
}
"""clark usage field -> canonical usage field; ``reasoning`` is 0, ``total_tokens`` the sum of the four."""

UNKNOWN = "unknown"
"""Model and provider of clark assistant messages: clark records neither."""

ROLES = ("system", "user", "assistant", "tool_result", "custom")

_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?:;[^;,]*)*;base64,(?P<data>.*)", re.DOTALL | re.IGNORECASE)

Converted = tuple[Message | ExtensionMessage, bool, int | None]
"""A converted record: the canonical message, whether its usage is known, and a timestamp for extension rows."""


class ClarkImporter:
    """Reads clark-agent transcripts (JSONL rows or a JSON array)."""

    format = "clark"

    def accepts(self, path: Path) -> bool:
        return path.suffix in {".jsonl", ".json"}

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One session per file, its loops and turns derived."""
        session_id = options.session_id or path_stem(path)
        bundle = SessionBundle(session_id=session_id, origin=str(path), hash_format=self.format)
        rows: list[MessageRow] = []
        spill: Spill | None = None
        if options.limits is not None and options.row_values is not None and spill_from_start(path):
            spill = bundle.spill = Spill(options.limits, options.row_values)
        stubs = StubTable()
        places = Places(f"{path}:")
        for place, source, value in _records(path):
            bundle.records += 1
            bundle.add_source(source)
            try:
                message, usage_known, stamp = convert(value, place)
            except InvalidRecord as error:
                bundle.errors.append(RecordError(error.place, error.reason))
                continue
            if spill is not None:  # a large session: its rows wait on disk, their stand-ins in columns
                stubs.add(spill.keep(message, source=source, usage_known=usage_known, timestamp=stamp))
                places.add(place)
                continue
            rows.append(
                MessageRow(message, "", None, source=source, usage_known=usage_known, timestamp=stamp, place=place)
            )
            if len(rows) > SPILL_AFTER_MESSAGES and options.limits is not None and options.row_values is not None:
                spill = bundle.spill = Spill(options.limits, options.row_values)
                for row in rows:
                    stubs.add(
                        spill.keep(
                            row.message,  # type: ignore[arg-type]  # rows read here hold parsed messages
                            source=row.source,
                            usage_known=row.usage_known,
                            timestamp=row.timestamp,
                        )
                    )
                    places.add(row.place)  # type: ignore[arg-type]
                rows = []
        if spill is not None:
            bundle.messages = derived_rows(bundle, f"{session_id}.clark", stubs, places)  # type: ignore[assignment]
        else:
            add_derived(bundle, f"{session_id}.clark", rows)
        yield bundle


def _records(path: Path) -> Iterator[tuple[str, str, Any]]:
    """``(place, verbatim source, parsed value or InvalidRecord)`` for each record of the file."""
    if path.suffix == ".json":
        records = read_json(path)
        if not isinstance(records, list):
            raise InvalidRecord(f"{path}:1", "expected a JSON array of clark AgentMessage objects")
        if not records:
            raise InvalidRecord(f"{path}:1", EMPTY_ARRAY)
        for number, record in enumerate(records, start=1):
            yield f"{path}: record {number}", compact(record), record
    else:
        for number, line, value in read_jsonl(path):
            yield f"{path}:{number}", line, value


def convert(record: Any, place: str) -> Converted:
    """Translate one clark AgentMessage into its canonical message.

    Raises:
        InvalidRecord: not a clark AgentMessage (bad JSON, unknown role or block type,
            a field of the wrong type), naming ``place`` and the field.
    """
    if isinstance(record, InvalidRecord):
        raise record
    if not isinstance(record, dict):
        raise InvalidRecord(place, f"expected a clark AgentMessage object, got {_json_type(record)}")
    role = record.get("role")
    build = _BUILDERS.get(role) if isinstance(role, str) else None
    if build is None:
        found = "no role" if role is None else f"unknown role {role!r}"
        raise InvalidRecord(place, f"{found}; clark writes {', '.join(ROLES)}")
    fields = _Fields(record, place)
    canonical, usage_known = build(fields)
    message = parse_agent_message(canonical, place)
    # Extension messages carry no timestamp: a custom record's dates its row (none when missing).
    stamp = (fields.timestamp() or None) if role == "custom" else None
    return message, usage_known, stamp


# --- one builder per role: clark record -> canonical wire dict -----------------------------


def _system(fields: _Fields) -> tuple[dict[str, Any], bool]:
    text = fields.string("content")
    return {"role": "system", "content": [{"type": "text", "text": text}], "timestamp": fields.timestamp()}, True


def _user(fields: _Fields) -> tuple[dict[str, Any], bool]:
    content = fields.record.get("content")
    if isinstance(content, str):
        blocks = [{"type": "text", "text": content}]
    else:
        blocks = [_media_block(block) for block in fields.blocks("content", "a string or an array of blocks")]
    return {"role": "user", "content": blocks, "timestamp": fields.timestamp()}, True


def _assistant(fields: _Fields) -> tuple[dict[str, Any], bool]:
    blocks = [_assistant_block(block) for block in fields.blocks("content")]
    stop = fields.record.get("stop_reason")
    if not isinstance(stop, str) or stop not in STOP_REASONS:
        raise fields.error(f"unknown stop_reason {stop!r}; clark writes {', '.join(STOP_REASONS)}")
    usage, known = _usage(fields)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": blocks,
        "stopReason": STOP_REASONS[stop],
        "model": UNKNOWN,
        "provider": UNKNOWN,
        "usage": usage,
        "timestamp": fields.timestamp(),
    }
    error_message = fields.optional_string("error_message")
    if error_message is not None:
        message["error_message"] = error_message
    if stop == "other":
        message["clarkStopReason"] = stop
    return message, known


def _tool_result(fields: _Fields) -> tuple[dict[str, Any], bool]:
    is_error = fields.record.get("is_error", False)
    if not isinstance(is_error, bool):
        raise fields.error(f"is_error must be a boolean, got {_json_type(is_error)}")
    message: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": fields.string("tool_call_id"),
        "toolName": fields.string("tool_name"),
        "content": [_media_block(block) for block in fields.blocks("content")],
        "isError": is_error,
        "timestamp": fields.timestamp(),
    }
    narration = fields.optional_string("narration")
    if narration is not None:
        message["narration"] = narration
    if fields.record.get("details") is not None:
        message["details"] = fields.record["details"]
    return message, True


def _custom(fields: _Fields) -> tuple[dict[str, Any], bool]:
    return {"role": "extension", "kind": fields.string("kind"), "data": fields.record.get("payload")}, True


_BUILDERS: dict[str, Callable[[_Fields], tuple[dict[str, Any], bool]]] = {
    "system": _system,
    "user": _user,
    "assistant": _assistant,
    "tool_result": _tool_result,
    "custom": _custom,
}


# --- content blocks and usage ------------------------------------------------------------------


def _media_block(block: _Fields) -> dict[str, Any]:
    """A user or tool-result block: ``text`` or ``image``."""
    kind = block.record.get("type")
    if kind == "text":
        return {"type": "text", "text": block.string("text")}
    if kind == "image":
        return _image(block)
    raise block.error(f"unknown block type {kind!r}; expected text or image")


def _image(block: _Fields) -> dict[str, Any]:
    """clark's ``{source, media_type?, alt?}``: a base64 data URL becomes inline data, any other source a ``url``."""
    source = block.string("source")
    media_type = block.optional_string("media_type")
    alt = block.optional_string("alt")
    inline = _DATA_URL.fullmatch(source)
    if inline is not None:
        image = {"type": "image", "data": inline["data"], "mimeType": inline["mime"] or media_type or ""}
    else:
        image = {"type": "image", "data": "", "mimeType": media_type or "", "url": source}
    if alt is not None:
        image["alt"] = alt
    return image


def _assistant_block(block: _Fields) -> dict[str, Any]:
    """An assistant block: text, one of the three reasoning channels, or a tool call."""
    kind = block.record.get("type")
    if kind == "text":
        return {"type": "text", "text": block.string("text")}
    if kind in ("thinking", "reasoning"):
        return {"type": "thinking", "thinking": block.string("text"), "clarkKind": kind}
    if kind == "reasoning_details":
        details = block.record.get("details")
        if not isinstance(details, list):
            raise block.error(f"details must be an array, got {_json_type(details)}")
        return {"type": "thinking", "thinking": "", "clarkKind": kind, "reasoningDetails": details}
    if kind == "tool_call":
        if "arguments" not in block.record:
            raise block.error("tool_call has no arguments")
        return {
            "type": "toolCall",
            "id": block.string("id"),
            "name": block.string("name"),
            "arguments": block.record["arguments"],
        }
    raise block.error(
        f"unknown block type {kind!r}; expected text, thinking, reasoning, reasoning_details or tool_call"
    )


def _usage(fields: _Fields) -> tuple[dict[str, int], bool]:
    """Canonical usage and whether clark recorded one (a missing usage is zeros, marked unknown)."""
    usage = fields.record.get("usage")
    if usage is None:
        return {"input": 0, "output": 0, "reasoning": 0, "cache_read": 0, "cache_write": 0, "total_tokens": 0}, False
    if not isinstance(usage, dict):
        raise fields.error(f"usage must be an object, got {_json_type(usage)}")
    counts = {"reasoning": 0}
    for name, canonical in USAGE_FIELDS.items():
        value = usage.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise fields.error(f"usage.{name} must be a non-negative integer, got {value!r}")
        counts[canonical] = value
    counts["total_tokens"] = sum(counts[name] for name in USAGE_FIELDS.values())
    return counts, True


class _Fields:
    """Typed reads of one clark object; a wrong type is an :class:`InvalidRecord` naming the field's path."""

    __slots__ = ("path", "place", "record")

    def __init__(self, record: dict[str, Any], place: str, path: str = "") -> None:
        self.record = record
        self.place = place
        self.path = path

    def error(self, reason: str) -> InvalidRecord:
        return InvalidRecord(self.place, f"{self.path}: {reason}" if self.path else reason)

    def string(self, key: str) -> str:
        """A required string field."""
        value = self.record.get(key)
        if not isinstance(value, str):
            raise self.error(f"{key} must be a string, got {_json_type(value)}")
        return value

    def optional_string(self, key: str) -> str | None:
        """A string field that may be missing or null (``None`` then)."""
        return None if self.record.get(key) is None else self.string(key)

    def timestamp(self) -> int:
        """Unix ms; missing or null is 0, never invented."""
        value = self.record.get("timestamp")
        if value is None:
            return 0
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(f"timestamp must be unix milliseconds (a non-negative integer), got {_json_type(value)}")
        return value

    def blocks(self, key: str, expected: str = "an array of blocks") -> list[_Fields]:
        """An array of block objects, each readable with its path (``content[2]``)."""
        value = self.record.get(key)
        if not isinstance(value, list):
            raise self.error(f"{key} must be {expected}, got {_json_type(value)}")
        blocks = []
        for index, item in enumerate(value):
            path = f"{self.path}.{key}[{index}]" if self.path else f"{key}[{index}]"
            if not isinstance(item, dict):
                raise InvalidRecord(self.place, f"{path}: expected a block object, got {_json_type(item)}")
            blocks.append(_Fields(item, self.place, path))
        return blocks


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"
