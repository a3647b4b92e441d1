"""A message's stored JSON text: dumping a model, and refusing what the store could not read back.

Every stored message is pydantic's canonical JSON of its model. Some models
dump text the store's own reader would refuse (NaN or Infinity, nesting
deeper than the reader takes, an integer too long to convert, a lone
surrogate); :func:`dump_message` finds those before anything is written and
names the field, so no loop is ever left unreadable.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic_core import PydanticSerializationError, from_json

from ..errors import InvalidMessage
from ..models import ExtensionMessage, Message

__all__ = ["READ_DEPTH", "deeper_than", "dump_message", "find", "has_surrogate", "shorten"]


def dump_message(model: Message | ExtensionMessage) -> str:
    """A message's canonical JSON text, as stored.

    Raises:
        InvalidMessage: the model holds a value JSON cannot carry (a lone
            surrogate, NaN or Infinity, an object that is not JSON), or one the
            store could not read back (see :func:`_check_readable`).
    """
    try:
        # model_dump_json() without its per-call argument handling; no warning for a field changed to a
        # value of another type: the text is validated before it is stored, and that names the field.
        text = model.__pydantic_serializer__.to_json(model, warnings=False).decode()
    except (PydanticSerializationError, ValueError, TypeError) as error:
        raise _unserializable(model, error) from None
    if len(text) > _DIGITS and _reads_back(text):
        return text
    if ("NaN" in text or "Infinity" in text) and _has_non_finite(text):
        raise InvalidMessage(
            "message holds NaN or Infinity, which JSON cannot carry", [("message", "non-finite number")]
        )
    _check_readable(model, text)
    return text


READ_DEPTH = 200
"""Deepest nesting of arrays and objects a stored message may have: pydantic-core's JSON reader
takes 201 levels, and :func:`parse_rows` reads messages inside one more array."""

_DIGITS = 4_300
"""Longest integer (in digits) the JSON readers convert (Python's and pydantic-core's limit)."""


def _reads_back(text: str) -> bool:
    """Whether the store's reader takes ``text`` back as it reads stored messages, finite numbers only.

    One pass of pydantic-core's parser answers what :func:`dump_message` asks
    of a long text (no bare NaN/Infinity, nesting the reader takes, no integer
    too long to convert) faster than scanning it for each: on a 150 KB image
    message, 4× faster. False sends the text to those checks, which name what
    is wrong.
    """
    try:
        from_json(f"[{text}]", allow_inf_nan=False, cache_strings=False)
    except ValueError:
        return False
    return True


def _check_readable(model: Message | ExtensionMessage, text: str) -> None:
    """Refuse JSON the store's own reader would not take back, so a loop is never left unreadable.

    The models accept (and dump) nesting a little deeper than the reader takes,
    and integers of any length; both are checked here, with the reader itself,
    only for texts that could hold them (long, or with many brackets).
    """
    deep = text.count("[") + text.count("{") >= READ_DEPTH
    if not deep and len(text) <= _DIGITS:
        return
    try:
        from_json(f"[{text}]" if deep else text, cache_strings=False)
    except ValueError as error:
        data = model.model_dump(by_alias=True)
        if "recursion" in str(error):
            path = find(data, lambda value, depth: depth > READ_DEPTH - 2 and isinstance(value, (list, dict)))
            where = shorten(path)
            raise InvalidMessage(
                f"{where}: nested more than {READ_DEPTH} levels deep, more than the store can read back",
                [(where, "nested too deeply")],
            ) from None
        path = find(data, lambda value, _: isinstance(value, int) and abs(value).bit_length() > _DIGITS * 3.32)
        where = shorten(path)
        raise InvalidMessage(
            f"{where}: an integer of more than {_DIGITS} digits, more than the store can read back",
            [(where, "number too large")],
        ) from None


def _unserializable(model: Message | ExtensionMessage, error: Exception) -> InvalidMessage:
    """The error for a model pydantic cannot dump as JSON, naming the field when it is a lone surrogate."""
    if "surrogates not allowed" in str(error):
        try:
            data = model.model_dump(by_alias=True)
        except ValueError:  # a surrogate in a key of an extra field: pydantic cannot walk it either
            data = None
        path = find(data, lambda value, _: isinstance(value, str) and has_surrogate(value))
        where = shorten(path)
        return InvalidMessage(
            f"{where}: holds a lone surrogate, which UTF-8 (and so the database) cannot store",
            [(where, "lone surrogate")],
        )
    return InvalidMessage(f"message cannot be stored as JSON: {error}", [("message", str(error))])


def has_surrogate(text: str) -> bool:
    """Whether ``text`` holds a lone surrogate, which UTF-8 (and so every database) cannot store."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def deeper_than(data: Any, limit: int) -> bool:
    """Whether lists and dicts inside ``data`` nest more than ``limit`` levels deep (walked without recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        children = value.values() if isinstance(value, Mapping) else value
        stack.extend((child, depth + 1) for child in children if isinstance(child, (list, dict)))
    return False


def find(data: Any, test: Any) -> list[Any]:
    """The path to the first value (or dict key) inside ``data`` for which ``test(value, depth)`` holds."""
    stack: list[tuple[Any, list[Any], int]] = [(data, [], 1)]
    while stack:
        value, path, depth = stack.pop()
        if test(value, depth):
            return path
        if isinstance(value, dict):
            for key in value:
                if test(key, depth):
                    return [*path, key]
            stack.extend((child, [*path, key], depth + 1) for key, child in reversed(value.items()))
        elif isinstance(value, list):
            stack.extend((child, [*path, index], depth + 1) for index, child in reversed(list(enumerate(value))))
    return []


def shorten(path: list[Any], keep: int = 4) -> str:
    """``content[0].arguments.a…`` (at most ``keep`` parts; surrogates shown escaped), or ``message``."""
    parts: list[str] = []
    for part in path[:keep]:
        if isinstance(part, int):
            parts.append(f"[{part}]")
        else:
            name = str(part).encode("utf-8", "backslashreplace").decode("utf-8")
            parts.append(f".{name}" if parts else name)
    text = "".join(parts) or "message"
    return text + "…" if len(path) > keep else text


def _refuse_constant(name: str) -> float:
    raise ValueError(name)


def _has_non_finite(text: str) -> bool:
    """Whether dumped JSON holds a bare NaN/Infinity (not merely those words inside a string)."""
    try:
        json.loads(text, parse_constant=_refuse_constant)
    except ValueError:
        return True
    return False
