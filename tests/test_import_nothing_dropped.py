"""Importers never drop anything silently: what cannot be imported is reported with its place.

* Parent-link cycles in every tree format (pi, Tau, yoagent): an entry that
  is its own parent, or its own ancestor, is reported with its file and line;
  skipping invalid records keeps the whole cycle as a history of its own.
* Paths that are not regular files (FIFOs, devices, sockets, broken
  symlinks, unreadable files) are refused or reported, never read blindly.
* Empty and whitespace-only source files of every format are reported, and
  write nothing.

Each is checked through ``Store.import_`` and through ``turnstore import``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.cli import main

Link = tuple[str, "str | None", str]
"""A tree entry: (id, parent id, role: ``user`` or ``assistant``)."""

OUTPUT_TOKENS = 7
"""Output tokens of every assistant entry the tree files hold."""


# --- one writer per tree format: entries as (id, parent, role) ---------------------------------------


def _pi_message(role: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "content": "hi", "timestamp": 1767225601000}
    return {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "api": "anthropic-messages",
            "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": "stop", "timestamp": 1767225602000,
            "usage": {"input": 10, "output": OUTPUT_TOKENS, "cacheRead": 0, "cacheWrite": 0,
                      "totalTokens": 10 + OUTPUT_TOKENS}}


def pi_tree(path: Path, links: list[Link]) -> int:
    """A pi v3 session file; returns the line number of the first entry."""
    header = {"type": "session", "version": 3, "id": "cycle", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"}
    entries = [{"type": "message", "id": ident, "parentId": parent, "timestamp": "2026-01-01T00:00:01.000Z",
                "message": _pi_message(role)} for ident, parent, role in links]
    path.write_text("\n".join(json.dumps(record) for record in [header, *entries]) + "\n", encoding="utf-8")
    return 2


def _tau_message(role: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "contents": [{"type": "text", "content": "hi"}], "id": "u", "timestamp": 1767225600.5}
    return {"role": "assistant", "contents": [{"type": "text", "content": "ok"}], "id": "a", "timestamp": 1767225601.0,
            "usage": {"input_tokens": 10, "output_tokens": OUTPUT_TOKENS}, "stop_reason": "stop", "error": ""}


def tau_tree(path: Path, links: list[Link]) -> int:
    header = {"type": "session", "version": 3, "id": "cycle", "timestamp": 1767225600.0, "cwd": "/tmp"}
    entries = [{"id": ident, "timestamp": 1767225601.0, **({"parent_id": parent} if parent else {}), "type": "message",
                "message": _tau_message(role)} for ident, parent, role in links]
    path.write_text("\n".join(json.dumps(record) for record in [header, *entries]) + "\n", encoding="utf-8")
    return 2


def _yoagent_message(role: str) -> dict[str, Any]:
    if role == "user":
        return {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1767225601000}
    return {"role": "assistant", "content": [{"type": "text", "text": "ok"}], "stopReason": "stop",
            "model": "claude-sonnet-4-5", "provider": "anthropic", "timestamp": 1767225602000,
            "usage": {"input": 10, "output": OUTPUT_TOKENS, "cacheRead": 0, "cacheWrite": 0,
                      "totalTokens": 10 + OUTPUT_TOKENS}}


def yoagent_tree(path: Path, links: list[Link]) -> int:
    entries = [{"id": ident, "parent_id": parent, "message": _yoagent_message(role), "timestamp": 1767225601000}
               for ident, parent, role in links]
    path.write_text("\n".join(json.dumps(record) for record in entries) + "\n", encoding="utf-8")
    return 1


TREE_FORMATS: dict[str, Callable[[Path, list[Link]], int]] = {"pi": pi_tree, "tau": tau_tree, "yoagent": yoagent_tree}


def cycle_links(length: int) -> list[Link]:
    """A root, an entry hanging from the cycle (written before it), then the cycle ``c1 .. cN``
    (``c1``'s parent is ``cN``); the cycle's last entry is an assistant with usage."""
    cycle: list[Link] = [(f"c{n}", f"c{n - 1}" if n > 1 else f"c{length}", "user") for n in range(1, length + 1)]
    cycle[-1] = (*cycle[-1][:2], "assistant")
    return [("r", None, "user"), ("d", "c1", "user"), *cycle]


# --- 1. cycles of parent links ---------------------------------------------------------------------


@pytest.mark.parametrize("length", [1, 2, 5, 9])
@pytest.mark.parametrize("fmt", sorted(TREE_FORMATS))
def test_a_parent_cycle_is_reported_and_skipping_keeps_it_as_a_history_of_its_own(
    store: Store, tmp_path: Path, fmt: str, length: int
) -> None:
    path = tmp_path / "cycle.jsonl"
    links = cycle_links(length)
    place = f"{path}:{TREE_FORMATS[fmt](path, links) + 2}"  # c1: the cycle's first entry in the file

    failed = store.import_(fmt, path)

    assert not failed.ok
    assert [error.place for error in failed.errors] == [place]
    reason = failed.errors[0].reason
    assert ("is its own parent" if length == 1 else "is its own ancestor") in reason
    assert "'c1'" in reason and "\n" not in reason
    assert failed.sessions_written == [] and store.sessions.list() == []

    report = store.import_(fmt, path, skip_invalid=True)

    assert report.ok
    assert [error.place for error in report.skipped] == [place]
    [session] = report.sessions_written
    assert report.messages == len(links)  # every entry stored, the cycle's assistant among them
    assert store.usage.session(session).output == OUTPUT_TOKENS
    roots = [loop for loop in store.loops.list(session) if loop.parent_loop_id is None]
    assert len(roots) == 2  # the root's history, and the cycle's
    opening = next(store.messages.records(loop_id=roots[1].loop_id))
    assert json.loads(opening.source or "")["id"] == "c1"  # the cycle is walked from its first entry in the file


def test_a_long_cycle_is_reported_on_one_short_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cycle.jsonl"
    yoagent_tree(path, cycle_links(5000))

    report = store.import_("yoagent", path, skip_invalid=True)

    [skipped] = report.skipped
    assert "(5000 entries)" in skipped.reason and len(skipped.reason) < 200
    assert report.messages == 5002


def test_two_cycles_are_each_reported(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cycles.jsonl"
    links: list[Link] = [("r", None, "user"), ("a1", "a2", "user"), ("b1", "b1", "user"), ("a2", "a1", "assistant")]
    tau_tree(path, links)

    report = store.import_("tau", path, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{path}:3", f"{path}:4"]
    assert report.messages == 4


@pytest.mark.parametrize("fmt", sorted(TREE_FORMATS))
def test_cli_reports_a_parent_cycle_on_one_line_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    path = tmp_path / "cycle.jsonl"
    first = TREE_FORMATS[fmt](path, cycle_links(2))
    db = str(tmp_path / "cli.db")

    assert main(["--db", db, "import", fmt, str(path)]) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(errors) == 1 and f"{path}:{first + 2}" in errors[0] and "own ancestor" in errors[0]

    assert main(["--db", db, "import", fmt, str(path), "--skip-invalid"]) == 0
    skipped = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(skipped) == 1 and skipped[0].startswith(f"  skipped {path}:{first + 2}")
