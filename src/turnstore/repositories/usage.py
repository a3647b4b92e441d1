"""``store.usage``: tokens and dollars per turn, loop, session, model or day, summed in SQL."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .. import queries as q
from .. import usage_queries as uq
from ..database import Database
from ..errors import InvalidMessage
from ..schema import USAGE_COLUMNS
from ..usage import PriceTable, Tally, UsageRow, UsageTotals
from ._shared import Settings, require_loop, require_session
from .staging import any_staged

__all__ = ["UsageRepository"]

Prices = PriceTable | dict[str, Any] | None

_OVERFLOWED = ("integer overflow", "value out of range: overflow", "bigint out of range")
"""How SQLite (a 64-bit integer sum) and PostgreSQL (a float sum; a row's derived token total,
see ``usage_queries._token_total``) say that a sum overflowed."""


class UsageRepository:
    """Usage totals of one store: sums of the costs stored with each record (see :mod:`turnstore.pricing`).

    ``prices`` on any method prices the records of the models it names at read time instead
    (all but those whose source reported a cost), without changing what is stored.
    """

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    # --- totals -------------------------------------------------------------------

    def turn(self, loop_id: str, turn_index: int, *, prices: Prices = None) -> UsageTotals:
        """Usage of one turn of a loop: zero for a turn that spent nothing, or that the loop does not hold
        (a usage question, not a lookup: ``store.messages.turn`` raises ``TurnNotFound`` for the latter).

        Raises:
            LoopNotFound: no such loop.
        """
        totals = self._total("turn", {"loop_id": loop_id, "turn_index": turn_index}, prices)
        if totals.requests == 0:
            require_loop(self._db, loop_id)
        return totals

    def loop(self, loop_id: str, *, prices: Prices = None) -> UsageTotals:
        """Usage of one loop (its messages; or what it reported, when none of them carry usage).

        Raises:
            LoopNotFound: no such loop.
        """
        totals = self._total("loop", {"loop_id": loop_id}, prices)
        if totals.requests == 0:
            require_loop(self._db, loop_id)
        return totals

    def session(self, session_id: str, *, prices: Prices = None) -> UsageTotals:
        """Usage of one session.

        Raises:
            SessionNotFound: no such session.
        """
        totals = self._total("session", {"session_id": session_id}, prices)
        if totals.requests == 0:
            require_session(self._db, session_id)
        return totals

    def total(self, *, prices: Prices = None) -> UsageTotals:
        """Usage of every session in the store."""
        return self._total("all", {}, prices)

    # --- breakdowns -------------------------------------------------------------

    def by_model(
        self, session_id: str | None = None, *, loop_id: str | None = None, prices: Prices = None
    ) -> list[UsageRow]:
        """Usage per (model, provider): across the store, or within a session or a loop; those with
        unpriced records first (then by model and provider)."""
        level, params = self._scope(session_id, loop_id)
        table = self._prices(prices)
        rows: dict[tuple[Any, ...], Tally] = {}
        for model, provider, source, *sums in self._rows(level, "none", params):
            rows.setdefault((model, provider), Tally()).add(model, provider, source, sums, table)
        return [
            UsageRow(model=model, provider=provider, **tally.fields())
            for (model, provider), tally in sorted(rows.items(), key=_model_key)
        ]

    def by_loop(self, session_id: str, *, prices: Prices = None) -> list[UsageRow]:
        """Usage per loop of a session.

        Raises:
            SessionNotFound: no such session.
        """
        require_session(self._db, session_id)
        return self._grouped("session", "loop", {"session_id": session_id}, "loop_id", prices)

    def by_session(self, *, prices: Prices = None) -> list[UsageRow]:
        """Usage per session, across the store."""
        return self._grouped("all", "session", {}, "session_id", prices)

    def by_day(
        self, session_id: str | None = None, *, loop_id: str | None = None, prices: Prices = None
    ) -> list[UsageRow]:
        """Usage per UTC day (of the message timestamps), across the store or within a session or loop."""
        level, params = self._scope(session_id, loop_id)
        return self._grouped(level, "day", params, "day", prices)

    # --- prices after they change ---------------------------------------------------

    def reprice(self, session_id: str | None = None, *, since: datetime | None = None, model: str | None = None) -> int:
        """Price stored usage records again, with the store's prices now; returns how many changed.

        Costs are fixed when records are written; after an override is set or
        the price data is updated, this recomputes the ``override``, ``catalog``
        and unpriced records (a reported cost is never changed): all of the
        store's, or one session's, those from ``since`` on (a record's
        timestamp; a loop's reported usage by its end), of one ``model``. Each
        record is priced at its own time and tier, as when it was written. It
        goes :data:`~turnstore.usage_queries.REPRICE_BATCH` records per
        transaction, so memory stays bounded and writers wait little; a reprice
        stopped part way leaves every record priced one way or the other.

        Raises:
            SessionNotFound: no such session.
        """
        if session_id is not None:
            require_session(self._db, session_id)
        changed = 0
        for table in ("messages", "loops"):
            params: dict[str, Any] = {"session_id": session_id, "model": model}
            if since is not None:
                params["since"] = int(since.timestamp() * 1000) if table == "messages" else self._db.bind_time(since)
            statement = uq.reprice_batch(table, session_id is not None, since is not None, model is not None)
            params["after"] = -(2**63) if table == "messages" else ""
            while True:
                with self._db.write():
                    rows = self._db.fetchall(statement, params)
                    updates = self._repriced(rows, table)
                    if updates:
                        self._db.executemany(uq.set_price(table), updates)
                changed += len(updates)
                if len(rows) < uq.REPRICE_BATCH:
                    break
                params["after"] = rows[-1][0]
        return changed

    def _repriced(self, rows: list[tuple[Any, ...]], table: str) -> list[dict[str, Any]]:
        """The new prices of the records among ``rows`` whose price changes."""
        pricing = self._settings.pricing
        updates = []
        for key, model, provider, when, *tokens, cost, source, version in rows:
            stamp = when if table == "messages" else _ms(self._db.load_time(when))
            input, output, cache_read, cache_write = (int(value or 0) for value in tokens)
            new = pricing.cost(model, provider, (input, output, cache_read, cache_write), stamp)
            if new != (cost, source, version):
                updates.append({"key": key, "priced_cost": new[0], "cost_source": new[1], "price_version": new[2]})
        return updates

    # --- what is not known -------------------------------------------------------

    def unknown(self, loop_id: str) -> list[int]:
        """Ids of the loop's assistant messages whose usage is unknown, oldest first.

        Such a message was stored with ``usage_known=False`` (an import whose source
        recorded usage per run, not per reply): its JSON holds zero token counts,
        which mean nothing, and it counts toward no total (the loop's reported usage
        stands in for it). A display shows it as unknown, not as 0 tokens.

        Raises:
            LoopNotFound: no such loop.
        """
        ids = [row[0] for row in self._db.execute(q.unknown_usage(), {"loop_id": loop_id})]
        if not ids:
            require_loop(self._db, loop_id)
        return ids

    @staticmethod
    def _prices(prices: Prices) -> PriceTable | None:
        return PriceTable().merged(prices) if prices is not None else None

    def _rows(self, level: str, group: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        """The usage rows, with exact sums whatever the stored values.

        SQLite's ``sum()`` fails past a 64-bit integer (or, for costs, counts no
        further than ``uq.COST_UNITS_LIMIT``); a row's derived token total past 64
        bits fails on PostgreSQL and is a float on SQLite. Then the same rows are
        read again with sums that cannot overflow (``uq.usage_rows(..., split=True)``),
        rejoined here. Reads whose sums fit pay nothing for this.
        """
        start = 3 if group == "none" else 4  # the sums follow the group key, model, provider and cost source
        total = start + len(USAGE_COLUMNS) - 1
        for split in (False, True):
            try:
                rows = self._fetch(level, group, params, split)
            except (self._db.OperationalError, InvalidMessage) as error:
                # The database's own words: SQLite's OperationalError; PostgreSQL's DataError,
                # which Database.execute reports as a value it cannot hold.
                if split or not any(words in str(error) for words in _OVERFLOWED):
                    raise
                continue
            if split:
                return [uq.joined(row, start) for row in rows]
            cost = start + len(USAGE_COLUMNS)
            if any(isinstance(row[total], float) for row in rows):
                continue  # SQLite: a derived token total passed 64 bits and became a float
            if not any(isinstance(row[cost], int) and row[cost] >= uq.COST_UNITS_LIMIT for row in rows):
                return rows
            # SQLite: a reported cost sum past what its integer units hold (see uq.reported_cost_sum).
        raise AssertionError("unreachable")

    def _fetch(self, level: str, group: str, params: dict[str, Any], split: bool) -> list[tuple[Any, ...]]:
        if level != "all":
            return self._db.fetchall(uq.usage_rows(level, group, split), params)
        # Across the store: staged sessions are left out. The filter costs a probe per usage
        # row, so it is added only when a probe of the (nearly always empty) staging table,
        # in the same read transaction, finds one.
        with self._db.read():
            scope = "visible" if any_staged(self._db) else level
            return self._db.fetchall(uq.usage_rows(scope, group, split), params)

    def _total(self, level: str, params: dict[str, Any], prices: Prices) -> UsageTotals:
        table = self._prices(prices)
        tally = Tally()
        for model, provider, source, *sums in self._rows(level, "none", params):
            tally.add(model, provider, source, sums, table)
        return UsageTotals(**tally.fields())

    def _grouped(self, level: str, group: str, params: dict[str, Any], key: str, prices: Prices) -> list[UsageRow]:
        table = self._prices(prices)
        tallies: dict[Any, Tally] = {}
        for group_key, model, provider, source, *sums in self._rows(level, group, params):
            tallies.setdefault(group_key, Tally()).add(model, provider, source, sums, table)
        return [UsageRow(**{key: name}, **tally.fields()) for name, tally in sorted(tallies.items(), key=_sort_key)]

    def _scope(self, session_id: str | None, loop_id: str | None) -> tuple[str, dict[str, Any]]:
        if loop_id is not None:
            require_loop(self._db, loop_id)
            return "loop", {"loop_id": loop_id}
        if session_id is not None:
            require_session(self._db, session_id)
            return "session", {"session_id": session_id}
        return "all", {}


def _ms(when: datetime | None) -> int | None:
    return None if when is None else int(when.timestamp() * 1000)


def _sort_key(item: tuple[Any, Tally]) -> tuple[str]:
    key, _tally = item
    return (str(key or ""),)


def _model_key(item: tuple[tuple[Any, ...], Tally]) -> tuple[bool, str, str]:
    """Sort key of a (model, provider) group: unpriced first, then by model, then provider (None first, as "")."""
    (model, provider), tally = item
    return (not tally.unpriced_records, model or "", provider or "")
