"""What a usage record costs, fixed when the record is written.

Every usage record (a message's, or a loop's reported usage) is priced once,
as it is written, and its cost is stored in the row (``priced_cost``) with
where it came from (``cost_source``) and, for the catalog, the price data's
version (``price_version``):

1. ``reported``: the source reported what the call cost (pi, Tau, appam): that;
2. ``override``: the store's own price for the model (``Store(prices=...)``),
   which wins over the catalog;
3. ``catalog``: the price in the genai-prices data bundled with the installed
   ``genai-prices`` package, in force at the record's timestamp, at the tier of
   the request's own prompt size (Anthropic and Gemini charge more per token
   above 200k input tokens); the model is matched by the package, with the
   record's provider where it has one, so a variant (``gpt-4.1-nano``,
   ``o3-pro``) takes its own price, never its base model's;
4. otherwise the cost is unknown (NULL): its tokens still count, and every
   total says how many records and tokens it leaves unpriced.

Totals are SQL sums of ``priced_cost``. ``store.usage.reprice()`` prices
stored catalog, override and unknown records again after prices change.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from .models import CostConfig
from .usage import PriceTable, _normal, _undated

if TYPE_CHECKING:
    from genai_prices.types import ModelInfo, ModelPrice

try:
    import genai_prices
    from genai_prices import data_snapshot
    from genai_prices.types import ModelPrice as ModelPriceType
    from genai_prices.types import TieredPrices
except ImportError:  # Python 3.10, which genai-prices does not support: no catalog
    genai_prices = None  # type: ignore[assignment]

__all__ = ["CATALOG_VERSION", "SOURCE_CATALOG", "SOURCE_OVERRIDE", "SOURCE_REPORTED", "Pricing", "catalog_rates"]

SOURCE_REPORTED = "reported"
SOURCE_CATALOG = "catalog"
SOURCE_OVERRIDE = "override"

CATALOG_VERSION = f"genai-prices {genai_prices.__version__}" if genai_prices is not None else None
"""The price data catalog costs come from: the installed genai-prices package, whose data is bundled in it
(None where it cannot be installed: then no record has a catalog price)."""

Rate = float | tuple[float, tuple[tuple[int, float], ...]]
"""USD per million tokens: a flat rate, or (base, ((threshold, rate), ...)) for tiered prices, where a
request whose prompt is over a threshold pays that tier's rate on all its tokens."""

Rates = tuple[Rate, Rate, Rate, Rate, float]
"""(input, output, cache_read, cache_write) rates and the price of one request (USD)."""


@lru_cache(maxsize=4096)
def _catalog_model(model: str, provider: str | None) -> ModelInfo | None:
    """The catalog's model for a (model, provider) as a record names them, or None when it has none.

    The provider is given to the catalog where it is known; one the catalog does not know (an app's
    own name for it) leaves the catalog to find the provider from the model name. Without one, an
    OpenRouter-style ``anthropic/claude-sonnet-4.5`` names its provider before the slash.
    """
    if genai_prices is None:
        return None
    snapshot = data_snapshot.get_snapshot()
    if not provider and "/" in model:
        prefix, _, rest = model.partition("/")
        if prefix and rest and data_snapshot.find_provider_by_id(snapshot.providers, prefix) is not None:
            found = _catalog_model(rest, prefix)
            if found is not None:
                return found
    if provider:
        try:
            return snapshot.find_provider_model(model, None, provider, None)[1]
        except LookupError:
            if data_snapshot.find_provider_by_id(snapshot.providers, provider) is not None:
                return None  # a provider the catalog knows, without this model
    try:
        return snapshot.find_provider_model(model, None, None, None)[1]
    except LookupError:
        return None


def _rate(value: Any) -> Rate:
    if value is None:
        return 0.0
    if isinstance(value, TieredPrices):
        return (float(value.base), tuple((int(tier.start), float(tier.price)) for tier in value.tiers))
    return float(value)


_RATES: dict[int, tuple[ModelPrice, Rates]] = {}
"""Rates per catalog price object (by id; the entry keeps the object alive): the catalog's prices are a fixed set."""


def _rates_of(price: ModelPrice) -> Rates:
    known = _RATES.get(id(price))
    if known is not None and known[0] is price:
        return known[1]
    get = price.__dict__.get
    requests = get("requests_kcount")
    rates: Rates = (
        _rate(get("input_mtok")),
        _rate(get("output_mtok")),
        _rate(get("cache_read_mtok")),
        _rate(get("cache_write_mtok")),
        float(requests) / 1000 if requests is not None else 0.0,
    )
    if len(_RATES) < 65536:
        _RATES[id(price)] = (price, rates)
    return rates


@lru_cache(maxsize=4096)
def _catalog_entry(model: str, provider: str | None) -> tuple[ModelInfo, Rates | None] | None:
    """The catalog's model and, when its price never changes with time, its rates (no date to work out)."""
    info = _catalog_model(model, provider)
    if info is None:
        return None
    fixed = isinstance(info.prices, ModelPriceType) and not info.price_variants
    return info, (_rates_of(info.prices) if fixed else None)  # type: ignore[arg-type]


def catalog_rates(model: str, provider: str | None, when: datetime | int | None) -> Rates | None:
    """The catalog's rates for a model at a time (a datetime, or unix milliseconds; None: now), or None
    when the catalog has no price for it."""
    entry = _catalog_entry(model, provider)
    if entry is None:
        return None
    info, fixed = entry
    if fixed is not None:
        return fixed
    return _rates_of(info.get_prices(when if isinstance(when, datetime) else _when(when)))


def _when(timestamp_ms: int | None) -> datetime:
    """The datetime of a record (now, for one without a timestamp or with one no datetime holds)."""
    if timestamp_ms is not None:
        try:
            return datetime.fromtimestamp(timestamp_ms / 1000, timezone.utc)
        except (OverflowError, OSError, ValueError):
            pass
    return datetime.now(timezone.utc)


def _at(rate: Rate, prompt: int) -> float:
    if isinstance(rate, float):
        return rate
    base, tiers = rate
    for threshold, tier_rate in reversed(tiers):
        if prompt > threshold:
            return tier_rate
    return base


def catalog_cost(rates: Rates, input: int, output: int, cache_read: int, cache_write: int) -> float:
    """USD for one request at catalog rates; the tier is chosen by the request's whole prompt."""
    prompt = input + cache_read + cache_write
    in_rate, out_rate, read_rate, write_rate, per_request = rates
    return (
        input * _at(in_rate, prompt)
        + output * _at(out_rate, prompt)
        + cache_read * _at(read_rate, prompt)
        + cache_write * _at(write_rate, prompt)
    ) / 1_000_000 + per_request


class SavedPrices:
    """Overrides saved in the store (``store.prices``): per model, each in force from a time on.

    A model matches as in :class:`~turnstore.usage.PriceTable` (its name, or its name without a date
    or ``-latest`` suffix); a price for one provider goes before one for any; the latest ``since`` at
    or before a record's time wins.
    """

    __slots__ = ("_by_name",)

    def __init__(self, rows: Iterable[Sequence[Any]] = ()) -> None:
        self._by_name: dict[str, list[tuple[int, str, CostConfig]]] = {}
        for model, provider, since, input, output, cache_read, cache_write in rows:
            price = CostConfig(
                input_per_million=input,
                output_per_million=output,
                cache_read_per_million=cache_read,
                cache_write_per_million=cache_write,
            )
            self._by_name.setdefault(_normal(model), []).append((int(since), _normal(provider or ""), price))
        for entries in self._by_name.values():
            entries.sort(key=lambda entry: (entry[0], entry[1] != ""), reverse=True)

    def __len__(self) -> int:
        return len(self._by_name)

    def for_model(self, model: str, provider: str | None, timestamp_ms: int | None) -> CostConfig | None:
        """The saved price of ``model`` at a record's time, or None."""
        name = _normal(model)
        entries = self._by_name.get(name) or self._by_name.get(_undated(name))
        if not entries:
            return None
        stamp = timestamp_ms if timestamp_ms is not None else int(datetime.now(timezone.utc).timestamp() * 1000)
        wanted = _normal(provider) if provider else ""
        for since, saved_provider, price in entries:
            if since <= stamp and saved_provider in ("", wanted):
                return price
        return None


Priced = tuple[float | None, str | None, str | None]
"""(cost, source, price version) of one usage record."""

_UNPRICED: Priced = (None, None, None)


class Pricing:
    """Prices usage records as they are written: a reported cost, else an override (the process's
    ``Store(prices=...)``, then the store's saved ones), else the catalog."""

    __slots__ = ("overrides", "saved")

    def __init__(self, overrides: PriceTable | None = None, saved: SavedPrices | None = None) -> None:
        self.overrides = overrides if overrides is not None else PriceTable()
        self.saved = saved if saved is not None else SavedPrices()

    def cost(
        self,
        model: str | None,
        provider: str | None,
        tokens: tuple[int, int, int, int],
        timestamp_ms: int | None,
        reported: float | None = None,
    ) -> Priced:
        """The (cost, source, version) of one record of ``tokens`` = (input, output, cache_read, cache_write)."""
        if reported is not None:
            return reported, SOURCE_REPORTED, None
        if not model:
            return _UNPRICED
        override = self.overrides.for_model(model, provider) if len(self.overrides) else None
        input, output, cache_read, cache_write = tokens
        if override is None and len(self.saved):
            override = self.saved.for_model(model, provider, timestamp_ms)
        if override is not None:
            return override.price(input, output, cache_read, cache_write), SOURCE_OVERRIDE, None
        rates = catalog_rates(model, provider, timestamp_ms)
        if rates is None:
            return _UNPRICED
        cost = catalog_cost(rates, input, output, cache_read, cache_write)
        return (cost, SOURCE_CATALOG, CATALOG_VERSION) if math.isfinite(cost) else _UNPRICED

    def price_row(self, params: dict[str, Any], timestamp_ms: int | None = None) -> None:
        """Fill a row's ``priced_cost``, ``cost_source`` and ``price_version`` from its usage columns."""
        if params["input_tokens"] is None:
            params["priced_cost"] = params["cost_source"] = params["price_version"] = None
            return
        stamp = params.get("timestamp", timestamp_ms)
        params["priced_cost"], params["cost_source"], params["price_version"] = self.cost(
            params["model"],
            params["provider"],
            (
                params["input_tokens"],
                params["output_tokens"],
                params["cache_read_tokens"],
                params["cache_write_tokens"],
            ),
            stamp if stamp is not None else timestamp_ms,
            params["cost"],
        )
