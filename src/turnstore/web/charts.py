"""Charts for the spend page, as geometry the template draws as inline SVG.

No charting library and nothing fetched at run time: each chart is a list of
bars (or points) with coordinates computed here; the template writes the
``<rect>``, ``<polyline>`` and ``<text>`` elements, labels escaped like any
stored text.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = ["MAX_TICKS", "Bar", "Chart", "columns", "line", "rows"]

WIDTH = 720
LABEL_WIDTH = 230
ROW_HEIGHT = 22
PLOT_HEIGHT = 180
MARGIN = 24


@dataclass
class Bar:
    """One bar: its box, its label and its value as text."""

    x: float
    y: float
    width: float
    height: float
    label: str
    value: str


@dataclass
class Chart:
    """A chart ready to draw: ``kind`` is ``rows`` (horizontal bars), ``columns`` or ``line``."""

    kind: str
    title: str
    width: int
    height: int
    bars: list[Bar] = field(default_factory=list)
    points: str = ""
    axis: list[tuple[float, str, str]] = field(default_factory=list)
    """Axis labels: x, text and SVG ``text-anchor``."""

    @property
    def empty(self) -> bool:
        return not self.bars


def rows(title: str, items: Sequence[tuple[str, float]], fmt: Callable[[float], str]) -> Chart:
    """Horizontal bars, one per labelled value (models, sessions), longest first as given."""
    top = max((value for _, value in items), default=0.0) or 1.0
    span = WIDTH - LABEL_WIDTH - 90
    chart = Chart("rows", title, WIDTH, ROW_HEIGHT * len(items) + 4)
    for i, (label, value) in enumerate(items):
        chart.bars.append(
            Bar(
                LABEL_WIDTH, i * ROW_HEIGHT + 3, round(max(value, 0) / top * span, 1), ROW_HEIGHT - 6, label, fmt(value)
            )
        )
    return chart


def columns(title: str, items: Sequence[tuple[str, float]], fmt: Callable[[float], str]) -> Chart:
    """Vertical bars over time (days), oldest first; labels under the axis at readable intervals."""
    top = max((value for _, value in items), default=0.0) or 1.0
    step = (WIDTH - 2 * MARGIN) / max(len(items), 1)
    chart = Chart("columns", title, WIDTH, PLOT_HEIGHT + 2 * MARGIN)
    for i, (label, value) in enumerate(items):
        height = round(max(value, 0) / top * PLOT_HEIGHT, 1)
        x = round(MARGIN + i * step + step * 0.1, 1)
        chart.bars.append(Bar(x, MARGIN + PLOT_HEIGHT - height, round(step * 0.8, 1), height, label, fmt(value)))
    chart.axis = _ticks([(bar.x + bar.width / 2, bar.label) for bar in chart.bars])
    return chart


def line(title: str, items: Sequence[tuple[str, float | None]], fmt: Callable[[float], str], top: float = 1.0) -> Chart:
    """A line over time (a rate between 0 and ``top``), one marked point per item with a value (None: a
    day without one, on the axis but not on the line)."""
    step = (WIDTH - 2 * MARGIN) / max(len(items) - 1, 1)
    chart = Chart("line", title, WIDTH, PLOT_HEIGHT + 2 * MARGIN)
    coordinates = []
    places = []
    for i, (label, value) in enumerate(items):
        x = round(MARGIN + i * step, 1)
        places.append((x, label))
        if value is None:
            continue
        y = round(MARGIN + PLOT_HEIGHT - min(max(value, 0), top) / top * PLOT_HEIGHT, 1)
        coordinates.append(f"{x},{y}")
        chart.bars.append(Bar(x, y, 0, 0, label, fmt(value)))
    chart.points = " ".join(coordinates)
    chart.axis = _ticks(places) if chart.bars else []
    return chart


MAX_TICKS = 8
"""Labels under a time axis at most: a ``YYYY-MM-DD`` label is about 70 pixels wide."""
TICK_WIDTH = 70


def _ticks(places: Sequence[tuple[float, str]]) -> list[tuple[float, str, str]]:
    """Labels under the axis: every one when they fit, else one every few, the last always labelled;
    each centred under its place, or aligned to the chart's edge where it would run past it."""
    if not places:
        return []
    every = -(-len(places) // MAX_TICKS)  # ceiling
    chosen = list(range(len(places) - 1, -1, -every))[::-1]
    axis = []
    for index in chosen:
        x, label = places[index]
        anchor = "middle"
        if x - TICK_WIDTH / 2 < 0:
            anchor = "start"
        elif x + TICK_WIDTH / 2 > WIDTH:
            anchor = "end"
        axis.append((round(x, 1), label, anchor))
    return axis
