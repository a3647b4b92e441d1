"""Printing: JSON for machines, rich tables for people; stored text escaped on the way (:mod:`.escaping`)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import IO, Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..errors import LimitExceeded
from ..usage import UsageTotals
from .escaping import json_safe, visible

TOKEN_COLUMNS = (
    ("input", "input"),
    ("output", "output"),
    ("reasoning", "reasoning"),
    ("cache_read", "cache read"),
    ("cache_write", "cache write"),
    ("total_tokens", "total"),
)


def console() -> Console:
    """A console on stdout; plain text when stdout is not a terminal."""
    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 200)


def print_json(value: Any) -> None:
    """Print ``value`` as indented JSON, control and bidi characters escaped; never Infinity or NaN.

    Raises:
        LimitExceeded: a number is infinite or NaN (a cost beyond the range of a float).
    """
    try:
        text = json.dumps(value, ensure_ascii=False, indent=2, default=_default, allow_nan=False)
    except ValueError as error:
        raise LimitExceeded(
            f"a number is beyond what JSON can hold ({error}); a price or reported cost is too large",
            [("number", "not finite")],
        ) from None
    click.echo(json_safe(text))


class JsonSafeWriter:
    """A text stream that passes JSON on with :func:`~.escaping.json_safe` applied (exports to stdout)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(json_safe(text))

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self._stream.flush()


def text(value: str, style: str = "") -> Text:
    """A stored value for rich: escaped, and plain text (never markup)."""
    return Text(visible(value), style=style)


def json_time(value: datetime) -> str:
    """A time in JSON output, as pydantic writes the records' times: ISO 8601, UTC as ``Z``."""
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return json_time(value)
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    raise TypeError(f"cannot print {type(value).__name__} as JSON")


def money(value: float | None) -> str:
    """Dollars, or a dash when unknown."""
    if value is None:
        return "-"
    if not math.isfinite(value):
        return "too large"
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


def number(value: int) -> str:
    return f"{value:,}"


def priced(totals: UsageTotals) -> str:
    """A total's cost and what it leaves unpriced: ``$0.2250 + 110,000 tokens unpriced (model)``, escaped."""
    unpriced = totals.unpriced_note()
    if not unpriced:
        return money(totals.cost)
    unpriced = visible(unpriced)  # model names are stored text
    return unpriced if totals.cost is None else f"{money(totals.cost)} + {unpriced}"


def usage_table(title: str, key_label: str, rows: Iterable[tuple[str, UsageTotals]]) -> Table:
    """A table of usage totals, one row per (label, totals), with a total row when there are several."""
    table = Table(title=text(title, "table.title"), title_justify="left", show_lines=False)
    table.add_column(key_label, overflow="fold")
    for _, label in TOKEN_COLUMNS:
        table.add_column(label, justify="right")
    table.add_column("cost", justify="right")
    table.add_column("calls", justify="right")
    materialized: Sequence[tuple[str, UsageTotals]] = list(rows)
    for label, totals in materialized:
        table.add_row(text(label), *_cells(totals))
    if len(materialized) > 1:
        table.add_section()
        table.add_row("total", *_cells(_sum(t for _, t in materialized)), style="bold")
    return table


def _cells(totals: UsageTotals) -> list[str | Text]:
    cells: list[str | Text] = [number(getattr(totals, field)) for field, _ in TOKEN_COLUMNS]
    cells.append(Text(priced(totals)))  # plain text: model names are stored text, never markup
    cells.append(number(totals.requests))
    return cells


def _sum(items: Iterable[UsageTotals]) -> UsageTotals:
    fields: dict[str, Any] = {field: 0 for field, _ in TOKEN_COLUMNS}
    cost: float | None = None
    requests = records = tokens = 0
    models: set[str] = set()
    for totals in items:
        for field in fields:
            fields[field] += getattr(totals, field)
        if totals.cost is not None:
            cost = (cost or 0.0) + totals.cost
        requests += totals.requests
        records += totals.unpriced_records
        tokens += totals.unpriced_tokens
        models.update(totals.unpriced_models)
    return UsageTotals(
        **fields,
        cost=cost,
        requests=requests,
        unpriced_records=records,
        unpriced_tokens=tokens,
        unpriced_models=sorted(models),
    )


def short(value: str, width: int = 100) -> str:
    """One line of at most ``width`` characters, escaped (:func:`~.escaping.visible`)."""
    line = visible(" ".join(value.split()))
    return line if len(line) <= width else line[: width - 1] + "…"
