"""``appam``: the SQLite ``session_history`` table of appam (``data/sessions.db``), and its web server's ``sessions`` table.

Each row is one whole session: its ``messages`` column holds the session's
``Vec<ChatMessage>`` as one JSON array. Every row becomes one session with
ONE loop (``{id}.appam.1``); turns are derived (:mod:`.derive`), numbered on
across the user prompts of the session, because appam has no loops or turns.

appam records no usage per message, only the session totals in the ``usage``
column (``AggregatedUsage``). They become the loop's reported usage, and the
assistant messages are written with unknown usage (NULL columns), so the
session totals are exactly the column (DESIGN §7, "Usage that counts"):

* ``input = total_input_tokens + total_compaction_input_tokens``
* ``output = total_output_tokens + total_compaction_output_tokens``
* ``cache_read = total_cache_read_tokens``, ``cache_write = total_cache_creation_tokens``
* ``reasoning = total_reasoning_tokens`` (a part of ``output``)
* ``total_tokens = input + output + cache_read + cache_write``; ``cost = total_cost_usd``

The mapping of every field is in ``docs/importers/appam.md``. The database is
opened read-only; nothing in it is changed.
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InvalidRecord
from ..models import Usage
from .base import (
    ImportOptions,
    LoopRow,
    MessageRow,
    RecordError,
    SessionBundle,
    compact,
    ms_timestamp,
    parse_agent_message,
    parse_time,
)
from .derive import TurnDeriver

__all__ = ["AppamImporter", "infer_provider"]

SQLITE_HEADER = b"SQLite format 3\x00"


@dataclass(frozen=True)
class _Table:
    """One appam table that holds whole sessions, one per row."""

    name: str
    started: str
    """Column with the session's start time."""
    required: frozenset[str]
    """Columns that identify the table as appam's."""


HISTORY = _Table(
    "session_history",
    "started_at",
    frozenset({"id", "agent_name", "model", "messages", "started_at", "updated_at"}),
)
"""``src/agent/history.rs`` (``SessionHistory``)."""

WEB = _Table("sessions", "created_at", frozenset({"id", "agent_name", "model", "messages", "created_at", "updated_at"}))
"""``src/web/session.rs`` (the web server's ``SessionStore``): no usage, no end time."""

_SESSION_KEYS = ("agent_name", "model", "ended_at", "turn_count", "tool_call_count", "metadata")
"""Row columns kept in the session's metadata (when the table has them)."""

_ROLES = ("system", "user", "assistant", "developer", "tool")

_EXTRAS = ("id", "status", "provider_response_id")
"""ChatMessage fields with no canonical place, kept as extra keys on the message (``name`` too,
except on tool messages, where it is the tool's name)."""

_USAGE_COUNTS = (
    "total_input_tokens",
    "total_output_tokens",
    "total_cache_creation_tokens",
    "total_cache_read_tokens",
    "total_reasoning_tokens",
    "total_compaction_input_tokens",
    "total_compaction_output_tokens",
    "request_count",
)


def infer_provider(model: str | None) -> str:
    """The provider a model name belongs to: appam rows record the model, never the provider.

    ``vendor/model`` (OpenRouter style) -> ``vendor``; ``claude*`` or a name
    holding ``anthropic`` (Bedrock ids) -> ``anthropic``; ``gpt*``,
    ``chatgpt*``, ``o1``/``o3``/``o4``… -> ``openai``; ``gemini*`` -> ``google``;
    anything else -> ``unknown``.
    """
    name = (model or "").strip().lower()
    vendor, slash, rest = name.partition("/")
    if slash and vendor and rest:
        return vendor
    if name.startswith("claude") or "anthropic" in name:
        return "anthropic"
    if name.startswith(("gpt", "chatgpt")) or re.match(r"o[134](\b|-)", name):
        return "openai"
    if name.startswith("gemini"):
        return "google"
    return "unknown"


class AppamImporter:
    """Reads appam's SQLite session databases."""

    format = "appam"

    def accepts(self, path: Path) -> bool:
        """SQLite files holding appam's ``session_history`` table (or its web ``sessions`` table)."""
        try:
            with path.open("rb") as file:
                if file.read(len(SQLITE_HEADER)) != SQLITE_HEADER:
                    return False
            connection = _connect(path)
        except (OSError, InvalidRecord):
            return False
        try:
            return bool(_tables(connection))
        except sqlite3.Error:
            return False
        finally:
            connection.close()

    def bundles(self, path: Path, options: ImportOptions) -> Iterator[SessionBundle]:
        """One bundle per row of each appam table in the database, in insertion order.

        Raises:
            InvalidRecord: not a SQLite database, no appam table, a row without
                an id (reported after the other rows are read), or a read error.
        """
        connection = _connect(path)
        try:
            try:
                tables = _tables(connection)
            except sqlite3.Error as error:
                raise InvalidRecord(str(path), f"not a readable SQLite database: {error}") from None
            if not tables:
                raise InvalidRecord(str(path), "no appam session_history (or web sessions) table")
            for table in tables:
                yield from _table_bundles(connection, path, table)
        finally:
            connection.close()


# --- reading the database -------------------------------------------------------------


def _connect(path: Path) -> sqlite3.Connection:
    """Open the database read-only (an ``?mode=ro`` URI), never creating or changing it."""
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as error:
        raise InvalidRecord(str(path), f"cannot open as SQLite: {error}") from None
    connection.row_factory = sqlite3.Row
    return connection


def _tables(connection: sqlite3.Connection) -> list[_Table]:
    """The appam tables of a database: those whose columns include appam's."""
    names = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    found = []
    for table in (HISTORY, WEB):
        if table.name in names:
            columns = {row[1] for row in connection.execute(f'PRAGMA table_info("{table.name}")')}
            if table.required <= columns:
                found.append(table)
    return found


def _table_bundles(connection: sqlite3.Connection, path: Path, table: _Table) -> Iterator[SessionBundle]:
    nameless: list[int] = []
    try:
        rows = connection.execute(f'SELECT rowid AS "rowid", * FROM "{table.name}" ORDER BY rowid')
        for row in rows:
            record = {key: row[key] for key in row.keys() if key != "rowid"}
            if not isinstance(record.get("id"), str) or not record["id"]:
                nameless.append(row["rowid"])
                continue
            yield _session(path, table, record)
    except sqlite3.Error as error:
        raise InvalidRecord(f"{path}: {table.name}", f"cannot read the table: {error}") from None
    if nameless:
        raise InvalidRecord(
            f"{path}: {table.name} rowid={nameless[0]}",
            f"{len(nameless)} row(s) without an id cannot be imported",
        )


# --- one row: one session ---------------------------------------------------------------


def _session(path: Path, table: _Table, record: dict[str, Any]) -> SessionBundle:
    """The session, loop and messages of one row; malformed parts go into ``bundle.errors``."""
    session_id: str = record["id"]
    place = f"{path}: {table.name} id={session_id}"
    header = {key: value for key, value in record.items() if key != "messages"}
    model = record.get("model") if isinstance(record.get("model"), str) else ""
    provider = infer_provider(model)
    bundle = SessionBundle(
        session_id=session_id,
        origin=place,
        agent_id=record.get("agent_name") if isinstance(record.get("agent_name"), str) else None,
        metadata=_session_metadata(record),
        created_at=parse_time(record.get(table.started)),
        updated_at=parse_time(record.get("updated_at")),
        source=compact(_jsonable(header)),
        records=1,
    )
    bundle.add_source(bundle.source or "")
    ended = parse_time(record.get("ended_at"))
    usage_text = _text(record.get("usage"))
    loop = LoopRow(
        loop_id=f"{session_id}.appam.1",
        config={"model": model, "provider": provider},
        status="completed" if ended else "running",
        started_at=bundle.created_at,
        ended_at=ended,
        source=usage_text,
    )
    _add_usage(bundle, loop, usage_text, f"{place} usage")
    bundle.loops.append(loop)
    elements = _elements(bundle, record.get("messages"), place)
    _add_messages(bundle, loop.loop_id, elements, model, provider, place)
    return bundle


def _session_metadata(record: dict[str, Any]) -> dict[str, Any]:
    metadata = {key: record[key] for key in _SESSION_KEYS if key in record}
    if isinstance(metadata.get("metadata"), (str, bytes)):
        try:
            metadata["metadata"] = json.loads(metadata["metadata"])
        except (ValueError, RecursionError):
            metadata["metadata"] = _text(metadata["metadata"])
    return _jsonable(metadata)


def _add_usage(bundle: SessionBundle, loop: LoopRow, text: str | None, place: str) -> None:
    """The ``usage`` column (``AggregatedUsage``) as the loop's reported usage, and its request count."""
    if text is None:
        return
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        bundle.errors.append(RecordError(place, "usage is not valid JSON"))
        return
    if data is None:
        return
    if not isinstance(data, dict):
        bundle.errors.append(RecordError(place, f"usage is a JSON {type(data).__name__}, not an object"))
        return
    counts = {key: data.get(key, 0) for key in _USAGE_COUNTS}
    bad = [key for key, value in counts.items() if isinstance(value, bool) or not isinstance(value, int) or value < 0]
    cost = data.get("total_cost_usd")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float)) or not 0 <= cost < float("inf")):
        bad.append("total_cost_usd")
    if bad:
        bundle.errors.append(RecordError(place, f"usage has invalid {', '.join(bad)}"))
        return
    input = counts["total_input_tokens"] + counts["total_compaction_input_tokens"]
    output = counts["total_output_tokens"] + counts["total_compaction_output_tokens"]
    cache_read, cache_write = counts["total_cache_read_tokens"], counts["total_cache_creation_tokens"]
    try:
        loop.reported_usage = Usage(
            input=input,
            output=output,
            reasoning=counts["total_reasoning_tokens"],
            cache_read=cache_read,
            cache_write=cache_write,
            total_tokens=input + output + cache_read + cache_write,
            cost=None if cost is None else float(cost),
        )
    except ValueError:
        bundle.errors.append(RecordError(place, "usage counts are too large for a 64-bit column"))
        return
    loop.metadata = {"request_count": counts["request_count"]}


def _elements(bundle: SessionBundle, value: Any, place: str) -> list[Any]:
    """The ``messages`` column as a list; bad JSON or a non-array is one error for the whole column."""
    text = _text(value)
    if text is None:
        bundle.errors.append(RecordError(place, "messages is missing or not UTF-8 text"))
        return []
    try:
        elements = json.loads(text)
    except json.JSONDecodeError as error:
        bundle.add_source(text)
        bundle.errors.append(RecordError(place, f"messages is not valid JSON: {error.msg} at char {error.pos}"))
        return []
    except RecursionError:
        bundle.add_source(text)
        bundle.errors.append(RecordError(place, "messages is nested too deeply"))
        return []
    if not isinstance(elements, list):
        bundle.add_source(text)
        bundle.errors.append(RecordError(place, f"messages is a JSON {type(elements).__name__}, not an array"))
        return []
    return elements


def _add_messages(
    bundle: SessionBundle, loop_id: str, elements: list[Any], model: str, provider: str, place: str
) -> None:
    """Convert every element; place the good ones in turns of the session's one loop."""
    converted: list[tuple[Any, Any]] = []
    tool_names: dict[str, str] = {}
    for number, element in enumerate(elements, start=1):
        bundle.records += 1
        source = compact(element)
        bundle.add_source(source)
        where = f"{place} message {number}"
        try:
            wire = _wire_message(element, model, provider, tool_names, where)
            message = parse_agent_message(wire, where)
        except InvalidRecord as error:
            bundle.errors.append(RecordError(error.place, error.reason))
            continue
        converted.append((element, message))
        bundle.messages.append(MessageRow(message, loop_id, None, source=source, usage_known=False))
    for row, turn in zip(bundle.messages, _turns(converted)):
        row.turn_index = turn


def _turns(converted: list[tuple[dict[str, Any], Any]]) -> list[int | None]:
    """Turn index per message, by the derivation rules, numbered on across derived loops (one loop here).

    appam writes an assistant's visible text as its own message just before
    the tool-call message of the same model call (when the provider gave no
    raw blocks); such a pair is one model call, so one turn.
    """
    deriver = TurnDeriver()
    turns: list[int | None] = []
    offset, last = 0, -1
    for index, (element, message) in enumerate(converted):
        if index and _continues_call(converted[index - 1][0], element):
            turns.append(turns[-1])
            continue
        role = str(message.role)
        tools = role == "assistant" and (
            any(block.type == "toolCall" for block in message.content)
            or (index + 1 < len(converted) and _continues_call(element, converted[index + 1][0]))
        )
        new_loop, turn = deriver.step(role, tools)
        if new_loop:
            offset = last + 1
        if turn is not None:
            turn += offset
            last = max(last, turn)
        turns.append(turn)
    return turns


def _continues_call(previous: dict[str, Any], element: dict[str, Any]) -> bool:
    """``element`` is the tool-call half of the model call whose text ``previous`` holds."""
    return (
        previous.get("role") == "assistant"
        and element.get("role") == "assistant"
        and bool(previous.get("content"))
        and not previous.get("tool_calls")
        and previous.get("raw_content_blocks") is None
        and bool(element.get("tool_calls"))
        and element.get("content") is None
        and element.get("raw_content_blocks") is None
    )


# --- one ChatMessage: one canonical message ---------------------------------------------


def _wire_message(
    element: Any, model: str, provider: str, tool_names: dict[str, str], place: str
) -> dict[str, Any]:
    """A ChatMessage as a canonical wire record (validated by the caller).

    Raises:
        InvalidRecord: not an object, unknown role, or fields of the wrong type.
    """
    if not isinstance(element, dict):
        raise InvalidRecord(place, f"expected a JSON object, got {type(element).__name__}")
    role = element.get("role")
    if role not in _ROLES:
        raise InvalidRecord(place, f"unknown role {role!r}; appam roles are {', '.join(_ROLES)}")
    for key in ("content", "reasoning", "name", "tool_call_id"):
        if element.get(key) is not None and not isinstance(element[key], str):
            raise InvalidRecord(place, f"{key} must be a string")
    timestamp = ms_timestamp(element.get("timestamp"))
    content, kept = _content(element, place)
    extras = {key: element[key] for key in _EXTRAS if element.get(key) is not None}
    if role != "tool" and element.get("name") is not None:
        extras["name"] = element["name"]
    if kept:
        extras["appamBlocks"] = kept
    if role == "tool":
        return {**_tool_result(element, content, timestamp, tool_names, place), **extras}
    if role != "assistant":  # system, developer, user
        return {"role": "user" if role == "user" else "system", "content": content, "timestamp": timestamp, **extras}
    for block in content:
        if block["type"] == "toolCall":
            tool_names[block["id"]] = block["name"]
    return {
        "role": "assistant",
        "content": content,
        "stopReason": _stop_reason(element.get("status"), content),
        "model": model,
        "provider": provider,
        "usage": {"input": 0, "output": 0},
        "timestamp": timestamp,
        **extras,
    }


def _tool_result(
    element: dict[str, Any], content: list[dict[str, Any]], timestamp: int, tool_names: dict[str, str], place: str
) -> dict[str, Any]:
    call_id = element.get("tool_call_id")
    if not call_id:
        raise InvalidRecord(place, "tool message without a tool_call_id")
    metadata = element.get("tool_metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise InvalidRecord(place, "tool_metadata must be an object")
    metadata = metadata or {}
    success = metadata.get("success")
    name = element.get("name") or _text(metadata.get("tool_name")) or tool_names.get(call_id, "")
    record: dict[str, Any] = {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": content,
        "isError": success is False,
        "timestamp": timestamp,
    }
    if element.get("tool_metadata") is not None:
        record["toolMetadata"] = element["tool_metadata"]
    return record


def _stop_reason(status: Any, content: list[dict[str, Any]]) -> str:
    """appam records no stop reason: ``failed`` -> error, ``incomplete`` -> length, tool calls -> toolUse, else stop."""
    if status == "failed":
        return "error"
    if status == "incomplete":
        return "length"
    return "toolUse" if any(block["type"] == "toolCall" for block in content) else "stop"


def _content(element: dict[str, Any], place: str) -> tuple[list[dict[str, Any]], list[Any]]:
    """Content blocks, and the raw blocks that have no canonical form (kept verbatim).

    ``raw_content_blocks`` take precedence (as in appam's own replay); the
    flat fields fill in only a kind the raw blocks lack, so nothing is shown
    twice and nothing is lost: ``reasoning`` -> thinking, ``content`` -> text,
    ``tool_calls`` -> tool calls.
    """
    raw = element.get("raw_content_blocks")
    blocks: list[dict[str, Any]] = []
    kept: list[Any] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise InvalidRecord(place, "raw_content_blocks must be an array")
        for number, block in enumerate(raw, start=1):
            mapped = _raw_block(block, f"{place} block {number}")
            if mapped is None:
                kept.append(block)
            else:
                blocks.append(mapped)
    kinds = {block["type"] for block in blocks}
    if element.get("reasoning") and "thinking" not in kinds:
        blocks.insert(0, {"type": "thinking", "thinking": element["reasoning"]})
    if element.get("content") and "text" not in kinds:
        first_call = next((i for i, block in enumerate(blocks) if block["type"] == "toolCall"), len(blocks))
        blocks.insert(first_call, {"type": "text", "text": element["content"]})
    if element.get("tool_calls") is not None and "toolCall" not in kinds:
        blocks.extend(_tool_calls(element["tool_calls"], place))
    return blocks, kept


def _tool_calls(calls: Any, place: str) -> list[dict[str, Any]]:
    """``tool_calls`` as toolCall blocks; ``arguments`` (a JSON string) parsed, or kept as the string when it is not JSON."""
    if not isinstance(calls, list):
        raise InvalidRecord(place, "tool_calls must be an array")
    blocks = []
    for number, call in enumerate(calls, start=1):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(call.get("id"), str) or not isinstance(function.get("name"), str):
            raise InvalidRecord(place, f"tool call {number} needs an id and a function name")
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except (ValueError, RecursionError):
                pass
        blocks.append({"type": "toolCall", "id": call["id"], "name": function["name"], "arguments": arguments})
    return blocks


def _raw_block(block: Any, place: str) -> dict[str, Any] | None:
    """One ``UnifiedContentBlock`` as a canonical block; None for the kinds with no canonical form
    (``tool_result``, ``compaction``). Keys the mapping does not use stay on the block as extras.

    Raises:
        InvalidRecord: not an object, an unknown type, or missing required fields.
    """
    if not isinstance(block, dict):
        raise InvalidRecord(place, "a raw content block must be an object")
    kind = block.get("type")
    try:
        if kind == "text":
            return {"type": "text", "text": _need(block, "text"), **_rest(block, "type", "text")}
        if kind == "thinking":
            mapped = {"type": "thinking", "thinking": _need(block, "thinking")}
            if block.get("signature") is not None:
                mapped["signature"] = block["signature"]
            if block.get("redacted"):
                mapped["redacted"] = True
            return {**mapped, **_rest(block, "type", "thinking", "signature", "redacted")}
        if kind == "tool_use":
            return {
                "type": "toolCall",
                "id": _need(block, "id"),
                "name": _need(block, "name"),
                "arguments": block.get("input"),
                **_rest(block, "type", "id", "name", "input"),
            }
        if kind == "image":
            return {**_image(block.get("source")), **_rest(block, "type", "source")}
        if kind == "document":
            return {**_document(block.get("source"), block.get("title")), **_rest(block, "type", "source", "title")}
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidRecord(place, f"{kind} block: {error}") from None
    if kind in ("tool_result", "compaction"):
        return None
    raise InvalidRecord(place, f"unknown content block type {kind!r}")


def _image(source: Any) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise ValueError("source must be an object")
    if source.get("type") == "base64":
        return {"type": "image", "data": _need(source, "data"), "mimeType": _need(source, "media_type")}
    if source.get("type") == "url":
        # The canonical image for a URL (docs/wire-format.md): no inline data, no known mime type.
        return {"type": "image", "data": "", "mimeType": "", "url": _need(source, "url")}
    raise ValueError(f"unknown image source type {source.get('type')!r}")


def _document(source: Any, title: Any) -> dict[str, Any]:
    if not isinstance(source, dict):
        raise ValueError("source must be an object")
    named = {"name": title} if isinstance(title, str) else {}
    kind = source.get("type")
    if kind == "base64_pdf":
        return {"type": "file", "data": _need(source, "data"), "mimeType": _need(source, "media_type"), **named}
    if kind == "url_pdf":
        return {"type": "file", "url": _need(source, "url"), "mimeType": "application/pdf", **named}
    if kind == "text":
        # A file block's data is base64; the plain text is encoded (the source record keeps it as written).
        data = base64.b64encode(_need(source, "data").encode("utf-8")).decode("ascii")
        return {"type": "file", "data": data, "mimeType": source.get("media_type") or "text/plain", **named}
    raise ValueError(f"unknown document source type {kind!r}")


def _need(data: dict[str, Any], key: str) -> str:
    value = data.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{key!r} must be a string")
    return value


def _rest(block: dict[str, Any], *used: str) -> dict[str, Any]:
    """The keys of a raw block that its mapping did not use (``id``, ``encrypted_content``, ``detail``, future fields)."""
    return {key: value for key, value in block.items() if key not in used}


def _text(value: Any) -> str | None:
    """A column value as text: TEXT as is, a BLOB decoded as UTF-8; anything else (or bad UTF-8) is None."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _jsonable(data: dict[str, Any]) -> dict[str, Any]:
    """Column values ready for JSON: a BLOB becomes its UTF-8 text, or base64 when it is not UTF-8."""
    ready = {}
    for key, value in data.items():
        if isinstance(value, bytes):
            text = _text(value)
            value = text if text is not None else base64.b64encode(value).decode("ascii")
        ready[key] = value
    return ready
