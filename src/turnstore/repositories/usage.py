"""``store.usage``: tokens and dollars per turn, loop, session, model or day, summed in SQL."""

from __future__ import annotations

from typing import Any

from .. import queries as q
from ..database import Database
from ..errors import LoopNotFound, SessionNotFound
from ..usage import PriceTable, Tally, UsageRow, UsageTotals
from ._shared import Settings

__all__ = ["UsageRepository"]

Prices = PriceTable | dict[str, Any] | None


class UsageRepository:
    """Usage totals of one store. ``prices`` on any method adds to (and overrides) the store's table."""

    def __init__(self, db: Database, settings: Settings) -> None:
        self._db = db
        self._settings = settings

    # --- totals -------------------------------------------------------------------

    def turn(self, loop_id: str, turn_index: int, *, prices: Prices = None) -> UsageTotals:
        """Usage of one turn of a loop.

        Raises:
            LoopNotFound: no such loop.
        """
        params = {"session_id": self._session_of(loop_id), "loop_id": loop_id, "turn_index": turn_index}
        return self._total("turn", params, prices)

    def loop(self, loop_id: str, *, prices: Prices = None) -> UsageTotals:
        """Usage of one loop (its messages; or what it reported, when none of them carry usage).

        Raises:
            LoopNotFound: no such loop.
        """
        return self._total("loop", {"session_id": self._session_of(loop_id), "loop_id": loop_id}, prices)

    def session(self, session_id: str, *, prices: Prices = None) -> UsageTotals:
        """Usage of one session.

        Raises:
            SessionNotFound: no such session.
        """
        totals = self._total("session", {"session_id": session_id}, prices)
        if totals.requests == 0:
            self._require_session(session_id)
        return totals

    def total(self, *, prices: Prices = None) -> UsageTotals:
        """Usage of every session in the store."""
        return self._total("all", {}, prices)

    # --- breakdowns -------------------------------------------------------------

    def by_model(
        self, session_id: str | None = None, *, loop_id: str | None = None, prices: Prices = None
    ) -> list[UsageRow]:
        """Usage per (model, provider): across the store, or within a session or a loop."""
        level, params = self._scope(session_id, loop_id)
        table = self._prices(prices)
        rows: dict[tuple[Any, ...], Tally] = {}
        for row in self._rows(level, "none", params):
            key = (row[0], row[1])
            rows.setdefault(key, Tally()).add(row[0], row[1], row[2:], table)
        return [
            UsageRow(model=model, provider=provider, **tally.fields())
            for (model, provider), tally in sorted(rows.items(), key=lambda item: (item[0][0] or "", item[0][1] or ""))
        ]

    def by_loop(self, session_id: str, *, prices: Prices = None) -> list[UsageRow]:
        """Usage per loop of a session.

        Raises:
            SessionNotFound: no such session.
        """
        self._require_session(session_id)
        return self._grouped("session", "loop", {"session_id": session_id}, "loop_id", prices)

    def by_session(self, *, prices: Prices = None) -> list[UsageRow]:
        """Usage per session, across the store."""
        return self._grouped("all", "session", {}, "session_id", prices)

    def by_day(self, session_id: str | None = None, *, loop_id: str | None = None, prices: Prices = None) -> list[UsageRow]:
        """Usage per UTC day (of the message timestamps), across the store or within a session or loop."""
        level, params = self._scope(session_id, loop_id)
        return self._grouped(level, "day", params, "day", prices)

    # --- helpers ------------------------------------------------------------------

    def _prices(self, prices: Prices) -> PriceTable:
        return self._settings.prices.merged(prices) if prices is not None else self._settings.prices

    def _rows(self, level: str, group: str, params: dict[str, Any]) -> list[tuple[Any, ...]]:
        rows = self._db.fetchall(q.message_usage(level, group), params)
        rows += self._db.fetchall(q.loop_reported_usage(level, group), params)
        return rows

    def _total(self, level: str, params: dict[str, Any], prices: Prices) -> UsageTotals:
        table = self._prices(prices)
        tally = Tally()
        for row in self._rows(level, "none", params):
            tally.add(row[0], row[1], row[2:], table)
        return UsageTotals(**tally.fields())

    def _grouped(self, level: str, group: str, params: dict[str, Any], key: str, prices: Prices) -> list[UsageRow]:
        table = self._prices(prices)
        tallies: dict[Any, Tally] = {}
        for row in self._rows(level, group, params):
            tallies.setdefault(row[0], Tally()).add(row[1], row[2], row[3:], table)
        return [UsageRow(**{key: name}, **tally.fields()) for name, tally in sorted(tallies.items(), key=_sort_key)]

    def _scope(self, session_id: str | None, loop_id: str | None) -> tuple[str, dict[str, Any]]:
        if loop_id is not None:
            return "loop", {"session_id": self._session_of(loop_id), "loop_id": loop_id}
        if session_id is not None:
            self._require_session(session_id)
            return "session", {"session_id": session_id}
        return "all", {}

    def _session_of(self, loop_id: str) -> str:
        session_id = self._db.scalar(q.loop_session(), {"loop_id": loop_id})
        if session_id is None:
            raise LoopNotFound(f"loop {loop_id!r} not found")
        return session_id

    def _require_session(self, session_id: str) -> None:
        if self._db.fetchone(q.session_exists(), {"session_id": session_id}) is None:
            raise SessionNotFound(f"session {session_id!r} not found")


def _sort_key(item: tuple[Any, Tally]) -> tuple[str]:
    return (str(item[0] or ""),)
