"""A message as a caller gives it to ``append``: a model, or its JSON object, validated before anything is written."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidMessage
from ..models import AGENT_MESSAGE, ExtensionMessage, Message, TurnId
from ..wire_input import from_input
from .message_json import READ_DEPTH, deeper_than, find, shorten

__all__ = ["MessageInput", "parse_message", "turn_json"]

MessageInput = Message | ExtensionMessage | Mapping[str, Any]
"""A message as a model, or as its JSON object (validated on append)."""


def parse_message(value: MessageInput) -> Message | ExtensionMessage:
    """A validated message model from a model or a JSON object.

    A JSON object may use Python field names and a plain-string ``content``
    (see :func:`turnstore.wire_input.from_input`); it is stored in wire form.

    Raises:
        InvalidMessage: the value is not a valid AgentMessage; names the failing fields.
    """
    if isinstance(value, (Message, ExtensionMessage)):
        return value
    if isinstance(value, Mapping):
        if deeper_than(value, READ_DEPTH):
            # Refused before pydantic sees it: pydantic-core reports input this deep through
            # sys.unraisablehook (its repr recurses) besides raising, which apps would see as noise.
            where = shorten(find(value, lambda item, depth: depth > READ_DEPTH and isinstance(item, (list, dict))))
            raise InvalidMessage(
                f"{where}: nested more than {READ_DEPTH} levels deep, more than the store can read back",
                [(where, "nested too deeply")],
            )
        try:
            parsed: Message | ExtensionMessage = AGENT_MESSAGE.validate_python(from_input(value))
            return parsed
        except ValidationError as error:
            raise InvalidMessage.from_pydantic(error) from None
    raise InvalidMessage(
        f"a message must be a turnstore message model or a JSON object, not {type(value).__name__}",
        [("message", "wrong type")],
    )


_TURN_JSON: dict[tuple[str, int], str] = {}


def turn_json(loop_id: str, turn_index: int) -> str:
    """``"turnId":{...}`` exactly as the models dump it (cached: a loop appends many messages per turn)."""
    key = (loop_id, turn_index)
    text = _TURN_JSON.get(key)
    if text is None:
        if len(_TURN_JSON) > 4096:
            _TURN_JSON.clear()
        text = _TURN_JSON[key] = '"turnId":' + TurnId(loop_id=loop_id, turn_index=turn_index).model_dump_json()
    return text
