"""What every part of the benchmark suite shares: sizes, results, database setup, timing helpers."""

from __future__ import annotations

import cProfile
import io
import itertools
import os
import pstats
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import raw
import workload

from turnstore import Store


@dataclass(frozen=True)
class Sizes:
    """How big each part of the run is."""

    write_sessions: int
    write_loops: int
    write_turns: int
    write_block: int  # turns per alternating block
    read_messages: int  # messages of the session read by last() and usage
    read_background: int  # sessions of other traffic in the read database
    last_n: int
    last_calls: int  # calls per repetition, for each read operation
    usage_calls: int
    session_calls: int = 10
    turn_calls: int = 1_000
    loop_usage_calls: int = 1_000
    by_model_calls: int = 300
    background_turns: int = 160  # turns per loop of each other session in the read database (2 loops)


FULL = Sizes(
    write_sessions=8,
    write_loops=3,
    write_turns=40,
    write_block=2,
    read_messages=5_000,
    read_background=3,
    last_n=50,
    last_calls=300,
    usage_calls=1_000,
)
QUICK = Sizes(
    write_sessions=2,
    write_loops=2,
    write_turns=10,
    write_block=2,
    read_messages=5_000,
    read_background=1,
    last_n=50,
    last_calls=30,
    usage_calls=100,
    session_calls=4,
    turn_calls=100,
    loop_usage_calls=100,
    by_model_calls=30,
)

IMAGE_FULL = Sizes(
    write_sessions=2,
    write_loops=2,
    write_turns=12,
    write_block=2,
    read_messages=1_000,
    read_background=1,
    last_n=50,
    last_calls=100,
    usage_calls=1_000,
    session_calls=3,
    background_turns=30,
)
"""The image mix: ≈100 KB of JSON a message on average, so a 1,000-message read session (≈100 MB) and fewer writes."""
IMAGE_QUICK = Sizes(
    write_sessions=1,
    write_loops=1,
    write_turns=6,
    write_block=2,
    read_messages=300,
    read_background=1,
    last_n=50,
    last_calls=10,
    usage_calls=100,
    session_calls=2,
    turn_calls=100,
    loop_usage_calls=100,
    by_model_calls=30,
    background_turns=10,
)


def sizes_for(mix: str, quick: bool) -> Sizes:
    """The sizes of a run on the message mix ``mix`` (``workload.MIXES``)."""
    if mix == "image":
        return IMAGE_QUICK if quick else IMAGE_FULL
    return QUICK if quick else FULL


READ_BLOCK = 10  # calls per alternating block in the read operations

OPS = {  # operation key -> its number, the same in every table
    "append": 1,
    "append_turn": 2,
    "import": 3,
    "last": 4,
    "session": 5,
    "turn": 6,
    "usage": 7,
    "usage_loop": 8,
    "usage_by_model": 9,
    "walk": 10,
}


@dataclass
class Result:
    key: str
    name: str
    unit: str
    ns: dict[str, list[float]]  # per-op nanoseconds per system, one value per repetition

    @property
    def num(self) -> int:
        """The operation's number (``OPS``)."""
        return OPS[self.key]

    def median_us(self, system: str) -> float:
        return statistics.median(self.ns[system]) / 1_000

    def ratio_of(self, system: str, base: str = "raw") -> float:
        """Median of ``system`` over median of ``base``."""
        return self.median_us(system) / self.median_us(base)

    def range_of(self, system: str, base: str = "raw") -> tuple[float, float]:
        """Lowest and highest per-repetition ratio ``system`` / ``base`` (both measured in the same repetition)."""
        ratios = [s / b for b, s in zip(self.ns[base], self.ns[system])]
        return min(ratios), max(ratios)

    @property
    def ratio(self) -> float:
        return self.ratio_of("turnstore")

    @property
    def ratio_range(self) -> tuple[float, float]:
        return self.range_of("turnstore")

    def as_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "operation": self.name,
            "unit": self.unit,
            "median_us": {s: round(self.median_us(s), 3) for s in self.ns},
            "samples_us": {s: [round(v / 1_000, 3) for v in values] for s, values in self.ns.items()},
        }


# --- database setup ------------------------------------------------------------


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def populate(store: Store, works: list[workload.Workload]) -> None:
    """Create the sessions and loops of ``works`` through turnstore (one transaction)."""
    with store.transaction():
        for work in works:
            for session_id in work.session_ids:
                store.sessions.create(session_id, title="benchmark")
            for plan in work.loops:
                store.loops.start(
                    plan.session_id,
                    loop_id=plan.loop_id,
                    parent_loop_id=plan.parent_loop_id,
                    continuation_kind="default" if plan.parent_loop_id else "initial",
                    config={"model": plan.model, "provider": plan.provider},
                )


def open_with_loops(path: Path, works: list[workload.Workload]) -> Store:
    """A fresh turnstore SQLite database (migrations run by Store) with the sessions and loops of ``works``."""
    remove_db(path)
    store = Store(path)
    populate(store, works)
    return store


def read_workloads(sizes: Sizes, mix: str = "tool") -> tuple[workload.Workload, workload.Workload, list[workload.Turn]]:
    """The read database's content: a session of ~read_messages messages (4 loops) and other sessions' traffic.

    Returns the big session's workload, the others', and all turns interleaved in append order.
    """
    big = workload.build(
        1,
        4,
        sizes.read_messages // 13,
        seed=workload.SEED + 1,
        prefix="big-",
        min_messages_per_session=sizes.read_messages,
        images=True,
        mix=mix,
    )
    other = workload.build(
        sizes.read_background, 2, sizes.background_turns, seed=workload.SEED + 2, prefix="other-", images=True, mix=mix
    )
    turns = [t for pair in itertools.zip_longest(big.turns, other.turns) for t in pair if t is not None]
    return big, other, turns


def fill_read_store(store: Store, turns: list[workload.Turn]) -> None:
    """Append the read database's turns through turnstore, 250 turns per transaction."""
    for chunk in blocks(turns, 250):
        with store.transaction():
            for turn in chunk:
                store.messages.append_turn(turn.loop_id, turn.turn_index, turn.models)


def sqlite_columns(connection: sqlite3.Connection, table: str = "messages") -> list[str]:
    """The column names of a table, in order."""
    return [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]


SEARCH_COLUMNS = ("search_text", "search_thinking")
"""turnstore's search words: left out of row comparisons, since the floors write none (their cost is turnstore's)."""


def sqlite_rows(path: Path | str, table: str = "messages") -> list[tuple[Any, ...]]:
    """Every column of every row of a table of a SQLite file, in rowid order, texts as written.

    Message rows leave out turnstore's search words (:data:`SEARCH_COLUMNS`), and
    texts that turnstore keeps with their media out of line come back whole
    (``turnstore.media.join``), so a floor's rows compare equal to turnstore's.
    """
    connection = sqlite3.connect(path)
    try:
        columns = [name for name in sqlite_columns(connection, table) if name not in SEARCH_COLUMNS]
        rows = connection.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid").fetchall()
        has_media = connection.execute("SELECT 1 FROM sqlite_master WHERE name = 'media'").fetchone() is not None
        if table != "messages" or not has_media:
            return rows
        texts = [i for i, name in enumerate(columns) if name in ("message", "source")]

        def whole(row: tuple[Any, ...]) -> tuple[Any, ...]:
            values = list(row)
            for i in texts:
                if isinstance(values[i], str):
                    values[i] = raw.whole_text(connection, values[i])
            return tuple(values)

        return [whole(row) for row in rows]
    finally:
        connection.close()


def sqlite_message_rows(path: Path | str) -> list[tuple[Any, ...]]:
    """Every column of every message row of a SQLite file, in id order (as :func:`sqlite_rows`)."""
    return sqlite_rows(path, "messages")


def same_rows(op: str, rows: dict[str, list[tuple[Any, ...]]]) -> int:
    """Every system wrote the same message rows as the first one (every column, ids included); their number."""
    (first, expected), *others = rows.items()
    for system, got in others:
        if got != expected:
            diff = next(i for i, (a, b) in enumerate(itertools.zip_longest(expected, got)) if a != b)
            raise SystemExit(
                f"{op}: {first} and {system} rows differ at row {diff} ({len(expected)} vs {len(got)} rows):\n"
                f"  {first}: {_row(expected, diff)}\n  {system}: {_row(got, diff)}"
            )
    return len(expected)


def _row(rows: list[tuple[Any, ...]], i: int) -> str:
    return f"{rows[i]!r:.400}" if i < len(rows) else "(none)"


# --- timing -----------------------------------------------------------------------


def timed(run: Callable[[], Any], profiler: cProfile.Profile | None = None) -> int:
    if profiler is not None:
        profiler.enable()
    start = time.perf_counter_ns()
    run()
    elapsed = time.perf_counter_ns() - start
    if profiler is not None:
        profiler.disable()
    return elapsed


def blocks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def print_profile(name: str, stats: pstats.Stats, limit: int = 14) -> None:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    text = buffer.getvalue()
    body = text[text.find("   ncalls") :] if "   ncalls" in text else text
    print(f"\n--- cProfile, turnstore side of: {name} (top {limit} by own time) ---")
    print(body.rstrip())
