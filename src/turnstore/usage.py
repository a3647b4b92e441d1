"""Token and dollar totals: price tables and the typed results of usage queries.

Totals are summed in SQL (see :mod:`turnstore.usage_queries`), grouped by model and
provider so each group can be priced; this module prices the groups and adds
them up. Cost is additive, record by record, so the total of a store is the
sum of its sessions' totals and a session's total the sum of its loops':

1. a usage record whose source reported a cost (pi, Tau and appam do) costs
   that: an imported session costs what its source says it cost;
2. a record without one costs its tokens at the :class:`PriceTable` rate for
   its model, when the table has one (``reasoning`` is inside ``output`` and
   is not charged again);
3. otherwise its cost is unknown — its tokens still count, and ``cost`` stays
   ``None`` only if no record of the total could be priced.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .models import CostConfig, Usage
from .usage_queries import USAGE_PART_LOOP, USAGE_PART_REPORTED

__all__ = ["DEFAULT_PRICES", "PriceTable", "UsageRow", "UsageTotals"]


class PriceTable:
    """Per-model prices: ``{"model-name": CostConfig, ...}``.

    A model is looked up by exact name, then by the longest key it starts with
    (``claude-sonnet-4-5-20250929`` uses ``claude-sonnet-4-5``). Names are
    compared lower-cased, with a ``provider/`` prefix dropped and dots read as
    dashes, so OpenRouter-style ``anthropic/claude-sonnet-4.5`` matches too.
    """

    def __init__(self, prices: Mapping[str, CostConfig | Mapping[str, float]] | None = None) -> None:
        self._prices: dict[str, CostConfig] = {}
        for model, price in (prices or {}).items():
            self._prices[_normal(model)] = price if isinstance(price, CostConfig) else _cost_config(price)
        self._by_length = sorted(self._prices, key=len, reverse=True)

    def __len__(self) -> int:
        return len(self._prices)

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.for_model(model) is not None

    def for_model(self, model: str | None, provider: str | None = None) -> CostConfig | None:
        """The price of ``model``, or None when the table has none."""
        if not model:
            return None
        name = _normal(model)
        if provider and f"{_normal(provider)}/{name}" in self._prices:
            return self._prices[f"{_normal(provider)}/{name}"]
        if name in self._prices:
            return self._prices[name]
        for key in self._by_length:
            if name.startswith(key):
                return self._prices[key]
        return None

    def merged(self, other: PriceTable | Mapping[str, Any] | None) -> PriceTable:
        """A table with ``other``'s prices over this one's."""
        if other is None:
            return self
        table = PriceTable()
        table._prices = {**self._prices, **(other if isinstance(other, PriceTable) else PriceTable(other))._prices}
        table._by_length = sorted(table._prices, key=len, reverse=True)
        return table

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PriceTable:
        """Read a JSON object ``{"model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}``.

        Rates are USD per million tokens; the ``*_per_million`` spellings are accepted too.
        """
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a price file is a JSON object of model -> rates")
        return cls(data)

    def items(self) -> Iterable[tuple[str, CostConfig]]:
        """(model, price) pairs."""
        return self._prices.items()


def _normal(model: str) -> str:
    name = model.strip().lower()
    if "/" in name:
        prefix, _, rest = name.partition("/")
        name = rest if prefix and rest else name
    return name.replace(".", "-").replace("_", "-")


def _cost_config(price: Mapping[str, float]) -> CostConfig:
    rates = {key if key.endswith("_per_million") else f"{key}_per_million": value for key, value in price.items()}
    return CostConfig(**rates)


def _rates(input: float, output: float, cache_read: float, cache_write: float) -> CostConfig:
    return CostConfig(
        input_per_million=input,
        output_per_million=output,
        cache_read_per_million=cache_read,
        cache_write_per_million=cache_write,
    )


DEFAULT_PRICES = PriceTable(
    {
        # Anthropic list prices (USD per million tokens; cache write = 5-minute cache).
        "claude-opus-4-5": _rates(5, 25, 0.50, 6.25),
        "claude-opus-4": _rates(15, 75, 1.50, 18.75),
        "claude-sonnet-4": _rates(3, 15, 0.30, 3.75),
        "claude-haiku-4-5": _rates(1, 5, 0.10, 1.25),
        "claude-3-5-haiku": _rates(0.80, 4, 0.08, 1.00),
        # OpenAI list prices (cached input billed at the cache_read rate).
        "gpt-5": _rates(1.25, 10, 0.125, 0),
        "gpt-5-mini": _rates(0.25, 2, 0.025, 0),
        "gpt-5-nano": _rates(0.05, 0.40, 0.005, 0),
        "gpt-4-1": _rates(2, 8, 0.50, 0),
        "gpt-4-1-mini": _rates(0.40, 1.60, 0.10, 0),
        "gpt-4o": _rates(2.50, 10, 1.25, 0),
        "gpt-4o-mini": _rates(0.15, 0.60, 0.075, 0),
        "o3": _rates(2, 8, 0.50, 0),
        "o4-mini": _rates(1.10, 4.40, 0.275, 0),
        # Google list prices (prompts up to 200k tokens).
        "gemini-2-5-pro": _rates(1.25, 10, 0.31, 0),
        "gemini-2-5-flash": _rates(0.30, 2.50, 0.075, 0),
    }
)
"""List prices of common models as published in late 2025. Prices change: pass
your own with ``Store(prices=...)`` or ``turnstore usage --prices FILE``."""


class UsageTotals(BaseModel):
    """Summed usage, with its cost and how many usage records went into it."""

    model_config = ConfigDict(extra="forbid")

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: float | None = None
    """USD: priced from the price table, or as reported by the source; None when neither is known."""
    reported_cost: float | None = None
    """USD the sources themselves reported, where they did."""
    requests: int = 0
    """Model calls: one per message usage record (assistant replies, compaction summaries), plus
    each counted loop's reported count (``loops.end(requests=...)``, appam ``request_count``,
    OpenAI Agents ``requests``), or one for a loop that reported usage without a count."""
    cache_hit_rate: float = 0.0
    """``cache_read / (input + cache_read + cache_write)``."""

    @property
    def usage(self) -> Usage:
        """The token counts as a :class:`~turnstore.models.Usage`."""
        return Usage(
            input=self.input,
            output=self.output,
            reasoning=self.reasoning,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
            total_tokens=self.total_tokens,
        )


class UsageRow(UsageTotals):
    """Totals of one group: a model/provider, a loop, a session or a day."""

    model: str | None = Field(None, exclude_if=lambda v: v is None)
    provider: str | None = Field(None, exclude_if=lambda v: v is None)
    loop_id: str | None = Field(None, exclude_if=lambda v: v is None)
    session_id: str | None = Field(None, exclude_if=lambda v: v is None)
    day: str | None = Field(None, exclude_if=lambda v: v is None)


class Tally:
    """Adds up the rows of :func:`turnstore.usage_queries.usage_rows` into one priced total.

    Rows come in parts (``USAGE_PART_*``): a (model, provider) group's TOTAL row
    counts all its records; its REPORTED row, the records among them whose source
    reported a cost; LOOP rows, loops' own reported usage. :meth:`add` keeps
    exact integer sums per (model, provider); :meth:`fields` prices the records
    without a reported cost once per model.
    """

    __slots__ = ("sums", "reported", "requests", "_groups")

    def __init__(self) -> None:
        self.sums = [0, 0, 0, 0, 0, 0]
        self.reported: float | None = None
        self.requests = 0
        # (model, provider) -> [input, output, cache_read, cache_write, records] not reported
        self._groups: dict[tuple[str | None, str | None], list[int]] = {}

    def add(self, model: str | None, provider: str | None, values: tuple[Any, ...]) -> None:
        """Add one row: six token sums, a cost, the record count, the part and the requests."""
        tokens = [int(v or 0) for v in values[:6]]
        cost, count, part = values[6], int(values[7] or 0), values[8]
        # A REPORTED row is already counted in its TOTAL row: it only moves records out of the priced part.
        sign = -1 if part == USAGE_PART_REPORTED else 1
        if sign == 1:
            for index, value in enumerate(tokens):
                self.sums[index] += value
            self.requests += int(values[9] or 0)
        if cost is not None:
            self.reported = (self.reported or 0.0) + float(cost)
            if part == USAGE_PART_LOOP:
                return
        unpriced = self._groups.setdefault((model, provider), [0, 0, 0, 0, 0])
        for index, value in enumerate((tokens[0], tokens[1], tokens[3], tokens[4], count)):
            unpriced[index] += sign * value

    def cost(self, prices: PriceTable) -> float | None:
        """Reported costs plus the price-table cost of the other records; None if nothing is priced."""
        total, priced = self.reported or 0.0, self.reported is not None
        for (model, provider), (input, output, cache_read, cache_write, records) in self._groups.items():
            price = prices.for_model(model, provider) if records else None
            if price is not None:
                total += price.price(input, output, cache_read, cache_write)
                priced = True
        return round(total, 10) if priced else None

    def fields(self, prices: PriceTable) -> dict[str, Any]:
        """The tally as :class:`UsageTotals` keyword arguments, priced with ``prices``."""
        input, output, reasoning, cache_read, cache_write, total = self.sums
        prompt = input + cache_read + cache_write
        return {
            "input": input,
            "output": output,
            "reasoning": reasoning,
            "cache_read": cache_read,
            "cache_write": cache_write,
            "total_tokens": total,
            "cost": self.cost(prices),
            "reported_cost": None if self.reported is None else round(self.reported, 10),
            "requests": self.requests,
            "cache_hit_rate": cache_read / prompt if prompt else 0.0,
        }
