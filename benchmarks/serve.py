"""How fast ``turnstore serve`` answers: a 5,000-message session page, and the sessions list of a 1M-message store.

    python -m benchmarks serve                                # builds both stores in a temporary folder
    python -m benchmarks serve --out /tmp/scale --json benchmarks/results/serve.json  # reuses the scale suite's 1M build

The viewer runs as a person runs it: ``turnstore serve`` in its own process
(uvicorn), asked over HTTP on one kept-alive connection; each time is from
sending the request to having read the whole page. The first request of each
page is reported apart (templates compiled, the store's pages not yet cached);
the median of ``--reps`` requests after it is the figure the targets apply to:

* the page of a session of 5,000 messages in one loop (its first 20 turns, with
  each turn's usage), and the same session's last page of turns: under 1 s;
* the sessions list (a page of 50, each with its models, tokens and cost) of the
  ``scale`` suite's store of 100 sessions x 10,000 messages: under 300 ms.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale
from common import load_average

SESSION_MESSAGES = 5_000
SESSION_TARGET_MS = 1000.0
LIST_TARGET_MS = 300.0


def session_store(path: Path) -> tuple[str, str, int]:
    """A store with one session of 5,000 messages in one loop: 1,250 tool-using turns of four messages."""
    from turnstore import Message, Store, ToolCallContent, Usage

    session_id = "serve-5k"
    with Store(path) as store:
        if store.sessions.exists(session_id):
            loop_id = store.loops.list(session_id)[0].loop_id
            return session_id, loop_id, len(store.messages.turns(loop_id, 0)) - 1
        store.sessions.create(session_id=session_id, title="A 5,000-message session")
        loop = store.loops.start(session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
        turns = SESSION_MESSAGES // 4
        with store.transaction():
            for k in range(turns):
                call = ToolCallContent(id=f"call-{k}", name="bash", arguments={"command": f"pytest -k case_{k}"})
                store.messages.append_turn(
                    loop.loop_id,
                    k,
                    [
                        Message.user(f"Step {k}: run the tests for case {k} and tell me what failed."),
                        Message.assistant(
                            [call],
                            model="claude-sonnet-4-5",
                            provider="anthropic",
                            usage=Usage(input=1200 + k, output=80, cache_read=9000 + 10 * k),
                        ),
                        Message.tool_result(call, f"case {k}: 12 passed, 1 failed\n" + "log line\n" * 20),
                        Message.assistant(
                            f"Case {k} has one failing test; the log says why.",
                            model="claude-sonnet-4-5",
                            provider="anthropic",
                            usage=Usage(input=400, output=60, cache_read=10_000 + 10 * k),
                        ),
                    ],
                )
        return session_id, loop.loop_id, turns - 1


def serve(db: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``turnstore serve`` on a free port of 127.0.0.1, once it listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = subprocess.Popen(
        [sys.executable, "-m", "turnstore", "--db", str(db), "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TURNSTORE_URL": ""},
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return process, port
        except OSError:
            if process.poll() is not None:
                raise SystemExit(
                    f"turnstore serve exited: {process.stderr.read().decode() if process.stderr else ''}"
                ) from None
            time.sleep(0.1)
    process.kill()
    raise SystemExit("turnstore serve did not listen in 60 s")


def timings(port: int, path: str, reps: int) -> dict[str, Any]:
    """The first request's time and the median (and range) of ``reps`` more, in ms; the page's size."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    times = []
    size = 0
    for _ in range(reps + 1):
        started = time.perf_counter()
        connection.request("GET", path)
        response = connection.getresponse()
        body = response.read()
        times.append((time.perf_counter() - started) * 1000)
        if response.status != 200:
            raise SystemExit(f"GET {path}: {response.status} {body[:200]!r}")
        size = len(body)
    connection.close()
    warm = times[1:]
    return {
        "first_ms": round(times[0], 1),
        "median_ms": round(statistics.median(warm), 1),
        "min_ms": round(min(warm), 1),
        "max_ms": round(max(warm), 1),
        "bytes": size,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="keep the built stores here and reuse them (the scale suite's too)")
    parser.add_argument("--reps", type=int, default=15, help="requests per page after the first (default 15)")
    parser.add_argument("--json", type=Path, help="also write the results as JSON")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="turnstore-serve-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"out {out}; load {load_average()}", file=sys.stderr)

    big = out / f"scale-{scale.SESSIONS_FULL}x10k.db"
    sessions = list(range(scale.SESSIONS_FULL))
    if scale.stored_build(big, sessions, False) is None:
        print(f"building {big} (the scale suite's 1M-message store)", file=sys.stderr)
        scale.build(big, sessions, out / "exports", False)
    session_id, loop_id, last_turn = session_store(out / "serve-5k.db")
    last_page = last_turn - last_turn % 20

    pages = [
        ("session of 5,000 messages, first page", "serve-5k.db", {"id": session_id}, SESSION_TARGET_MS),
        (
            "session of 5,000 messages, last page",
            "serve-5k.db",
            {"id": session_id, "loop": loop_id, "from": last_page},
            SESSION_TARGET_MS,
        ),
        ("context of that loop, first page", "serve-5k.db", {"loop": loop_id}, None),
        ("sessions list of 1M messages, page 1", big.name, {}, LIST_TARGET_MS),
        ("sessions list of 1M messages, page 2 of 25", big.name, {"per": 25, "page": 2}, LIST_TARGET_MS),
        ("sessions list of 1M messages, by model", big.name, {"model": "gpt-5"}, LIST_TARGET_MS),
    ]
    rows = []
    servers: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
    try:
        for label, db, params, target in pages:
            if db not in servers:
                servers[db] = serve(out / db)
            path = "/context?" if "loop" in params and "id" not in params else "/session?" if params.get("id") else "/?"
            path += urlencode(params)
            row = {"page": label, "path": path, "target_ms": target, **timings(servers[db][1], path, args.reps)}
            row["ok"] = target is None or row["median_ms"] < target
            rows.append(row)
            print(
                f"{label:45} first {row['first_ms']:8.1f} ms  median {row['median_ms']:7.1f} ms"
                f"  (min {row['min_ms']:.1f}, max {row['max_ms']:.1f}; {row['bytes']:,} bytes)"
                + ("" if target is None else f"  target < {target:.0f} ms: {'met' if row['ok'] else 'MISSED'}")
            )
    finally:
        for process, _port in servers.values():
            process.terminate()
            process.wait(timeout=30)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"load_average": load_average(), "reps": args.reps, "rows": rows}, indent=2))
    return 0 if all(row["ok"] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
