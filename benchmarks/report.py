"""Write docs/performance.md and docs/performance.png from the benchmark result files.

    python benchmarks/report.py                          # benchmarks/results/*.json
    python benchmarks/report.py results/a.json b.json    # these files
    python benchmarks/report.py --md /tmp/p.md --png /tmp/p.png

Each result file holds one table (or a list of them, or ``{"tables": [...]}``):
``{"table": NAME, ..., "rows": [{"op", "label", "unit", "system",
"median_us", "ratio", ...}]}``. Tables: ``sqlite``, ``async``, ``postgres``
(``run.py``), ``peers``, ``scale``, ``import`` (the other benchmark scripts).
When several files hold the same table, the newest file wins. A table no file
holds is reported as not measured; so is every target that needs it.

The plot (matplotlib, a benchmark-only requirement: benchmarks/requirements.txt)
shows, per table, each system's ratio to that table's floor per operation.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
MIXES = {  # workload.MIXES, with their titles (workload.MIX_TITLES); "" is the tool mix's table name suffix
    "small": "small chat messages (≈300 B, no tools)",
    "tool": "tool-heavy turns",
    "image": "image-heavy agent (a 100-500 KB screenshot in most tool results)",
}
PER_MIX = ("sqlite", "peers")  # the tables run once per message mix


def mix_key(name: str, mix: str | None) -> str:
    """The key of a table of the message mix ``mix``: the tool mix (or none) keeps the table's name."""
    return name if mix in (None, "tool") else f"{name}-{mix}"


TABLES = {
    **{mix_key("sqlite", mix): f"SQLite: turnstore sync vs raw sqlite3 — {title}" for mix, title in MIXES.items()},
    "async": "SQLite: AsyncStore vs Store (tool-heavy turns)",
    "postgres": "PostgreSQL: turnstore vs raw psycopg (tool-heavy turns)",
    **{mix_key("peers", mix): f"turnstore vs other agent-framework stores — {title}" for mix, title in MIXES.items()},
    "scale": "Scale: the same session in a small and a large store",
    "index_costs": "What each index on messages and the session touch cost an append (small chat messages)",
    "search": "Full-text search over a 1M-message store",
    "import": "Importing a pi session",
    "startup": "Starting: import turnstore, and turnstore sessions",
}
NOTES = ROOT / "benchmarks" / "notes.md"
"""What the results mean and where turnstore's time goes: checked-in text, copied to the end of the document."""
FLOORS = ("raw", "floor")  # systems a table's ratios are taken against
NOT_PEERS = {"sync", "async", "async1", "raw", "raw_default", "aiosqlite", "floor"}  # and turnstore's own variants


OP_NUMBERS = {  # run.py's numbering, for tables whose rows carry no "num"
    "append": 1,
    "append_turn": 2,
    "import": 3,
    "last": 4,
    "session": 5,
    "whole": 5,
    "turn": 6,
    "usage": 7,
    "usage.session": 7,
    "usage_loop": 8,
    "usage.loop": 8,
    "usage_by_model": 9,
    "usage.by_model": 9,
    "walk": 10,
}


def is_peer(system: str) -> bool:
    """Another framework's store (not a floor, not turnstore in any of its forms)."""
    return system not in NOT_PEERS and "turnstore" not in system and not system.startswith("ts_")


# --- loading -------------------------------------------------------------------------


@dataclass
class Table:
    name: str
    data: dict[str, Any]
    path: Path
    rows: list[dict[str, Any]]

    def ops(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.setdefault(row["op"], None)
        return list(seen)

    def systems(self) -> list[str]:
        seen: dict[str, None] = {}
        for row in self.rows:
            seen.setdefault(row["system"], None)
        return list(seen)

    def row(self, op: str, system: str) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["op"] == op and r["system"] == system), None)

    def floor(self) -> str | None:
        explicit = self.data.get("floor")
        systems = self.systems()
        if explicit in systems:
            return explicit
        named = next((s for s in FLOORS if s in systems), None)
        if named is not None:
            return named
        # A system all of whose ratios are 1 (scale: the small store).
        return next((s for s in systems if all(r.get("ratio") == 1.0 for r in self.rows if r["system"] == s)), None)

    def label(self, system: str) -> str:
        return (self.data.get("systems") or {}).get(system, system)

    @property
    def when(self) -> str:
        env = self.data.get("environment") or self.data.get("env") or {}
        return str(self.data.get("date") or env.get("date") or _mtime(self.path))

    @property
    def load(self) -> str:
        env = self.data.get("environment") or self.data.get("env") or {}
        start = env.get("load_average") or env.get("load_average_start")
        end = env.get("load_average_end")
        if start and end:
            return f"{start} → {end}"
        return str(start or "not recorded")


def _mtime(path: Path) -> str:
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def _objects(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, list):
        return [v for v in value if isinstance(v, dict)]
    if isinstance(value, dict) and isinstance(value.get("tables"), list):
        return [v for v in value["tables"] if isinstance(v, dict)]
    return [value] if isinstance(value, dict) else []


def _normal_rows(name: str, data: dict[str, Any]) -> list[dict[str, Any]]:
    """The table's rows with op, system, median_us and ratio filled in where the file leaves them out."""
    rows = []
    for raw_row in data.get("rows") or []:
        if not isinstance(raw_row, dict) or raw_row.get("median_us") is None:
            continue
        row = dict(raw_row)
        row["op"] = str(row.get("op") or row.get("key") or row.get("label") or "?")
        row["system"] = str(row.get("system") or row.get("size") or "turnstore")
        row.setdefault("label", row["op"])
        row.setdefault("unit", "per call")
        row.setdefault("ratios", {})
        rows.append(row)
    # Ratios the file gives beside the rows, not in them.
    if name == "scale" and isinstance(data.get("ratios"), dict):
        sizes = list(dict.fromkeys(r["system"] for r in rows))
        ratios = scale_ratios(data)
        for row in rows:
            key = (row["op"], str(row.get("cache") or ""))
            if len(sizes) > 1 and row["system"] == sizes[0]:
                row["ratio"] = 1.0
            elif row.get("ratio") is None:
                row["ratio"] = ratios.get(key, ratios.get((row["op"], "")))
    if isinstance(data.get("ratio"), (int, float)):
        for row in rows:
            if row.get("ratio") is None and row["system"] == "turnstore":
                row["ratio"] = data["ratio"]
    floor = (
        data.get("floor")
        if data.get("floor")
        else next((s for s in FLOORS if any(r["system"] == s for r in rows)), None)
    )
    if floor is not None:
        base = {r["op"]: r["median_us"] for r in rows if r["system"] == floor}
        for row in rows:
            if row.get("ratio") is None and base.get(row["op"]):
                row["ratio"] = row["median_us"] / base[row["op"]]
    return rows


def load(paths: list[Path]) -> tuple[dict[str, Table], list[str]]:
    """The newest table of each name among ``paths``; and what was skipped, and why."""
    tables: dict[str, Table] = {}
    notes: list[str] = []
    for path in sorted(paths, key=lambda p: p.stat().st_mtime):
        try:
            value = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            notes.append(f"{path}: not read ({error})")
            continue
        objects = _objects(value)
        if not any("table" in obj for obj in objects):
            notes.append(f"{path}: no table in it")
        for obj in objects:
            name = obj.get("table")
            if not isinstance(name, str):
                continue
            if obj.get("skipped"):
                notes.append(f"{path}: table {name} was skipped: {obj['skipped']}")
                continue
            key = mix_key(name, obj.get("mix")) if name in PER_MIX else name
            tables[key] = Table(key, obj, path, _normal_rows(name, obj))
    return tables, notes


# --- markdown ------------------------------------------------------------------------


def us(value: float | None) -> str:
    if value is None:
        return "—"
    if value >= 10_000:
        return f"{value / 1_000:,.1f} ms"
    return f"{value:,.1f} µs"


def ratio(value: float | None) -> str:
    return "—" if value is None else f"×{value:.2f}"


def table_markdown(table: Table) -> str:
    systems = table.systems()
    floor = table.floor()
    extra = []  # (system, base) ratios besides the floor's, as the file gives them
    for row in table.rows:
        for base in row.get("ratios") or {}:
            if base != floor and (row["system"], base) not in extra:
                extra.append((row["system"], base))
    head = [
        "#",
        "Operation",
        "Unit",
        *(table.label(s) for s in systems),
        *(f"{table.label(s)} / {table.label(b)}" for s, b in extra),
    ]
    lines = ["| " + " | ".join(head) + " |", "|---|---|---|" + "---:|" * (len(systems) + len(extra))]
    for op in table.ops():
        first = next(r for r in table.rows if r["op"] == op)
        cells = [str(op_number(first)), str(first["label"]), str(first["unit"])]
        for system in systems:
            row = table.row(op, system)
            if row is None:
                cells.append("—")
            elif system == floor or row.get("ratio") is None:
                cells.append(us(row["median_us"]))
            else:
                cells.append(f"{us(row['median_us'])} ({ratio(row['ratio'])})")
        for system, base in extra:
            row = table.row(op, system)
            cells.append(ratio((row or {}).get("ratios", {}).get(base)))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def op_number(row: dict[str, Any]) -> Any:
    """The row's operation number: its own, else run.py's for the same operation, else blank."""
    if row.get("num") is not None:
        return row["num"]
    op, label = row["op"], str(row["label"])
    if op == "usage":  # a bare "usage" names the usage operation its label describes
        op = "usage_by_model" if "by model" in label else "usage_loop" if "loop" in label else "usage"
    return OP_NUMBERS.get(op, "")


# --- targets -------------------------------------------------------------------------


@dataclass
class Target:
    name: str
    goal: str
    value: str
    met: bool | None  # None: not measured

    @property
    def status(self) -> str:
        return "not measured in this run" if self.met is None else ("met" if self.met else "**missed**")


LIMITS = {
    "append": 1.5,
    "append_turn": 1.4,
    "import": 1.3,
    "last": 1.5,
    "usage": 2.0,
    "usage_loop": 2.0,
    "usage_by_model": 1.2,
}  # the main table's targets, turnstore / raw


def _ratio_target(tables: dict[str, Table], name: str, op: str, limit: float, system: str = "turnstore") -> Target:
    goal = f"≤ ×{limit:g} the raw floor"
    table = tables.get("sqlite")
    row = table.row(op, system) if table else None
    if row is None or row.get("ratio") is None:
        return Target(name, goal, "—", None)
    return Target(name, goal, ratio(row["ratio"]), row["ratio"] <= limit)


def _append_vs_peers(tables: dict[str, Table]) -> Target:
    name, goal = "append 1 message per commit vs the fastest peer", "≥ 3× faster"
    peers = tables.get("peers")
    if peers is None:
        return Target(name, goal, "—", None)
    op = next((o for o in peers.ops() if o in ("append", "append_message", "append_one")), None)
    if op is None:
        op = next((o for o in peers.ops() if "append" in o and "turn" not in o), None)
    if op is None:
        return Target(name, goal, "no append row in the peers table", None)
    rows = [r for r in peers.rows if r["op"] == op]
    others = [r for r in rows if is_peer(r["system"])]
    mine = peers.row(op, "turnstore")
    if mine is None and "sqlite" in tables:
        mine = tables["sqlite"].row("append", "turnstore")
    if not others or mine is None:
        return Target(name, goal, "—", None)
    fastest = min(others, key=lambda r: r["median_us"])
    times = fastest["median_us"] / mine["median_us"]
    return Target(
        name,
        goal,
        f"{times:.1f}× ({peers.label(fastest['system'])} {us(fastest['median_us'])}, "
        f"turnstore {us(mine['median_us'])})",
        times >= 3,
    )


def _async(tables: dict[str, Table]) -> Target:
    name, goal = "async append (AsyncStore / Store)", "≤ ×2 of sync"
    table = tables.get("async")
    if table is None:
        return Target(name, goal, "—", None)
    values = []
    for op in ("append", "append_turn"):
        row, sync = table.row(op, "async"), table.row(op, "sync")
        if row is not None and sync is not None:
            values.append((op, row.get("ratios", {}).get("sync") or row["median_us"] / sync["median_us"]))
    if not values:
        return Target(name, goal, "—", None)
    text = ", ".join(f"{'1 message' if op == 'append' else '1 turn'} ×{v:.2f}" for op, v in values)
    return Target(name, goal, text, all(v <= 2 for _, v in values))


def _scale(tables: dict[str, Table]) -> Target:
    name = "scale: same session, small vs large store"
    table = tables.get("scale")
    targets = (table.data.get("targets") if table else None) or {}
    limit = max(targets.values()) if targets else 1.5
    goal = f"≤ ×{limit:g}" + (f" ({', '.join(targets)})" if targets else "")
    if table is None:
        return Target(name, goal, "—", None)
    ratios = scale_ratios(table.data) or {
        (r["op"], ""): r["ratio"] for r in table.rows if r.get("ratio") not in (None, 1.0)
    }
    chosen = {key: v for key, v in ratios.items() if not targets or key[0] in targets}
    if not chosen:
        return Target(name, goal, "—", None)
    worst = max(chosen, key=lambda key: chosen[key])
    text = ", ".join(f"{op}{f' ({cache})' if cache else ''} ×{v:.2f}" for (op, cache), v in chosen.items())
    met = all(v <= targets.get(op, limit) for (op, _), v in chosen.items())
    return Target(name, goal, f"{text} (worst {' '.join(filter(None, worst))})", met)


def scale_facts(data: dict[str, Any]) -> list[str]:
    """File size per message, peak RSS and build rate of a scale run, as Markdown lines."""
    lines = [
        "The targets are the operations on one session (last, turn, usage.session). usage.by_model sums "
        "the whole store, so it grows with it (100× the usage rows); sessions.list(limit=50) returns 50 "
        "sessions of the large store against the small store's one."
    ]
    sizes = data.get("file_bytes_per_message")
    if isinstance(sizes, dict) and sizes:
        lines.append(
            "File size per message (database + WAL after a checkpoint): "
            + ", ".join(f"{size} store {value:,} B" for size, value in sizes.items())
            + "."
        )
    rss = data.get("rss_mb")
    if isinstance(rss, dict) and all(isinstance(rss.get(k), (int, float)) for k in ("open", "read", "messages")):
        lines.append(
            f"Peak RSS of a fresh process on the large store: opening it {rss['open']:.1f} MB; opening it and "
            f"reading the session list, usage by model and every session's usage {rss['read']:.1f} MB "
            f"(no messages loaded); control, holding one session's messages {rss['messages']:.1f} MB."
        )
    if isinstance(data.get("build_msgs_per_s"), (int, float)):
        lines.append(
            f"The large store was built by turnstore's bulk import at {data['build_msgs_per_s']:,.0f} messages/s."
        )
    return [item for line in lines for item in ("", line)]


def search_facts(data: dict[str, Any]) -> list[str]:
    """Build, migration and file size figures of a search run (``benchmarks/search.py``), as Markdown lines."""
    lines: list[str] = []
    off, migration, sizes = data.get("build_off"), data.get("migration"), data.get("import_10k_bytes")
    if off and migration:
        lines.append(
            f"Migration 0007 on the {off['messages']:,}-message store built without it: {migration['seconds']:.0f} s, "
            f"peak RSS {migration['peak_rss_mb']:,.0f} MB; file {off['bytes'] / 2**20:,.0f} MiB before, "
            f"{migration['bytes'] / 2**20:,.0f} MiB after."
        )
    if sizes:
        lines.append(
            f"A 10,000-message session imported into a new store: {sizes['on'] / 2**20:,.1f} MiB with the index, "
            f"{sizes['off'] / 2**20:,.1f} MiB without (x{data.get('size_ratio', 0):.2f})."
        )
    return ["", *lines] if lines else []


def scale_ratios(data: dict[str, Any]) -> dict[tuple[str, str], float]:
    """scale.json's ratios as {(op, cache): ratio}: flat ``{op: r}`` or per cache ``{"warm": {op: r}, ...}``."""
    ratios = data.get("ratios")
    if not isinstance(ratios, dict):
        return {}
    flat: dict[tuple[str, str], float] = {}
    for key, value in ratios.items():
        if isinstance(value, dict):
            flat.update({(op, key): v for op, v in value.items() if isinstance(v, (int, float))})
        elif isinstance(value, (int, float)):
            flat[(key, "")] = value
    return flat


def pi_rate(table: Table, system: str = "turnstore", op: str | None = None) -> float | None:
    """turnstore's pi import rate, messages per second (of the first operation, unless ``op`` is given)."""
    row = next((r for r in table.rows if r["system"] == system and op in (None, r["op"])), None)
    if row is None:
        return None
    for key in ("msgs_per_s", "msg_per_s", "messages_per_s", "rate"):
        if isinstance(row.get(key), (int, float)):
            return float(row[key])
    if "message" in str(row.get("unit", "")):
        return 1e6 / row["median_us"]
    messages = (table.data.get("session") or {}).get("messages")
    return messages / (row["median_us"] / 1e6) if messages else None


def _pi(tables: dict[str, Table]) -> Target:
    """Met when ``store.import_`` returns at the rate and a folder of sessions, imported in one call,
    keeps it up until every WAL checkpoint is done (import_pi.py's rows)."""
    name, goal = "pi import", "≥ 20,000 messages/s"
    table = tables.get("import")
    rate = pi_rate(table) if table else None
    if table is None or rate is None:
        return Target(name, goal, "—", None)
    value = f"{rate:,.0f} messages/s"
    done = pi_rate(table, "turnstore_checkpointed")
    if done is not None:
        value += f" ({done:,.0f}/s until the WAL is checkpointed"
        folder = next((r["op"] for r in table.rows if r["op"] != table.rows[0]["op"]), None)
        sustained = pi_rate(table, "turnstore_checkpointed", folder) if folder else None
        if sustained is not None:
            value += f"; {folder.removeprefix('pi import, ')} in one call: {sustained:,.0f}/s, checkpoints included"
            rate = min(rate, sustained)
        value += ")"
    return Target(name, goal, value, rate >= 20_000)


def _times_faster(tables: dict[str, Table], mix: str, op: str, times: float, label: str) -> Target:
    """turnstore's ``op`` at least ``times`` faster than OAI ``SQLiteSession`` in the peers table of ``mix``."""
    name, goal = f"{label}, {mix} mix", f"≥ {times:g}× faster than OAI SQLiteSession"
    peers = tables.get(mix_key("peers", mix))
    mine, oai = (peers.row(op, "turnstore"), peers.row(op, "oai")) if peers else (None, None)
    if mine is None or oai is None:
        return Target(name, goal, "—", None)
    value = oai["median_us"] / mine["median_us"]
    return Target(name, goal, f"{value:.2f}× ({us(oai['median_us'])} vs {us(mine['median_us'])})", value >= times)


def _whole_read(tables: dict[str, Table], mix: str, walked: bool = False) -> Target:
    """The whole-session read: ≤ ×1.2 of the raw floor (main table) and no slower than OAI SQLiteSession (peers).

    ``walked``: the session walked instead (``records()`` iterated, nothing kept; op 10), against the
    floor walked the same way and OAI SQLiteSession's whole read (it has no streaming read).
    """
    if walked:
        name, ops = f"10 whole session walked, typed, {mix} mix", ("walk", "walk")
        goal = "≤ ×1.2 the raw floor walked, and no slower than OAI SQLiteSession's whole read"
    else:
        name, ops = f"5 whole session, typed, {mix} mix", ("session", "whole")
        goal = "≤ ×1.2 the raw floor, and no slower than OAI SQLiteSession"
    main, peers = tables.get(mix_key("sqlite", mix)), tables.get(mix_key("peers", mix))
    row = main.row(ops[0], "turnstore") if main else None
    # The peer is held to its whole read either way: its walk is that list iterated, and no cheaper.
    mine, oai = (peers.row(ops[1], "turnstore"), peers.row("whole", "oai")) if peers else (None, None)
    parts, met = [], []
    if row is not None and row.get("ratio") is not None:
        parts.append(f"{ratio(row['ratio'])} the floor")
        met.append(row["ratio"] <= 1.2)
    if mine is not None and oai is not None:
        parts.append(f"OAI / turnstore ×{oai['median_us'] / mine['median_us']:.2f}")
        met.append(mine["median_us"] <= oai["median_us"])
    if not parts:
        return Target(name, goal, "—", None)
    return Target(name, goal, "; ".join(parts), all(met) if len(met) == 2 else (False if False in met else None))


def _mix_ratio(tables: dict[str, Table], mix: str, op: str, limit: float, label: str, base: str = "raw") -> Target:
    """turnstore's ratio to ``base`` for ``op`` in the main table of ``mix``."""
    name = f"{label}, {mix} mix"
    goal = f"≤ ×{limit:g} the raw floor" if base == "raw" else f"≤ ×{limit:g} a minimal raw table"
    table = tables.get(mix_key("sqlite", mix))
    row = table.row(op, "turnstore") if table else None
    value = None if row is None else (row.get("ratio") if base == "raw" else row.get("ratios", {}).get(base))
    if value is None:
        return Target(name, goal, "—", None)
    return Target(name, goal, ratio(value), value <= limit)


def mix_targets(tables: dict[str, Table]) -> list[Target]:
    """The targets every message mix is held to."""
    out = [_mix_ratio(tables, "small", "append", 1.6, "1 append 1 message per commit", base="raw_min")]
    for mix in MIXES:
        out += [
            _times_faster(tables, mix, "append", 3, "1 append 1 message per commit"),
            _times_faster(tables, mix, "append_turn", 2, "2 append 1 turn per transaction"),
            _whole_read(tables, mix),
            _whole_read(tables, mix, walked=True),
            _mix_ratio(tables, mix, "last", 1.3, "4 last 50 messages"),
        ]
    return out


def targets(tables: dict[str, Table]) -> list[Target]:
    return [
        _ratio_target(tables, "1 append 1 message per commit", "append", LIMITS["append"]),
        _append_vs_peers(tables),
        _ratio_target(tables, "2 append 1 turn per transaction", "append_turn", LIMITS["append_turn"]),
        _ratio_target(tables, "3 bulk import (turnstore JSONL)", "import", LIMITS["import"]),
        _ratio_target(tables, "4 last 50 messages", "last", LIMITS["last"]),
        _ratio_target(tables, "7 session usage totals", "usage", LIMITS["usage"]),
        _ratio_target(tables, "8 usage of one loop", "usage_loop", LIMITS["usage_loop"]),
        _ratio_target(tables, "9 usage by model", "usage_by_model", LIMITS["usage_by_model"]),
        _async(tables),
        _scale(tables),
        _pi(tables),
        *mix_targets(tables),
    ]


# --- the plot ------------------------------------------------------------------------


def plot(tables: dict[str, Table], path: Path) -> bool:
    """Grouped bars: each system's ratio to its table's floor, per operation; one panel per table."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed (pip install -r benchmarks/requirements.txt): no plot", file=sys.stderr)
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    panels = []
    for name in [*TABLES, *(t for t in tables if t not in TABLES)]:
        table = tables.get(name)
        if table is None:
            continue
        floor = table.floor()
        systems = [
            s
            for s in table.systems()
            if s != floor and any(r["system"] == s and r.get("ratio") not in (None, 1.0) for r in table.rows)
        ]
        if systems:
            panels.append((table, systems))
    if not panels:
        return False
    fig, axes = plt.subplots(len(panels), 1, figsize=(11, 3.6 * len(panels)), squeeze=False)
    for ax, (table, systems) in zip(axes[:, 0], panels):
        ops = table.ops()
        width = 0.8 / len(systems)
        values = []
        for j, system in enumerate(systems):
            heights = []
            for op in ops:
                row = table.row(op, system)
                heights.append(row["ratio"] if row and row.get("ratio") else float("nan"))
            values += [h for h in heights if not math.isnan(h)]
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(ops))]
            bars = ax.bar(xs, heights, min(width, 0.3), label=table.label(system))
            ax.bar_label(bars, labels=["" if math.isnan(h) else f"×{h:.2f}" for h in heights], fontsize=7, padding=1)
        if table.name == "sqlite":  # the tool mix's main table: the targets it is held to
            for i, op in enumerate(ops):
                if op in LIMITS:
                    ax.hlines(
                        LIMITS[op],
                        i - 0.45,
                        i + 0.45,
                        colors="red",
                        linestyles="dashed",
                        linewidth=1,
                        label="target" if i == 0 else None,
                    )
        finite = [v for v in values if v > 0]
        if finite and max(finite) / min(finite) > 8:
            ax.set_yscale("log")
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"×{v:g}"))
        ax.margins(y=0.15)
        ax.axhline(1.0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(ops)))
        labels = [f"{op_number(next(r for r in table.rows if r['op'] == op))} {op}".strip() for op in ops]
        ax.set_xticklabels(labels, rotation=20, ha="right", fontsize=8)
        floor = table.floor()
        ax.set_ylabel(f"ratio to {table.label(floor)}" if floor else "ratio", fontsize=8)
        ax.set_title(TABLES.get(table.name, table.name), fontsize=10)
        ax.legend(fontsize=8)
        ax.grid(axis="y", alpha=0.3, which="both")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


# --- the document --------------------------------------------------------------------


def document(tables: dict[str, Table], notes: list[str], png: Path | None, md: Path) -> str:
    out = [
        "# Performance",
        "",
        "What turnstore costs on top of the least work a hand-written app would do to store the same rows, "
        "and how it compares with the stores other agent frameworks ship. Generated by "
        "`python benchmarks/report.py` from the result files of the benchmark scripts; how each number is "
        "measured (the floor, the workload, the method) is in [benchmarks/README.md](../benchmarks/README.md).",
        "",
        "A ratio is a system's median over its table's floor (×1.00 = no overhead; lower is better), "
        "measured with the systems interleaved in the same process.",
        "",
        "## Targets",
        "",
        "| Target | Goal | Measured | Status |",
        "|---|---|---|---|",
    ]
    for target in targets(tables):
        out.append(f"| {target.name} | {target.goal} | {target.value} | {target.status} |")
    if any(target.met is False for target in targets(tables)):
        out += [
            "",
            "Where turnstore's time goes on the missed ones (profiles, and turnstore's own SQL timed "
            "against the floor's): the notes below, [Where turnstore's time goes](#where-turnstores-time-goes).",
        ]
    if png is not None:
        out += [
            "",
            f"![ratio to the floor, per operation and system]({os.path.relpath(png, md.parent)})",
            "",
            "Each panel: every system's ratio to its table's floor, per operation (log scale where the "
            "ratios span more than ×8); dashed red: the target.",
        ]
    for name, title in [*TABLES.items(), *((t, t) for t in tables if t not in TABLES)]:
        out += ["", f"## {title}", ""]
        table = tables.get(name)
        if table is None:
            out.append("Not measured in this run.")
            continue
        rel = table.path.relative_to(ROOT) if table.path.is_relative_to(ROOT) else table.path
        env = table.data.get("environment") or table.data.get("env") or {}
        facts = [f"`{rel}`", table.when]
        if env.get("commit"):
            facts.append(f"commit {env['commit']}")
        reps = table.data.get("reps")
        if reps:
            facts.append(f"medians of {reps} repetitions")
        facts.append(f"load average {table.load}")
        out += [", ".join(facts) + ".", "", table_markdown(table)]
        if name == "import" and pi_rate(table) is not None:
            out += [
                "",
                f"turnstore imports {_pi(tables).value}. A session of 1,000 messages or more leaves "
                "its WAL checkpoint (the copy of the log into the main file) to a thread of the import "
                "call, which overlaps the next file of a folder and is joined before `store.import_` "
                "returns; the floor's COMMIT does the checkpoint itself.",
            ]
        if name == "scale":
            out += scale_facts(table.data)
        if name == "search":
            out += search_facts(table.data)
        if name.startswith("sqlite"):
            row = table.row("import", "turnstore")
            if row is not None:
                out += [
                    "",
                    f"Bulk import of turnstore's own JSONL: {1e6 / row['median_us']:,.0f} messages/s "
                    f"(images included).",
                ]
    if notes:
        out += ["", "## Notes on the inputs", "", *(f"* {note}" for note in notes)]
    if NOTES.is_file():
        out += ["", "## Notes", "", NOTES.read_text(encoding="utf-8").rstrip()]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="result files (default: benchmarks/results/*.json)")
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "performance.md")
    parser.add_argument("--png", type=Path, default=ROOT / "docs" / "performance.png")
    args = parser.parse_args(argv)
    files = args.files or sorted((ROOT / "benchmarks" / "results").glob("*.json"))
    files = [f.resolve() for f in files if f.exists()]
    tables, notes = load(files)
    print(f"tables: {', '.join(f'{n} ({t.path.name})' for n, t in tables.items()) or 'none'}")
    png = args.png.resolve() if plot(tables, args.png.resolve()) else None
    md = args.md.resolve()
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(document(tables, notes, png, md), encoding="utf-8")
    print(f"wrote {md}" + (f" and {png}" if png else ""))
    for target in targets(tables):
        print(f"  {target.name}: {target.value} — {target.status}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
