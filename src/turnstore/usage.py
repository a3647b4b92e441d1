"""Token and dollar totals: price overrides and the typed results of usage queries.

Each usage record's cost is fixed when the record is written (see
:mod:`turnstore.pricing`: a reported cost, else an override from a
:class:`PriceTable`, else the genai-prices catalog, else unknown) and stored in
its row. Totals are SQL sums of those costs (see :mod:`turnstore.usage_queries`),
grouped by model, provider and cost source; this module adds the groups up.
Cost is additive, record by record, so the total of a store is the sum of its
sessions' totals and a session's total the sum of its loops'. A total's
``cost`` is its priced part; ``unpriced_records``, ``unpriced_tokens`` and
``unpriced_models`` say what it leaves out.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .errors import InvalidPrices
from .models import CostConfig, Usage
from .usage_queries import COST_DECIMALS

__all__ = ["DEFAULT_PRICES", "CatalogPrices", "PriceTable", "SavedPrice", "UsageRow", "UsageTotals"]


MAX_PRICE_FILE_BYTES = 1 << 20
"""The largest price file read (1 MiB: thousands of models); larger ones are refused unread."""

MAX_RATE = 1_000_000.0
"""The highest rate accepted, in USD per million tokens: far above any list price, and low enough
that no sum of 64-bit token counts priced at it overflows a float."""

_RATE_NAMES = ("input", "output", "cache_read", "cache_write")


class PriceTable:
    """Per-model prices: ``{"model-name": CostConfig, ...}``: overrides, which win over the catalog.

    A model is looked up by its name, or by its name without a date or
    ``-latest`` suffix (``claude-sonnet-4-5-20250929`` uses ``claude-sonnet-4-5``),
    never by a shorter prefix: ``gpt-4-1-nano`` does not take ``gpt-4-1``'s price.
    Names are compared lower-cased, with a ``provider/`` prefix dropped and dots
    read as dashes, so OpenRouter-style ``anthropic/claude-sonnet-4.5`` matches too.

    Every rate must be a finite number from 0 to :data:`MAX_RATE`; anything
    else raises :class:`~turnstore.errors.InvalidPrices` naming the model and rate.
    """

    def __init__(self, prices: Mapping[str, CostConfig | Mapping[str, float]] | None = None) -> None:
        self._set(_parse_prices(prices or {}, ""))

    def _set(self, prices: dict[str, CostConfig]) -> None:
        self._prices = prices

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
        base = _undated(name)
        return self._prices.get(base) if base != name else None

    def merged(self, other: PriceTable | Mapping[str, Any] | None) -> PriceTable:
        """A table with ``other``'s prices over this one's."""
        if other is None:
            return self
        table = PriceTable()
        table._set({**self._prices, **(other if isinstance(other, PriceTable) else PriceTable(other))._prices})
        return table

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PriceTable:
        """Read a JSON object ``{"model": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}``.

        Rates are USD per million tokens; the ``*_per_million`` spellings are accepted too.
        Only a regular file of at most :data:`MAX_PRICE_FILE_BYTES` is read (a FIFO or a
        device is refused before any read).

        Raises:
            InvalidPrices: the file cannot be read, is not UTF-8 JSON, or a model or rate is
                malformed; the message names the file (and line, model and rate).
        """
        name = os.fspath(path)
        data = _read_price_file(name)
        if not isinstance(data, dict):
            raise InvalidPrices(f"{name}: a price file is a JSON object of model -> rates, not {_json_kind(data)}")
        table = cls()
        table._set(_parse_prices(data, f"{name}: "))
        return table

    def items(self) -> Iterable[tuple[str, CostConfig]]:
        """(model, price) pairs."""
        return self._prices.items()


def _read_price_file(name: str) -> Any:
    """The JSON value of a price file, read with its size bounded."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before it can be refused.
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as error:
        raise InvalidPrices(f"{name}: cannot open the price file: {error.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InvalidPrices(f"{name}: a price file must be a regular file, not a {_file_kind(info.st_mode)}")
        if info.st_size > MAX_PRICE_FILE_BYTES:
            raise InvalidPrices(
                f"{name}: the price file is {info.st_size} bytes, over the limit of {MAX_PRICE_FILE_BYTES}"
            )
        with os.fdopen(os.dup(fd), "rb") as handle:
            raw = handle.read(MAX_PRICE_FILE_BYTES + 1)
    except OSError as error:
        raise InvalidPrices(f"{name}: cannot read the price file: {error.strerror}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_PRICE_FILE_BYTES:
        raise InvalidPrices(f"{name}: the price file is over the limit of {MAX_PRICE_FILE_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidPrices(f"{name}: not UTF-8 text (byte {error.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidPrices(f"{name} line {error.lineno} column {error.colno}: {error.msg}") from None
    except RecursionError:
        raise InvalidPrices(f"{name}: JSON nested too deeply") from None
    except ValueError:  # an integer beyond int()'s digit limit
        raise InvalidPrices(f"{name}: a number has too many digits to read") from None


def _parse_prices(prices: Mapping[Any, Any], where: str) -> dict[str, CostConfig]:
    if not isinstance(prices, Mapping):
        raise InvalidPrices(f"{where}prices are a mapping of model -> rates, not {_json_kind(prices)}")
    parsed: dict[str, CostConfig] = {}
    for model, price in prices.items():
        if not isinstance(model, str):
            raise InvalidPrices(f"{where}a model name must be a string, not {_shown(model)}")
        if not _normal(model):  # every name starts with "": it would price every model
            raise InvalidPrices(f"{where}a model name must not be empty, got {_shown(model)}")
        parsed[_normal(model)] = _cost_config(price, f"{where}model {_shown(model)}")
    return parsed


def _cost_config(price: Any, where: str) -> CostConfig:
    if isinstance(price, CostConfig):
        price = price.model_dump()
    if not isinstance(price, Mapping):
        raise InvalidPrices(f'{where}: rates are an object like {{"input": 3, "output": 15}}, not {_json_kind(price)}')
    rates: dict[str, float] = {}
    for key, value in price.items():
        name = key.removesuffix("_per_million") if isinstance(key, str) else key
        if name not in _RATE_NAMES:
            raise InvalidPrices(f"{where}: unknown rate {_shown(key)} (known: {', '.join(_RATE_NAMES)})")
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidPrices(f"{where}: {name} is {_shown(value)}, not a number")
        if not 0 <= value <= MAX_RATE:  # NaN fails this too
            raise InvalidPrices(
                f"{where}: {name} is {_shown(value)}, not a price from 0 to {MAX_RATE:,.0f} USD per million tokens"
            )
        rates[f"{name}_per_million"] = float(value)
    return CostConfig(**rates)


def _shown(value: Any) -> str:
    """A value for an error message: its repr, cut short."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**30 else "a huge integer"
    return text if len(text) <= 60 else text[:57] + "..."


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


def _normal(model: str) -> str:
    name = model.strip().lower()
    if "/" in name:
        prefix, _, rest = name.partition("/")
        name = rest if prefix and rest else name
    return name.replace(".", "-").replace("_", "-")


_DATED = re.compile(r"(-latest|-\d{4}-?\d{2}-?\d{2}|@\d{8})$")


def _undated(name: str) -> str:
    """A normalized model name without its date or ``-latest`` suffix."""
    return _DATED.sub("", name)


class CatalogPrices(PriceTable):
    """The genai-prices catalog's current prices, looked up as a :class:`PriceTable` is.

    For a look at one model's list price (``DEFAULT_PRICES.for_model("gpt-4.1-nano", "openai")``);
    stored costs are priced at each record's own time and tier (see :mod:`turnstore.pricing`).
    A tiered price shows its base rate.
    """

    def for_model(self, model: str | None, provider: str | None = None) -> CostConfig | None:
        """The catalog's price of ``model`` now, or None when it has none."""
        from .pricing import catalog_rates

        if not model:
            return None
        rates = catalog_rates(model, provider, datetime.now(timezone.utc))
        if rates is None:
            return None
        input, output, cache_read, cache_write = (rate if isinstance(rate, float) else rate[0] for rate in rates[:4])
        return CostConfig(
            input_per_million=input,
            output_per_million=output,
            cache_read_per_million=cache_read,
            cache_write_per_million=cache_write,
        )


DEFAULT_PRICES: PriceTable = CatalogPrices()
"""The genai-prices catalog as a price table. Stored costs come from it unless an override
(``Store(prices=...)``) or the source's reported cost wins."""


class SavedPrice(BaseModel):
    """A price override saved in the store (``store.prices``): USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    model: str
    provider: str | None = None
    """None: for any provider."""
    since: datetime | None = None
    """In force for records from this time on; None: of any time."""
    input: float = 0.0
    output: float = 0.0
    cache_read: float = 0.0
    cache_write: float = 0.0


class UsageTotals(BaseModel):
    """Summed usage, with its cost and how many usage records went into it."""

    model_config = ConfigDict(extra="forbid")

    input: int = 0
    output: int = 0
    reasoning: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    """Each record's :attr:`~turnstore.models.Usage.total`, summed: the total its provider reported,
    or where it reported none, ``input + output + cache_read + cache_write``."""
    cost: float | None = None
    """USD of the priced records (reported, override or catalog); None when no record is priced.
    The unpriced ones are counted apart: see ``unpriced_records``."""
    reported_cost: float | None = None
    """USD the sources themselves reported, where they did."""
    unpriced_records: int = 0
    """Usage records with no known price, left out of ``cost``."""
    unpriced_tokens: int = 0
    """Their tokens (input, output and cache)."""
    unpriced_models: list[str] = Field(default_factory=list)
    """The models they came from, by name (``""`` for records naming none)."""
    requests: int = 0
    """Model calls: one per message usage record (assistant replies, compaction summaries), plus
    each counted loop's reported count (``loops.end(requests=...)``, appam ``request_count``,
    OpenAI Agents ``requests``), or one for a loop that reported usage without a count."""
    cache_hit_rate: float = 0.0
    """``cache_read / (input + cache_read + cache_write)``."""

    def unpriced_note(self, names: int = 3) -> str:
        """What the total leaves unpriced, for people: ``110,000 tokens unpriced (model-a, model-b)``;
        empty when every record is priced. At most ``names`` models are named, the rest counted."""
        if not self.unpriced_records:
            return ""
        models = [name or "(no model)" for name in self.unpriced_models]
        named = ", ".join(models[:names])
        if len(models) > names:
            named += f", {len(models) - names:,} more"
        return f"{self.unpriced_tokens:,} tokens unpriced ({named})"

    @property
    def usage(self) -> Usage:
        """The token counts as a :class:`~turnstore.models.Usage`.

        Built without validation: a sum may pass the 64-bit bound that each stored
        count is held to, and is still the exact sum.
        """
        return Usage.model_construct(
            input=self.input,
            output=self.output,
            reasoning=self.reasoning,
            cache_read=self.cache_read,
            cache_write=self.cache_write,
            total_tokens=self.total_tokens,
        )


class UsageRow(UsageTotals):
    """Totals of one group: a model/provider, a loop, a session or a day."""

    model: str | None = Field(default=None, exclude_if=lambda v: v is None)
    provider: str | None = Field(default=None, exclude_if=lambda v: v is None)
    loop_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    session_id: str | None = Field(default=None, exclude_if=lambda v: v is None)
    day: str | None = Field(default=None, exclude_if=lambda v: v is None)


_REPORTED_UNIT: int = 10 ** (18 - COST_DECIMALS)
"""A unit of a reported cost (10**-COST_DECIMALS USD) in :data:`_UNITS_PER_DOLLAR` units."""
_RATE_SCALE = 10**12
"""A rate (USD per million tokens) is held as a whole number of 10**-12 of a unit, so a token at it costs a
whole number of 10**-18 USD (:data:`_UNITS_PER_DOLLAR`)."""
_UNITS_PER_DOLLAR = 10**18


def _reported_units(cost: Any) -> int | None:
    """A sum of reported costs (see :class:`~turnstore.usage_queries.reported_cost_sum`) as units of 10**-18 USD;
    None for infinity.

    An integer or a ``Decimal`` counts whole units of 10**-COST_DECIMALS USD; a float (SQLite's second try) is USD.
    """
    if isinstance(cost, float):
        if math.isinf(cost):
            return None
        if cost >= 2.0**52:  # a whole number of dollars (and the product below could overflow)
            return int(cost) * _UNITS_PER_DOLLAR
        return round(cost * float(10**COST_DECIMALS)) * _REPORTED_UNIT
    if isinstance(cost, Decimal) and not cost.is_finite():
        return None
    return int(cost) * _REPORTED_UNIT


def _rate_units(price: CostConfig) -> tuple[int, int, int, int]:
    """``price``'s four rates, each a whole number of 10**-12 USD per million tokens."""
    return (
        round(price.input_per_million * _RATE_SCALE),
        round(price.output_per_million * _RATE_SCALE),
        round(price.cache_read_per_million * _RATE_SCALE),
        round(price.cache_write_per_million * _RATE_SCALE),
    )


def _dollars(units: int | None) -> float:
    """Units as USD, correctly rounded (infinity for None, or past the largest float)."""
    if units is None:
        return math.inf
    try:
        return units / _UNITS_PER_DOLLAR
    except OverflowError:
        return math.inf


class Tally:
    """Adds up the rows of :func:`turnstore.usage_queries.usage_rows` into one total.

    Each row is one (model, provider, cost source) group, of messages or of loops'
    reported usage: its token sums, the sum of its records' stored costs, and its
    record count. :meth:`add` keeps exact integer sums; a group without a source
    is unpriced. A read-time ``prices`` table (``usage.session(..., prices=...)``)
    prices the groups it covers that no source reported a cost for.

    Costs add up exactly, so a total's cost is the sum of its groups' in every
    breakdown: each stored cost is rounded to :data:`COST_DECIMALS` decimals
    record by record, in SQL, and summed as integers; a read-time price is
    linear in the exact token sums (each rate held to 10**-12 USD per million
    tokens). Only the result is rounded, to the nearest float.
    """

    __slots__ = (
        "cost",
        "has_reported",
        "priced",
        "reported",
        "requests",
        "sums",
        "unpriced_models",
        "unpriced_records",
        "unpriced_tokens",
    )

    def __init__(self) -> None:
        self.sums = [0, 0, 0, 0, 0, 0]
        self.cost: int | None = 0
        """The priced records' cost, in units of 10**-18 USD (None: infinite)."""
        self.priced = False
        self.reported: int | None = 0
        """The reported part of it, in the same units."""
        self.has_reported = False
        self.requests = 0
        self.unpriced_records = 0
        self.unpriced_tokens = 0
        self.unpriced_models: set[str] = set()

    def add(
        self,
        model: str | None,
        provider: str | None,
        source: str | None,
        values: Sequence[Any],
        prices: PriceTable | None,
    ) -> None:
        """Add one row: six token sums, a cost, the record count, the part and the requests."""
        tokens = [int(v or 0) for v in values[:6]]
        cost, count = values[6], int(values[7] or 0)
        for index, value in enumerate(tokens):
            self.sums[index] += value
        self.requests += int(values[9] or 0)
        units: int | None
        if source != "reported" and prices is not None and count:
            price = prices.for_model(model, provider)
            if price is not None:
                rate_in, rate_out, rate_read, rate_write = _rate_units(price)
                units = tokens[0] * rate_in + tokens[1] * rate_out + tokens[3] * rate_read + tokens[4] * rate_write
                self._add(units, False)
                return
        if source is None or cost is None:
            self.unpriced_records += count
            self.unpriced_tokens += tokens[0] + tokens[1] + tokens[3] + tokens[4]
            if count:
                self.unpriced_models.add(model or "")
            return
        self._add(_reported_units(cost), source == "reported")

    def _add(self, units: int | None, reported: bool) -> None:
        self.cost = None if self.cost is None or units is None else self.cost + units
        self.priced = True
        if reported:
            self.reported = None if self.reported is None or units is None else self.reported + units
            self.has_reported = True

    def fields(self) -> dict[str, Any]:
        """The tally as :class:`UsageTotals` keyword arguments."""
        input, output, reasoning, cache_read, cache_write, total = self.sums
        prompt = input + cache_read + cache_write
        return {
            "input": input,
            "output": output,
            "reasoning": reasoning,
            "cache_read": cache_read,
            "cache_write": cache_write,
            "total_tokens": total,
            "cost": _dollars(self.cost) if self.priced else None,
            "reported_cost": _dollars(self.reported) if self.has_reported else None,
            "requests": self.requests,
            "cache_hit_rate": cache_read / prompt if prompt else 0.0,
            "unpriced_records": self.unpriced_records,
            "unpriced_tokens": self.unpriced_tokens,
            "unpriced_models": sorted(self.unpriced_models),
        }
