"""``openai-agents``: Responses-API items as canonical messages.

Each ``agent_messages`` row of the OpenAI Agents SDK holds one Responses-API
input item (``message_data``, ``json.dumps`` of the item). This module holds
what items become; :mod:`turnstore.importers.openai_agents` reads the tables
and puts the messages into loops and branches, and
:mod:`turnstore.integrations.openai_agents` stores a live session's items
with the same mapping (:func:`item_messages`, one message per item).

* ``user`` / ``system`` / ``developer`` messages -> user and system messages;
  their input parts (``input_text``, ``input_image``, ``input_file``,
  ``input_audio``) -> text, image, file and audio blocks.
* The model output items of one response -> ONE assistant message: its
  reasoning (thinking blocks, ``encrypted_content`` as the signature), text
  and ``function_call`` items (tool calls, ``arguments`` parsed) in order. A
  response ends at the next input item (:data:`INPUT_TYPES`, or a message
  from the app) or at a branch's fork point; its other output items (hosted
  tool calls...) follow it as extension messages in the same turn. The
  assistant message's source holds every item of the response in the SDK's
  order, those too (they are no content a model is sent, but the SDK's
  session gives them back in place), so their extension messages have no
  source of their own.
* ``function_call_output`` -> a tool result, named after its call.
* Every other item type -> an extension message of kind = the item type.

Items record no model and no usage: assistant messages name model
``unknown`` of provider ``openai`` (:data:`MODEL`, :data:`PROVIDER`) and carry
zero usage (written as unknown usage). The mapping of every item type is in
``docs/importers/openai-agents.md``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..errors import InvalidRecord
from ..models import ExtensionMessage, Message
from .base import RecordError, guess_mime_type, parse_agent_message

__all__ = ["MODEL", "PROVIDER", "ItemConverter", "Piece", "Row", "guard", "item_messages", "parse_item"]

_T = TypeVar("_T")

MODEL = "unknown"
PROVIDER = "openai"
"""Items record no model; the SDK's ``Agent.model`` is not stored in the session."""

CALL_TYPES = frozenset(
    {"function_call", "computer_call", "local_shell_call", "shell_call", "apply_patch_call", "custom_tool_call"}
)
"""Model output items that ask the app to run something: a response holding one stops with ``toolUse``."""

INPUT_TYPES = frozenset(
    {
        "function_call_output",
        "computer_call_output",
        "local_shell_call_output",
        "shell_call_output",
        "apply_patch_call_output",
        "custom_tool_call_output",
        "mcp_approval_response",
        "item_reference",
        "compaction",
    }
)
"""Typed items the app sends to the model; like a message from the user, each ends the model response before it.
Every other typed item (and every ``assistant`` message) is model output."""

ROLES = frozenset({"user", "system", "developer", "assistant"})

_DATA_URL = re.compile(r"data:(?P<mime>[^;,]*)(?:;[^,]*)?;base64,(?P<data>.*)", re.DOTALL)


@dataclass
class Row:
    """One ``agent_messages`` row: its verbatim ``message_data`` and the item parsed from it."""

    id: int
    text: str
    item: dict[str, Any]
    place: str
    timestamp: int
    """Unix ms of the row's ``created_at`` (when the SDK stored the item; 0 when missing)."""


@dataclass
class Piece:
    """One message to be: from one row, or from the rows of one model response."""

    message: Message | ExtensionMessage
    rows: list[Row]
    """The rows the message was made from, in order; their texts, one per line, are its source
    (except for an :attr:`in_response` item's, which has none)."""
    nodes: list[int]
    """Trie nodes (row positions in the session's branch tree) the message holds."""
    turn_number: int | None
    asks_tools: bool = False
    in_response: bool = False
    """An extension item of the model response whose assistant message comes just before it: that
    message's source holds the item's text in its place, so this message has no source."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse_item(text: Any, place: str) -> dict[str, Any]:
    """The Responses-API item of one row.

    Raises:
        InvalidRecord: not JSON, not an object, or an item with neither a
            ``type`` nor a known ``role``.
    """
    if not isinstance(text, str):
        raise InvalidRecord(place, "message_data is not text")
    try:
        item = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as error:
        raise InvalidRecord(place, f"invalid JSON: {error}") from None
    if not isinstance(item, dict):
        raise InvalidRecord(place, f"expected a JSON object, got {type(item).__name__}")
    kind, role = item.get("type"), item.get("role")
    if kind in (None, "message"):
        if role is None:
            raise InvalidRecord(place, "item has neither a type nor a role")
        if not isinstance(role, str) or role not in ROLES:
            raise InvalidRecord(place, f"unknown message role {role!r}")
    elif not isinstance(kind, str):
        raise InvalidRecord(place, f"item type must be a string, got {type(kind).__name__}")
    return item


def _tool_names(rows: Iterable[Row]) -> dict[str, str]:
    """``call_id -> name`` of the session's function calls, for naming their outputs."""
    names = {}
    for row in rows:
        item = row.item
        call_id, name = item.get("call_id"), item.get("name")
        if item.get("type") == "function_call" and isinstance(call_id, str) and isinstance(name, str):
            names[call_id] = name
    return names


def guard(errors: list[RecordError], build: Callable[..., _T], *args: Any) -> _T | None:
    """``build(*args)``, or None with the malformed record reported in ``errors``."""
    try:
        return build(*args)
    except InvalidRecord as error:
        errors.append(RecordError(error.place, error.reason))
        return None


# --- rows into messages ---------------------------------------------------------------


class ItemConverter:
    """Turns runs of one session's rows into the messages they become; malformed rows are reported, not raised."""

    def __init__(self, errors: list[RecordError], rows: Iterable[Row]) -> None:
        self.errors = errors
        """Where a malformed row is reported (the bundle's errors)."""
        self.tool_names = _tool_names(rows)

    def _guard(self, build: Callable[..., _T], *args: Any) -> _T | None:
        return guard(self.errors, build, *args)

    def pieces(self, entries: list[tuple[Row, int | None]], nodes: list[int], forks: set[int]) -> list[Piece]:
        """The messages of a run of rows: model output items grouped per response, every other row alone.

        A response also ends at a fork point, so a branch never starts inside a message.
        """
        pieces: list[Piece] = []
        response: list[tuple[Row, int | None, int]] = []
        for (row, turn), node in zip(entries, nodes):
            if _is_model_output(row.item):
                response.append((row, turn, node))
            else:
                pieces += self._response(response)
                response = []
                piece = self._guard(self._input, row, turn, node)
                if piece is not None:
                    pieces.append(piece)
            if node in forks:
                pieces += self._response(response)
                response = []
        return pieces + self._response(response)

    def _input(self, row: Row, turn: int | None, node: int) -> Piece:
        """A user / system / developer message, a tool result, or another input item (an extension message)."""
        item, place = row.item, row.place
        role = item.get("role")
        if role in ("user", "system", "developer"):
            data: dict[str, Any] = {
                "role": "user" if role == "user" else "system",
                "content": _content(item.get("content"), place),
                "timestamp": row.timestamp,
            }
        elif item.get("type") == "function_call_output":
            call_id = _need_text(item, "call_id", place)
            data = {
                "role": "toolResult",
                "toolCallId": call_id,
                "toolName": self.tool_names.get(call_id, ""),
                "content": _tool_output(item.get("output"), place),
                "isError": False,
                "timestamp": row.timestamp,
            }
        else:
            data = {"role": "extension", "kind": item["type"], "data": item}
        return Piece(parse_agent_message(data, place), [row], [node], turn)

    def _response(self, members: list[tuple[Row, int | None, int]]) -> list[Piece]:
        """One model response: an assistant message of its reasoning, text and function-call items,
        followed by its other items (hosted tool calls...) as extension messages.

        The assistant message's rows are all the response's rows (malformed ones left out) in their
        order, so its source gives the SDK's items back in place; its nodes are those of its own items.
        """
        blocks: list[dict[str, Any]] = []
        held: list[tuple[Row, int | None, int]] = []
        others: list[Piece] = []
        kept: list[Row] = []
        refused = incomplete = False
        for row, turn, node in members:
            item = row.item
            if item.get("role") == "assistant" or item.get("type") in ("reasoning", "function_call"):
                converted = self._guard(_output_blocks, item, row.place)
                if converted is not None:
                    kept.append(row)
                if converted:
                    blocks += converted
                    held.append((row, turn, node))
                    refused = refused or any(block.get("refusal") is True for block in converted)
                    incomplete = incomplete or item.get("status") == "incomplete"
            else:
                data = {"role": "extension", "kind": item["type"], "data": item}
                extension = self._guard(parse_agent_message, data, row.place)
                if extension is not None:
                    others.append(Piece(extension, [row], [node], turn))
                    kept.append(row)
        if not held:
            return others
        asks = any(row.item.get("type") in CALL_TYPES for row, _, _ in members)
        first, first_turn, _ = held[0]
        data = {
            "role": "assistant",
            "content": blocks,
            "stopReason": "refusal" if refused else "toolUse" if asks else "length" if incomplete else "stop",
            "model": MODEL,
            "provider": PROVIDER,
            "usage": {"input": 0, "output": 0},
            "timestamp": first.timestamp,
        }
        message = self._guard(parse_agent_message, data, first.place)
        if message is None:
            return others
        for piece in others:
            piece.in_response = True
        assistant = Piece(message, kept, [node for _, _, node in held], first_turn, asks)
        return [assistant, *others]


def item_messages(rows: list[Row], errors: list[RecordError]) -> list[Message | ExtensionMessage | None]:
    """One message per row, each item alone (a live session stores items one by one, so that each can be
    popped): what :class:`ItemConverter` makes of it, or None for a malformed row (reported in ``errors``)."""
    nodes = list(range(len(rows)))
    pieces = ItemConverter(errors, rows).pieces([(row, None) for row in rows], nodes, set(nodes))
    made: list[Message | ExtensionMessage | None] = [None] * len(rows)
    for piece in pieces:
        made[piece.nodes[0]] = piece.message
    return made


def _is_model_output(item: dict[str, Any]) -> bool:
    """Assistant messages and every typed item the app does not send (see :data:`INPUT_TYPES`)."""
    if item.get("type") in (None, "message"):
        return item.get("role") == "assistant"
    return item["type"] not in INPUT_TYPES


# --- content ----------------------------------------------------------------------------------


def _output_blocks(item: dict[str, Any], place: str) -> list[dict[str, Any]]:
    """The canonical blocks of one ``reasoning``, ``function_call`` or assistant ``message`` item."""
    kind = item.get("type")
    item_id = {"itemId": item["id"]} if isinstance(item.get("id"), str) else {}
    if kind == "reasoning":
        return [_thinking(item, place, item_id)]
    if kind == "function_call":
        call: dict[str, Any] = {
            "type": "toolCall",
            "id": _need_text(item, "call_id", place),
            "name": _need_text(item, "name", place),
            **_arguments(item.get("arguments"), place),
            **item_id,
        }
        return [call]
    content = item.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content, **item_id}]
    if not isinstance(content, list):
        raise InvalidRecord(place, "assistant message content must be a string or a list of parts")
    blocks = []
    for part in content:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("output_text", "input_text"):
            block = {"type": "text", "text": _need_text(part, "text", place), **item_id}
            if part.get("annotations"):
                block["annotations"] = part["annotations"]
            blocks.append(block)
        elif kind == "refusal":
            blocks.append({"type": "text", "text": _need_text(part, "refusal", place), "refusal": True, **item_id})
        else:
            raise InvalidRecord(place, f"unknown assistant content part type {kind!r}")
    return blocks


def _thinking(item: dict[str, Any], place: str, item_id: dict[str, str]) -> dict[str, Any]:
    """A reasoning item: its summary texts (else its reasoning texts) joined by blank lines; the
    ``encrypted_content`` as the signature, byte for byte."""
    texts = []
    for key in ("summary", "content"):
        parts = item.get(key) or []
        if not isinstance(parts, list):
            raise InvalidRecord(place, f"reasoning {key} must be a list")
        texts = [_need_text(part, "text", place) for part in parts if isinstance(part, dict)]
        if texts:
            break
    block: dict[str, Any] = {"type": "thinking", "thinking": "\n\n".join(texts), **item_id}
    signature = item.get("encrypted_content")
    if signature is not None:
        if not isinstance(signature, str):
            raise InvalidRecord(place, "reasoning encrypted_content must be a string")
        block["signature"] = signature
    return block


def _arguments(raw: Any, place: str) -> dict[str, Any]:
    """A function call's ``arguments`` JSON string, parsed; a string that does not parse is kept as it is,
    flagged with ``invalidArguments``."""
    if isinstance(raw, (dict, list)):
        return {"arguments": raw}
    if not isinstance(raw, str):
        raise InvalidRecord(place, "function_call arguments must be a JSON string")
    try:
        return {"arguments": json.loads(raw, parse_constant=_reject_constant)}
    except (ValueError, RecursionError):
        return {"arguments": raw, "invalidArguments": True}


def _content(content: Any, place: str) -> list[dict[str, Any]]:
    """A user / system / developer message's content: a string, or a list of input parts."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise InvalidRecord(place, "message content must be a string or a list of parts")
    return [_input_part(part, place) for part in content]


def _tool_output(output: Any, place: str) -> list[dict[str, Any]]:
    """A ``function_call_output``'s output: text, or a list of input parts."""
    if isinstance(output, str):
        return [{"type": "text", "text": output}]
    if isinstance(output, list):
        return [_input_part(part, place) for part in output]
    raise InvalidRecord(place, "function_call_output output must be a string or a list of parts")


def _input_part(part: Any, place: str) -> dict[str, Any]:
    """One Responses-API input part (``input_text``, ``input_image``, ``input_file``, ``input_audio``)."""
    kind = part.get("type") if isinstance(part, dict) else None
    if kind == "input_text":
        return {"type": "text", "text": _need_text(part, "text", place)}
    if kind == "input_image":
        extras = {"detail": part["detail"]} if isinstance(part.get("detail"), str) else {}
        if isinstance(part.get("file_id"), str):
            extras["fileId"] = part["file_id"]
        url = part.get("image_url")
        if isinstance(url, str) and (inline := _DATA_URL.fullmatch(url)):
            return {"type": "image", "data": inline["data"], "mimeType": inline["mime"], **extras}
        if isinstance(url, str):
            return {"type": "image", "data": "", "mimeType": guess_mime_type(url) or "", "url": url, **extras}
        if "fileId" in extras:
            return {"type": "image", "data": "", "mimeType": "", **extras}
        raise InvalidRecord(place, "input_image has neither an image_url nor a file_id")
    if kind == "input_file":
        block: dict[str, Any] = {"type": "file"}
        name = part.get("filename")
        if isinstance(name, str):
            block["name"] = name
        data, url = part.get("file_data"), part.get("file_url")
        if isinstance(data, str):
            inline = _DATA_URL.fullmatch(data)
            block["data"] = inline["data"] if inline else data
            if inline and inline["mime"]:
                block["mimeType"] = inline["mime"]
        if isinstance(url, str):
            block["url"] = url
        if isinstance(part.get("file_id"), str):
            block["fileId"] = part["file_id"]
        if "mimeType" not in block and (guessed := guess_mime_type(name or url or "")):
            block["mimeType"] = guessed
        return block
    if kind == "input_audio":
        audio = part.get("input_audio")
        if not isinstance(audio, dict):
            raise InvalidRecord(place, "input_audio part without input_audio data")
        audio_format = audio.get("format")
        mime = f"audio/{audio_format}" if isinstance(audio_format, str) else ""
        return {"type": "audio", "data": _need_text(audio, "data", place), "mimeType": mime}
    raise InvalidRecord(place, f"unknown content part type {kind!r}")


def _need_text(data: Any, key: str, place: str) -> str:
    value = data.get(key) if isinstance(data, dict) else None
    if not isinstance(value, str):
        raise InvalidRecord(place, f"{key} must be a string")
    return value
