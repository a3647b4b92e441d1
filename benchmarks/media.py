"""Image-heavy sessions: what keeping media out of line saves, and what it costs.

    python benchmarks/media.py --against OTHER/src           # this checkout vs another one's code
    python benchmarks/media.py --against OTHER/src --reps 5 --json benchmarks/results/media.json

Its own workload (:func:`screenshots`, :func:`session_turns`): computer-use
agent sessions whose tool results carry a 100-500 KB base64 screenshot in two
turns of three, the same few screenshots repeated within a session and across
sessions (a screen that did not change), beside short chat text.

Four measurements, each a new interpreter per repetition with this checkout's
``src`` (``after``) or ``--against``'s (``before``) first on ``PYTHONPATH``,
the two alternating repetition by repetition so the machine's load falls on
both alike:

* ``file size``: the SQLite file (after a checkpoint) once the sessions are written;
* ``append image``: one append (its own transaction) of a screenshot tool result;
* ``append small``: one append of a 300-byte chat message (no media);
* ``last(50)``: the last 50 messages of a screenshot-heavy session; ``after``
  also with ``media="omit"``, interleaved call by call in the same process.

Medians per repetition, then the median over repetitions and the ratio after/before.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

SESSIONS = 3
TURNS = 40
"""Turns per session: a prompt, an assistant tool call and its result (a screenshot in two of three)."""
DISTINCT = 8
"""Distinct screenshots across the whole store; every other one is a repeat."""


def screenshots(seed: int = 7) -> list[str]:
    """``DISTINCT`` screenshots of 100-500 KB of base64 each (random bytes: as incompressible as a PNG)."""
    chooser = random.Random(seed)
    return [base64.b64encode(chooser.randbytes(chooser.randint(75_000, 375_000))).decode() for _ in range(DISTINCT)]


def session_turns(loop_id: str, images: list[str], seed: int) -> list[list[dict[str, Any]]]:
    """One session's turns: prompt, tool call, result (with a screenshot most of the time), as wire dicts."""
    chooser = random.Random(seed)
    turns = []
    for turn in range(TURNS):
        tid = {"loopId": loop_id, "turnIndex": turn}
        result: list[dict[str, Any]] = [{"type": "text", "text": f"clicked at {turn * 13 % 800},{turn * 7 % 600}"}]
        if turn % 3:
            result.append({"type": "image", "data": chooser.choice(images), "mimeType": "image/png"})
        turns.append(
            [
                {"role": "user", "content": [{"type": "text", "text": chat(turn)}], "timestamp": 1, "turnId": tid},
                {
                    "role": "assistant",
                    "content": [{"type": "toolCall", "id": f"c{turn}", "name": "computer", "arguments": {"x": turn}}],
                    "api": "anthropic-messages",
                    "provider": "anthropic",
                    "model": "claude-sonnet-4-5",
                    "usage": {"input": 1200, "output": 40, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 1240},
                    "stopReason": "toolUse",
                    "timestamp": 2,
                    "turnId": tid,
                },
                {
                    "role": "toolResult",
                    "toolCallId": f"c{turn}",
                    "toolName": "computer",
                    "content": result,
                    "isError": False,
                    "timestamp": 3,
                    "turnId": tid,
                },
            ]
        )
    return turns


def chat(number: int) -> str:
    """About 300 bytes of chat text."""
    return (f"message {number}: " + "the quick brown fox jumps over the lazy dog; " * 7)[:300]


# --- what runs in each worker interpreter ---------------------------------------------


def build(db: Path) -> dict[str, float]:
    """Write the image-heavy store; its file size."""
    import sqlite3

    from turnstore import Store

    images = screenshots()
    with Store(db) as store:
        for number in range(SESSIONS):
            session = store.sessions.create(title=f"computer use {number}").session_id
            loop = store.loops.start(session, config={"model": "claude-sonnet-4-5", "provider": "anthropic"}).loop_id
            for turn, messages in enumerate(session_turns(loop, images, number)):
                store.messages.append_turn(loop, turn, messages)
    connection = sqlite3.connect(db)
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return {"size": float(db.stat().st_size)}


def appends(db: Path, calls: int) -> dict[str, float]:
    """Median time of one append (its own transaction): a 300-byte chat message, then a screenshot tool result.

    The chat messages go first, into a store that holds no media yet: their figure is
    what a text-only app pays, not shared with the images' writes and checkpoints.
    """
    from turnstore import Store

    images = screenshots()
    samples: dict[str, list[float]] = {"append small": [], "append image": []}
    with Store(db) as store:
        for name in samples:
            session = store.sessions.create().session_id
            loop = store.loops.start(session, config={"model": "claude-sonnet-4-5", "provider": "anthropic"}).loop_id
            for call in range(calls):
                message: dict[str, Any] = {"role": "user", "content": [{"type": "text", "text": chat(call)}]}
                if name == "append image":
                    message = {
                        "role": "toolResult",
                        "toolCallId": f"c{call}",
                        "toolName": "computer",
                        "content": [{"type": "image", "data": images[call % DISTINCT], "mimeType": "image/png"}],
                        "isError": False,
                    }
                start = time.perf_counter()
                store.messages.append({**message, "timestamp": 1}, loop_id=loop, turn_index=call)
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in samples.items()}


def reads(db: Path, calls: int) -> dict[str, float]:
    """Median time of ``last(50)`` on a screenshot-heavy session; with ``media="omit"`` too where the code has it."""
    import inspect

    from turnstore import Store

    with Store(db) as store:
        session = store.sessions.list()[0].session_id
        omits = "media" in inspect.signature(store.messages.last).parameters
        samples: dict[str, list[float]] = {"last(50)": [], "last(50, omit)": []}
        for _ in range(calls):
            start = time.perf_counter()
            full = store.messages.last(session, 50)
            samples["last(50)"].append(time.perf_counter() - start)
            if omits:
                start = time.perf_counter()
                light = store.messages.last(session, 50, media="omit")  # type: ignore[call-arg]
                samples["last(50, omit)"].append(time.perf_counter() - start)
                assert len(light) == len(full)
    return {name: statistics.median(values) for name, values in samples.items() if values}


def worker(op: str, db: Path, calls: int) -> None:
    results = {"build": lambda: build(db), "appends": lambda: appends(db, calls), "reads": lambda: reads(db, calls)}
    print(json.dumps(results[op]()))


# --- the driver -----------------------------------------------------------------------


def run_worker(src: Path, op: str, db: Path, calls: int) -> dict[str, float]:
    environment = {**os.environ, "PYTHONPATH": str(src)}
    done = subprocess.run(
        [sys.executable, __file__, "--worker", op, "--db", str(db), "--calls", str(calls)],
        env=environment,
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def measure(sources: dict[str, Path], reps: int, calls: int, folder: Path) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {label: {} for label in sources}
    for rep in range(reps):
        order = list(sources.items()) if rep % 2 == 0 else list(reversed(sources.items()))
        for label, src in order:
            db = folder / f"{label}-{rep}.db"
            for op in ("build", "reads", "appends"):
                result = run_worker(src, op, db if op != "appends" else folder / f"{label}-{rep}-a.db", calls)
                for name, value in result.items():
                    samples[label].setdefault(name, []).append(value)
            for path in folder.glob(f"{label}-{rep}*"):
                path.unlink()
        print(f"  repetition {rep + 1}/{reps} done", file=sys.stderr)
    return samples


def report(samples: dict[str, dict[str, list[float]]]) -> list[dict[str, Any]]:
    before, after = samples.get("before", {}), samples["after"]
    rows = []
    for name in after:
        row: dict[str, Any] = {"measure": name, "after": statistics.median(after[name]), "after_samples": after[name]}
        if name in before:
            row["before"] = statistics.median(before[name])
            row["before_samples"] = before[name]
            row["ratio"] = statistics.median(a / b for a, b in zip(after[name], before[name]))
        rows.append(row)
    omit, full = after.get("last(50, omit)"), after.get("last(50)")
    if omit and full:
        rows.append(
            {
                "measure": "last(50) / last(50, omit)",
                "after": statistics.median(f / o for f, o in zip(full, omit)),
                "after_samples": [f / o for f, o in zip(full, omit)],
            }
        )
    return rows


def show(rows: list[dict[str, Any]]) -> None:
    def value(name: str, number: float | None) -> str:
        if number is None:
            return "-"
        if name == "size":
            return f"{number / 1e6:.1f} MB"
        if "/" in name:
            return f"x{number:.1f}"
        return f"{number * 1e3:.2f} ms"

    print(f"{'measure':28} {'before':>12} {'after':>12} {'after/before':>13}")
    for row in rows:
        name = row["measure"]
        ratio = f"x{row['ratio']:.2f}" if "ratio" in row else "-"
        print(f"{name:28} {value(name, row.get('before')):>12} {value(name, row['after']):>12} {ratio:>13}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", metavar="SRC", help="the code to compare with (another checkout's src folder)")
    parser.add_argument("--reps", type=int, default=5, help="repetitions, alternating the two codes (default 5)")
    parser.add_argument("--calls", type=int, default=30, help="timed calls per repetition and measure (default 30)")
    parser.add_argument("--json", metavar="FILE", help="also write the table and every sample here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.worker:
        worker(options.worker, Path(options.db), options.calls)
        return 0
    sources = {"after": SRC}
    if options.against:
        sources = {"before": Path(options.against).resolve(), **sources}
    print(f"load average at start: {load_average()}", file=sys.stderr)
    with tempfile.TemporaryDirectory(prefix="turnstore-media-") as folder:
        samples = measure(sources, options.reps, options.calls, Path(folder))
    print(f"load average at end: {load_average()}", file=sys.stderr)
    rows = report(samples)
    show(rows)
    if options.json:
        Path(options.json).write_text(
            json.dumps({"suite": "media", "reps": options.reps, "calls": options.calls, "rows": rows}, indent=1)
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
