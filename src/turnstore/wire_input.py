"""Hand-written message dicts, turned into wire records before validation.

``store.messages.append`` takes a message as its JSON object. Apps writing
one by hand reach for the Python field names (``stop_reason``) and a plain
string ``content``; the wire format has neither. :func:`from_input` renames
and wraps them, so what is stored is phi-core's JSON exactly. Stored records
are read with the strict wire adapters and never pass through here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["from_input"]

_WIRE_NAMES = {
    "stop_reason": "stopReason",
    "tool_call_id": "toolCallId",
    "tool_name": "toolName",
    "is_error": "isError",
}
"""Python field names a hand-written message dict may use, and the wire name each stands for."""

_TURN_WIRE_NAMES = {"loop_id": "loopId", "turn_index": "turnIndex"}


def from_input(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """A message dict written by hand, in wire form: what ``store.messages.append`` accepts besides wire records.

    A Python field name (``stop_reason``, ``tool_call_id``, ``tool_name``,
    ``is_error``; ``mime_type`` in a block; ``loop_id``/``turn_index`` in
    ``turnId``) is renamed to its wire name, unless the wire name is there too
    (then it stays an unknown key, kept as written); a string ``content``
    becomes one text block. A dict that needs neither is returned as it is.
    """
    content = data.get("content")
    turn = data.get("turnId")
    if not (
        any(key in _WIRE_NAMES for key in data)
        or isinstance(content, str)
        or (isinstance(content, list) and any(isinstance(block, dict) and "mime_type" in block for block in content))
        or (isinstance(turn, dict) and any(key in _TURN_WIRE_NAMES for key in turn))
    ):
        return data
    fixed = {
        _WIRE_NAMES[key] if key in _WIRE_NAMES and _WIRE_NAMES[key] not in data else key: value
        for key, value in data.items()
    }
    if isinstance(content, str):
        fixed["content"] = [{"type": "text", "text": content}]
    elif isinstance(content, list):
        fixed["content"] = [_renamed(block, {"mime_type": "mimeType"}) for block in content]
    if isinstance(turn, dict):
        fixed["turnId"] = _renamed(turn, _TURN_WIRE_NAMES)
    return fixed


def _renamed(value: Any, names: Mapping[str, str]) -> Any:
    if not isinstance(value, dict) or not any(key in names for key in value):
        return value
    return {names[key] if key in names and names[key] not in value else key: item for key, item in value.items()}
