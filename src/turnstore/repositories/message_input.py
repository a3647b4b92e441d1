"""A message as a caller gives it to ``append``: a model, or its JSON object, checked and made into its row before
anything is written."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from ..errors import InvalidArgument, InvalidMessage, LimitExceeded, LoopNotFound, TurnIdMismatch
from ..limits import Limits
from ..models import AGENT_MESSAGE, MAX_INT, ExtensionMessage, Message, TurnId, Usage, now_ms
from ..pricing import Pricing
from ..wire_input import from_input
from . import media as out_of_line
from ._shared import usage_argument
from .message_json import READ_DEPTH, deeper_than, dump_message, find, shorten
from .rows import MAX_TURN_INDEX, row_params

__all__ = ["MessageInput", "check_messages", "parse_message", "prepare_row", "turn_json"]

MessageInput = Message | ExtensionMessage | Mapping[str, Any]
"""A message as a model, or as its JSON object (validated on append)."""


def parse_message(value: MessageInput) -> Message | ExtensionMessage:
    """A validated message model from a model or a JSON object.

    A JSON object may use Python field names and a plain-string ``content``
    (see :func:`turnstore.wire_input.from_input`); it is stored in wire form.
    A model is validated again, from its JSON (it may have been changed since
    it was built): the model returned is a new one.

    Raises:
        InvalidMessage: the value is not a valid AgentMessage; names the failing fields.
    """
    return checked_message(value)[0]


def checked_message(value: MessageInput) -> tuple[Message | ExtensionMessage, str | None]:
    """:func:`parse_message`, and a model's stored JSON text if making the model dumped it (else None).

    A model given is checked as a stored message is read: its JSON is dumped
    and validated, and the model validated from it is returned, with that
    text. pydantic validates a model only when it is built, so one changed
    since (``message.usage.input = -5``, ``model_copy(update=...)``) could
    otherwise hold anything, and be stored as it is: counted in every total,
    refused on every read. The text validated is the text stored, so what is
    written is what reads back; a model is validated once, as a dict is.
    """
    if isinstance(value, (Message, ExtensionMessage)):
        text = dump_message(value)
        try:
            parsed: Message | ExtensionMessage = AGENT_MESSAGE.validate_json(text)
        except ValidationError as error:
            raise InvalidMessage.from_pydantic(error) from None
        return parsed, text
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
            return AGENT_MESSAGE.validate_python(from_input(value)), None
        except ValidationError as error:
            raise InvalidMessage.from_pydantic(error) from None
    raise InvalidMessage(
        f"a message must be a turnstore message model or a JSON object, not {type(value).__name__}",
        [("message", "wrong type")],
    )


def check_messages(messages: object) -> None:
    """Refuse a turn's ``messages`` that are not a sequence of messages: one message (a dict or a string), None,
    a generator.

    Raises:
        InvalidArgument: names what was given.
    """
    if not isinstance(messages, Sequence) or isinstance(messages, (str, bytes, bytearray)):
        raise InvalidArgument("messages", f"must be a list of messages, not {type(messages).__name__}")


_DATED_ROLES = frozenset({"user", "assistant", "toolResult", "system"})
"""Roles whose messages carry a ``timestamp`` (a system prompt's is optional, 0 when absent: dated like the
others, as ``Message.system()`` dates one)."""


def _dated_role(role: object) -> bool:
    return isinstance(role, str) and role in _DATED_ROLES


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


def prepare_row(
    message: MessageInput,
    loop_id: str | None,
    turn_index: int | None,
    usage: Usage | Mapping[str, Any] | None,
    timestamp: int | None,
    source: str | None = None,
    usage_known: bool = True,
    *,
    limits: Limits,
    pricing: Pricing,
    model: str | None = None,
    provider: str | None = None,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The row ``append`` inserts for a message, its media moved out, and that media by digest.

    Everything a caller gave is checked here, before anything is written: the
    message itself, its ``turnId`` against ``loop_id`` / ``turn_index``, the
    verbatim ``source``, and the store's ``limits``. A message without a
    ``turnId`` that is appended to a turn is stored with one; a hand-written
    dict without a ``timestamp`` is dated ``timestamp``, else now.

    ``usage`` (a :class:`Usage` or a dict of its fields) counts for a message
    that carries none of its own, attributed to ``model`` and ``provider``.

    Raises:
        InvalidMessage / TurnIdMismatch / InvalidArgument / LimitExceeded: as ``append`` documents them.
        LoopNotFound: a loop id holding NUL (no loop's does; PostgreSQL could not even look one up).
    """
    _check_arguments(loop_id, timestamp, usage_known, model, provider, source, limits)
    usage = usage_argument(usage)
    dated = now_ms() if timestamp is None else timestamp  # 0 is a time (1970-01-01), not a missing one
    if isinstance(message, Mapping) and "timestamp" not in message and _dated_role(message.get("role")):
        # A hand-written dict without a time is dated as it is appended, as Message.user() dates a message.
        if dated < 0:
            raise InvalidArgument(
                "timestamp", f"dates a message without a time of its own: must be 0 or more, got {dated}"
            )
        message = {**message, "timestamp": dated}
    parsed, text = checked_message(message)
    role = parsed.role
    turn = None if isinstance(parsed, ExtensionMessage) else parsed.turn
    if turn is not None:
        if loop_id is not None and turn.loop_id != loop_id:
            raise TurnIdMismatch(
                f"message turnId.loopId {turn.loop_id!r} differs from loop_id {loop_id!r}",
                [("turnId.loopId", "mismatch")],
            )
        if turn_index is not None and turn.turn_index != turn_index:
            raise TurnIdMismatch(
                f"message turnId.turnIndex {turn.turn_index} differs from turn_index {turn_index}",
                [("turnId.turnIndex", "mismatch")],
            )
        loop_id, turn_index = turn.loop_id, turn.turn_index
    if loop_id is None:
        raise InvalidArgument("loop_id", "append needs a loop_id (or a message with a turnId)")
    if "\x00" in loop_id:
        raise LoopNotFound(f"loop {loop_id!r} not found")
    if turn_index is not None and (
        not isinstance(turn_index, int) or isinstance(turn_index, bool) or not 0 <= turn_index <= MAX_TURN_INDEX
    ):
        problem = f"must be an integer from 0 to {MAX_TURN_INDEX}, got {turn_index!r}"
        if turn is not None:  # the message's own turnId carries it
            raise InvalidMessage(f"turnId.turnIndex {problem}", [("turnId.turnIndex", "too large")])
        raise InvalidArgument("turn_index", problem)
    stamp = turn is None and turn_index is not None and role != "extension"
    if stamp and turn_index is not None and parsed.__pydantic_extra__:
        # Stamp the row's turn into the message, as phi-core would have...
        parsed = parsed.model_copy(update={"turn": TurnId(loop_id=loop_id, turn_index=turn_index)})
        stamp = False
        text = None
    if text is None:
        text = dump_message(parsed)
    if stamp:
        # ...cheaply: "turnId" is a message's last key when it has no unknown keys.
        text = f"{text[:-1]},{turn_json(loop_id, turn_index)}}}"  # type: ignore[arg-type]
    limits.check_message(text)
    params = row_params(parsed, text, loop_id, turn_index, usage, source, timestamp=dated, usage_known=usage_known)
    if usage is not None and params["model"] is None:
        params["model"], params["provider"] = model, provider
    limits.check_row(params)
    pricing.price_row(params)
    return params, out_of_line.split_row(params)


def _check_arguments(
    loop_id: object,
    timestamp: object,
    usage_known: object,
    model: object,
    provider: object,
    source: object,
    limits: Limits,
) -> None:
    """Refuse :func:`prepare_row`'s arguments other than the message that are not of their kind, in one line each."""
    if loop_id is not None and not isinstance(loop_id, str):
        raise InvalidArgument("loop_id", f"must be a string, not {type(loop_id).__name__}")
    if timestamp is not None and (
        not isinstance(timestamp, int) or isinstance(timestamp, bool) or not -MAX_INT - 1 <= timestamp <= MAX_INT
    ):
        # Signed: an extension message may be dated before 1970 (its row's column, not phi-core's U64).
        raise InvalidArgument("timestamp", f"must be unix milliseconds, a 64-bit integer, got {timestamp!r}")
    if not isinstance(usage_known, bool):
        raise InvalidArgument("usage_known", f"must be True or False, got {usage_known!r}")
    for name, value in (("model", model), ("provider", provider)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(name, f"must be a string, not {type(value).__name__}")
    if source is not None:
        if not isinstance(source, str):
            raise InvalidArgument(
                "source", f"must be a string (the verbatim record) or None, got {type(source).__name__}"
            )
        if "\x00" in source:
            raise InvalidArgument("source", "holds a NUL character (U+0000), which a database text column cannot store")
        limit = limits.max_message_bytes
        if len(source) * 4 > limit and len(source.encode("utf-8", "surrogatepass")) > limit:
            raise LimitExceeded(f"source is over the limit of {limit} bytes", [("source", "too large")])
