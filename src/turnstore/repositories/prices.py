"""``store.prices``: price overrides saved in the store, used by every process that opens it."""

from __future__ import annotations

from datetime import datetime, timezone
from os import PathLike
from typing import Any

import sqlalchemy as sa

from .. import queries as q
from ..database import Database
from ..errors import InvalidPrices, NotFound
from ..models import CostConfig
from ..schema import ALWAYS, prices
from ..usage import PriceTable, SavedPrice, _cost_config, _shown
from ._shared import Settings
from .usage import UsageRepository

__all__ = ["PriceRepository"]


class PriceRepository:
    """Overrides saved in the store: a model's price over the genai-prices catalog's, from a time on.

    Every process that opens the store prices new records with them (``Store(prices=...)`` still
    goes first, for its own process). Setting or deleting one reprices the stored records it
    covers: those of that model name (other spellings of it: ``store.usage.reprice()``).
    """

    def __init__(self, db: Database, settings: Settings, usage: UsageRepository) -> None:
        self._db = db
        self._settings = settings
        self._usage = usage

    def set(
        self,
        model: str,
        provider: str | None = None,
        *,
        input: float = 0.0,
        output: float = 0.0,
        cache_read: float = 0.0,
        cache_write: float = 0.0,
        since: datetime | None = None,
    ) -> int:
        """Save a price of ``model`` (USD per million tokens; for one ``provider``, or any) in force from
        ``since`` on (default: for records of any time); returns how many stored records it repriced.

        Raises:
            InvalidPrices: a rate that is not a finite number from 0 to 1,000,000, or a model or
                provider name that is empty or over the store's name limit; nothing is changed.
        """
        rates = _cost_config(
            {"input": input, "output": output, "cache_read": cache_read, "cache_write": cache_write},
            f"model {_shown(model)}",
        )
        row = self._row(model, provider, since, rates)
        with self._db.write():
            self._save(row)
        return self._changed(model, since)

    def _row(self, model: str, provider: str | None, since: datetime | None, rates: CostConfig) -> dict[str, Any]:
        return {
            "model": self._name("model", model),
            "provider": self._name("provider", provider) if provider is not None else "",
            "since": _since(since),
            "input": rates.input_per_million,
            "output": rates.output_per_million,
            "cache_read": rates.cache_read_per_million,
            "cache_write": rates.cache_write_per_million,
        }

    def _save(self, row: dict[str, Any]) -> None:
        self._db.execute(_delete(), row)
        self._db.execute(sa.insert(prices).values({name: sa.bindparam(name) for name in row}), row)

    def import_file(self, path: str | PathLike[str]) -> int:
        """Save every price of a price file (the JSON of ``turnstore usage --prices``) for any provider and
        time, all or none; returns how many stored records they repriced.

        Raises:
            InvalidPrices: the file or one of its prices is malformed (named); nothing is changed.
        """
        table = PriceTable.from_file(path)
        rows = [self._row(model, None, None, price) for model, price in table.items()]
        with self._db.write():
            for row in rows:
                self._save(row)
        self._settings.load_saved_prices(self._db)
        return self._usage.reprice()

    def list(self) -> list[SavedPrice]:
        """The saved prices, by model, provider and time."""
        return [
            SavedPrice(
                model=model,
                provider=provider or None,
                since=None if since == ALWAYS else datetime.fromtimestamp(since / 1000, timezone.utc),
                input=input,
                output=output,
                cache_read=cache_read,
                cache_write=cache_write,
            )
            for model, provider, since, input, output, cache_read, cache_write in self._db.fetchall(q.saved_prices())
        ]

    def delete(self, model: str, provider: str | None = None, *, since: datetime | None = None) -> int:
        """Delete a saved price; returns how many stored records it repriced (to the catalog, or unpriced).

        Raises:
            NotFound: no price of that model, provider and time is saved.
        """
        key = {"model": model, "provider": provider or "", "since": _since(since)}
        with self._db.write():
            if self._db.execute(_delete(), key).rowcount == 0:
                raise NotFound(f"no saved price of {_shown(model)} for {_shown(provider or 'any provider')}")
        return self._changed(model, since)

    def _changed(self, model: str, since: datetime | None) -> int:
        self._settings.load_saved_prices(self._db)
        return self._usage.reprice(model=model, since=since)

    def _name(self, what: str, value: Any) -> str:
        if not isinstance(value, str) or not value.strip():
            raise InvalidPrices(f"a {what} name is a non-empty string, not {_shown(value)}")
        limit = self._settings.limits.max_name_length
        if len(value) > limit or "\x00" in value:
            raise InvalidPrices(f"{what} {_shown(value)} is over {limit} characters or holds NUL")
        return value


def _since(since: datetime | None) -> int:
    if since is None:
        return ALWAYS
    if since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)
    return int(since.timestamp() * 1000)


def _delete() -> sa.Delete:
    return sa.delete(prices).where(
        prices.c.model == sa.bindparam("model"),
        prices.c.provider == sa.bindparam("provider"),
        prices.c.since == sa.bindparam("since"),
    )
