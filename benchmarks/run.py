"""turnstore vs. a raw-sqlite3 floor: same schema, same pragmas, same rows.

    python benchmarks/run.py                 # full run, 5 repetitions (a few minutes)
    python benchmarks/run.py --quick         # smoke run (seconds)
    python benchmarks/run.py --reps 9 --json benchmarks/results/sqlite.json --out /tmp/tsbench
    python benchmarks/run.py --profile       # also cProfile turnstore's side of each operation
    python benchmarks/run.py --async         # also AsyncStore vs Store on SQLite (+ aiosqlite if installed)
    python benchmarks/run.py --postgres postgresql://postgres@127.0.0.1:5432/test   # also PostgreSQL
    python benchmarks/run.py --all           # all of it (PostgreSQL from $TURNSTORE_BENCH_POSTGRES_URL)
    python benchmarks/run.py --mix small     # on small chat messages (small, tool, image, or all in turn)

The main table (operations 1-9: appends and bulk import in ``ops_write.py``,
reads and usage in ``ops_read.py``) compares turnstore's sync Store with the
raw-sqlite3 floor at turnstore's pragmas and, in a second column, at SQLite's
default pragmas. ``--json FILE`` writes it as ``{"table": "sqlite", ...,
"rows": [...]}`` (``results.py``), and the async / PostgreSQL tables beside
it. ``--mix`` picks the message mix (``workload.MIXES``); the main table runs
once per mix (``sqlite.json`` for the tool mix, ``sqlite-small.json``, ...),
the async and PostgreSQL tables on the tool mix only. See benchmarks/README.md for what each operation measures and how the
floors are defined.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import pstats
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ops_read
import ops_write
import results as report
import workload
from common import Result, Sizes, load_average, print_profile, sizes_for

PG_ENV = "TURNSTORE_BENCH_POSTGRES_URL"


@dataclass
class MixTable:
    """The main table of one message mix, and what it was run on."""

    mix: str
    sizes: Sizes
    work: workload.Workload
    results: list[Result]
    profiles: list[tuple[str, pstats.Stats]]
    info: dict[str, Any]


def run_sqlite(
    sizes: Sizes,
    reps: int,
    out: Path,
    work: workload.Workload,
    warm: workload.Workload,
    profile: bool,
    mix: str = "tool",
) -> tuple[list[Result], list[tuple[str, pstats.Stats]], dict[str, Any]]:
    """The main table: turnstore's sync Store against the raw-sqlite3 floors (ops_write, ops_read)."""
    messages = work.message_count
    images = sum(1 for turn in work.turns for m in turn.dicts for b in m["content"] if b.get("type") == "image")
    print(
        f"message mix: {workload.MIX_TITLES[mix]}; write workload: {len(work.session_ids)} sessions × {sizes.write_loops} loops × "
        f"{sizes.write_turns} turns = {len(work.turns)} turns, {messages} messages "
        f"({messages / len(work.turns):.2f}/turn, {images} images); {reps} repetitions, fresh database file each"
    )

    results: list[Result] = []
    profiles: list[tuple[str, pstats.Stats]] = []
    info: dict[str, Any] = {}
    t0 = time.perf_counter()
    files = ops_write.export_files(out, {"work": work, "warm": warm})
    ops_write.check_import(out, files["work"], len(work.session_ids), messages)
    size = sum(path.stat().st_size for path in files["work"])
    info["import_bytes"] = size
    print(
        f"  exported the write workload: {len(files['work'])} turnstore JSONL files, {size / 1e6:.1f} MB "
        f"({time.perf_counter() - t0:.1f} s)"
    )
    for op in ops_write.write_ops(work, warm, sizes.write_block, files):
        t0 = time.perf_counter()
        samples, rows, stats = ops_write.bench_write(op, reps, out, [warm, work], profile)
        results.append(Result(op.key, op.name, op.unit, samples))
        if stats is not None:
            profiles.append((op.name, stats))
        print(
            f"  {op.name}: {rows} identical rows checked; ×{results[-1].ratio:.2f} ({time.perf_counter() - t0:.1f} s)"
        )

    t0 = time.perf_counter()
    db = ops_read.build(out, sizes, mix)
    gc.collect()
    gc.freeze()
    try:
        info["pragmas"] = ops_read.check_pragmas(db.store, db.floors)
        print(
            f"read database: {db.total} messages, the read session {db.in_session} "
            f"({time.perf_counter() - t0:.1f} s to build); pragmas {info['pragmas']}"
        )
        print(f"  {ops_read.check_reads(db, sizes.last_n)}")
        for op in ops_read.read_ops(db, sizes):
            t0 = time.perf_counter()
            samples, stats = ops_read.bench_read(op, reps, profile)
            results.append(Result(op.key, op.name, op.unit, samples))
            if stats is not None:
                profiles.append((op.name, stats))
            print(f"  {op.name}: ×{results[-1].ratio:.2f} ({time.perf_counter() - t0:.1f} s)")
    finally:
        db.close()
        ops_read.remove(out)
    return results, profiles, info


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
    parser.add_argument(
        "--json",
        type=Path,
        help="also write the results to this JSON file (the async and "
        "PostgreSQL tables beside it: sqlite.json -> async.json, x.json -> x-async.json)",
    )
    parser.add_argument("--out", type=Path, help="directory for the temporary databases (default: a new temp dir)")
    parser.add_argument(
        "--profile", action="store_true", help="cProfile turnstore's side of each operation (main table)"
    )
    parser.add_argument(
        "--async",
        dest="run_async",
        action="store_true",
        help="also AsyncStore vs Store on SQLite, with aiosqlite for reference if installed",
    )
    parser.add_argument(
        "--postgres",
        nargs="?",
        const="",
        default=None,
        metavar="URL",
        help=f"also PostgreSQL: turnstore sync and async vs raw psycopg, on databases created on "
        f"this server for the run (default URL: ${PG_ENV})",
    )
    parser.add_argument("--all", action="store_true", help="everything: --async and --postgres")
    parser.add_argument(
        "--mix",
        choices=[*workload.MIXES, "all"],
        default="tool",
        help="the message mix (default tool; all: each in turn, one main table each)",
    )
    args = parser.parse_args(argv)
    reps = args.reps if args.reps is not None else (2 if args.quick else 5)
    if reps < 1:
        parser.error("--reps must be at least 1")
    pg_url, pg_skipped = postgres_plan(args, parser)
    mixes = list(workload.MIXES) if args.mix == "all" else [args.mix]

    started = time.perf_counter()
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        out = Path(tempfile.mkdtemp(prefix="turnstore-bench-", dir=args.out))
    else:
        out = Path(tempfile.mkdtemp(prefix="turnstore-bench-"))
    env = report.environment(out)
    print(f"turnstore benchmark — {env['date']} — commit {env['commit']}")
    print(f"turnstore imported from {env['turnstore']}")
    print(
        f"Python {env['python']}, SQLite {env['sqlite']}, SQLAlchemy {env['sqlalchemy']}, "
        f"pydantic {env['pydantic']}; {env['cpus']} CPUs ({env['cpu']}); databases in {out}"
    )
    print(f"load average at start: {env['load_average']}")

    sections: list[Any] = []
    tables: list[MixTable] = []
    try:
        for mix in mixes:
            sizes = sizes_for(mix, args.quick)
            work = workload.build(sizes.write_sessions, sizes.write_loops, sizes.write_turns, images=True, mix=mix)
            warm = workload.build(1, 1, 1, seed=workload.SEED - 1, prefix="warm-", images=True, mix=mix)
            gc.collect()
            gc.freeze()  # the workload's objects are long-lived: keep them out of every later collection
            results, profiles, info = run_sqlite(sizes, reps, out, work, warm, args.profile, mix)
            tables.append(MixTable(mix, sizes, work, results, profiles, info))
            if mix == "tool" and (args.run_async or args.all):
                import asyncbench

                sections.append(asyncio.run(asyncbench.run(sizes, reps, out, work, warm)))
            if mix == "tool" and pg_url is not None:
                import pgbench

                sections.append(asyncio.run(pgbench.run(pg_url, sizes, reps, work, warm)))
            gc.unfreeze()
        if pg_url is None and pg_skipped is not None:
            from interleave import Section

            sections.append(Section("postgresql", "PostgreSQL", [], [], skipped=pg_skipped))
    finally:
        shutil.rmtree(out, ignore_errors=True)

    elapsed = time.perf_counter() - started
    for table in tables:
        print(f"\n{workload.MIX_TITLES[table.mix]}:\n")
        print(report.sqlite_table(table.results))
    print(
        f"\nMedians of {reps} repetitions; ratio = turnstore / raw sqlite3 with turnstore's pragmas "
        f"(lower is better; ×1.00 = no overhead); turnstore / default = turnstore over raw sqlite3 at "
        f"SQLite's default pragmas (rollback journal, synchronous=FULL); turnstore / minimal table = over "
        f"raw sqlite3 appending to a messages table with two indexes and no session touch."
    )
    for section in sections:
        print()
        print(section.render())
    print(f"\nTotal runtime {elapsed:.1f} s; load average at the end: {load_average()}.")
    for table in tables:
        for name, stats in table.profiles:
            print_profile(f"{name} ({table.mix})", stats)

    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        shared = {
            "environment": {**env, "load_average_end": load_average()},
            "reps": reps,
            "total_seconds": round(elapsed, 2),
        }
        written = []
        for table in tables:
            main_table = {
                "table": "sqlite",
                "mix": table.mix,
                "title": "SQLite: turnstore sync vs raw sqlite3",
                "floor": "raw",
                "systems": report.SQLITE_SYSTEMS,
                **shared,
                "sizes": table.sizes.__dict__,
                "write_workload": {
                    "sessions": len(table.work.session_ids),
                    "loops": len(table.work.loops),
                    "turns": len(table.work.turns),
                    "messages": table.work.message_count,
                },
                "info": table.info,
                "rows": report.rows(
                    table.results,
                    {"turnstore": ["raw", "raw_default", "raw_min"], "raw_default": ["raw"], "raw_min": ["raw"]},
                ),
            }
            path = report.mix_path(args.json, table.mix)
            path.write_text(json.dumps(main_table, indent=2) + "\n", encoding="utf-8")
            written.append(path)
        for section in sections:
            table_json = report.section_json(section, {**shared, "sizes": sizes_for("tool", args.quick).__dict__})
            path = report.sibling(args.json, table_json["table"])
            path.write_text(json.dumps(table_json, indent=2) + "\n", encoding="utf-8")
            written.append(path)
        print(f"\nwrote {', '.join(map(str, written))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
