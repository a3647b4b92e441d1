"""The interleaved driver for sections with more than two systems, awaited (async and PostgreSQL).

The same method as the SQLite table of ``run.py``, for any list of systems
(``systems.py``) and either backend:

* writes: every system on a fresh database of its own, with the workload's
  sessions and loops created through turnstore and one untimed warm-up turn
  through its own path; then the turns in blocks that alternate between the
  systems (order reversed every block and every repetition). One untimed
  warm-up repetition first, whose databases are compared row by row.
* reads: every system open on one database; calls in blocks of 10,
  alternating the same way, after an untimed warm-up pass and a check that
  all return the same window and the same sums.

Everything runs inside one event loop; each block is timed around its
``await``, so an async system's thread hops are inside the time and the
event loop's start-up is not.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import workload
from common import (
    READ_BLOCK,
    Result,
    Sizes,
    blocks,
    fill_read_store,
    populate,
    read_workloads,
    remove_db,
    same_rows,
    sqlite_message_rows,
)
from systems import System

from turnstore import Store


class SqliteFiles:
    """A fresh file per system, operation and repetition."""

    dialect = "sqlite"

    def __init__(self, out: Path) -> None:
        self.out = out

    def fresh(self, op: str, system: str, rep: str) -> str:
        path = self.out / f"{op}-{system}-{rep}.db"
        remove_db(path)
        return str(path)

    def discard(self, url: str) -> None:
        remove_db(Path(url))

    def rows(self, url: str) -> list[tuple[Any, ...]]:
        return sqlite_message_rows(url)

    def after_build(self, url: str) -> None:
        pass


class Backend(Protocol):
    """Where a section's databases live (``SqliteFiles`` here, ``pgbench.PostgresDatabases``)."""

    dialect: str

    def fresh(self, op: str, system: str, rep: str) -> str:
        """URL of an empty database for ``system`` (turnstore's schema, or none yet)."""

    def discard(self, url: str) -> None: ...

    def rows(self, url: str) -> list[tuple[Any, ...]]:
        """Every column of every message row, in id order."""

    def after_build(self, url: str) -> None:
        """Called once the read database is written."""


async def write_rep(
    op: str,
    order: list[type[System]],
    urls: dict[str, str],
    work: workload.Workload,
    warm: workload.Workload,
    block: int,
) -> dict[str, int]:
    """One repetition of a write operation; returns the summed nanoseconds per system."""
    opened: dict[str, System] = {}
    try:
        for cls in order:
            store = Store(urls[cls.name])  # migrations, sessions, loops: through turnstore, untimed
            try:
                populate(store, [warm, work])
            finally:
                store.close()
            system = opened[cls.name] = await cls.open(urls[cls.name])
            await system.write(op, warm.turns)
        totals = dict.fromkeys(opened, 0)
        names = [cls.name for cls in order]
        gc.collect()
        for i, turns in enumerate(blocks(work.turns, block)):
            for name in names if i % 2 == 0 else names[::-1]:
                system = opened[name]
                start = time.perf_counter_ns()
                await system.write(op, turns)
                totals[name] += time.perf_counter_ns() - start
        return totals
    finally:
        for system in opened.values():
            await system.close()


async def bench_write(
    op: str,
    systems: list[type[System]],
    backend: Backend,
    work: workload.Workload,
    warm: workload.Workload,
    block: int,
    reps: int,
) -> tuple[dict[str, list[float]], int]:
    """Per-op nanoseconds of each repetition per system, and the number of rows checked equal."""
    per_op = work.message_count if op == "append" else len(work.turns)
    urls = {cls.name: backend.fresh(op, cls.name, "warmup") for cls in systems}
    await write_rep(op, systems, urls, work, warm, block)
    rows = same_rows(op, {name: backend.rows(url) for name, url in urls.items()})
    for url in urls.values():
        backend.discard(url)
    samples: dict[str, list[float]] = {cls.name: [] for cls in systems}
    for rep in range(reps):
        order = systems if rep % 2 == 0 else systems[::-1]
        urls = {cls.name: backend.fresh(op, cls.name, str(rep)) for cls in systems}
        totals = await write_rep(op, order, urls, work, warm, block)
        for name, total in totals.items():
            samples[name].append(total / per_op)
        for url in urls.values():
            backend.discard(url)
    return samples, rows


def build_read_db(
    backend: Backend, big: workload.Workload, other: workload.Workload, turns: list[workload.Turn]
) -> str:
    """The read database (written through turnstore's sync store); its URL."""
    url = backend.fresh("read", "read", "all")
    store = Store(url)
    try:
        populate(store, [big, other])
        fill_read_store(store, turns)
    finally:
        store.close()
    backend.after_build(url)
    return url


async def check_reads(opened: dict[str, System], session_id: str, n: int) -> int:
    """Every system reads the same last-n window (a typed window may drop a leading orphan tool result) and sums."""
    (base_name, base), *others = opened.items()
    plain = await base.check_last(session_id, n)
    sums = await base.check_usage(session_id)
    for name, system in others:
        window = await system.check_last(session_id, n)
        if not window or plain[-len(window) :] != window:
            raise SystemExit(f"last(): {name} and {base_name} returned different messages")
        mine = await system.check_usage(session_id)
        if tuple(mine) != tuple(sums):
            raise SystemExit(f"usage: {name} {mine} != {base_name} {tuple(sums)}")
    return len(plain)


async def bench_read(
    systems: list[type[System]],
    url: str,
    session_id: str,
    sizes: Sizes,
    reps: int,
) -> dict[str, dict[str, list[float]]]:
    """Per-call nanoseconds of each repetition per system, for last() and usage."""
    opened: dict[str, System] = {}
    try:
        for cls in systems:
            if cls.reads:
                opened[cls.name] = await cls.open(url)
        await check_reads(opened, session_id, sizes.last_n)
        n = sizes.last_n
        ops: dict[str, tuple[int, Callable[[System, int], Any]]] = {
            "last": (sizes.last_calls, lambda s, calls: s.last(session_id, n, calls)),
            "usage": (sizes.usage_calls, lambda s, calls: s.usage(session_id, calls)),
        }
        names = list(opened)
        results: dict[str, dict[str, list[float]]] = {}
        for key, (calls, run) in ops.items():
            for system in opened.values():  # warm-up, untimed
                await run(system, calls)
            rounds = max(calls // READ_BLOCK, 1)
            samples: dict[str, list[float]] = {name: [] for name in names}
            for rep in range(reps):
                order = names if rep % 2 == 0 else names[::-1]
                totals = dict.fromkeys(names, 0)
                gc.collect()
                for i in range(rounds):
                    for name in order if i % 2 == 0 else order[::-1]:
                        start = time.perf_counter_ns()
                        await run(opened[name], READ_BLOCK)
                        totals[name] += time.perf_counter_ns() - start
                for name in names:
                    samples[name].append(totals[name] / (rounds * READ_BLOCK))
            results[key] = samples
        return results
    finally:
        for system in opened.values():
            await system.close()


def write_names(work: workload.Workload) -> dict[str, tuple[str, str]]:
    per_turn = work.message_count / len(work.turns)
    return {
        "append": ("append 1 message per commit", "per message"),
        "append_turn": (f"append 1 turn per transaction ({per_turn:.2f} msgs)", "per turn"),
    }


def read_names(n: int, in_session: int) -> dict[str, tuple[str, str]]:
    return {
        "last": (f"last {n} of a {in_session:,}-message session", "per call"),
        "usage": (f"session usage totals ({in_session:,} messages)", "per call"),
    }


def table(results: list[Result], columns: list[tuple[str, str]], ratios: list[tuple[str, str]]) -> str:
    """A markdown table: the median of each system, then each ratio with its per-repetition range."""
    head = ["#", "Operation", "Unit", *(label for _, label in columns), *(f"{a}/{b}" for a, b in ratios)]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (len(columns) + len(ratios))]
    for result in results:
        cells = [str(result.num), result.name, result.unit]
        cells += [f"{result.median_us(name):,.1f} µs" if name in result.ns else "—" for name, _ in columns]
        for a, b in ratios:
            if a in result.ns and b in result.ns:
                low, high = result.range_of(a, b)
                cells.append(f"×{result.ratio_of(a, b):.2f} ({low:.2f}–{high:.2f})")
            else:
                cells.append("—")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass
class Section:
    """One table of the report: its results, which systems and ratios it shows, and its notes."""

    key: str
    title: str
    columns: list[tuple[str, str]]  # (system, column header)
    ratios: list[tuple[str, str]]  # (system, base)
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # extra facts for the JSON report
    skipped: str | None = None  # why the section did not run

    def render(self) -> str:
        if self.skipped:
            return f"### {self.title}\n\nskipped: {self.skipped}"
        notes = "\n".join(f"* {note}" for note in self.notes)
        return f"### {self.title}\n\n{table(self.results, self.columns, self.ratios)}\n\n{notes}".rstrip()

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "skipped": self.skipped,
            "notes": self.notes,
            "info": self.info,
            "results": [
                {
                    **r.as_json(),
                    "ratios": {
                        f"{a}/{b}": {
                            "median": round(r.ratio_of(a, b), 3),
                            "range": [round(v, 3) for v in r.range_of(a, b)],
                        }
                        for a, b in self.ratios
                        if a in r.ns and b in r.ns
                    },
                }
                for r in self.results
            ],
        }


async def run_ops(
    section: Section,
    backend: Backend,
    systems: list[type[System]],
    sizes: Sizes,
    reps: int,
    work: workload.Workload,
    warm: workload.Workload,
) -> None:
    """The four operations for ``systems`` on ``backend``, appended to ``section.results``."""
    for op, (name, unit) in write_names(work).items():
        started = time.perf_counter()
        samples, rows = await bench_write(op, systems, backend, work, warm, sizes.write_block, reps)
        section.results.append(Result(op, name, unit, samples))
        print(
            f"  {name}: {rows} identical rows checked across {', '.join(samples)} "
            f"({time.perf_counter() - started:.1f} s)"
        )
    started = time.perf_counter()
    big, other, turns = read_workloads(sizes)
    url = build_read_db(backend, big, other, turns)
    session_id = big.session_ids[0]
    in_session = big.messages_of(session_id)
    print(
        f"  read database: {sum(len(t.models) for t in turns)} messages, the read session {in_session} "
        f"({time.perf_counter() - started:.1f} s to build)"
    )
    try:
        reads = await bench_read(systems, url, session_id, sizes, reps)
    finally:
        backend.discard(url)
    for key, (name, unit) in read_names(sizes.last_n, in_session).items():
        section.results.append(Result(key, name, unit, reads[key]))
    print(
        f"  reads: same windows and sums checked across {', '.join(reads['last'])} "
        f"({time.perf_counter() - started:.1f} s)"
    )
