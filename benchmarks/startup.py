"""How fast turnstore starts: ``import turnstore`` and ``turnstore --db X sessions`` on a small store.

    python benchmarks/startup.py                      # 15 runs of each, medians
    python benchmarks/startup.py --runs 31 --json benchmarks/results/startup.json
    python benchmarks/startup.py --against OTHER/src  # the same, alternating with another checkout's code

Every run is a new interpreter. ``import`` times what ``import turnstore``
(and then ``from turnstore import Store``) adds after ``import sqlalchemy,
pydantic`` in the same interpreter, the libraries any turnstore program pays
for; ``sessions`` is the wall-clock time of the whole command (interpreter
start to exit) listing the sessions of a small store, as ``/usr/bin/time``
would report it. ``--against`` runs the same measurements with another
source folder first on ``PYTHONPATH``, alternating run by run so that the
machine's load falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import load_average

IMPORT_PROBE = """
import time
t0 = time.perf_counter()
import sqlalchemy, pydantic
t1 = time.perf_counter()
import turnstore
t2 = time.perf_counter()
from turnstore import Store
t3 = time.perf_counter()
print(t1 - t0, t2 - t1, t3 - t1)
"""

CLI = "import sys; from turnstore.cli import main; sys.exit(main())"
"""The console script's body: ``turnstore ARGS`` with this interpreter and PYTHONPATH."""


def small_store(folder: Path) -> Path:
    """A store with five sessions, one loop and a few messages each."""
    from turnstore import Message, Store

    path = folder / "small.db"
    with Store(path) as store:
        for number in range(5):
            session = store.sessions.create(title=f"session {number}")
            loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
            store.messages.append_turn(
                loop.loop_id, 0, [Message.user("hello"), Message.assistant("hi", model="claude-sonnet-4-5")]
            )
    return path


def environment(src: str | None) -> dict[str, str]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
    return env


def import_once(src: str | None) -> tuple[float, float, float]:
    """Seconds for ``import sqlalchemy, pydantic``; what ``import turnstore`` adds; what it and ``Store`` add."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE], env=environment(src), capture_output=True, text=True, check=True
    )
    base, package, store = (float(value) for value in done.stdout.split())
    return base, package, store


def sessions_once(src: str | None, db: Path) -> float:
    """Wall-clock seconds of ``turnstore --db DB sessions``, interpreter start to exit."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-c", CLI, "--db", str(db), "sessions"],
        env=environment(src),
        stdout=subprocess.DEVNULL,
        check=True,
    )
    return time.perf_counter() - start


def measure(sources: dict[str, str | None], runs: int, db: Path) -> dict[str, dict[str, list[float]]]:
    samples: dict[str, dict[str, list[float]]] = {
        name: {"sqlalchemy+pydantic": [], "import turnstore": [], "+ Store": [], "sessions": []} for name in sources
    }
    for _ in range(runs):
        for name, src in sources.items():  # alternate, so load falls on every variant alike
            base, package, store = import_once(src)
            samples[name]["sqlalchemy+pydantic"].append(base)
            samples[name]["import turnstore"].append(package)
            samples[name]["+ Store"].append(store)
            samples[name]["sessions"].append(sessions_once(src, db))
    return samples


def result_file(runs: int, before: str, after: str, samples: dict[str, list[float]]) -> dict[str, Any]:
    """The results in the shape report.py reads: the floor is ``import sqlalchemy, pydantic`` alone."""
    from results import environment

    base = samples["sqlalchemy+pydantic"]
    with_package = [b + p for b, p in zip(base, samples["import turnstore"])]
    with_store = [b + s for b, s in zip(base, samples["+ Store"])]

    def row(op: str, label: str, system: str, values: list[float], floor: list[float] | None) -> dict[str, Any]:
        median = statistics.median(values)
        return {
            "op": op,
            "label": label,
            "unit": "per start",
            "system": system,
            "median_us": median * 1e6,
            "ratio": median / statistics.median(floor) if floor else None,
            "samples_us": [value * 1e6 for value in values],
        }

    with tempfile.TemporaryDirectory() as folder:
        env = environment(Path(folder))
    return {
        "table": "startup",
        "title": "Starting: import turnstore, and turnstore sessions",
        "floor": "floor",
        "systems": {"floor": "import sqlalchemy, pydantic", "turnstore": "turnstore"},
        "environment": {**env, "load_average": before, "load_average_end": after},
        "reps": runs,
        "rows": [
            row("import_package", "import turnstore", "floor", base, None),
            row("import_package", "import turnstore", "turnstore", with_package, base),
            row("import_store", "from turnstore import Store", "floor", base, None),
            row("import_store", "from turnstore import Store", "turnstore", with_store, base),
            row(
                "sessions",
                "turnstore --db X sessions (wall clock, a 5-session store)",
                "turnstore",
                samples["sessions"],
                None,
            ),
        ],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=15, help="runs of each measurement (default 15)")
    parser.add_argument(
        "--against", metavar="SRC", help="also measure the turnstore package in this source folder, alternating"
    )
    parser.add_argument("--json", type=Path, help="also write the medians and samples to this JSON file")
    args = parser.parse_args(argv)

    sources: dict[str, str | None] = {"this": None}
    if args.against:
        sources["against"] = str(Path(args.against).resolve())
    before = load_average()
    with tempfile.TemporaryDirectory(prefix="turnstore-startup-") as folder:
        db = small_store(Path(folder))
        samples = measure(sources, args.runs, db)
    after = load_average()

    print(f"medians of {args.runs} runs, seconds; load average {before} → {after}")
    print(f"{'':10} {'sqlalchemy+pydantic':>20} {'import turnstore':>17} {'+ Store':>9} {'sessions (wall)':>16}")
    medians: dict[str, dict[str, float]] = {}
    for name, by_kind in samples.items():
        medians[name] = {kind: statistics.median(values) for kind, values in by_kind.items()}
        m = medians[name]
        print(
            f"{name:10} {m['sqlalchemy+pydantic']:20.3f} {m['import turnstore']:17.3f} {m['+ Store']:9.3f} {m['sessions']:16.3f}"
        )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(result_file(args.runs, before, after, samples["this"]), indent=2) + "\n", encoding="utf-8"
        )
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
