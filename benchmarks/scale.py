"""Scale benchmark: does turnstore stay fast when the store holds 1M messages?

Two SQLite stores are built with turnstore's own bulk path, ``store.import_("turnstore", ...)``
of generated turnstore JSONL exports (one file per session, each session
written in one transaction):

* the **large** store: 100 sessions x 10,000 messages (``--quick``: 10 sessions);
* the **baseline** store: one session of 10,000 messages, the very session that
  sits in the middle of the large store (same id, same bytes), so a ratio
  large / baseline measures the size of the store and nothing else.

Messages come from ``workload.py`` (user prompts, assistant replies with a
signed thinking block, text, tool calls and usage, tool results; with
``--images`` also a 50-200 KB base64 image in one user / tool-result message
in 60), 10 loops per session rotating over three models.

Then, on both stores, interleaved repetition by repetition so load on the
machine hits both alike: ``messages.last(sid, 50)``, ``messages.turn(loop, k)``
for random (loop, k) of the session, ``usage.session(sid)``,
``usage.by_model()`` over the whole store and ``sessions.list(limit=50)``.
Twice: **warm** (store files read into the OS page cache first, each store
opened once, one warm-up call per operation) and **cold** (every repetition
drops the files from the OS page cache and opens a new ``Store``, then one
warm-up call): what the OS happens to cache of a 2 GB file otherwise decides
the result, and differs between the two stores.

Also: file size per message (after a WAL checkpoint), import throughput, and
peak RSS of fresh subprocesses that open the large store and read the session
list and usage (which must not pull messages into memory), against one that
only opens it and one that does read a session's messages (the control).

    python benchmarks/scale.py [--quick] [--images] [--reps N] [--out DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import resource
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pydantic
import sqlalchemy

import turnstore
from turnstore import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workload

MESSAGES_PER_SESSION = 10_000
LOOPS_PER_SESSION = 10
TURNS_PER_LOOP = 310  # x 10 loops x ~3.15 messages per turn: the last loop runs on to 10,000 messages
SESSIONS_FULL, SESSIONS_QUICK = 100, 10
SEED = 20251123
BUILD_VERSION = 1  # bump when the generated content changes, so stored builds are rebuilt
TARGET_REP_S = 0.4  # time budget of one repetition of one operation (sets the calls per repetition)
MIN_CALLS, MAX_CALLS = 3, 400
LAST_N = 50
TARGETED = ("last", "turn", "usage.session")  # ratio target: each within x1.5
TARGET_RATIO = 1.5


# --- generating the exports --------------------------------------------------------


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def write_session_export(index: int, path: Path, images: bool = False) -> int:
    """Write session number ``index`` as a turnstore JSONL export; returns its message count.

    The content depends only on ``index`` (a seed of its own), so the baseline
    store can hold exactly the large store's middle session. Session times are
    shifted by ``index`` minutes so ``sessions.list`` has a definite order.
    """
    extra = {"images": True} if images else {}  # only asked for: the text-only workload needs no new API
    work = workload.build(
        1, LOOPS_PER_SESSION, TURNS_PER_LOOP, seed=SEED + index, min_messages_per_session=MESSAGES_PER_SESSION, **extra
    )
    session_id = work.session_ids[0]
    # Exactly 10,000: the last turn may be cut short, as a session caught mid-turn is.
    rows = [(turn, message) for turn in work.turns for message in turn.dicts][:MESSAGES_PER_SESSION]
    shift = index * 60_000
    stamps: dict[str, list[int]] = {}
    for turn, message in rows:
        stamps.setdefault(turn.loop_id, []).append(message["timestamp"])
    with open(path, "w", encoding="utf-8") as out:
        out.write(
            _dumps(
                {
                    "type": "session",
                    "format": "turnstore",
                    "version": 1,
                    "session_id": session_id,
                    "title": f"scale session {index}",
                    "agent_id": "scale-bench",
                    "created_at": _rfc3339(rows[0][1]["timestamp"] + shift),
                    "updated_at": _rfc3339(rows[-1][1]["timestamp"] + shift),
                }
            )
            + "\n"
        )
        for plan in work.loops:
            if plan.loop_id not in stamps:
                continue
            out.write(
                _dumps(
                    {
                        "type": "loop",
                        "loop_id": plan.loop_id,
                        "session_id": session_id,
                        "parent_loop_id": plan.parent_loop_id,
                        "continuation_kind": "default" if plan.parent_loop_id else "initial",
                        "config": {"model": plan.model, "provider": plan.provider},
                        "status": "completed",
                        "started_at": _rfc3339(min(stamps[plan.loop_id])),
                        "ended_at": _rfc3339(max(stamps[plan.loop_id])),
                    }
                )
                + "\n"
            )
        for number, (turn, message) in enumerate(rows, start=1):
            out.write(
                _dumps(
                    {
                        "type": "message",
                        "id": number,
                        "loop_id": turn.loop_id,
                        "turn_index": turn.turn_index,
                        "message": message,
                    }
                )
                + "\n"
            )
    return len(rows)


# --- building and reusing the stores ---------------------------------------------


def _config(sessions: list[int], images: bool) -> dict[str, Any]:
    return {
        "build_version": BUILD_VERSION,
        "seed": SEED,
        "sessions": sessions,
        "images": images,
        "messages_per_session": MESSAGES_PER_SESSION,
        "loops_per_session": LOOPS_PER_SESSION,
    }


def _sidecar(db: Path) -> Path:
    return db.with_suffix(".json")


def stored_build(db: Path, sessions: list[int], images: bool) -> dict[str, Any] | None:
    """The build record of ``db`` if it exists, matches this configuration and holds every message."""
    try:
        record = json.loads(_sidecar(db).read_text())
    except (OSError, ValueError):
        return None
    if record.get("config") != _config(sessions, images) or not db.exists():
        return None
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        counts = connection.execute(
            "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM messages)"
        ).fetchone()
    return record if counts == (len(sessions), len(sessions) * MESSAGES_PER_SESSION) else None


def checkpoint(db: Path) -> None:
    """Fold the WAL into the database file (as SQLite does on its own every 1,000 pages)."""
    with sqlite3.connect(db) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def file_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in (db, Path(f"{db}-wal")) if p.exists())


def build(db: Path, sessions: list[int], exports: Path, images: bool) -> dict[str, Any]:
    """Generate the sessions' exports and import them into a new store at ``db``; the build record.

    Only ``store.import_`` is timed (its rate is the build rate reported);
    generating the JSONL is not.
    """
    for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm"), _sidecar(db)):
        path.unlink(missing_ok=True)
    exports.mkdir(parents=True, exist_ok=True)
    files: list[str] = []
    started = time.perf_counter()
    for done, index in enumerate(sessions, start=1):
        path = exports / f"session-{index:04d}.jsonl"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            write_session_export(index, tmp, images)
            tmp.rename(path)
        files.append(str(path))
        if done % 10 == 0 or done == len(sessions):
            print(f"  generated {done}/{len(sessions)} session exports", file=sys.stderr, flush=True)
    generated = time.perf_counter() - started
    export_bytes = sum(Path(f).stat().st_size for f in files)

    def progress(_file: str, done: int, total: int) -> None:
        if done % 10 == 0 or done == total:
            print(f"  imported {done}/{total} sessions into {db.name}", file=sys.stderr, flush=True)

    store = Store(db)
    started = time.perf_counter()
    # The benchmark's own process: build as `turnstore import` does.
    report = store.import_("turnstore", *files, progress=progress, tune_process=True)
    seconds = time.perf_counter() - started
    store.close()
    if not report.ok or report.messages != len(sessions) * MESSAGES_PER_SESSION:
        raise SystemExit(f"import of {db} failed: {report.errors[:3]} ({report.messages} messages)")
    checkpoint(db)
    with sqlite3.connect(db) as connection:
        json_bytes = connection.execute("SELECT sum(length(CAST(message AS BLOB))) FROM messages").fetchone()[0]
    record = {
        "config": _config(sessions, images),
        "built": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "messages": report.messages,
        "import_s": round(seconds, 2),
        "msgs_per_s": round(report.messages / seconds),
        "generate_s": round(generated, 2),
        "export_bytes": export_bytes,
        "json_bytes": json_bytes,
        "load_average": load_average(),
    }
    _sidecar(db).write_text(json.dumps(record, indent=2) + "\n")
    return record


# --- timing ------------------------------------------------------------------------


def session_plan(db: Path, session_index: int, count: int) -> tuple[str, list[tuple[str, int]]]:
    """The id of session number ``session_index`` and ``count`` random (loop_id, turn_index) pairs of it."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as connection:
        session_id = connection.execute(
            "SELECT session_id FROM sessions WHERE title = ?", (f"scale session {session_index}",)
        ).fetchone()[0]
        turns = connection.execute(
            "SELECT loop_id, max(turn_index) FROM messages WHERE session_id = ? GROUP BY loop_id ORDER BY loop_id",
            (session_id,),
        ).fetchall()
    rng = random.Random(SEED)
    return session_id, [(loop_id, rng.randint(0, last)) for loop_id, last in (rng.choice(turns) for _ in range(count))]


def operations(session_id: str, pairs: list[tuple[str, int]]) -> dict[str, Callable[[Store, int], Any]]:
    """Operation name -> ``f(store, i)`` making call number ``i`` (the turn lookups walk ``pairs``)."""

    def turn(store: Store, i: int) -> Any:
        loop_id, k = pairs[i % len(pairs)]
        return store.messages.turn(loop_id, k)

    return {
        "last": lambda store, i: store.messages.last(session_id, LAST_N),
        "turn": turn,
        "usage.session": lambda store, i: store.usage.session(session_id),
        "usage.by_model": lambda store, i: store.usage.by_model(),
        "sessions.list": lambda store, i: store.sessions.list(limit=50),
    }


LABELS = {
    "last": f"messages.last(sid, {LAST_N})",
    "turn": "messages.turn(loop, k), random k",
    "usage.session": "usage.session(sid)",
    "usage.by_model": "usage.by_model(), whole store",
    "sessions.list": "sessions.list(limit=50)",
}


def os_cache(db: Path, load: bool) -> None:
    """Read the store's files into the OS page cache (``load``), or have the kernel drop them.

    Dropping (``POSIX_FADV_DONTNEED``) evicts clean pages, which after a
    checkpoint is all of them; it needs no privileges and touches no other file.
    """
    for path in (db, Path(f"{db}-wal")):
        if path.exists():
            with open(path, "rb") as handle:
                if load:
                    while handle.read(1 << 24):
                        pass
                else:
                    os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def run_timings(
    dbs: dict[str, Path],
    ops: dict[str, Callable[[Store, int], Any]],
    reps: int,
    cache: str,
    calls: dict[tuple[str, str], int],
) -> list[dict[str, Any]]:
    """Time every operation on every store, repetitions alternating between the stores.

    ``warm``: both files are read into the OS page cache first (as on a server
    whose RAM holds the store); each store is opened once and each operation
    warmed up with one call. ``cold``: every repetition drops the files from
    the OS page cache and opens a new ``Store`` (empty SQLite page cache), then
    makes one warm-up call, as an app process starting on a store nobody has
    read lately. Calls per repetition are set in the first (warm) pass from
    the warm-up call (about TARGET_REP_S, MIN_CALLS..MAX_CALLS) and stored in
    ``calls`` for the next pass; a sample is the mean µs per call of one repetition.
    """
    if cache == "warm":
        for db in dbs.values():
            os_cache(db, load=True)
    stores = {size: Store(db) for size, db in dbs.items()}
    rows = []
    for name, op in ops.items():
        samples: dict[str, list[float]] = {size: [] for size in dbs}
        for rep in range(reps):
            for size in list(dbs) if rep % 2 == 0 else list(dbs)[::-1]:
                if cache == "cold":
                    stores[size].close()
                    os_cache(dbs[size], load=False)
                    stores[size] = Store(dbs[size])
                if cache == "cold" or rep == 0:  # warm-up, on a turn pair no timed call uses
                    started = time.perf_counter()
                    op(stores[size], reps * MAX_CALLS + rep)
                    warm = time.perf_counter() - started
                    calls.setdefault((name, size), max(MIN_CALLS, min(MAX_CALLS, int(TARGET_REP_S / max(warm, 1e-6)))))
                count, first = calls[(name, size)], rep * MAX_CALLS  # the same turn pairs on both stores
                gc.collect()
                started = time.perf_counter()
                for i in range(first, first + count):
                    op(stores[size], i)
                samples[size].append((time.perf_counter() - started) / count * 1e6)
        for size in dbs:
            rows.append(
                {
                    "op": name,
                    "size": size,
                    "cache": cache,
                    "calls_per_rep": calls[(name, size)],
                    "median_us": round(statistics.median(samples[size]), 1),
                    "samples_us": [round(sample, 1) for sample in samples[size]],
                }
            )
        medians = ", ".join(f"{size} {statistics.median(samples[size]):,.0f} µs" for size in dbs)
        print(f"  {cache} {name}: {medians}", file=sys.stderr, flush=True)
    for store in stores.values():
        store.close()
    return rows


# --- memory ------------------------------------------------------------------------


def rss_child(mode: str, db: str) -> None:
    """Subprocess body: open the store, do ``mode``'s reads, print peak RSS in MB as JSON."""
    store = Store(db)
    if mode == "read":
        sessions = store.sessions.list(limit=1000)
        store.usage.by_model()
        for summary in sessions:
            store.usage.session(summary.session_id)
    elif mode == "messages":  # the control: one session's messages, all held at once
        session = store.sessions.list(limit=1)[0]
        held = [store.messages.loop(loop.loop_id) for loop in store.loops.list(session.session_id)]
        assert sum(map(len, held)) == MESSAGES_PER_SESSION
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    result = {"mode": mode, "ru_maxrss_mb": round(peak / (2**20 if sys.platform == "darwin" else 1024), 1)}
    try:  # this process image's own peak: ru_maxrss also counts the parent's, carried over fork + exec
        status = Path("/proc/self/status").read_text()
        result["vmhwm_mb"] = round(int(status.split("VmHWM:")[1].split()[0]) / 1024, 1)
    except (OSError, IndexError, ValueError):
        pass
    print(json.dumps(result))


def measure_rss(db: Path) -> dict[str, Any]:
    """Peak RSS (MB) of fresh subprocesses on the large store: open only, read list + usage, read messages.

    On Linux a child's ``ru_maxrss`` starts from the RSS of the process that
    forked it (the kernel keeps the high-water mark across exec), so the
    child's own peak is read from ``VmHWM``; ``ru_maxrss`` is reported beside it.
    """
    result: dict[str, Any] = {"ru_maxrss": {}}
    for mode in ("open", "read", "messages"):
        out = subprocess.run(
            [sys.executable, __file__, "--rss-child", mode, str(db)], capture_output=True, text=True, check=True
        ).stdout
        child = json.loads(out.strip().splitlines()[-1])
        result[mode] = child.get("vmhwm_mb", child["ru_maxrss_mb"])
        result["ru_maxrss"][mode] = child["ru_maxrss_mb"]
    return result


# --- reporting ---------------------------------------------------------------------


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def code_version() -> str:
    """The turnstore commit, flagged when its package has uncommitted changes."""
    package = Path(turnstore.__file__).resolve().parent
    try:
        git = ["git", "-C", str(package)]
        commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True)
        dirty = subprocess.run([*git, "status", "--porcelain", "--", "."], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return commit.stdout.strip() + (" + uncommitted changes" if dirty.stdout.strip() else "")


def environment(out: Path) -> dict[str, Any]:
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    cpu = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "?")
    return {
        "commit": code_version(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "pydantic": pydantic.VERSION,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "out": str(out),
        "load_average_start": load_average(),
    }


def _us(value: float) -> str:
    return f"{value / 1000:,.1f} ms" if value >= 10_000 else f"{value:,.1f} µs"


def markdown(rows: list[dict[str, Any]], sizes: dict[str, str], ratios: dict[str, dict[str, float]]) -> str:
    small, large = sizes
    medians = {(row["op"], row["size"], row["cache"]): row["median_us"] for row in rows}
    lines = [
        f"| Operation | {sizes[small]} | {sizes[large]} | {large} / {small} "
        f"| {small}, cold | {large}, cold | {large} / {small}, cold |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for op, label in LABELS.items():
        cells = [label]
        for cache in ("warm", "cold"):
            ratio = ratios[cache][op]
            mark = ("" if ratio <= TARGET_RATIO else " (over ×1.5)") if op in TARGETED else ""
            cells += [_us(medians[(op, small, cache)]), _us(medians[(op, large, cache)]), f"×{ratio:.2f}{mark}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --- main --------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{SESSIONS_QUICK} sessions, not {SESSIONS_FULL}")
    parser.add_argument("--reps", type=int, default=7, help="repetitions per operation and store (default 7)")
    parser.add_argument("--out", type=Path, help="keep the built stores here and reuse them when valid")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    parser.add_argument(
        "--images", action="store_true", help="one user / tool-result message in 60 carries a 50-200 KB base64 image"
    )
    parser.add_argument("--keep-exports", action="store_true", help="keep the generated JSONL under OUT/exports")
    parser.add_argument("--rss-child", nargs=2, metavar=("MODE", "DB"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        return rss_child(*args.rss_child) or 0
    if args.reps < 5:
        parser.error("--reps must be at least 5")

    count = SESSIONS_QUICK if args.quick else SESSIONS_FULL
    middle = count // 2
    out = args.out or Path(tempfile.mkdtemp(prefix="turnstore-scale-"))
    out.mkdir(parents=True, exist_ok=True)
    env = environment(out)
    print(
        f"turnstore {env['commit']} ({Path(turnstore.__file__).parent}); out {out}; load {env['load_average_start']}",
        file=sys.stderr,
    )
    started = time.perf_counter()
    large_name = f"{count * MESSAGES_PER_SESSION // 1000}k" if count < 100 else f"{count // 100}M"
    tag = "-images" if args.images else ""
    plan = {  # size label -> (db file, session numbers)
        "10k": (out / f"scale-1x10k-s{middle}{tag}.db", [middle]),
        large_name: (out / f"scale-{count}x10k{tag}.db", list(range(count))),
    }
    builds: dict[str, dict[str, Any]] = {}
    try:
        for size in (large_name, "10k"):  # the large build generates the baseline's session too
            db, sessions = plan[size]
            record = stored_build(db, sessions, args.images)
            if record is None:
                print(f"building {db} ({len(sessions)} x {MESSAGES_PER_SESSION:,} messages)", file=sys.stderr)
                record = build(db, sessions, out / f"exports{tag}", args.images)
            else:
                print(f"reusing {db} (built {record['built']})", file=sys.stderr)
            builds[size] = record
        if not args.keep_exports:
            shutil.rmtree(out / f"exports{tag}", ignore_errors=True)

        bytes_per_message = {}
        for size, (db, sessions) in plan.items():
            checkpoint(db)
            bytes_per_message[size] = round(file_bytes(db) / (len(sessions) * MESSAGES_PER_SESSION))

        session_id, pairs = session_plan(plan["10k"][0], middle, MAX_CALLS * (args.reps + 1))
        print(f"timing session {session_id} ({args.reps} repetitions)", file=sys.stderr)
        dbs, ops, calls = {size: db for size, (db, _) in plan.items()}, operations(session_id, pairs), {}
        rows = [row for cache in ("warm", "cold") for row in run_timings(dbs, ops, args.reps, cache, calls)]
        medians = {(row["op"], row["size"], row["cache"]): row["median_us"] for row in rows}
        ratios = {
            cache: {op: round(medians[(op, large_name, cache)] / medians[(op, "10k", cache)], 2) for op in LABELS}
            for cache in ("warm", "cold")
        }
        rss = measure_rss(plan[large_name][0])
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)  # a temporary directory: nothing to reuse

    elapsed = time.perf_counter() - started
    env["load_average_end"] = load_average()
    sizes = {
        "10k": "10k messages (1 session)",
        large_name: f"{count * MESSAGES_PER_SESSION:,} messages ({count} sessions)",
    }
    print()
    print(markdown(rows, sizes, ratios))
    print()
    print(
        "File size per message (db + WAL after checkpoint): "
        + ", ".join(f"{size} {value:,} B" for size, value in bytes_per_message.items())
        + f"; stored message JSON {builds[large_name]['json_bytes'] / builds[large_name]['messages']:,.0f} B/message"
    )
    print(
        f"Peak RSS, fresh process on the {large_name} store: open only {rss['open']} MB; "
        f"+ sessions.list (all {count}), usage.by_model(), usage.session × {count}: {rss['read']} MB; "
        f"control, one session's 10,000 messages held: {rss['messages']} MB"
    )
    print(
        "Import (store.import_('turnstore', ...)): "
        + ", ".join(f"{size} {b['msgs_per_s']:,} messages/s ({b['import_s']} s)" for size, b in builds.items())
    )
    print(
        f"Medians of {args.reps} repetitions; load average {env['load_average_start']} → {env['load_average_end']}; "
        f"{elapsed:.0f} s wall"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "table": "scale",
                    "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                    "env": env,
                    "session_id": session_id,
                    "reps": args.reps,
                    "rows": rows,
                    "ratios": ratios,
                    "targets": dict.fromkeys(TARGETED, TARGET_RATIO),
                    "file_bytes_per_message": bytes_per_message,
                    "rss_mb": rss,
                    "build_msgs_per_s": builds[large_name]["msgs_per_s"],
                    "builds": builds,
                },
                indent=2,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
