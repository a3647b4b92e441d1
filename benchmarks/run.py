"""turnstore vs. a raw-sqlite3 floor: same schema, same pragmas, same rows.

    python benchmarks/run.py                 # full run, 5 repetitions (about a minute)
    python benchmarks/run.py --quick         # smoke run (seconds)
    python benchmarks/run.py --reps 9 --json benchmarks/results/run.json --out /tmp/tsbench
    python benchmarks/run.py --profile       # also cProfile turnstore's side of each operation

See benchmarks/README.md for what each operation measures and how the floor is defined.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import hashlib
import io
import itertools
import json
import os
import platform
import pstats
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import pydantic  # noqa: E402
import sqlalchemy  # noqa: E402

import raw  # noqa: E402
import workload  # noqa: E402
import turnstore  # noqa: E402
from turnstore import Store  # noqa: E402

SYSTEMS = ("raw", "turnstore")


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
    last_calls: int  # calls per repetition
    usage_calls: int


FULL = Sizes(write_sessions=8, write_loops=3, write_turns=40, write_block=2, read_messages=5_000, read_background=3,
             last_n=50, last_calls=300, usage_calls=1_000)
QUICK = Sizes(write_sessions=2, write_loops=2, write_turns=10, write_block=2, read_messages=5_000, read_background=1,
              last_n=50, last_calls=30, usage_calls=100)


@dataclass
class Result:
    key: str
    name: str
    unit: str
    ns: dict[str, list[float]]  # per-op nanoseconds, one value per repetition

    def median_us(self, system: str) -> float:
        return statistics.median(self.ns[system]) / 1_000

    @property
    def ratio(self) -> float:
        return self.median_us("turnstore") / self.median_us("raw")

    @property
    def ratio_range(self) -> tuple[float, float]:
        ratios = [t / r for r, t in zip(self.ns["raw"], self.ns["turnstore"])]
        return min(ratios), max(ratios)


# --- database setup ------------------------------------------------------------


def _remove(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _open_with_loops(path: Path, works: list[workload.Workload]) -> Store:
    """A fresh turnstore database (migrations run by Store) with the sessions and loops of ``works``."""
    _remove(path)
    store = Store(path)
    for work in works:
        for session_id in work.session_ids:
            store.sessions.create(session_id, title="benchmark")
        for plan in work.loops:
            store.loops.start(
                plan.session_id,
                loop_id=plan.loop_id,
                parent_loop_id=plan.parent_loop_id,
                continuation="default" if plan.parent_loop_id else "initial",
                config={"model": plan.model, "provider": plan.provider},
            )
    return store


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


def _timed(run: Callable[[], Any], profiler: cProfile.Profile | None = None) -> int:
    if profiler is not None:
        profiler.enable()
    start = time.perf_counter_ns()
    run()
    elapsed = time.perf_counter_ns() - start
    if profiler is not None:
        profiler.disable()
    return elapsed


def _blocks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[start:start + size] for start in range(0, len(items), size)]


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
            store = _open_with_loops(paths[system], [warm, work])
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
        for i, turns in enumerate(_blocks(work.turns, block)):
            for system in systems if i % 2 == 0 else systems[::-1]:
                totals[system] += _timed(lambda: runs[system](turns), profiler)
        return totals
    finally:
        for close in closers:
            close()


def _message_rows(path: Path) -> list[tuple[Any, ...]]:
    connection = sqlite3.connect(path)
    try:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(messages)")]
        return connection.execute(f"SELECT {', '.join(columns)} FROM messages ORDER BY id").fetchall()
    finally:
        connection.close()


def _same_rows(op: str, paths: dict[str, Path]) -> int:
    """Both systems wrote byte-identical message rows (every column, ids included)."""
    rows = {system: _message_rows(path) for system, path in paths.items()}
    if rows["raw"] != rows["turnstore"]:
        diff = next(i for i, (a, b) in enumerate(itertools.zip_longest(rows["raw"], rows["turnstore"])) if a != b)
        raise SystemExit(
            f"{op}: raw and turnstore rows differ at row {diff}:\n  raw: {rows['raw'][diff]!r:.400}\n"
            f"  turnstore: {rows['turnstore'][diff]!r:.400}"
        )
    return len(rows["raw"])


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
        _remove(path)
    samples: dict[str, list[float]] = {system: [] for system in SYSTEMS}
    for rep in range(reps):
        paths = {system: out / f"{op}-{system}-{rep}.db" for system in SYSTEMS}
        order = SYSTEMS if rep % 2 == 0 else SYSTEMS[::-1]
        totals = write_rep(op, paths, work, warm, block, order)
        for system in SYSTEMS:
            samples[system].append(totals[system] / per_op)
        for path in paths.values():
            _remove(path)
    stats = None
    if profile:
        profiler = cProfile.Profile()
        path = out / f"profile-{op}.db"
        write_rep(op, {"turnstore": path}, work, warm, block, ("turnstore",), profiler)
        _remove(path)
        stats = pstats.Stats(profiler)
    return samples, rows, stats


# --- the read operations ------------------------------------------------------------


def build_read_db(path: Path, sizes: Sizes) -> tuple[Store, str]:
    """One database: a session of ~read_messages messages (4 loops) among other sessions' traffic."""
    big = workload.build(1, 4, sizes.read_messages // 13, seed=workload.SEED + 1, prefix="big-",
                         min_messages_per_session=sizes.read_messages)
    other = workload.build(sizes.read_background, 2, 160, seed=workload.SEED + 2, prefix="other-")
    store = _open_with_loops(path, [big, other])
    turns = [t for pair in itertools.zip_longest(big.turns, other.turns) for t in pair if t is not None]
    for chunk in _blocks(turns, 250):
        with store.transaction():
            _ts_append_turn(store, chunk)
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
                    totals[system] += _timed(lambda: loop(runs[system], block))
            for system in SYSTEMS:
                samples[system].append(totals[system] / (max(calls // block, 1) * block))
        stats = None
        if profile:
            profiler = cProfile.Profile()
            _timed(lambda: loop(ts_call, calls), profiler)
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
        "load_average": _load_average(),
    }


def _load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


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


def print_profile(name: str, stats: pstats.Stats, limit: int = 14) -> None:
    buffer = io.StringIO()
    stats.stream = buffer  # type: ignore[attr-defined]
    stats.strip_dirs().sort_stats("tottime").print_stats(limit)
    text = buffer.getvalue()
    body = text[text.find("   ncalls"):] if "   ncalls" in text else text
    print(f"\n--- cProfile, turnstore side of: {name} (top {limit} by own time) ---")
    print(body.rstrip())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=None, help="repetitions per operation (default 5; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help="small workload, fast smoke run")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--out", type=Path, help="directory for the temporary databases (default: a new temp dir)")
    parser.add_argument("--profile", action="store_true", help="cProfile turnstore's side of each operation")
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    reps = args.reps if args.reps is not None else (2 if args.quick else 5)
    if reps < 1:
        parser.error("--reps must be at least 1")

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

    try:
        work = workload.build(sizes.write_sessions, sizes.write_loops, sizes.write_turns)
        warm = workload.build(1, 1, 1, seed=workload.SEED - 1, prefix="warm-")
        gc.collect()
        gc.freeze()  # the workload's objects are long-lived: keep them out of every later collection
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
            samples, rows, stats = bench_write(op, reps, out, work, warm, sizes.write_block, args.profile)
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
            read = bench_read(store, rs, session_id, sizes, reps, args.profile)
        finally:
            connection.close()
            store.close()
            _remove(read_path)
        read_names = {
            "last": (f"last {sizes.last_n} of a {in_session:,}-message session", "per call"),
            "usage": (f"session usage totals ({in_session:,} messages)", "per call"),
        }
        for key, (samples, stats) in read.items():
            name, unit = read_names[key]
            results.append(Result(key, name, unit, samples))
            if stats is not None:
                profiles.append((name, stats))
    finally:
        shutil.rmtree(out, ignore_errors=True)

    elapsed = time.perf_counter() - started
    print()
    print(table(results))
    print(f"\nMedians of {reps} repetitions; ratio = turnstore / raw (lower is better; ×1.00 = no overhead). "
          f"Total runtime {elapsed:.1f} s; load average at the end: {_load_average()}.")
    for name, stats in profiles:
        print_profile(name, stats)

    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "environment": env,
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
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
