"""Import throughput: a 10,000-message pi session into a fresh SQLite file, against a raw sqlite3 floor.

    flock /tmp/bench.lock python benchmarks/import_pi.py
    flock /tmp/bench.lock python benchmarks/import_pi.py --reps 9 --json benchmarks/results/import_pi.json

The script writes a deterministic pi-mono v3 session file (user prompts;
assistant replies with thinking blocks and their signatures, text and tool
calls; tool results; usage with cost; model and thinking-level changes; two
branches, one with a branch summary; a compaction) and times
``store.import_("pi", path, tune_process=True)``, as ``turnstore import`` runs
it, each repetition into a new SQLite file (the store is opened, and its schema
created, before the clock starts); and the same import as a library call gets
it by default, without ``tune_process`` (the collector left as the app set it,
no thread of the import's own). With it, a session
this large leaves its WAL checkpoint to the import's own thread
(``turnstore/repositories/import_writes.py``), which is joined before the call
returns; a second time is taken when the checkpoint is done too (the same, now;
later in versions that checkpointed after the call returned). Then the same for
a folder of ``--files`` such sessions (other seeds and ids) imported in one
call, where each session's checkpoint runs while the next file is read, timed
until the last checkpoint is done.

The floor stores the same rows with plain ``sqlite3``: a new file whose
schema a turnstore ``Store`` created (so every index is there), turnstore's
pragmas, per session one ``BEGIN IMMEDIATE`` … ``COMMIT`` (which
checkpoints, as SQLite does by default) and ``executemany`` of the rows
turnstore wrote, their JSON already dumped: the session, its loops, its
messages and the import record. The floor's rows are checked equal to
turnstore's, column by column. ratio = turnstore / floor.

Run one benchmark at a time (``flock``): the timings assume an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import raw
import sqlalchemy
from results import environment

import turnstore
from turnstore import Store
from turnstore.engine import SQLITE_PRAGMAS

SEED = 20260315
SESSION_ID = "3f6b2c1e-8d4a-4b7e-9c5f-1a2d3e4f5a6b"

MODELS = [
    ("anthropic", "claude-sonnet-4-5", "anthropic-messages", (3.0, 15.0, 0.3, 3.75)),
    ("anthropic", "claude-opus-4-1", "anthropic-messages", (15.0, 75.0, 1.5, 18.75)),
]
"""(provider, model, api, $ per million input, output, cache read, cache write tokens)."""

WORDS = [
    "the",
    "a",
    "test",
    "fails",
    "when",
    "cart",
    "is",
    "empty",
    "total",
    "reduce",
    "initial",
    "value",
    "checkout",
    "component",
    "render",
    "props",
    "state",
    "hook",
    "effect",
    "fetch",
    "api",
    "response",
    "error",
    "handler",
    "retry",
    "timeout",
    "config",
    "file",
    "path",
    "module",
    "import",
    "export",
    "function",
    "class",
    "method",
    "return",
    "type",
    "interface",
    "null",
    "undefined",
    "array",
    "object",
    "string",
    "number",
    "async",
    "await",
    "promise",
    "stream",
    "buffer",
    "parse",
    "json",
    "schema",
    "validate",
    "migrate",
    "database",
    "query",
    "index",
    "transaction",
    "commit",
    "rollback",
    "lock",
    "worker",
    "queue",
    "job",
    "schedule",
    "deploy",
    "build",
    "lint",
    "format",
    "coverage",
    "snapshot",
    "mock",
    "fixture",
]

TOOLS = {
    "read": lambda r: {"path": f"src/{r.choice(['checkout', 'cart', 'api', 'db', 'ui'])}/{_word(r).title()}.tsx"},
    "bash": lambda r: {
        "command": r.choice(["npm test -- checkout", "git status", "ls -la src/", "npm run lint"]),
        "timeout": r.choice([60, 120, 300]),
    },
    "edit": lambda r: {
        "path": f"src/{_word(r)}/{_word(r)}.ts",
        "oldText": _sentence(r, 6, 14),
        "newText": _sentence(r, 6, 18),
    },
    "grep": lambda r: {"pattern": _word(r), "path": "src/", "glob": "*.ts"},
    "write": lambda r: {"path": f"docs/{_word(r)}.md", "content": _paragraph(r, 2, 4)},
}


# --- the session file --------------------------------------------------------------------------


def _word(r: random.Random) -> str:
    return r.choice(WORDS)


def _sentence(r: random.Random, low: int, high: int) -> str:
    return " ".join(_word(r) for _ in range(r.randint(low, high)))


def _paragraph(r: random.Random, low: int, high: int) -> str:
    return " ".join(_sentence(r, 6, 16).capitalize() + "." for _ in range(r.randint(low, high)))


def _signature(r: random.Random) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    return "Eq" + "".join(r.choice(alphabet) for _ in range(r.randint(160, 360))) + "=="


def _dumps(value: Any) -> str:
    """JSON.stringify form: compact, UTF-8."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class _Writer:
    """Builds the session's lines: a pi v3 entry tree, one entry per line."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.now = datetime(2026, 3, 2, 9, 15, tzinfo=timezone.utc)
        self.lines: list[str] = []
        self.leaf: str | None = None
        self.model = MODELS[0]
        self.tool_ids = 0

    def _advance(self, low: float, high: float) -> tuple[str, int]:
        self.now += timedelta(milliseconds=int(self.r.uniform(low, high) * 1000))
        ms = int(self.now.timestamp() * 1000)
        return self.now.strftime("%Y-%m-%dT%H:%M:%S.") + f"{self.now.microsecond // 1000:03d}Z", ms

    def entry(
        self, kind: str, fields: dict[str, Any], parent: str | None = None, *, low: float = 0.2, high: float = 2.0
    ) -> str:
        iso, _ = self._advance(low, high)
        entry_id = f"{self.r.getrandbits(32):08x}"
        parent_id = self.leaf if parent is None else parent
        self.lines.append(_dumps({"type": kind, "id": entry_id, "parentId": parent_id, "timestamp": iso, **fields}))
        self.leaf = entry_id
        return entry_id

    def message(self, message: dict[str, Any], parent: str | None = None) -> str:
        _, ms = self._advance(0.5, 9.0)
        message["timestamp"] = ms
        return self.entry("message", {"message": message}, parent, low=0.001, high=0.02)

    def user(self, parent: str | None = None) -> str:
        text = _paragraph(self.r, 1, 3)
        if self.r.random() < 0.2:  # pi also writes plain-string content for typed prompts
            return self.message({"role": "user", "content": text}, parent)
        return self.message({"role": "user", "content": [{"type": "text", "text": text}]}, parent)

    def assistant(self, calls: list[tuple[str, str, dict[str, Any]]]) -> str:
        provider, model, api, prices = self.model
        content: list[dict[str, Any]] = [
            {"type": "thinking", "thinking": _paragraph(self.r, 1, 2), "thinkingSignature": _signature(self.r)},
            {"type": "text", "text": _sentence(self.r, 8, 40)},
        ]
        content += [
            {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments}
            for call_id, name, arguments in calls
        ]
        counts = [self.r.randint(50, 4000), self.r.randint(40, 900), self.r.randint(0, 60000), self.r.randint(0, 3000)]
        costs = [round(count * price / 1e6, 8) for count, price in zip(counts, prices)]
        usage = {
            "input": counts[0],
            "output": counts[1],
            "cacheRead": counts[2],
            "cacheWrite": counts[3],
            "totalTokens": sum(counts),
            "cost": {
                "input": costs[0],
                "output": costs[1],
                "cacheRead": costs[2],
                "cacheWrite": costs[3],
                "total": round(sum(costs), 8),
            },
        }
        return self.message(
            {
                "role": "assistant",
                "content": content,
                "api": api,
                "provider": provider,
                "model": model,
                "usage": usage,
                "stopReason": "toolUse" if calls else "stop",
            }
        )

    def tool_result(self, call_id: str, name: str) -> str:
        failed = self.r.random() < 0.08
        message: dict[str, Any] = {
            "role": "toolResult",
            "toolCallId": call_id,
            "toolName": name,
            "content": [
                {"type": "text", "text": "\n".join(_sentence(self.r, 4, 12) for _ in range(self.r.randint(1, 6)))}
            ],
        }
        if name == "bash":
            message["details"] = {"exitCode": 1 if failed else 0, "truncation": None}
        message["isError"] = failed
        return self.message(message)

    def loop(self, parent: str | None = None) -> str:
        """One prompt and the turns answering it; returns the id of the final answer."""
        self.user(parent)
        for _ in range(self.r.choice([0, 1, 1, 2, 2, 3])):
            calls = []
            for _ in range(self.r.choice([1, 1, 1, 2])):
                self.tool_ids += 1
                name = self.r.choice(list(TOOLS))
                calls.append((f"toolu_{self.tool_ids:06d}{self.r.getrandbits(40):010x}", name, TOOLS[name](self.r)))
            self.assistant(calls)
            for call_id, name, _ in calls:
                self.tool_result(call_id, name)
        return self.assistant([])

    def model_change(self, index: int) -> None:
        self.model = MODELS[index]
        self.entry("model_change", {"provider": self.model[0], "modelId": self.model[1]})


def session_lines(messages: int, seed: int = SEED) -> list[str]:
    """The lines of a pi v3 session file whose entries import as exactly ``messages`` rows."""
    w = _Writer(seed)
    header = {
        "type": "session",
        "version": 3,
        "id": SESSION_ID,
        "timestamp": "2026-03-02T09:15:00.000Z",
        "cwd": "/home/ana/src/webshop",
    }
    w.model_change(0)
    w.entry("thinking_level_change", {"thinkingLevel": "medium"})
    finals: list[str] = []
    loops = 0
    while len(w.lines) < messages:
        loops += 1
        if loops % 150 == 0:
            w.model_change(1 if w.model is MODELS[0] else 0)
        if loops == 400:  # a branch: back to an earlier answer, a new prompt from there
            finals.append(w.loop(parent=finals[-3]))
        elif loops == 900:  # a branch with pi's summary of the abandoned path
            abandoned = w.leaf
            w.entry(
                "branch_summary",
                {
                    "fromId": abandoned,
                    "summary": _paragraph(w.r, 3, 6),
                    "details": {"readFiles": ["src/cart/Cart.tsx"], "modifiedFiles": []},
                },
                parent=finals[-4],
            )
            finals.append(w.loop())
        elif loops == 1200:  # a compaction keeping the last few entries
            kept = json.loads(w.lines[-6])["id"]
            w.entry(
                "compaction",
                {
                    "summary": _paragraph(w.r, 6, 10),
                    "firstKeptEntryId": kept,
                    "tokensBefore": 183_204,
                    "details": {
                        "readFiles": ["src/checkout/Checkout.tsx"],
                        "modifiedFiles": ["src/checkout/Checkout.tsx"],
                    },
                },
            )
            finals.append(w.loop())
        else:
            finals.append(w.loop())
    return [_dumps(header), *w.lines[:messages]]


def write_session(directory: Path, messages: int, index: int = 0) -> Path:
    """The session file; ``index`` > 0 gives another session (its own seed and id) of the same shape."""
    session_id = SESSION_ID if index == 0 else f"{SESSION_ID[:-4]}{index:04x}"
    lines = session_lines(messages, SEED + index)
    header = json.loads(lines[0])
    lines[0] = _dumps({**header, "id": session_id})
    path = directory / f"2026-03-02T09-15-00-000Z_{session_id}.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_sessions(directory: Path, messages: int, files: int) -> Path:
    """A folder of ``files`` session files."""
    folder = directory / "sessions"
    folder.mkdir()
    for index in range(files):
        write_session(folder, messages, index)
    return folder


# --- the two systems ------------------------------------------------------------------------------


TABLES = ("sessions", "loops", "messages", "imports")

LABELS = {
    "turnstore": "turnstore `store.import_(..., tune_process=True)` (as `turnstore import`)",
    "turnstore_checkpointed": "turnstore, until the WAL is checkpointed",
    "turnstore_guest": "turnstore `store.import_` (default: the process left alone)",
    "raw": "raw sqlite3 floor",
}


def remove_db(path: Path) -> None:
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def table_rows(path: Path, *, with_ids: bool = True) -> dict[str, tuple[list[str], list[tuple[Any, ...]]]]:
    """Every table's columns and rows (messages in id order); ``with_ids=False`` leaves out messages.id."""
    connection = sqlite3.connect(path)
    try:
        found = {}
        for table in TABLES:
            columns = [row[1] for row in connection.execute(f"PRAGMA table_info({table})")]
            if table == "messages" and not with_ids:
                columns.remove("id")
            order = "id" if table == "messages" else "rowid"
            rows = connection.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY {order}").fetchall()
            found[table] = (columns, rows)
        return found
    finally:
        connection.close()


def run_turnstore(source: Path, db: Path, messages: int, sessions: int = 1, tune: bool = True) -> tuple[int, int]:
    """Import ``source`` into a new SQLite file; nanoseconds until ``store.import_`` returns, and until
    the write-ahead log is also checkpointed (``turnstore/repositories/import_writes.py``).

    ``tune``: ``tune_process=True``, as ``turnstore import`` passes (off: a library call's default).
    """
    remove_db(db)
    store = Store(db)
    try:
        start = time.perf_counter_ns()
        report = store.import_("pi", source, **({"tune_process": True} if tune else {}))
        returned = time.perf_counter_ns()
        checkpoints = getattr(store._db, "checkpoints", None)  # older versions checkpoint after import_ returns
        if checkpoints is not None:
            checkpoints.wait()
        checkpointed = time.perf_counter_ns()
    finally:
        store.close()
    if not report.ok or report.messages != messages or len(report.sessions_written) != sessions:
        raise SystemExit(f"turnstore import failed or incomplete: {report.as_dict()}")
    return returned - start, checkpointed - start


def raw_connect(db: Path) -> sqlite3.Connection:
    """sqlite3 on ``db`` with turnstore's pragmas, busy timeout first, autocommit (explicit transactions)."""
    connection = sqlite3.connect(db, isolation_level=None)
    pragmas = {"busy_timeout": SQLITE_PRAGMAS["busy_timeout"], **SQLITE_PRAGMAS}
    for name, value in pragmas.items():
        connection.execute(f"PRAGMA {name}={value}")
    return connection


def run_raw(rows: dict[str, tuple[list[str], list[tuple[Any, ...]]]], db: Path) -> int:
    """The floor: the same rows, JSON already dumped and search words found, into a new file with turnstore's
    schema, a transaction per session (in the order turnstore wrote them), each session's words added to the
    search index in its transaction as turnstore does; nanoseconds."""
    remove_db(db)
    Store(db).close()  # the schema, every index included
    connection = raw_connect(db)
    sessions: dict[str, list[tuple[str, list[tuple[Any, ...]]]]] = {}
    for table, (columns, values) in rows.items():
        sql = f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"
        at = columns.index("session_id")
        for session_id in dict.fromkeys(value[at] for value in values):
            sessions.setdefault(session_id, []).append((sql, [value for value in values if value[at] == session_id]))
    try:
        start = time.perf_counter_ns()
        for statements in sessions.values():
            connection.execute("BEGIN IMMEDIATE")
            for sql, values in statements:
                connection.executemany(sql, values)
            # turnstore indexes an import's words for search in its transaction: so does the floor
            connection.execute(raw.CATCH_UP)
            connection.execute(raw.INDEXED_TO_NEWEST)
            connection.execute("COMMIT")
        return time.perf_counter_ns() - start
    finally:
        connection.close()


def check_pragmas(db: Path) -> None:
    """The floor's connection has the effective pragma values turnstore's has."""
    names = ("journal_mode", "synchronous", "foreign_keys", "busy_timeout")
    store = Store(db)
    try:
        theirs = {name: store._db.scalar(sqlalchemy.text(f"PRAGMA {name}")) for name in names}
    finally:
        store.close()
    connection = raw_connect(db)
    try:
        ours = {name: connection.execute(f"PRAGMA {name}").fetchone()[0] for name in names}
    finally:
        connection.close()
    if {k: str(v).lower() for k, v in ours.items()} != {k: str(v).lower() for k, v in theirs.items()}:
        raise SystemExit(f"pragmas differ: turnstore {theirs}, raw {ours}")


# --- the run ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=10_000, help="messages in the session (default 10,000)")
    parser.add_argument(
        "--files",
        type=int,
        default=4,
        help="also import a folder of this many such sessions in one call (default 4; 1: not)",
    )
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions per system (default 5, at least 5)")
    parser.add_argument("--json", type=Path, help="also write the results to this JSON file")
    parser.add_argument(
        "--out", type=Path, help="directory for the session file and databases (default: a temporary one)"
    )
    parser.add_argument("--profile", type=Path, help="write a cProfile of one more turnstore import to this file")
    args = parser.parse_args(argv)
    if args.reps < 5:
        parser.error("--reps must be at least 5")
    if args.files < 1:
        parser.error("--files must be at least 1")

    with tempfile.TemporaryDirectory(prefix="tsbench-import-", dir=args.out) as tmp:
        out = Path(tmp)
        source = write_session(out, args.messages)
        size = source.stat().st_size
        env = environment(out)
        print(
            f"turnstore {turnstore.__version__} from {env['turnstore']}; Python {env['python']}, "
            f"SQLite {env['sqlite']}, pydantic {env['pydantic']}; {env['cpus']} CPUs, load {env['load_average']}"
        )
        check_pragmas(out / "pragmas.db")
        cases = [Case("pi import", source, 1)]
        if args.files > 1:
            cases.append(
                Case(f"pi import, {args.files} files", write_sessions(out, args.messages, args.files), args.files)
            )
        for case in cases:
            case.prepare(out, args.messages)
        print(f"session: {args.messages:,} messages, {cases[0].loops:,} loops, {size / 1e6:.1f} MB ({source.name})")

        for rep in range(args.reps):  # interleaved, so every system sees the same machine
            for case in cases:
                case.run(out / f"rep-{rep}.db", args.messages)

        if args.profile is not None:
            import cProfile

            db = out / "profile.db"
            remove_db(db)
            store = Store(db)
            profiler = cProfile.Profile()
            profiler.runcall(store.import_, "pi", source, tune_process=True)
            store.close()
            profiler.dump_stats(args.profile)
            print(f"wrote the profile of one import to {args.profile}")

    print()
    print("| operation | system | median | messages/s | samples |")
    print("|---|---|---:|---:|---|")
    rows = [row for case in cases for row in case.rows(args.messages)]
    for row in rows:
        shown = ", ".join(f"{value / 1e3:.0f}" for value in row["samples_us"])
        print(
            f"| {row['op']} | {LABELS[row['system']]} | {row['median_us'] / 1e3:,.1f} ms | {row['msgs_per_s']:,.0f} "
            f"| {shown} ms |"
        )
    print(
        f"\nMedians of {args.reps} repetitions, each into a new SQLite file; ratio turnstore / floor: "
        + "; ".join(
            f"{case.label} ×{case.ratio('turnstore'):.2f} (×{case.ratio('turnstore_checkpointed'):.2f} "
            "until the checkpoint is done)"
            for case in cases
        )
        + ". The floor's COMMIT checkpoints, as SQLite does by default."
    )

    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        payload = {
            "table": "import",
            "systems": {name: label.replace("`", "") for name, label in LABELS.items()},
            "rows": rows,
            "ratio": round(cases[0].ratio("turnstore"), 3),
            "ratio_checkpointed": round(cases[0].ratio("turnstore_checkpointed"), 3),
            "session": {"messages": args.messages, "loops": cases[0].loops, "bytes": size, "files": args.files},
            "reps": args.reps,
            "environment": env,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


class Case:
    """One source (a session file, or a folder of them) imported by turnstore and written by the floor."""

    def __init__(self, label: str, source: Path, sessions: int) -> None:
        self.label = label
        self.source = source
        self.sessions = sessions
        self.loops = 0
        self.table: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
        self.samples: dict[str, list[int]] = {name: [] for name in LABELS}

    def prepare(self, out: Path, messages: int) -> None:
        """A first import (untimed) warms every cache and gives the rows the floor writes (checked equal)."""
        reference = out / "reference.db"
        run_turnstore(self.source, reference, messages * self.sessions, self.sessions)
        self.table = table_rows(reference, with_ids=False)
        self.loops = len(self.table["loops"][1]) // self.sessions
        run_raw(self.table, out / "raw-check.db")
        if table_rows(out / "raw-check.db") != table_rows(reference):
            raise SystemExit(f"{self.label}: the floor's rows differ from turnstore's")
        for db in (reference, out / "raw-check.db"):
            remove_db(db)

    def run(self, db: Path, messages: int) -> None:
        returned, checkpointed = run_turnstore(self.source, db, messages * self.sessions, self.sessions)
        self.samples["turnstore"].append(returned)
        self.samples["turnstore_checkpointed"].append(checkpointed)
        self.samples["raw"].append(run_raw(self.table, db))
        remove_db(db)
        self.samples["turnstore_guest"].append(
            run_turnstore(self.source, db, messages * self.sessions, self.sessions, tune=False)[0]
        )
        remove_db(db)

    def ratio(self, system: str) -> float:
        return statistics.median(self.samples[system]) / statistics.median(self.samples["raw"])

    def rows(self, messages: int) -> list[dict[str, Any]]:
        result = []
        for name, values in self.samples.items():
            median = statistics.median(values)
            result.append(
                {
                    "op": self.label,
                    "system": name,
                    "median_us": round(median / 1e3, 1),
                    "ratio": round(self.ratio(name), 3),
                    "msgs_per_s": round(messages * self.sessions / (median / 1e9), 1),
                    "samples_us": [round(value / 1e3, 1) for value in values],
                }
            )
        return result


if __name__ == "__main__":
    sys.exit(main())
