"""What each index on ``messages`` and the session touch cost an append, in one run.

    python benchmarks/index_costs.py                    # small chat messages, 5 repetitions
    python benchmarks/index_costs.py --mix tool --reps 3 --json benchmarks/results/index_costs.json

The raw-sqlite3 floor of ``raw.py`` appends the write workload one message
per commit to files that differ in one thing each: turnstore's schema as it
is (with the ``UPDATE sessions`` that moves ``updated_at``), without the
touch, without one of the optional indexes, without all of them, and the
minimal table of ``raw.create_minimal`` (two indexes, no touch); turnstore's
own ``messages.append`` runs beside them on its full schema. The systems
alternate in blocks of two turns (order reversed every block), each on a
fresh file every repetition; the table gives medians, each over the floor
with the full schema. What each index serves is in docs/performance.md
("Where turnstore's time goes").
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import raw
import workload
from common import blocks, load_average, open_with_loops, remove_db, sizes_for
from results import environment

OPTIONAL = (
    "ix_messages_usage_session",
    "ix_messages_usage_loop",
    "ix_messages_usage_model",
    "ix_messages_cost",
)
"""The messages indexes beyond the two every read needs (a session's messages in order, a loop's turns)."""

VARIANTS: dict[str, tuple[tuple[str, ...], bool]] = {
    "full": ((), True),
    "no touch": ((), False),
    **{f"without {name}": ((name,), True) for name in OPTIONAL},
    "without the four": (OPTIONAL, True),
    "without the four, no touch": (OPTIONAL, False),
}
"""Variant -> (indexes dropped from turnstore's schema, whether the session is touched)."""


def _open(name: str, path: Path, works: list[workload.Workload]) -> tuple[Callable[[list[Any]], None], Any]:
    """The variant's appender on a fresh file: (append the turns' messages, close)."""
    store = open_with_loops(path, works)
    if name == "turnstore":
        append = store.messages.append

        def run_turnstore(turns: list[workload.Turn]) -> None:
            for turn in turns:
                for message in turn.models:
                    append(message, loop_id=turn.loop_id, turn_index=turn.turn_index)

        return run_turnstore, store.close
    store.close()
    dropped, touch = VARIANTS[name]
    connection = raw.connect(str(path))
    for index in dropped:
        connection.execute(f"DROP INDEX {index}")
    rs = raw.RawStore(connection, touch=touch)

    def run_raw(turns: list[workload.Turn]) -> None:
        for turn in turns:
            for message in turn.dicts:
                rs.append(message, turn.session_id, turn.loop_id, turn.turn_index)

    return run_raw, connection.close


def rep(out: Path, tag: str, work: workload.Workload, warm: workload.Workload, names: list[str]) -> dict[str, int]:
    """One repetition: every variant on a fresh file; nanoseconds per variant."""
    runs: dict[str, Callable[[list[Any]], None]] = {}
    closers = []
    try:
        for name in names:
            run, close = _open(name, out / f"{tag}-{names.index(name)}.db", [warm, work])
            closers.append(close)
            runs[name] = run
            run(warm.turns)
        totals = dict.fromkeys(names, 0)
        for i, chunk in enumerate(blocks(work.turns, 2)):
            for name in names if i % 2 == 0 else names[::-1]:
                start = time.perf_counter_ns()
                runs[name](chunk)
                totals[name] += time.perf_counter_ns() - start
        return totals
    finally:
        for close in closers:
            close()
        for i in range(len(names)):
            remove_db(out / f"{tag}-{i}.db")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", choices=workload.MIXES, default="small", help="the message mix (default small)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions (default 5)")
    parser.add_argument("--quick", action="store_true", help="the small write workload")
    parser.add_argument("--json", type=Path, help="also write the table to this JSON file")
    args = parser.parse_args(argv)
    if args.reps < 1:
        parser.error("--reps must be at least 1")
    sizes = sizes_for(args.mix, args.quick)
    work = workload.build(sizes.write_sessions, sizes.write_loops, sizes.write_turns, images=True, mix=args.mix)
    warm = workload.build(1, 1, 1, seed=workload.SEED - 1, prefix="warm-", images=True, mix=args.mix)
    names = ["turnstore", *VARIANTS]
    out = Path(tempfile.mkdtemp(prefix="turnstore-index-costs-"))
    env = environment(out)
    print(f"index costs — {env['date']} — commit {env['commit']}; load average {env['load_average']}")
    print(f"{workload.MIX_TITLES[args.mix]}: {work.message_count} messages appended one per commit, {args.reps} reps")
    samples: dict[str, list[float]] = {name: [] for name in names}
    for k in range(args.reps):
        order = names if k % 2 == 0 else names[::-1]
        for name, total in rep(out, str(k), work, warm, order).items():
            samples[name].append(total / work.message_count / 1_000)
    out.rmdir()
    base = statistics.median(samples["full"])
    rows = []
    print("\n| variant | per message | over the full schema |\n|---|---:|---:|")
    for name in names:
        median = statistics.median(samples[name])
        rows.append(
            {
                "op": "append",
                "label": f"append 1 message per commit ({args.mix} mix)",
                "unit": "per message",
                "system": name,
                "median_us": round(median, 2),
                "ratio": round(median / base, 3),
                "samples_us": [round(v, 2) for v in samples[name]],
            }
        )
        print(f"| {name} | {median:,.1f} µs | ×{median / base:.2f} |")
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "table": "index_costs",
            "mix": args.mix,
            "floor": "full",
            "systems": {name: name if name == "turnstore" else f"raw sqlite3, {name}" for name in names},
            "environment": {**env, "load_average_end": load_average()},
            "reps": args.reps,
            "messages": work.message_count,
            "rows": rows,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
