"""Tau / Operator-Use messages, content blocks and usage, as turnstore's canonical models.

Pure conversion of one parsed record at a time; :mod:`turnstore.importers.tau`
walks the session and supplies what a record does not say itself (the model
in force, the names of earlier tool calls). A record that cannot be converted
raises :class:`BadRecord`, which the importer reports with the record's place.

Mapping decisions (see ``docs/importers/tau.md``):

* Tau's text key is ``content``; list keys are ``contents`` (messages),
  ``images``, ``audios`` (Operator-Use: ``audio``), ``videos``, ``files``.
  One Tau media block holding N items becomes N canonical blocks.
* A thinking ``signature`` of ``""`` is Tau's default for "no signature": it
  becomes ``None`` (omitted), so no provider is ever sent an empty signature;
  any other signature is kept byte for byte.
* A ``tool`` message holds one ``tool_result`` per call; each becomes its own
  ``toolResult`` message. Tool results inside a ``user`` message are split out
  the same way, before the user's own content.
* Tau usage counts cache writes at 1-hour retention inside
  ``cache_write_tokens``; with ``input_tokens_include_cache_read`` the cached
  reads are inside ``input_tokens`` and are taken out of the canonical input.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping
from typing import Any

from ..models import (
    AssistantMessage,
    AudioContent,
    ExtensionMessage,
    FileContent,
    ImageContent,
    Message,
    StopReason,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from .base import guess_mime_type

__all__ = ["EXTENSION_ROLES", "BadRecord", "convert_message", "convert_usage", "ms", "tool_call_names"]

STOP_REASONS = {
    "stop": StopReason.STOP,
    "length": StopReason.LENGTH,
    "tool_calls": StopReason.TOOL_USE,
    "content_filter": StopReason.GUARD_RAIL,
    "abort": StopReason.ABORTED,
    "error": StopReason.ERROR,
}
"""Tau's ``StopReason`` values -> canonical stop reasons."""

EXTENSION_ROLES = frozenset(
    {"custom", "branch_summary", "compaction_summary", "skill_invocation", "template_invocation", "terminal_execution"}
)
"""Session-only roles: never sent to the model by Tau as they are; kept as extension messages of that kind."""

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
"""A URL or ``file:`` path; base64 text never contains a colon."""


class BadRecord(ValueError):
    """A Tau record that cannot be converted; the message says what is wrong."""


def ms(value: Any) -> int | None:
    """A Tau timestamp (float unix seconds) as integer unix milliseconds; None when missing.

    Numbers above 10^11 are taken as milliseconds already (no Tau version
    writes them, but a hand-edited file might).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != value:
        raise BadRecord(f"timestamp {value!r} is not unix seconds")
    if value > 100_000_000_000:
        return int(value)
    return round(value * 1000)


# --- usage --------------------------------------------------------------------


def convert_usage(data: Any) -> Usage:
    """Tau ``Usage`` -> canonical usage; ``total_tokens`` is the sum, ``cost`` is ``cost.total`` (USD).

    Raises:
        BadRecord: not an object, a count that is not a non-negative integer,
            or cached reads larger than an input said to include them.
    """
    if not isinstance(data, Mapping):
        raise BadRecord("usage is not an object")
    input_tokens = _count(data, "input_tokens")
    output = _count(data, "output_tokens")
    cache_read = _count(data, "cache_read_tokens")
    cache_write = _count(data, "cache_write_tokens")  # cache_write_1h_tokens is a part of it
    _count(data, "cache_write_1h_tokens")
    includes = data.get("input_tokens_include_cache_read")
    if includes not in (None, True, False):
        raise BadRecord(f"usage.input_tokens_include_cache_read is {includes!r}, not a boolean")
    if includes:
        if cache_read > input_tokens:
            raise BadRecord(
                f"usage.input_tokens ({input_tokens}) is said to include "
                f"cache_read_tokens ({cache_read}) but is smaller"
            )
        input_tokens -= cache_read
    return Usage(
        input=input_tokens,
        output=output,
        cache_read=cache_read,
        cache_write=cache_write,
        total_tokens=input_tokens + output + cache_read + cache_write,
        cost=_cost(data.get("cost")),
    )


def _count(data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if value is None:
        return 0
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadRecord(f"usage.{key} is {value!r}, not a token count")
    return value


def _cost(data: Any) -> float | None:
    if data is None:
        return None
    if not isinstance(data, Mapping):
        raise BadRecord("usage.cost is not an object")
    total = data.get("total")
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, (int, float)) or total < 0 or total != total:
        raise BadRecord(f"usage.cost.total is {total!r}, not a dollar amount")
    return float(total)


# --- messages -----------------------------------------------------------------


def tool_call_names(message: Mapping[str, Any]) -> dict[str, str]:
    """``{call id: tool name}`` of the tool calls in a Tau assistant message (for results that lack ``tool_name``)."""
    names: dict[str, str] = {}
    for block in message.get("contents") or ():
        if (
            isinstance(block, Mapping)
            and block.get("type") == "tool_call"
            and isinstance(block.get("id"), str)
            and isinstance(block.get("name"), str)
        ):
            names[block["id"]] = block["name"]
    return names


def convert_message(
    message: Any,
    *,
    model: str,
    provider: str,
    tool_names: Mapping[str, str],
    fallback_ms: int | None,
) -> list[Message | ExtensionMessage]:
    """One Tau message -> the canonical messages it becomes (several for a batch of tool results).

    Args:
        message: the parsed ``message`` object of a ``message`` entry.
        model, provider: who answered, for assistant messages that do not say.
        tool_names: names of earlier tool calls, by call id.
        fallback_ms: the entry's timestamp, for a message without its own.

    Raises:
        BadRecord: unknown role or content type, or a field of the wrong type.
    """
    if not isinstance(message, Mapping):
        raise BadRecord("message is not an object")
    role = message.get("role")
    if isinstance(role, str) and role in EXTENSION_ROLES:
        return [ExtensionMessage(kind=role, data=dict(message))]
    stamp = ms(message.get("timestamp"))
    timestamp = stamp if stamp is not None else (fallback_ms or 0)
    contents = message.get("contents")
    if contents is None:
        contents = []
    if not isinstance(contents, list) or not all(isinstance(block, Mapping) for block in contents):
        raise BadRecord("message contents is not a list of objects")
    if role == "assistant":
        return [_assistant(message, contents, timestamp, model, provider)]
    if role == "tool":
        if not contents or any(block.get("type") != "tool_result" for block in contents):
            raise BadRecord("a tool message holds tool_result contents only, and at least one")
        return [_tool_result(block, timestamp, tool_names) for block in contents]
    if role == "user":
        results = [
            _tool_result(block, timestamp, tool_names) for block in contents if block.get("type") == "tool_result"
        ]
        rest = [block for block in contents if block.get("type") != "tool_result"]
        if results and not rest:
            return list(results)
        return [*results, UserMessage(content=_blocks(rest, role), timestamp=timestamp)]
    if role == "system":
        return [SystemMessage(content=_blocks(contents, role), timestamp=timestamp)]
    raise BadRecord(f"unknown message role {role!r}")


def _assistant(
    message: Mapping[str, Any], contents: list[Any], timestamp: int, model: str, provider: str
) -> AssistantMessage:
    stop = message.get("stop_reason")
    if stop is None:
        stop = "stop"  # Tau's default
    if not isinstance(stop, str) or stop not in STOP_REASONS:
        raise BadRecord(f"unknown stop_reason {stop!r}; one of: {', '.join(STOP_REASONS)}")
    usage = message.get("usage")
    error = message.get("error")
    if error is not None and not isinstance(error, str):
        raise BadRecord("assistant error is not a string")
    extras: dict[str, Any] = {}
    if message.get("error_kind") not in (None, "unknown"):
        extras["error_kind"] = message["error_kind"]
    return AssistantMessage(
        content=_blocks(contents, "assistant"),
        stop_reason=STOP_REASONS[stop],
        model=_text_or(message.get("model"), model),
        provider=_text_or(message.get("provider"), provider),
        usage=convert_usage(usage) if usage is not None else Usage(input=0, output=0),
        timestamp=timestamp,
        error_message=error or None,
        **extras,
    )


def _tool_result(block: Mapping[str, Any], timestamp: int, tool_names: Mapping[str, str]) -> ToolResultMessage:
    call_id = _text(block, "id")
    name = block.get("tool_name") or tool_names.get(call_id) or ""
    if not isinstance(name, str):
        raise BadRecord("tool_result tool_name is not a string")
    content: list[Any] = []
    if _text(block, "content"):
        content.append(TextContent(text=block["content"]))
    for key in ("image", "audio", "video"):
        media = block.get(key)
        if media is not None:
            if not isinstance(media, Mapping):
                raise BadRecord(f"tool_result {key} is not a content object")
            content.extend(_block(media, "tool"))
    is_error = block.get("is_error", False)
    if not isinstance(is_error, bool):
        raise BadRecord("tool_result is_error is not a boolean")
    metadata = block.get("metadata")
    extras: dict[str, Any] = {}
    if block.get("terminate"):
        extras["terminate"] = block["terminate"]
    if block.get("terminate_message") is not None:
        extras["terminate_message"] = block["terminate_message"]
    return ToolResultMessage(
        tool_call_id=call_id,
        tool_name=name,
        content=content,
        is_error=is_error,
        timestamp=timestamp,
        details=metadata if metadata else None,  # Tau: "not sent to the LLM", as details
        **extras,
    )


# --- content blocks -----------------------------------------------------------


def _blocks(contents: list[Any], role: str) -> list[Any]:
    blocks: list[Any] = []
    for block in contents:
        blocks.extend(_block(block, role))
    return blocks


def _block(block: Mapping[str, Any], role: str) -> list[Any]:
    kind = block.get("type")
    if kind == "text":
        return [TextContent(text=_text(block, "content"))]
    if kind == "thinking":
        signature = block.get("signature")
        if signature is not None and not isinstance(signature, str):
            raise BadRecord("thinking signature is not a string")
        return [ThinkingContent(thinking=_text(block, "content"), signature=signature or None)]
    if kind == "tool_call":
        return [_tool_call(block)]
    if kind == "image":
        note = block.get("dimension_note")
        extras = {"dimension_note": note} if note is not None else {}
        return [_image(item, extras) for item in _items(block, "images")]
    if kind == "audio":
        return [_audio(item) for item in _items(block, "audios", "audio")]
    if kind == "video":
        return [_file(item, _sniff_video) for item in _items(block, "videos")]
    if kind == "file":
        return [_file(item, _sniff_document) for item in _items(block, "files")]
    if kind == "tool_result":
        raise BadRecord(f"a tool_result content in a {role} message")
    raise BadRecord(f"unknown content type {kind!r} in a {role} message")


def _tool_call(block: Mapping[str, Any]) -> ToolCallContent:
    args = block.get("args")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise BadRecord("tool_call args is not an object")
    extras: dict[str, Any] = {}
    if block.get("kind") is not None:
        extras["kind"] = block["kind"]
    if block.get("metadata"):
        extras["metadata"] = block["metadata"]
    return ToolCallContent(id=_text(block, "id"), name=_text(block, "name"), arguments=args, **extras)


def _items(block: Mapping[str, Any], *keys: str) -> list[str]:
    for key in keys:
        items = block.get(key)
        if items is not None:
            if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
                raise BadRecord(f"{block.get('type')} {key} is not a list of strings")
            return items
    return []


def _image(item: str, extras: dict[str, Any]) -> ImageContent:
    if item.startswith("data:"):
        mime, data = _data_url(item)
        return ImageContent(data=data, mime_type=mime or _sniff_image(data), **extras)
    if _SCHEME.match(item):
        return ImageContent(data="", mime_type=guess_mime_type(item) or "", url=item, **extras)
    return ImageContent(data=item, mime_type=_sniff_image(item), **extras)


def _audio(item: str) -> AudioContent:
    if _SCHEME.match(item) and not item.startswith("data:"):
        # A URL, or a "file:" path Tau reads on send.
        return AudioContent(data="", mime_type=guess_mime_type(item) or "", url=item)
    if item.startswith("data:"):
        mime, data = _data_url(item)
        return AudioContent(data=data, mime_type=mime or _sniff_audio(data))
    return AudioContent(data=item, mime_type=_sniff_audio(item))


def _file(item: str, sniff: Callable[[str], str | None]) -> FileContent:
    if item.startswith("data:"):
        mime, data = _data_url(item)
        return FileContent(data=data, mime_type=mime or sniff(data))
    if _SCHEME.match(item):
        return FileContent(url=item, mime_type=guess_mime_type(item))
    return FileContent(data=item, mime_type=sniff(item))


def _data_url(item: str) -> tuple[str | None, str]:
    head, _, data = item.partition(",")
    mime = head[len("data:") :].split(";")[0]
    return (mime or None), data


def _head(data: str) -> bytes:
    """The first bytes of base64 ``data`` (empty when it is not base64)."""
    chunk = data[:32]
    chunk += "=" * (-len(chunk) % 4)
    try:
        return base64.b64decode(chunk)
    except (binascii.Error, ValueError):
        return b""


def _sniff_image(data: str) -> str:
    """MIME type from magic bytes, as Tau's ``image_to_base64`` does; ``image/png`` when unknown."""
    head = _head(data)
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head.startswith(b"GIF8"):
        return "image/gif"
    if head.startswith(b"RIFF") and head[8:12] == b"WEBP":
        return "image/webp"
    return "image/png"


def _sniff_audio(data: str) -> str:
    """MIME type from magic bytes, as Tau's ``audio_to_base64`` does; ``audio/mpeg`` when unknown."""
    head = _head(data)
    if head.startswith(b"OggS"):
        return "audio/ogg"
    if head.startswith(b"fLaC"):
        return "audio/flac"
    if head.startswith(b"RIFF") and head[8:12] == b"WAVE":
        return "audio/wav"
    return "audio/mpeg"


def _sniff_video(data: str) -> str | None:
    head = _head(data)
    if head[4:8] == b"ftyp":
        return "video/quicktime" if head[8:10] == b"qt" else "video/mp4"
    if head.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm"
    return None


def _sniff_document(data: str) -> str | None:
    head = _head(data)
    if head.startswith(b"%PDF"):
        return "application/pdf"
    if head.startswith(b"PK\x03\x04"):
        return "application/zip"  # also DOCX / XLSX / PPTX
    return None


def _text(block: Mapping[str, Any], key: str) -> str:
    value = block.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise BadRecord(f"{block.get('type') or 'record'} {key} is not a string")
    return value


def _text_or(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value else default
