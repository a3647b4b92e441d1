"""Peak memory of large imports, and how long the app's appends wait meanwhile.

    flock /tmp/bench.lock python benchmarks/import_memory.py --pi-mb 1024 --clark-mb 150 --appenders 3

The script writes (into ``--out``, default a temporary folder; the files are
not kept) a pi-mono v3 session file of about ``--pi-mb`` megabytes, made of
the same entries as ``import_pi.py``'s session (prompts, thinking replies with
tool calls, tool results, model changes, a branch every 1,000 prompts), and a
clark JSONL transcript of about ``--clark-mb`` megabytes. Each file is
imported by ``store.import_`` into a new SQLite store in a child process,
which reports its peak resident set size (``VmHWM`` of
``/proc/self/status``; ``ru_maxrss`` where there is none), its peak before
the import began (Python, turnstore and SQLAlchemy loaded, the store open)
and the import's time.

During the pi import, ``--appenders`` other processes append one message at
a time to a session of their own in the same store, 20 a second each; each
reports the longest time one append took and how many failed (``StoreBusy``:
the store's ``busy_timeout``, 5 s by default, ran out). A large session is
written in batches under a staging marker (turnstore.repositories.staging),
so the longest append should stay near one batch's transaction, far below
``busy_timeout``; the median and 99th percentile show the common case.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from import_pi import MODELS, SESSION_ID, _dumps, _paragraph, _sentence, _Writer

MB = 1024 * 1024


def peak_rss_kib() -> int:
    """The process's peak resident set size in KiB."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


# --- the source files ------------------------------------------------------------------------


def write_pi(path: Path, size: int, seed: int = 20260315) -> int:
    """A pi v3 session file of about ``size`` bytes; its line count.

    A block of about 8 MB of entries (with branches and model changes) is
    made once and written again and again with its entry ids renamed, each
    copy continuing after the last entry of the one before (the file is
    never held whole).
    """
    w = _Writer(seed)
    w.model_change(0)
    loops = 0
    while sum(map(len, w.lines)) < 8 * MB:
        loops += 1
        if loops % 150 == 0:
            w.model_change(1 if w.model is MODELS[0] else 0)
        branch = loops % 1000 == 0  # a new prompt after an earlier answer
        w.loop(parent=json.loads(w.lines[-40])["id"] if branch else None)
    block = w.lines
    header = {
        "type": "session",
        "version": 3,
        "id": SESSION_ID,
        "timestamp": "2026-03-02T09:15:00.000Z",
        "cwd": "/home/ana/src/webshop",
    }
    written = lines = copy = 0
    last: str | None = None
    with path.open("w", encoding="utf-8") as file:
        file.write(_dumps(header) + "\n")
        while written < size:
            suffix = f"{copy:05x}"
            for line in block:
                line = _ID.sub(lambda found: f'{found[0][:-1]}{suffix}"', line, count=2)
                if last is not None and '"parentId":null' in line:
                    line = line.replace('"parentId":null', f'"parentId":"{last}"', 1)
                file.write(line + "\n")
                written += len(line) + 1
            last = f"{w.leaf}{suffix}"
            lines += len(block)
            copy += 1
    return lines + 1


_ID = re.compile(r'"(?:id|parentId)":"([0-9a-f]{8})"')
"""An entry's id or parent id as the block writer makes them (eight hex digits)."""


def write_clark(path: Path, size: int, seed: int = 20260315) -> int:
    """A clark JSONL transcript of about ``size`` bytes (user, assistant with a tool call, tool result rows)."""
    r = random.Random(seed)
    written = rows = 0
    stamp = 1_772_442_900_000
    with path.open("w", encoding="utf-8") as file:
        while written < size:
            stamp += r.randint(500, 9000)
            call = f"call_{rows:08d}"
            records: list[dict[str, Any]] = [
                {"role": "user", "content": [{"type": "text", "text": _paragraph(r, 1, 3)}], "timestamp": stamp},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": _sentence(r, 8, 40)},
                        {"type": "tool_call", "id": call, "name": "read", "arguments": {"path": "src/app.ts"}},
                    ],
                    "stop_reason": "tool_use",
                    "timestamp": stamp + 10,
                    "usage": {"input_tokens": r.randint(50, 4000), "output_tokens": r.randint(40, 900)},
                },
                {
                    "role": "tool_result",
                    "tool_call_id": call,
                    "tool_name": "read",
                    "content": [{"type": "text", "text": _paragraph(r, 1, 4)}],
                    "timestamp": stamp + 20,
                },
                {
                    "role": "assistant",
                    "content": [{"type": "text", "text": _sentence(r, 8, 40)}],
                    "stop_reason": "end_turn",
                    "timestamp": stamp + 30,
                    "usage": {"input_tokens": r.randint(50, 4000), "output_tokens": r.randint(40, 900)},
                },
            ]
            for record in records:
                line = json.dumps(record, ensure_ascii=False) + "\n"
                file.write(line)
                written += len(line)
                rows += 1
    return rows


# --- child processes -------------------------------------------------------------------------


def child_import(fmt: str, source: str, db: str) -> None:
    """Import ``source`` into the store at ``db``; print the figures as JSON."""
    from turnstore import Store

    store = Store(db)
    before = peak_rss_kib()
    start = time.perf_counter()
    report = store.import_(fmt, source)
    seconds = time.perf_counter() - start
    store.close()
    print(
        json.dumps(
            {
                "ok": report.ok,
                "messages": report.messages,
                "errors": [str(e) for e in report.errors[:3]],
                "seconds": round(seconds, 2),
                "rss_before_kib": before,
                "peak_rss_kib": peak_rss_kib(),
            }
        )
    )


def child_append(db: str, stop_file: str, index: int) -> None:
    """Append messages (20 a second) until ``stop_file`` exists; print the longest wait and the failures."""
    from turnstore import Message, Store
    from turnstore.errors import StoreBusy

    store = Store(db)
    session = store.sessions.create(title=f"appender {index}")
    loop = store.loops.start(session.session_id)
    waits: list[float] = []
    appended = failed = 0
    while not os.path.exists(stop_file):
        start = time.perf_counter()
        try:
            store.messages.append(Message.user(f"message {appended}"), loop_id=loop.loop_id, turn_index=appended)
            appended += 1
        except StoreBusy:
            failed += 1
        waits.append(time.perf_counter() - start)
        time.sleep(0.05)
    store.close()
    waits.sort()
    p99 = waits[min(len(waits) - 1, int(len(waits) * 0.99))] if waits else 0.0
    print(
        json.dumps(
            {
                "appended": appended,
                "failed": failed,
                "longest_wait_s": round(waits[-1] if waits else 0.0, 3),
                "median_wait_s": round(waits[len(waits) // 2] if waits else 0.0, 4),
                "p99_wait_s": round(p99, 3),
            }
        )
    )


# --- the run ---------------------------------------------------------------------------------


def run_import(fmt: str, source: Path, db: Path, appenders: int) -> dict[str, Any]:
    """Import ``source`` in a child process, with ``appenders`` appending processes meanwhile."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{db}"
    from turnstore import Store

    Store(url).close()  # the schema exists before anyone appends
    stop = db.with_suffix(".stop")
    stop.unlink(missing_ok=True)
    me = [sys.executable, __file__]
    others = [
        subprocess.Popen([*me, "--child-append", url, str(stop), str(n)], stdout=subprocess.PIPE, text=True)
        for n in range(appenders)
    ]
    time.sleep(1.0 if appenders else 0)
    done = subprocess.run([*me, "--child-import", fmt, str(source), url], stdout=subprocess.PIPE, text=True, check=True)
    stop.touch()
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["appenders"] = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in others]
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pi-mb", type=float, default=1024, help="size of the pi session file (default 1024 MB)")
    parser.add_argument(
        "--clark-mb", type=float, default=150, help="size of the clark transcript (default 150 MB; 0: none)"
    )
    parser.add_argument("--appenders", type=int, default=3, help="appending processes during the pi import (default 3)")
    parser.add_argument("--out", type=Path, help="folder for the source files and stores (default: a temporary one)")
    parser.add_argument("--child-import", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--child-append", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_import:
        child_import(*args.child_import)
        return 0
    if args.child_append:
        child_append(args.child_append[0], args.child_append[1], int(args.child_append[2]))
        return 0
    with tempfile.TemporaryDirectory(dir=args.out) as folder:
        out = Path(folder)
        runs = []
        if args.pi_mb:
            source = out / f"2026-03-02T09-15-00-000Z_{SESSION_ID}.jsonl"
            lines = write_pi(source, int(args.pi_mb * MB))
            runs.append(("pi", source, lines, args.appenders))
        if args.clark_mb:
            source = out / "transcript.jsonl"
            lines = write_clark(source, int(args.clark_mb * MB))
            runs.append(("clark", source, lines, 0))
        for fmt, source, lines, appenders in runs:
            size = source.stat().st_size
            result = run_import(fmt, source, out / f"{fmt}.db", appenders)
            source.unlink()
            print(
                f"{fmt}: {size / MB:,.0f} MB, {lines:,} lines -> {result['messages']:,} messages in "
                f"{result['seconds']:,.1f} s (ok: {result['ok']}); peak RSS {result['peak_rss_kib'] / 1024:,.0f} MB "
                f"({result['rss_before_kib'] / 1024:,.0f} MB before the import)"
            )
            for index, appender in enumerate(result["appenders"]):
                print(
                    f"  appender {index}: {appender['appended']} appends, {appender['failed']} failed (StoreBusy), "
                    f"append median {appender['median_wait_s'] * 1000:,.1f} ms, "
                    f"p99 {appender['p99_wait_s'] * 1000:,.0f} ms, longest {appender['longest_wait_s'] * 1000:,.0f} ms"
                )
            if result["errors"]:
                print(f"  errors: {result['errors']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
