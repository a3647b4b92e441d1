"""Small helpers every repository uses."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

from pydantic import ValidationError

from .. import queries as q
from ..database import Database
from ..errors import InvalidArgument, InvalidMessage, LoopNotFound, SessionNotFound
from ..limits import Limits
from ..models import Usage
from ..pricing import Pricing, SavedPrices
from ..usage import PriceTable
from .message_json import READ_DEPTH, deeper_than, find, has_surrogate, shorten


def dumps(value: Any) -> str | None:
    """Compact JSON text for a JSON column (None stays NULL)."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def json_object(what: str, value: Mapping[str, Any] | None) -> str | None:
    """``value``, a JSON object (session or loop metadata, a loop's config), as the text its column stores.

    Checked as the column is read back, before anything is written: a read
    validates nesting only so deep (the store's :data:`.message_json.READ_DEPTH`,
    as for messages), JSON has no NaN, and no database stores a lone surrogate.
    A tuple is stored as an array, and read back as a list.

    Raises:
        InvalidArgument: ``what`` is not a JSON object, or what inside it is wrong, named by its place.
        InvalidMessage: a string inside it holds a lone surrogate (as :func:`~turnstore.limits.check_json`
            refuses a NUL).
    """
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument(what, f"must be a JSON object (a dict), not {type(value).__name__}")
    if deeper_than(value, READ_DEPTH):
        raise _too_deep(what, value)
    try:
        text = json.dumps(dict(value), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    except RecursionError:  # nested tuples, which deeper_than does not walk
        raise _too_deep(what, value) from None
    except (TypeError, ValueError) as error:
        raise InvalidArgument(what, f"{_place(value, _not_json)}not JSON ({error})") from None
    if text.count("[") + text.count("{") >= READ_DEPTH and deeper_than(json.loads(text), READ_DEPTH):
        raise _too_deep(what, json.loads(text))
    if has_surrogate(text):
        where = _place(value, lambda item, _: isinstance(item, str) and has_surrogate(item))
        # InvalidMessage, as for a NUL (limits.check_json): text no database column can hold.
        raise InvalidMessage(
            f"{what}: {where}holds a lone surrogate, which UTF-8 (and so the database) cannot store",
            [(what, "lone surrogate")],
        )
    return text


def _place(value: Any, test: Any) -> str:
    """``key[0]: ``, the place of the first value inside ``value`` that ``test`` finds, or nothing."""
    path = find(value, test)
    return f"{shorten(path)}: " if path else ""


def _not_json(value: Any, _depth: int) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    return not isinstance(value, (str, int, list, tuple, dict)) and value is not None


def _too_deep(what: str, value: Any) -> InvalidArgument:
    where = _place(value, lambda item, depth: depth > READ_DEPTH and isinstance(item, (list, tuple, dict)))
    return InvalidArgument(what, f"{where}nested more than {READ_DEPTH} levels deep, more than the store can read back")


def loads(value: Any) -> Any:
    """A JSON column back as Python (drivers return text; see ``Database``)."""
    if value is None or not isinstance(value, (str, bytes)):
        return value
    return json.loads(value)


def utcnow() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def check_whole(name: str, value: object, low: int, high: int) -> None:
    """Refuse ``value`` unless it is an integer from ``low`` to ``high`` (a bool is not one): one line naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidArgument(name, f"must be an integer from {low} to {high}, got {value!r}")


def require_loop(db: Database, loop_id: str) -> None:
    """Raise :class:`LoopNotFound` unless ``loop_id`` is a loop of the store (a read that found nothing says why)."""
    if db.scalar(q.loop_session(), {"loop_id": loop_id}) is None:
        raise LoopNotFound(f"loop {loop_id!r} not found")


def require_session(db: Database, session_id: str) -> None:
    """Raise :class:`SessionNotFound` unless ``session_id`` is a session of the store."""
    if db.fetchone(q.session_exists(), {"session_id": session_id}) is None:
        raise SessionNotFound(f"session {session_id!r} not found")


class Settings:
    """What every repository of one store shares: its price overrides, the pricing of new records, and limits."""

    __slots__ = ("limits", "prices", "pricing")

    def __init__(self, prices: PriceTable | None = None, limits: Limits | None = None) -> None:
        self.prices = prices if prices is not None else PriceTable()
        self.pricing = Pricing(self.prices)
        self.limits = limits or Limits()

    def load_saved_prices(self, db: Database) -> None:
        """Price new records with the overrides saved in the store, as they are now."""
        self.pricing.saved = SavedPrices(db.fetchall(q.saved_prices()))


_USAGE_FIELDS = tuple(Usage.model_fields)
_USAGE_KEYS = frozenset(_USAGE_FIELDS) | {"cacheRead", "cacheWrite", "totalTokens"}
"""What a usage dict may hold: the fields, and the wire names phi-core writes."""


def usage_argument(usage: Usage | Mapping[str, Any] | None) -> Usage | None:
    """A ``usage`` argument (``loops.end``, ``messages.append``): a :class:`Usage`, or its fields as a dict.

    A :class:`Usage` is validated again from its fields: one changed since it
    was built (``usage.input = -1``, ``model_copy(update=...)``) could hold
    any value, and its columns would be written as they are.

    Raises:
        InvalidArgument: anything else, or fields a usage cannot hold (one line naming them).
    """
    if usage is None:
        return None
    if isinstance(usage, Usage):
        try:
            return Usage.model_validate(usage.model_dump(warnings=False))  # type: ignore[no-any-return]
        except ValidationError as error:
            raise InvalidArgument("usage", problems(error)) from None
    if not isinstance(usage, Mapping):
        raise InvalidArgument("usage", f"must be a Usage or a dict of its fields, not {type(usage).__name__}")
    unknown = [key for key in usage if key not in _USAGE_KEYS]
    if unknown:  # a Usage keeps unknown keys, but as an argument one is a misspelt count (cache_read_tokens)
        raise InvalidArgument("usage", f"{unknown[0]!r} is not a usage field (fields: {', '.join(_USAGE_FIELDS)})")
    try:
        return Usage.model_validate(dict(usage))  # type: ignore[no-any-return]
    except ValidationError as error:
        raise InvalidArgument("usage", problems(error)) from None


def problems(error: ValidationError) -> str:
    """A pydantic error on one line: ``field: problem; ...``."""
    return "; ".join(
        f"{'.'.join(map(str, item['loc']))}: {item['msg']}" if item["loc"] else item["msg"]
        for item in error.errors(include_url=False)
    )
