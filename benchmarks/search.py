"""Search benchmark: full-text search over a 1M-message store, and what keeping the index costs.

The store is the ``scale`` suite's (100 sessions x 10,000 messages of ``workload.py``,
built by ``store.import_("turnstore", ...)`` of its generated exports), with one
change: ``workload.py`` draws every word from 115 equally likely ones, so any
word is in a tenth of all messages, which no real transcript is like. Each text
block here also gets a few words of a 20,000-word vocabulary drawn by Zipf's
law (word of rank r about 1/r as often as the first), as words of natural
language are; the queries use those, and one "common" query uses two of the
115 words (the worst case: each is in about 100,000 messages).

Measured, with medians over ``--reps`` repetitions:

* **search** on the large store, interleaved query by query: two words, a phrase,
  a prefix, the common two words, and a two-word query in one session;
* **build**: the same exports imported by this checkout (index on) and by
  ``--against`` (another checkout's ``src``: without the index), in subprocesses;
  their times and file sizes;
* **migration**: the store built by ``--against`` upgraded by this checkout
  (``migrate.upgrade``, which backfills the index), its time and the peak RSS of the process;
* **appends**: ``messages.append`` of workload messages to a fresh store, this
  checkout and ``--against`` alternating in subprocesses, median per append;
* **import**: one 10,000-message session imported into a fresh store, alternating the same way.

    python benchmarks/search.py --against ../main/src [--sessions 100] [--reps 15] [--out DIR] [--json FILE]

Without ``--against`` only the search timings and this checkout's build are measured.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sqlite3
import statistics
import subprocess
import sys
import time
from itertools import accumulate
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

VOCABULARY = 20_000
ZIPF_WORDS_PER_BLOCK = (3, 12)
SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "ta", "vo", "zi", "po", "se", "da", "fu")
SEED = 20261126
APPENDS = 1_000
ROUNDS = 5


def zipf_word(rank: int) -> str:
    """The vocabulary word of ``rank`` (1 = most frequent): its rank written in syllables, so words share prefixes."""
    digits = []
    number = rank + len(SYLLABLES)
    while number:
        number, digit = divmod(number, len(SYLLABLES))
        digits.append(SYLLABLES[digit])
    return "".join(reversed(digits))


def searchable_exports(sessions: int, out: Path) -> list[Path]:
    """The scale suite's session exports, each text block given a few Zipf-drawn words (cached in ``out``)."""
    import scale

    raw = out / "exports"
    done = out / "search-exports"
    raw.mkdir(parents=True, exist_ok=True)
    done.mkdir(parents=True, exist_ok=True)
    words = [zipf_word(rank) for rank in range(1, VOCABULARY + 1)]
    weights = list(accumulate(1 / rank for rank in range(1, VOCABULARY + 1)))
    files = []
    for index in range(sessions):
        target = done / f"session-{index:04d}.jsonl"
        files.append(target)
        if target.exists():
            continue
        source = raw / f"session-{index:04d}.jsonl"
        if not source.exists():
            scale.write_session_export(index, source)
        rng = random.Random(SEED + index)
        with open(source, encoding="utf-8") as read, open(target.with_suffix(".tmp"), "w", encoding="utf-8") as write:
            for line in read:
                record = json.loads(line)
                if record.get("type") == "message":
                    for block in record["message"].get("content") or []:
                        if isinstance(block, dict) and block.get("type") == "text":
                            count = rng.randint(*ZIPF_WORDS_PER_BLOCK)
                            block["text"] += " " + " ".join(rng.choices(words, cum_weights=weights, k=count))
                write.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
        target.with_suffix(".tmp").rename(target)
        if (index + 1) % 10 == 0:
            print(f"  prepared {index + 1}/{sessions} session exports", file=sys.stderr, flush=True)
    return files


# --- subprocesses: one version of the code each ------------------------------------------


def child(mode: str, args: list[str]) -> None:
    """Subprocess body: run ``mode`` with whatever turnstore is on ``sys.path``; print the result as JSON."""
    from turnstore import Store, migrate
    from turnstore.engine import create_engine

    result: dict[str, Any] = {}
    if mode == "import":
        db, *files = args
        started = time.perf_counter()
        with Store(db) as store:
            report = store.import_("turnstore", *files)
        result["seconds"] = time.perf_counter() - started
        result["messages"] = report.messages
        with sqlite3.connect(db) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        result["bytes"] = Path(db).stat().st_size
    elif mode == "upgrade":
        (db,) = args
        engine = create_engine(db)
        started = time.perf_counter()
        migrate.upgrade(engine)
        result["seconds"] = time.perf_counter() - started
        engine.dispose()
        with sqlite3.connect(db) as connection:
            connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        result["bytes"] = Path(db).stat().st_size
    elif mode == "append":
        db, source = args
        messages = []
        with open(source, encoding="utf-8") as read:
            for line in read:
                record = json.loads(line)
                if record.get("type") == "message":
                    message = record["message"]
                    message.pop("turnId", None)
                    messages.append(message)
                if len(messages) >= APPENDS:
                    break
        with Store(db) as store:
            loop_id = store.loops.start(store.sessions.create().session_id).loop_id
            times = []
            for turn, message in enumerate(messages):
                started = time.perf_counter()
                store.messages.append(message, loop_id=loop_id, turn_index=turn)
                times.append(time.perf_counter() - started)
        result["median_us"] = statistics.median(times) * 1e6
    status = Path("/proc/self/status").read_text()
    result["peak_rss_mb"] = round(int(status.split("VmHWM:")[1].split()[0]) / 1024, 1)
    print(json.dumps(result))


def run_child(src: Path | None, mode: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(src)
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, *args], capture_output=True, text=True, env=env, check=False
    )
    if out.returncode != 0:
        raise SystemExit(f"{mode} child failed:\n{out.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# --- measuring ----------------------------------------------------------------------------


def queries(db: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        session_id = connection.execute("SELECT session_id FROM sessions ORDER BY session_id LIMIT 1").fetchone()[0]
    return {
        "two words": (f"{zipf_word(40)} {zipf_word(90)}", {}),
        "phrase": (f'"{zipf_word(2)} {zipf_word(3)}"', {}),
        "prefix": (f"{zipf_word(300)[:6]}*", {}),
        "two words, one session": (f"{zipf_word(40)} {zipf_word(90)}", {"session_id": session_id}),
        "two common words": ("migration fails", {}),
    }


def time_searches(db: Path, reps: int) -> dict[str, Any]:
    from turnstore import Store

    plan = queries(db)
    times: dict[str, list[float]] = {name: [] for name in plan}
    hits: dict[str, int] = {}
    with Store(db) as store:
        for name, (query, filters) in plan.items():  # warm-up, and how many messages match
            store.messages.search(query, **filters)
            hits[name] = len(store.messages.search(query, limit=1000, **filters))
        for _ in range(reps):
            for name, (query, filters) in plan.items():
                started = time.perf_counter()
                store.messages.search(query, **filters)
                times[name].append(time.perf_counter() - started)
    return {
        name: {
            "query": plan[name][0],
            "median_ms": round(statistics.median(values) * 1000, 2),
            "max_ms": round(max(values) * 1000, 2),
            "hits_up_to_1000": hits[name],
        }
        for name, values in times.items()
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=100, help="sessions of 10,000 messages (default 100: 1M)")
    parser.add_argument("--against", type=Path, help="another checkout's src (without the index), for the A/B")
    parser.add_argument("--out", type=Path, default=Path("/tmp/turnstore-search-bench"), help="work folder")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        child(options.child[0], options.child[1:])
        return 0
    out: Path = options.out
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"sessions": options.sessions, "load_average_start": os.getloadavg()}
    files = searchable_exports(options.sessions, out)
    this = Path(__file__).resolve().parents[1] / "src"
    on_db = out / "on.db"
    for path in out.glob("on.db*"):
        path.unlink()
    print("building the store with the index...", file=sys.stderr, flush=True)
    results["build_on"] = run_child(this, "import", str(on_db), *map(str, files))
    if options.against is not None:
        off_db = out / "off.db"
        for path in out.glob("off.db*"):
            path.unlink()
        print("building the store without it...", file=sys.stderr, flush=True)
        results["build_off"] = run_child(options.against, "import", str(off_db), *map(str, files))
        print("upgrading that store (the migration's backfill)...", file=sys.stderr, flush=True)
        results["migration"] = run_child(this, "upgrade", str(off_db))
        appends: dict[str, list[float]] = {"on": [], "off": []}
        imports: dict[str, list[float]] = {"on": [], "off": []}
        for round_ in range(ROUNDS):
            for name, src in (("on", this), ("off", options.against))[:: 1 if round_ % 2 == 0 else -1]:
                fresh = out / f"ab-{name}.db"
                for path in out.glob(f"ab-{name}.db*"):
                    path.unlink()
                appends[name].append(run_child(src, "append", str(fresh), str(files[0]))["median_us"])
                for path in out.glob(f"ab-{name}.db*"):
                    path.unlink()
                imports[name].append(run_child(src, "import", str(fresh), str(files[0]))["seconds"])
        results["append_us"] = {name: round(statistics.median(values), 1) for name, values in appends.items()}
        results["append_ratio"] = round(results["append_us"]["on"] / results["append_us"]["off"], 3)
        results["import_10k_s"] = {name: round(statistics.median(values), 3) for name, values in imports.items()}
        results["import_ratio"] = round(results["import_10k_s"]["on"] / results["import_10k_s"]["off"], 3)
        results["size_ratio"] = round(results["build_on"]["bytes"] / results["build_off"]["bytes"], 3)
    print("searching...", file=sys.stderr, flush=True)
    results["search"] = time_searches(on_db, options.reps)
    results["load_average_end"] = os.getloadavg()
    results["peak_rss_parent_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    text = json.dumps(results, indent=2)
    print(text)
    if options.json:
        options.json.parent.mkdir(parents=True, exist_ok=True)
        options.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
