"""turnstore against the session stores agent frameworks ship, each at its own defaults, in one run.

    python benchmarks/peers.py                  # full run (about 4 minutes)
    python benchmarks/peers.py --quick          # smoke run
    python benchmarks/peers.py --reps 7 --json benchmarks/results/peers.json
    python benchmarks/peers.py --mix all --json benchmarks/results/peers.json   # + peers-small.json, peers-image.json

Runs in a separate virtualenv that has the peers installed (never turnstore
dependencies; see benchmarks/requirements-peers.txt and the "Peers" section
of benchmarks/README.md). Every system stores the same deterministic workload
(``workload.py``) in its own native types (``peer_items.py``), in its own file
of a temporary directory, opened as its users open it (``peer_systems.py``).
Every ratio is against the raw-sqlite3 floor of ``raw.py`` measured in the
same run. Systems are interleaved within each repetition (blocks of turns or
rounds of calls), in a different order every repetition; medians of the
repetitions are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import os
import platform
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import raw
import workload
from common import blocks, load_average, remove_db, same_rows, sqlite_message_rows
from peer_items import PeerTurn, convert, records_for_last
from peer_systems import (
    SYSTEMS,
    System,
    comparable,
    expected_records,
    expected_totals,
    expected_whole,
    stored_records,
)
from results import mix_path


@dataclass(frozen=True)
class PeerSizes:
    sessions: int  # write workload: sessions x loops x turns
    loops: int
    turns: int
    block: int  # turns per interleaved block
    read_messages: int  # messages of the session read whole and by its last n
    background_turns: int  # turns of another session in the read database (2 loops)
    last_n: int
    rounds: int  # interleaved rounds of calls per read repetition
    round_seconds: float  # target time of one system's share of a round


FULL = PeerSizes(
    sessions=3,
    loops=2,
    turns=12,
    block=2,
    read_messages=5_000,
    background_turns=40,
    last_n=50,
    rounds=2,
    round_seconds=0.05,
)
IMAGE_FULL = PeerSizes(
    sessions=2,
    loops=1,
    turns=8,
    block=2,
    read_messages=1_000,
    background_turns=10,
    last_n=50,
    rounds=2,
    round_seconds=0.05,
)
"""The image mix: ≈100 KB of JSON a message on average, so a 1,000-message read session (≈100 MB)."""
IMAGE_QUICK = PeerSizes(
    sessions=1,
    loops=1,
    turns=4,
    block=2,
    read_messages=200,
    background_turns=4,
    last_n=50,
    rounds=2,
    round_seconds=0.01,
)
QUICK = PeerSizes(
    sessions=2,
    loops=1,
    turns=6,
    block=2,
    read_messages=1_000,
    background_turns=20,
    last_n=50,
    rounds=2,
    round_seconds=0.01,
)

PACKAGES = (
    "turnstore",
    "openai-agents",
    "openai",
    "langchain-core",
    "langchain-community",
    "google-adk",
    "google-genai",
    "SQLAlchemy",
    "aiosqlite",
    "pydantic",
)


@dataclass
class Row:
    op: str
    label: str
    unit: str
    system: str
    samples_ns: list[float]
    note: str | None = None

    @property
    def median_us(self) -> float | None:
        return statistics.median(self.samples_ns) / 1_000 if self.samples_ns else None


def _order(systems: list[System], rep: int) -> list[System]:
    """A different order every repetition: rotated by the repetition, reversed every other one."""
    k = rep % len(systems)
    order = systems[k:] + systems[:k]
    return order[::-1] if rep % 2 else order


# --- writes -----------------------------------------------------------------------------------


async def write_rep(
    op: str,
    systems: list[System],
    out: Path,
    tag: str,
    work: list[PeerTurn],
    warm: list[PeerTurn],
    works: list[workload.Workload],
    block: int,
) -> tuple[dict[str, int], dict[str, Path]]:
    """One repetition of a write operation: every system on a fresh file, turns in interleaved blocks.

    Untimed: the file, the sessions (and loops, for the turnstore schema), one
    warm-up turn through the system's own path. Returns the summed nanoseconds
    per system and the files.
    """
    paths = {s.name: out / f"{op}-{s.name}-{tag}.db" for s in systems}
    opened: list[System] = []
    try:
        for system in systems:
            remove_db(paths[system.name])
            await system.open_write(paths[system.name], works)
            opened.append(system)
            await getattr(system, op)(warm)
        totals = dict.fromkeys(paths, 0)
        gc.collect()
        for i, chunk in enumerate(blocks(work, block)):
            for system in systems if i % 2 == 0 else systems[::-1]:
                start = time.perf_counter_ns()
                await getattr(system, op)(chunk)
                totals[system.name] += time.perf_counter_ns() - start
        return totals, paths
    finally:
        for system in opened:
            await system.close()


async def bench_write(
    op: str,
    systems: list[System],
    out: Path,
    reps: int,
    work: list[PeerTurn],
    warm: list[PeerTurn],
    works: list[workload.Workload],
    per: int,
    block: int,
) -> dict[str, list[float]]:
    """Per-unit nanoseconds of each repetition per system; a warm-up repetition first, whose files are checked."""
    _, paths = await write_rep(op, systems, out, "warmup", work, warm, works, block)
    # From here on the floor stores and indexes turnstore's search words, as in the main table (ops_write.py).
    raw.learn_search_words(paths["turnstore"])
    same_rows(
        op,
        {
            s.name: sqlite_message_rows(paths[s.name])
            for s in systems  # turnstore's schema: same rows
            if s.name in ("floor", "turnstore", "ts_full")
        },
    )
    for system in systems:
        want, got = expected_records(system, warm + work, op), stored_records(system, paths[system.name])
        if want != got:
            raise SystemExit(f"{op}: {system.label} stored {got} records, expected {want}")
        remove_db(paths[system.name])
    samples: dict[str, list[float]] = {s.name: [] for s in systems}
    for rep in range(reps):
        totals, paths = await write_rep(op, _order(systems, rep), out, str(rep), work, warm, works, block)
        for name, total in totals.items():
            samples[name].append(total / per)
            remove_db(paths[name])
    return samples


# --- reads ------------------------------------------------------------------------------------


async def check_reads(
    systems: list[System], turns: list[PeerTurn], session_id: str, records: dict[str, int], session_ids: list[str]
) -> None:
    """Every system reads back what was written: the whole session, the last window, the usage by model."""
    want_totals = expected_totals(turns)
    for system in systems:
        whole = await system.whole(session_id)
        if comparable(system, whole) != expected_whole(system, turns, session_id):
            raise SystemExit(f"whole session: {system.label} did not return what was written")
        if await system.walk(session_id) != len(whole):
            raise SystemExit(f"walk: {system.label} walked another number of items than its whole read returns")
        last = await system.last(session_id, records)
        if not last or comparable(system, last) != comparable(system, whole)[-len(last) :]:
            raise SystemExit(f"last: {system.label} returned a different window")
        if "usage" not in system.na and await system.usage(session_ids) != want_totals:
            raise SystemExit(f"usage by model: {system.label} {await system.usage(session_ids)} != {want_totals}")


async def bench_read(
    call: Callable[[System], Awaitable[Any]], systems: list[System], reps: int, sizes: PeerSizes
) -> dict[str, list[float]]:
    """Per-call nanoseconds of each repetition per system.

    A warm-up call per system sizes its share of a round (about
    ``round_seconds``); each repetition runs ``rounds`` rounds, the systems
    taking turns in an order that changes every round and repetition.
    """
    calls: dict[str, int] = {}
    for system in systems:
        await call(system)
        start = time.perf_counter_ns()
        await call(system)
        calls[system.name] = max(1, min(200, int(sizes.round_seconds * 1e9 / max(time.perf_counter_ns() - start, 1))))
    samples: dict[str, list[float]] = {s.name: [] for s in systems}
    for rep in range(reps):
        order = _order(systems, rep)
        totals = dict.fromkeys(calls, 0)
        gc.collect()
        for i in range(sizes.rounds):
            for system in order if i % 2 == 0 else order[::-1]:
                start = time.perf_counter_ns()
                for _ in range(calls[system.name]):
                    await call(system)
                totals[system.name] += time.perf_counter_ns() - start
        for name, total in totals.items():
            samples[name].append(total / (calls[name] * sizes.rounds))
    return samples


async def run_reads(
    systems: list[System], out: Path, reps: int, sizes: PeerSizes, mix: str
) -> tuple[list[Row], dict[str, Any]]:
    """Build each system's read database (the same turns), check it, time the three reads."""
    big = workload.build(
        1,
        4,
        sizes.read_messages // 13,
        seed=workload.SEED + 1,
        prefix="big-",
        min_messages_per_session=sizes.read_messages,
        mix=mix,
    )
    other = workload.build(1, 2, sizes.background_turns, seed=workload.SEED + 2, prefix="other-", mix=mix)
    turns = [convert(t) for pair in zip(big.turns, other.turns + [None] * len(big.turns)) for t in pair if t]
    session_id, session_ids = big.session_ids[0], big.session_ids + other.session_ids
    records = records_for_last(turns, session_id, sizes.last_n)
    readers = [s for s in systems if s.reads]
    opened: list[System] = []
    info: dict[str, Any] = {"build_seconds": {}}
    try:
        for system in sorted(readers, key=lambda s: s.name != "turnstore"):  # the floor reads turnstore's file
            started = time.perf_counter()
            path = out / ("read-turnstore.db" if system.name in ("floor", "turnstore") else f"read-{system.name}.db")
            await system.open_read(path, [big, other], turns)
            opened.append(system)
            info["build_seconds"][system.name] = round(time.perf_counter() - started, 1)
        await check_reads(readers, turns, session_id, records, session_ids)
        in_session = big.messages_of(session_id)
        total = sum(len(p.turn.dicts) for p in turns)
        info.update(session_messages=in_session, messages=total, last_records=records)
        print(
            f"  read databases: {total} messages in {len(session_ids)} sessions, the read session {in_session}; "
            f"built in {info['build_seconds']} s; reads checked against what was written"
        )
        ops = {
            "last": (f"last {sizes.last_n} of a {in_session:,}-message session", lambda s: s.last(session_id, records)),
            "whole": (f"whole {in_session:,}-message session", lambda s: s.whole(session_id)),
            "walk": (
                f"walk the whole {in_session:,}-message session (none kept; a list where the store cannot stream)",
                lambda s: s.walk(session_id),
            ),
            "usage": (f"usage by model, all sessions ({total:,} messages)", lambda s: s.usage(session_ids)),
        }
        rows: list[Row] = []
        for op, (label, call) in ops.items():
            started = time.perf_counter()
            able = [s for s in readers if op not in s.na]
            samples = await bench_read(call, able, reps, sizes)
            for system in readers:
                rows.append(Row(op, label, "per call", system.name, samples.get(system.name, []), system.na.get(op)))
            print(f"  {label}: {time.perf_counter() - started:.1f} s")
        return rows, info
    finally:
        for system in opened:
            await system.close()


# --- report -----------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    import turnstore

    package = Path(turnstore.__file__).resolve().parent
    try:
        git = ["git", "-C", str(package)]
        commit = subprocess.run(
            [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=False)
        if status.stdout:
            commit += " + uncommitted changes"
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    return {
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "turnstore_commit": commit,
        **{name: version(name) for name in PACKAGES},
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "load_average_start": load_average(),
    }


def render(rows: list[Row], systems: list[System]) -> str:
    """One markdown row per operation: each system's median and its ratio to the floor."""
    head = ["Operation", "Unit", *(s.label for s in systems)]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * len(systems)]
    for op in dict.fromkeys(r.op for r in rows):
        mine = {r.system: r for r in rows if r.op == op}
        first = next(iter(mine.values()))
        floor = mine["floor"].median_us
        cells = [first.label, first.unit]
        for system in systems:
            row = mine.get(system.name)
            if row is None or row.median_us is None:
                cells.append(f"n/a ({row.note})" if row is not None and row.note else "—")
            else:
                cells.append(f"{row.median_us:,.1f} µs (×{row.median_us / floor:.2f})")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


PEERS = ("oai", "oai_adv", "langchain", "adk")


def versus(rows: list[Row], labels: dict[str, str]) -> list[str]:
    """turnstore against the fastest peer, per operation: the peer's median over turnstore's (>1: turnstore faster)."""
    lines = []
    for op in dict.fromkeys(r.op for r in rows):
        mine = {r.system: r for r in rows if r.op == op and r.median_us is not None}
        peers = [mine[p] for p in PEERS if p in mine]
        if "turnstore" not in mine or not peers:
            continue
        fastest = min(peers, key=lambda r: r.median_us)  # type: ignore[arg-type,return-value]
        speedup = fastest.median_us / mine["turnstore"].median_us  # type: ignore[operator]
        lines.append(
            f"* {mine['turnstore'].label}: fastest peer {labels[fastest.system]} {fastest.median_us:,.1f} µs, "
            f"turnstore {mine['turnstore'].median_us:,.1f} µs: ×{speedup:.2f} "
            f"({'turnstore faster' if speedup >= 1 else 'turnstore slower'})"
        )
    return lines


def sizes_for(mix: str, quick: bool) -> PeerSizes:
    """The sizes of a run on the message mix ``mix``."""
    if mix == "image":
        return IMAGE_QUICK if quick else IMAGE_FULL
    return QUICK if quick else FULL


async def run(args: argparse.Namespace) -> int:
    for mix in list(workload.MIXES) if args.mix == "all" else [args.mix]:
        path = None if args.json is None else mix_path(args.json, mix)
        await run_mix(args, mix, path)
    return 0


async def run_mix(args: argparse.Namespace, mix: str, json_path: Path | None) -> None:
    """The peers table of one message mix."""
    sizes = sizes_for(mix, args.quick)
    reps = args.reps if args.reps is not None else (2 if args.quick else 5)
    started = time.perf_counter()
    env = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), **environment()}
    print(f"turnstore peer benchmark — {env['date']} — turnstore {env['turnstore_commit']}")
    print(f"message mix: {workload.MIX_TITLES[mix]}")
    print(", ".join(f"{k} {env[k]}" for k in ("python", "sqlite", *PACKAGES)))
    print(f"load average at start: {env['load_average_start']}")
    out = Path(tempfile.mkdtemp(prefix="turnstore-peers-", dir=args.out))
    systems = [cls() for cls in SYSTEMS]
    labels = {s.name: s.label for s in systems}
    try:
        work_plan = workload.build(sizes.sessions, sizes.loops, sizes.turns, mix=mix)
        warm_plan = workload.build(1, 1, 1, seed=workload.SEED - 1, prefix="warm-", mix=mix)
        work, warm = [convert(t) for t in work_plan.turns], [convert(t) for t in warm_plan.turns]
        gc.collect()
        gc.freeze()
        messages = work_plan.message_count
        print(
            f"write workload: {sizes.sessions} sessions × {sizes.loops} loops × {sizes.turns} turns = "
            f"{len(work)} turns, {messages} messages; {reps} repetitions, fresh files each; files in {out}"
        )
        rows: list[Row] = []
        per_turn = messages / len(work)
        write_ops = {
            "append": ("append 1 message per commit", "per message", messages),
            "append_turn": (f"append 1 turn per transaction ({per_turn:.2f} msgs)", "per turn", len(work)),
        }
        for op, (label, unit, per) in write_ops.items():
            t0 = time.perf_counter()
            samples = await bench_write(op, systems, out, reps, work, warm, [warm_plan, work_plan], per, sizes.block)
            rows += [Row(op, label, unit, s.name, samples[s.name]) for s in systems]
            print(
                f"  {label}: floor and turnstore rows identical, peers' record counts checked "
                f"({time.perf_counter() - t0:.1f} s)"
            )
        read_rows, read_info = await run_reads(systems, out, reps, sizes, mix)
        rows += read_rows
    finally:
        shutil.rmtree(out, ignore_errors=True)
    floor = {r.op: r.median_us for r in rows if r.system == "floor"}
    elapsed = time.perf_counter() - started
    env["load_average_end"] = load_average()
    print()
    print(render(rows, systems))
    print(f"\nMedians of {reps} repetitions; (×n) = median / the floor's median in this run.")
    fastest = versus(rows, labels)
    print("\n".join(fastest))
    print(f"\nTotal runtime {elapsed:.1f} s; load average at the end: {env['load_average_end']}.")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "table": "peers",
            "mix": mix,
            "date": env["date"],
            "env": env,
            "reps": reps,
            "sizes": sizes.__dict__,
            "write_workload": {"turns": len(work), "messages": messages},
            "read_workload": read_info,
            "total_seconds": round(elapsed, 1),
            "systems": labels,
            "turnstore_vs_fastest_peer": [line[2:] for line in fastest],
            "rows": [
                {
                    "op": r.op,
                    "label": r.label,
                    "unit": r.unit,
                    "system": r.system,
                    "median_us": None if r.median_us is None else round(r.median_us, 3),
                    "ratio": None if r.median_us is None else round(r.median_us / floor[r.op], 3),  # type: ignore[operator]
                    "samples_us": [round(v / 1_000, 3) for v in r.samples_ns],
                    **({"note": r.note} if r.note else {}),
                }
                for r in rows
            ],
        }
        json_path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {json_path}")
    gc.unfreeze()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small workload, fast smoke run")
    parser.add_argument("--reps", type=int, default=None, help="repetitions per operation (default 5; 2 with --quick)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument("--out", type=Path, help="directory for the temporary databases (default: system temp)")
    parser.add_argument(
        "--mix",
        choices=[*workload.MIXES, "all"],
        default="tool",
        help="the message mix (default tool; all: each in turn, one table each)",
    )
    args = parser.parse_args(argv)
    if args.reps is not None and args.reps < 1:
        parser.error("--reps must be at least 1")
    logging.getLogger("google_adk").setLevel(logging.ERROR)
    return asyncio.run(run(args))


if __name__ == "__main__":
    raise SystemExit(main())
