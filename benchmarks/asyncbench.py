"""``--async``: turnstore's AsyncStore against its sync Store on SQLite, with the raw floor and aiosqlite.

Four systems, each on a fresh file per repetition, interleaved (``interleave.py``):

* ``raw``: the sqlite3 floor of ``raw.py``;
* ``sync``: ``Store``, as in the main table;
* ``async``: ``await AsyncStore.open(path)``, then every append awaited in
  turn (``await store.messages.append(model, loop_id=…, turn_index=…)``), as
  an agent loop awaits its store between model calls — one thread hop per call;
* ``async1`` (diagnostic): ``AsyncStore(path, workers=1)``, one thread and
  one connection, to show what rotating over the pool's connections costs;
* ``aiosqlite`` (reference, appends only): the floor's own statements and rows,
  one ``await`` per statement on an aiosqlite connection with the same pragmas
  — one thread hop per statement. A benchmark-only requirement
  (``benchmarks/requirements.txt``); without it the column is skipped.

The reads (last 50, session usage) are measured for raw, sync and async too.
"""

from __future__ import annotations

from pathlib import Path

import workload
from common import Sizes
from interleave import Section, SqliteFiles, run_ops
from systems import (
    AioSqlite,
    RawSqlite,
    System,
    TurnstoreAsync,
    TurnstoreAsyncOneWorker,
    TurnstoreSync,
    aiosqlite,
)

TARGET = 2.0  # async / sync


async def check_pragmas(out: Path) -> dict[str, object]:
    """aiosqlite's connection has the floor's (and so turnstore's) effective pragmas."""
    path = out / "pragmas-aiosqlite.db"
    system = await AioSqlite.open(str(path))
    try:
        got = await system.pragmas()
    finally:
        await system.close()
    raw_system = await RawSqlite.open(str(path))
    try:
        connection = raw_system.rs.connection
        expected = {name: connection.execute(f"PRAGMA {name}").fetchone()[0] for name in got}
    finally:
        await raw_system.close()
    if got != expected:
        raise SystemExit(f"aiosqlite pragmas {got} != raw sqlite3 pragmas {expected}")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    return got


async def run(sizes: Sizes, reps: int, out: Path, work: workload.Workload, warm: workload.Workload) -> Section:
    systems: list[type[System]] = [RawSqlite, TurnstoreSync, TurnstoreAsync, TurnstoreAsyncOneWorker]
    section = Section(
        "sqlite_async",
        "SQLite: AsyncStore vs Store (and aiosqlite, for reference)",
        columns=[
            ("raw", "raw sqlite3"),
            ("sync", "turnstore sync"),
            ("async", "turnstore async"),
            ("async1", "async, 1 worker"),
            ("aiosqlite", "aiosqlite"),
        ],
        ratios=[("async", "sync"), ("async", "raw"), ("async1", "sync"), ("aiosqlite", "raw")],
    )
    if aiosqlite is None:
        section.notes.append(
            "aiosqlite is not installed, so its column is empty: it is a benchmark-only requirement "
            "(`pip install --target DIR -r benchmarks/requirements.txt`, then `PYTHONPATH=DIR`)."
        )
    else:
        systems.append(AioSqlite)
        section.info["aiosqlite"] = aiosqlite.__version__
        section.info["aiosqlite_pragmas"] = await check_pragmas(out)
    print(f"\nSQLite, async: {', '.join(cls.label for cls in systems)}; {reps} repetitions, fresh file each")
    await run_ops(section, SqliteFiles(out), systems, sizes, reps, work, warm)
    append = next(r.ratio_of("async", "sync") for r in section.results if r.key == "append")
    section.notes += [
        f"Medians of {reps} repetitions, per-repetition range in parentheses; all systems interleaved in "
        f"blocks ({sizes.write_block} turns, or 10 calls) inside one event loop, each block timed around its await.",
        "async: each call awaited in turn (one thread hop per call, to AsyncStore's worker pool of 4 threads, "
        "each with its own connection, all opened before timing); sync: the same store's calls, blocking.",
        "async, 1 worker: AsyncStore(path, workers=1), a diagnostic: every call on the same thread and "
        "connection. The default pool gives the next call to the most recently used worker, so calls awaited "
        "one after another also stay on one connection; its other workers were opened by the warm-up.",
        "aiosqlite: the raw floor's statements and rows with one await per statement "
        "(BEGIN IMMEDIATE, INSERT…, UPDATE sessions, COMMIT), same pragmas (checked); appends only.",
        f"Target, async/sync for append 1 message per commit ≤ ×{TARGET:g}: "
        f"{'met' if append <= TARGET else 'NOT met'} (×{append:.2f}); the other operations are reported, not targeted.",
    ]
    return section
