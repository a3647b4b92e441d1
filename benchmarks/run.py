"""turnstore vs. a raw-sqlite3 floor: same schema, same pragmas, same rows.

    python benchmarks/run.py                 # full run, 5 repetitions (about a minute)
    python benchmarks/run.py --quick         # smoke run (seconds)
    python benchmarks/run.py --reps 9 --json benchmarks/results/run.json --out /tmp/tsbench
    python benchmarks/run.py --profile       # also cProfile turnstore's side of each operation
    python benchmarks/run.py --async         # also AsyncStore vs Store on SQLite (+ aiosqlite if installed)
    python benchmarks/run.py --postgres postgresql://postgres@127.0.0.1:5432/test   # also PostgreSQL
    python benchmarks/run.py --all           # all of it (PostgreSQL from $TURNSTORE_BENCH_POSTGRES_URL)

See benchmarks/README.md for what each operation measures and how the floor is defined.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import hashlib
import json
import os
import platform
import pstats
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pydantic  # noqa: E402
import sqlalchemy  # noqa: E402

import raw  # noqa: E402
import workload  # noqa: E402
import turnstore  # noqa: E402
from common import (  # noqa: E402
    FULL,
    QUICK,
    Result,
    Sizes,
    blocks,
    fill_read_store,
    load_average,
    open_with_loops,
    print_profile,
    read_workloads,
    remove_db,
    same_rows,
    sqlite_message_rows,
    timed,
)
from turnstore import Store  # noqa: E402

SYSTEMS = ("raw", "turnstore")
PG_ENV = "TURNSTORE_BENCH_POSTGRES_URL"


# --- the write operations ---------------------------------------------------------


def _raw_append(rs: raw.RawStore, turns: list[workload.Turn]) -> None:
    append = rs.append
    for turn in turns:
        for message in turn.dicts:
            append(message, turn.session_id, turn.loop_id, turn.turn_index)


def _ts_append(store: Store, turns: list[workload.Turn]) -> None:
    append = store.messages.append
    for turn in turns:
        for message in turn.models:
            append(message, loop_id=turn.loop_id, turn_index=turn.turn_index)


def _raw_append_turn(rs: raw.RawStore, turns: list[workload.Turn]) -> None:
    append_turn = rs.append_turn
    for turn in turns:
        append_turn(turn.dicts, turn.session_id, turn.loop_id, turn.turn_index)


def _ts_append_turn(store: Store, turns: list[workload.Turn]) -> None:
    append_turn = store.messages.append_turn
    for turn in turns:
        append_turn(turn.loop_id, turn.turn_index, turn.models)


WRITE_OPS: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
    "append": (_raw_append, _ts_append),
    "append_turn": (_raw_append_turn, _ts_append_turn),
}


def write_rep(
    op: str, paths: dict[str, Path], work: workload.Workload, warm: workload.Workload, block: int,
    systems: tuple[str, ...] = SYSTEMS, profiler: cProfile.Profile | None = None,
) -> dict[str, int]:
    """One repetition of a write operation, each system on its own fresh database file.

    Untimed: create each file and its schema (turnstore's migrations), the
    sessions and loops, and append one warm-up turn through each system's own
    path (so both have their statements prepared and connections open). Timed:
    the workload's turns, in blocks of ``block`` turns that alternate between
    the systems (raw, turnstore, turnstore, raw, ...), so load from other
    processes on the machine falls on both sides alike. Returns the summed
    nanoseconds per system.
    """
    raw_op, ts_op = WRITE_OPS[op]
    runs: dict[str, Callable[[list[workload.Turn]], None]] = {}
    closers: list[Callable[[], None]] = []
    try:
        for system in systems:
            store = open_with_loops(paths[system], [warm, work])
            if system == "raw":
                store.close()
                connection = raw.connect(str(paths[system]))
                closers.append(connection.close)
                rs = raw.RawStore(connection)
                runs[system] = lambda turns, rs=rs: raw_op(rs, turns)
            else:
                closers.append(store.close)
                runs[system] = lambda turns, store=store: ts_op(store, turns)
            runs[system](warm.turns)
        totals = dict.fromkeys(systems, 0)
        gc.collect()
        for i, turns in enumerate(blocks(work.turns, block)):
            for system in systems if i % 2 == 0 else systems[::-1]:
                totals[system] += timed(lambda: runs[system](turns), profiler)
        return totals
    finally:
        for close in closers:
            close()


def _same_rows(op: str, paths: dict[str, Path]) -> int:
    """Both systems wrote byte-identical message rows (every column, ids included)."""
    return same_rows(op, {system: sqlite_message_rows(path) for system, path in paths.items()})


def bench_write(
    op: str, reps: int, out: Path, work: workload.Workload, warm: workload.Workload, block: int, profile: bool,
) -> tuple[dict[str, list[float]], int, pstats.Stats | None]:
    """Per-op nanoseconds of each repetition, the number of rows checked, and a profile if asked."""
    per_op = work.message_count if op == "append" else len(work.turns)
    # Warm-up repetition, untimed; its databases are compared row by row.
    paths = {system: out / f"warmup-{op}-{system}.db" for system in SYSTEMS}
    write_rep(op, paths, work, warm, block)
    rows = _same_rows(op, paths)
    for path in paths.values():
        remove_db(path)
    samples: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    for rep in range(reps):
        paths = {system: out / f"{op}-{system}-{rep}.db" for system in SYSTEMS}
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        totals = write_rep(op, paths, work, warm, block, order)
        for system in SYSTEMS:
            samples[system].append(totals[system] / per_op)
        for path in paths.values():
            remove_db(path)
    stats = None
    if profile:
        profiler = cProfile.Profile()
        path = out / f"profile-{op}.db"
        write_rep(op, {"turnstore": path}, work, warm, block, ("turnstore",), profiler)
        remove_db(path)
        stats = pstats.Stats(profiler)
    return samples, rows, stats


# --- the read operations ------------------------------------------------------------


def build_read_db(path: Path, sizes: Sizes) -> tuple[Store, str]:
    """One database: a session of ~read_messages messages (4 loops) among other sessions' traffic."""
    big, other, turns = read_workloads(sizes)
    store = open_with_loops(path, [big, other])
    fill_read_store(store, turns)
    return store, big.session_ids[0]


def bench_read(
    store: Store, rs: raw.RawStore, session_id: str, sizes: Sizes, reps: int, profile: bool,
) -> dict[str, tuple[dict[str, list[float]], pstats.Stats | None]]:
    """Per-call nanoseconds of each repetition (and a profile if asked) for last() and usage.

    Each repetition makes ``calls`` calls per system, in blocks of 10 calls
    alternating between the systems, on one database both have open.
    """
    n = sizes.last_n
    ops: dict[str, tuple[int, Callable[[], Any], Callable[[], Any]]] = {
        "last": (sizes.last_calls, lambda: rs.last(session_id, n), lambda: store.messages.last(session_id, n)),
        "usage": (sizes.usage_calls, lambda: rs.usage(session_id), lambda: store.usage.session(session_id)),
    }
    block = 10
    results = {}
    for key, (calls, raw_call, ts_call) in ops.items():
        runs = {"raw": raw_call, "turnstore": ts_call}

        def loop(call: Callable[[], Any], count: int) -> None:
            for _ in range(count):
                call()

        for system in SYSTEMS:  # warm-up, untimed
            loop(runs[system], calls)
        samples: dict[str, list[float]] = {system: [] for system in SYSTEMS}
        for rep in range(reps):
            order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
            totals = dict.fromkeys(SYSTEMS, 0)
            gc.collect()
            for i in range(max(calls // block, 1)):
                for system in order if i % 2 == 0 else order[::-1]:
                    totals[system] += timed(lambda: loop(runs[system], block))
            for system in SYSTEMS:
                samples[system].append(totals[system] / (max(calls // block, 1) * block))
        stats = None
        if profile:
            profiler = cProfile.Profile()
            timed(lambda: loop(ts_call, calls), profiler)
            stats = pstats.Stats(profiler)
        results[key] = (samples, stats)
    return results


def check_reads(store: Store, rs: raw.RawStore, session_id: str, n: int) -> tuple[int, int]:
    """Both systems read the same messages and the same token sums."""
    typed = [m.model_dump(mode="json") for m in store.messages.last(session_id, n)]
    plain = rs.last(session_id, n)
    if not typed or plain[-len(typed):] != typed:
        raise SystemExit("last(): turnstore and raw returned different messages")
    totals = store.usage.session(session_id)
    sums = rs.usage(session_id)
    mine = (totals.input, totals.output, totals.reasoning, totals.cache_read, totals.cache_write,
            totals.total_tokens, totals.requests)
    if tuple(sums) != mine:
        raise SystemExit(f"usage: turnstore {mine} != raw {tuple(sums)}")
    return len(plain), len(typed)


def check_pragmas(store: Store, connection: sqlite3.Connection) -> dict[str, Any]:
    """The effective pragmas of turnstore's own connection and of the floor's are the same."""
    names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
    store.sessions.exists("x")  # make sure this thread's connection exists
    ts_connection = store._db._state().dbapi  # the connection turnstore executes on (private; read only)
    got = {}
    for name in names:
        mine = ts_connection.execute(f"PRAGMA {name}").fetchone()[0]
        theirs = connection.execute(f"PRAGMA {name}").fetchone()[0]
        if mine != theirs:
            raise SystemExit(f"PRAGMA {name}: turnstore {mine!r} != raw {theirs!r}")
        got[name] = mine
    if ts_connection.isolation_level is not None or connection.isolation_level is not None:
        raise SystemExit("both connections must be in autocommit mode")
    return got


# --- reporting ---------------------------------------------------------------------


def _git(package: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True, check=True).stdout


def code_version() -> str:
    """The commit of the turnstore being measured, and whether its package files differ from it.

    Uncommitted changes are named by a hash of their diff, so two runs can tell
    whether they measured the same code.
    """
    package = Path(turnstore.__file__).resolve().parent
    try:
        commit = _git(package, "rev-parse", "--short", "HEAD").strip()
        diff = _git(package, "diff", "HEAD", "--", ".")
        untracked = _git(package, "ls-files", "--others", "--exclude-standard", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return f"unknown (turnstore from {package}, not a git checkout)"
    if diff or untracked:
        digest = hashlib.sha1((diff + untracked).encode()).hexdigest()[:8]
        return f"{commit} + uncommitted changes in {package.name}/ (diff {digest})"
    return commit


def environment(out: Path) -> dict[str, Any]:
    commit = code_version()
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "turnstore": str(Path(turnstore.__file__).resolve().parent),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "pydantic": pydantic.VERSION,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "out": str(out),
        "load_average": load_average(),
    }


def table(results: list[Result]) -> str:
    lines = [
        "| # | Operation | Unit | raw sqlite3 | turnstore | ratio | ratio range |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for i, result in enumerate(results, 1):
        low, high = result.ratio_range
        lines.append(
            f"| {i} | {result.name} | {result.unit} | {result.median_us('raw'):,.1f} µs "
            f"| {result.median_us('turnstore'):,.1f} µs | ×{result.ratio:.2f} | ×{low:.2f}–{high:.2f} |"
        )
    return "\n".join(lines)


def run_sqlite(
    sizes: Sizes, reps: int, out: Path, work: workload.Workload, warm: workload.Workload, profile: bool,
) -> tuple[list[Result], list[tuple[str, pstats.Stats]]]:
    """The main table: turnstore's sync Store against the raw-sqlite3 floor."""
    messages = work.message_count
    print(f"write workload: {len(work.session_ids)} sessions × {sizes.write_loops} loops × "
          f"{sizes.write_turns} turns = {len(work.turns)} turns, {messages} messages "
          f"({messages / len(work.turns):.2f}/turn); {reps} repetitions, fresh database file each")

    results: list[Result] = []
    profiles: list[tuple[str, pstats.Stats]] = []
    names = {
        "append": ("append 1 message per commit", "per message"),
        "append_turn": (f"append 1 turn per transaction ({messages / len(work.turns):.2f} msgs)", "per turn"),
    }
    for op, (name, unit) in names.items():
        t0 = time.perf_counter()
        samples, rows, stats = bench_write(op, reps, out, work, warm, sizes.write_block, profile)
        results.append(Result(op, name, unit, samples))
        if stats is not None:
            profiles.append((name, stats))
        print(f"  {name}: {rows} identical rows checked; ×{results[-1].ratio:.2f} ({time.perf_counter() - t0:.1f} s)")

    t0 = time.perf_counter()
    read_path = out / "read.db"
    store, session_id = build_read_db(read_path, sizes)
    gc.collect()
    gc.freeze()
    connection = raw.connect(str(read_path))
    try:
        rs = raw.RawStore(connection)
        pragmas = check_pragmas(store, connection)
        total = connection.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        in_session = connection.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        got_raw, got_typed = check_reads(store, rs, session_id, sizes.last_n)
        print(f"read database: {total} messages, the read session {in_session} "
              f"({time.perf_counter() - t0:.1f} s to build); pragmas {pragmas}")
        print(f"  last({sizes.last_n}): raw returns {got_raw} dicts, turnstore {got_typed} models "
              f"(a window never starts with a tool result whose call it cut)")
        read = bench_read(store, rs, session_id, sizes, reps, profile)
    finally:
        connection.close()
        store.close()
        remove_db(read_path)
    read_names = {
        "last": (f"last {sizes.last_n} of a {in_session:,}-message session", "per call"),
        "usage": (f"session usage totals ({in_session:,} messages)", "per call"),
    }
    for key, (samples, stats) in read.items():
        name, unit = read_names[key]
        results.append(Result(key, name, unit, samples))
        if stats is not None:
            profiles.append((name, stats))
    return results, profiles


def postgres_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple[str | None, str | None]:
    """(URL to run the PostgreSQL section on, or None; why it is skipped, or None)."""
    if not (args.all or args.postgres is not None):
        return None, None
    url = args.postgres or os.environ.get(PG_ENV) or None
    if url is None:
        return None, f"no server given: pass --postgres URL or set {PG_ENV}"
    try:
        import pg
    except ImportError as error:
        return None, f"psycopg is not installed ({error}); pip install 'turnstore[postgres]'"
    why = pg.unreachable(pg.plain_url(url))
    if why is not None and args.postgres:  # asked for by name: fail instead of skipping
        parser.error(why)
    return (None, why) if why else (url, None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=None, help="repetitions per operation (default 5; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small workload, fast smoke run")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--out", type=Path, help="directory for the temporary databases (default: a new temp dir)")
    parser.add_argument("--profile", action="store_true", help="cProfile turnstore's side of each operation (main table)")
    parser.add_argument("--async", dest="run_async", action="store_true",
                        help="also AsyncStore vs Store on SQLite, with aiosqlite for reference if installed")
    parser.add_argument("--postgres", nargs="?", const="", default=None, metavar="URL",
                        help=f"also PostgreSQL: turnstore sync and async vs raw psycopg, on databases created on "
                             f"this server for the run (default URL: ${PG_ENV})")
    parser.add_argument("--all", action="store_true", help="everything: --async and --postgres")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    reps = args.reps if args.reps is not None else (2 if args.quick else 5)
    if reps < 1:
        parser.error("--reps must be at least 1")
    pg_url, pg_skipped = postgres_plan(args, parser)

    started = time.perf_counter()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix="turnstore-bench-", dir=args.out))
    else:
        out = Path(tempfile.mkdtemp(prefix="turnstore-bench-"))
    env = environment(out)
    print(f"turnstore benchmark — {env['date']} — commit {env['commit']}")
    print(f"turnstore imported from {env['turnstore']}")
    print(f"Python {env['python']}, SQLite {env['sqlite']}, SQLAlchemy {env['sqlalchemy']}, "
          f"pydantic {env['pydantic']}; {env['cpus']} CPUs ({env['cpu']}); databases in {out}")
    print(f"load average at start: {env['load_average']}")

    sections: list[Any] = []
    try:
        work = workload.build(sizes.write_sessions, sizes.write_loops, sizes.write_turns)
        warm = workload.build(1, 1, 1, seed=workload.SEED - 1, prefix="warm-")
        gc.collect()
        gc.freeze()  # the workload's objects are long-lived: keep them out of every later collection
        results, profiles = run_sqlite(sizes, reps, out, work, warm, args.profile)
        if args.run_async or args.all:
            import asyncbench

            sections.append(asyncio.run(asyncbench.run(sizes, reps, out, work, warm)))
        if pg_url is not None:
            import pgbench

            sections.append(asyncio.run(pgbench.run(pg_url, sizes, reps, work, warm)))
        elif pg_skipped is not None:
            from interleave import Section

            sections.append(Section("postgresql", "PostgreSQL", [], [], skipped=pg_skipped))
    finally:
        shutil.rmtree(out, ignore_errors=True)

    elapsed = time.perf_counter() - started
    print()
    print(table(results))
    print(f"\nMedians of {reps} repetitions; ratio = turnstore / raw (lower is better; ×1.00 = no overhead).")
    for section in sections:
        print()
        print(section.render())
    print(f"\nTotal runtime {elapsed:.1f} s; load average at the end: {load_average()}.")
    for name, stats in profiles:
        print_profile(name, stats)

    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        messages = work.message_count
        payload = {
            "environment": {**env, "load_average_end": load_average()},
            "sizes": sizes.__dict__,
            "reps": reps,
            "write_workload": {"sessions": len(work.session_ids), "loops": len(work.loops),
                               "turns": len(work.turns), "messages": messages},
            "total_seconds": round(elapsed, 2),
            "results": [
                {
                    "key": r.key,
                    "operation": r.name,
                    "unit": r.unit,
                    "raw_median_us": round(r.median_us("raw"), 3),
                    "turnstore_median_us": round(r.median_us("turnstore"), 3),
                    "ratio": round(r.ratio, 3),
                    "ratio_range": [round(v, 3) for v in r.ratio_range],
                    "samples_us": {s: [round(v / 1_000, 3) for v in r.ns[s]] for s in SYSTEMS},
                }
                for r in results
            ],
            "sections": {section.key: section.as_json() for section in sections},
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
