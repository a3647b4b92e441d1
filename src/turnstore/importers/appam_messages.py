"""``appam``: one ChatMessage (an element of a ``messages`` column) as a canonical message.

:mod:`turnstore.importers.appam` reads the session rows and places the
messages in the session's loop and turns; this module holds what one element
of the row's ``Vec<ChatMessage>`` becomes (``docs/importers/appam.md`` has
every field):

* ``system`` / ``developer`` -> a system message, ``user`` -> a user message,
  ``assistant`` -> an assistant message of the row's model and provider with
  zero usage (appam records usage per session only), ``tool`` -> a tool
  result named by the message, its ``tool_metadata`` or its call.
* ``raw_content_blocks`` (appam's ``UnifiedContentBlock``) take precedence;
  the flat ``reasoning``, ``content`` and ``tool_calls`` fields fill in only
  a kind the raw blocks lack. Raw blocks with no canonical form
  (``tool_result``, ``compaction``) are kept verbatim under ``appamBlocks``.
* ``id``, ``status``, ``provider_response_id`` (and ``name``, except on tool
  messages) are kept as extra keys; the stop reason comes from ``status``.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from ..errors import InvalidRecord
from .base import ms_timestamp, str_or_none

__all__ = ["wire_message"]

_ROLES = ("system", "user", "assistant", "developer", "tool")

_EXTRAS = ("id", "status", "provider_response_id")
"""ChatMessage fields with no canonical place, kept as extra keys on the message (``name`` too,
except on tool messages, where it is the tool's name)."""


def wire_message(element: Any, model: str, provider: str, tool_names: dict[str, str], place: str) -> dict[str, Any]:
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
    name = element.get("name") or str_or_none(metadata.get("tool_name")) or tool_names.get(call_id, "")
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
        if (
            not isinstance(function, dict)
            or not isinstance(call.get("id"), str)
            or not isinstance(function.get("name"), str)
        ):
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
            mapped: dict[str, Any] = {"type": "thinking", "thinking": _need(block, "thinking")}
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
