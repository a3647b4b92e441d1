"""The run's report: the environment it ran in, the main table, and the JSON result files.

Every table is written as one JSON object of the same shape, which
``report.py`` reads (as it reads the tables of the other benchmark scripts)::

    {"table": "sqlite" | "async" | "postgres", "title": ..., "floor": "raw",
     "systems": {system: label}, "environment": {...}, ...,
     "rows": [{"op", "num", "label", "unit", "system", "median_us", "ratio",
               "ratio_range", "ratios", "samples_us"}, ...]}

One row per operation and system; ``ratio`` is the system's median over the
floor's (``raw``: the raw driver with turnstore's settings), ``ratio_range``
the lowest and highest per-repetition ratio, ``ratios`` the ratios to every
other base the table compares with.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pydantic
import sqlalchemy
from common import Result, load_average

import turnstore

SQLITE_SYSTEMS = {
    "raw": "raw sqlite3",
    "turnstore": "turnstore",
    "raw_default": "raw sqlite3, default pragmas",
    "raw_min": "raw sqlite3, minimal table",
}
TABLE_NAMES = {"sqlite_async": "async", "postgresql": "postgres"}  # Section.key -> JSON "table"


def _git(package: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(package), *args], capture_output=True, text=True, check=True).stdout


def code_version() -> str:
    """The commit of the turnstore being measured, and whether its package files differ from it.

    Uncommitted changes are named by a hash of their diff, so two runs can tell
    whether they measured the same code.
    """
    package = Path(turnstore.__file__).resolve().parent
    try:
        commit = _git(package, "rev-parse", "--short", "HEAD").strip()
        diff = _git(package, "diff", "HEAD", "--", ".")
        untracked = _git(package, "ls-files", "--others", "--exclude-standard", "--", ".")
    except (OSError, subprocess.CalledProcessError):
        return f"unknown (turnstore from {package}, not a git checkout)"
    if diff or untracked:
        digest = hashlib.sha1((diff + untracked).encode()).hexdigest()[:8]
        return f"{commit} + uncommitted changes in {package.name}/ (diff {digest})"
    return commit


def environment(out: Path) -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        cpu = platform.processor() or "unknown"
    return {
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": code_version(),
        "turnstore": str(Path(turnstore.__file__).resolve().parent),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "sqlalchemy": sqlalchemy.__version__,
        "pydantic": pydantic.VERSION,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "out": str(out),
        "load_average": load_average(),
    }


def sqlite_table(results: list[Result]) -> str:
    """The main table, as markdown."""
    lines = [
        "| # | Operation | Unit | raw sqlite3 | turnstore | ratio | ratio range "
        "| raw sqlite3, default pragmas | turnstore / default | turnstore / minimal table |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for result in results:
        low, high = result.ratio_range
        default = "—"
        versus = "—"
        if "raw_default" in result.ns:
            default = f"{result.median_us('raw_default'):,.1f} µs"
            versus = f"×{result.ratio_of('turnstore', 'raw_default'):.2f}"
        minimal = f"×{result.ratio_of('turnstore', 'raw_min'):.2f}" if "raw_min" in result.ns else "—"
        lines.append(
            f"| {result.num} | {result.name} | {result.unit} | {result.median_us('raw'):,.1f} µs "
            f"| {result.median_us('turnstore'):,.1f} µs | ×{result.ratio:.2f} | ×{low:.2f}–{high:.2f} "
            f"| {default} | {versus} | {minimal} |"
        )
    return "\n".join(lines)


def rows(results: list[Result], bases: dict[str, list[str]], floor: str = "raw") -> list[dict[str, Any]]:
    """One JSON row per operation and system; ``bases[system]``: what else its ratio is given against."""
    out = []
    for result in results:
        for system, samples in result.ns.items():
            row: dict[str, Any] = {
                "op": result.key,
                "num": result.num,
                "label": result.name,
                "unit": result.unit,
                "system": system,
                "median_us": round(result.median_us(system), 3),
                "ratio": None,
                "ratio_range": None,
                "ratios": {},
                "samples_us": [round(v / 1_000, 3) for v in samples],
            }
            if floor in result.ns:
                row["ratio"] = round(result.ratio_of(system, floor), 4)
                row["ratio_range"] = [round(v, 4) for v in result.range_of(system, floor)]
            for base in bases.get(system, []):
                if base in result.ns:
                    row["ratios"][base] = round(result.ratio_of(system, base), 4)
            out.append(row)
    return out


def section_json(section: Any, common: dict[str, Any]) -> dict[str, Any]:
    """An async or PostgreSQL section (``interleave.Section``) as a table object."""
    bases: dict[str, list[str]] = {}
    for system, base in section.ratios:
        bases.setdefault(system, []).append(base)
    return {
        "table": TABLE_NAMES.get(section.key, section.key),
        "title": section.title,
        "floor": "raw",
        "systems": dict(section.columns),
        "skipped": section.skipped,
        "notes": section.notes,
        "info": section.info,
        **common,
        "rows": rows(section.results, bases),
    }


def sibling(path: Path, table: str) -> Path:
    """Where the ``table`` table of a run goes when the main one goes to ``path``.

    ``results/sqlite.json`` → ``results/async.json``; ``results/x.json`` → ``results/x-async.json``.
    """
    if "sqlite" in path.stem:
        return path.with_name(path.stem.replace("sqlite", table) + path.suffix)
    return path.with_name(f"{path.stem}-{table}{path.suffix}")


def mix_path(path: Path, mix: str) -> Path:
    """Where the main table of the message mix ``mix`` goes: ``path`` for the tool mix, ``x-small.json`` ..."""
    return path if mix == "tool" else path.with_name(f"{path.stem}-{mix}{path.suffix}")
