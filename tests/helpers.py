"""Helpers several test modules share: plain views of what a store holds, for before/after comparisons."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import sqlalchemy as sa

SONNET = {"model": "claude-sonnet-4-5", "provider": "anthropic"}
GPT5 = {"model": "gpt-5", "provider": "openai"}
"""Loop configs of two models, for loops started by hand."""

TABLES = ("sessions", "loops", "messages", "imports")
"""turnstore's tables."""

TOKEN_FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens")
"""The token counts of a usage total, in the order :func:`tokens` gives them."""


def snapshot(store: Any, session_id: str) -> dict[str, Any]:
    """Everything a session holds, as records, for before/after comparisons."""
    return {
        "session": store.sessions.get(session_id),
        "loops": store.loops.list(session_id),
        "messages": list(store.messages.records(session_id)),
        "usage": store.usage.session(session_id),
    }


def stored(store: Any, session_id: str) -> list[Any]:
    """A session's messages (the models), in order."""
    return [m.message for m in store.messages.records(session_id)]


def table_counts(store: Any) -> dict[str, int]:
    """Rows per table, read with plain SQL on the store's own connection."""
    return {table: int(store._db.scalar(sa.text(f"SELECT count(*) FROM {table}"))) for table in TABLES}


def session_data(store: Any, session_id: str) -> dict[str, Any]:
    """Everything one session holds, as plain data, with its usage by model and loop and its import rows."""
    return {
        "session": store.sessions.get(session_id).model_dump(mode="json"),
        "loops": [loop.model_dump(mode="json") for loop in store.loops.list(session_id)],
        "messages": [m.model_dump(mode="json") for m in store.messages.records(session_id)],
        "usage": store.usage.session(session_id).model_dump(),
        "by_model": [row.model_dump() for row in store.usage.by_model(session_id)],
        "by_loop": [row.model_dump() for row in store.usage.by_loop(session_id)],
        "imports": store._db.fetchall(
            sa.text("SELECT format, origin, digest FROM imports WHERE session_id = :sid"), {"sid": session_id}
        ),
    }


def portable_data(store: Any, session_id: str) -> dict[str, Any]:
    """Everything a session holds, as plain data (message ids left out: an import assigns new ones)."""
    session = store.sessions.get(session_id).model_dump(mode="json")
    return {
        "session": session,
        "loops": [loop.model_dump(mode="json") for loop in store.loops.list(session_id)],
        "messages": [
            (m.loop_id, m.turn_index, m.seq, m.message.model_dump(mode="json"))
            for m in store.messages.records(session_id)
        ],
        "usage": store.usage.session(session_id).model_dump(),
        "by_model": [row.model_dump() for row in store.usage.by_model(session_id)],
    }


def file_state(path: Path) -> tuple[str, list[str]]:
    """A file's sha256 and its folder's listing."""
    return hashlib.sha256(path.read_bytes()).hexdigest(), sorted(os.listdir(path.parent))


def tokens(totals: Any, fields: tuple[str, ...] = TOKEN_FIELDS) -> tuple[int, ...]:
    """A usage total's token counts, in ``fields`` order (default :data:`TOKEN_FIELDS`)."""
    return tuple(getattr(totals, name) for name in fields)


def token_counts(totals: Any) -> dict[str, int]:
    """A usage total's token counts by name."""
    return {name: getattr(totals, name) for name in TOKEN_FIELDS}


ROOT = Path(__file__).resolve().parent.parent
"""The repository (examples/ and docs/ live there)."""


def run_python(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a fresh interpreter (this one's), its output captured as text."""
    return subprocess.run([sys.executable, *args], cwd=cwd, check=False, capture_output=True, text=True, timeout=120)


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``examples/NAME`` with ARGS."""
    return run_python([str(ROOT / "examples" / name), *args])


def run_doc_example(doc: str, cwd: Path, block: int = 0) -> subprocess.CompletedProcess[str]:
    """Run a Python block of ``docs/DOC`` (the first, or number ``block`` from 0) in ``cwd``."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    code = re.findall(r"```python\n(.*?)```", text, re.DOTALL)[block]
    return run_python(["-c", code], cwd=cwd)
