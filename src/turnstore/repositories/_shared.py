"""Small helpers every repository uses."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ..limits import Limits
from ..usage import DEFAULT_PRICES, PriceTable


def dumps(value: Any) -> str | None:
    """Compact JSON text for a JSON column (None stays NULL)."""
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def loads(value: Any) -> Any:
    """A JSON column back as Python (drivers return text; see ``Database``)."""
    if value is None or not isinstance(value, (str, bytes)):
        return value
    return json.loads(value)


def utcnow() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(timezone.utc)


class Settings:
    """What every repository of one store shares: its price table and limits."""

    __slots__ = ("limits", "prices")

    def __init__(self, prices: PriceTable | None = None, limits: Limits | None = None) -> None:
        self.prices = prices if prices is not None else DEFAULT_PRICES
        self.limits = limits or Limits()
