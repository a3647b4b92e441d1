"""A large pi session's entry tree kept as columns (turnstore.importers.compact_tree) gives the same loops,
rows and reported errors as the tree of nodes: branches, duplicated ids, parents not in the file, parent
cycles, skipped lines with children, compactions (kept-from ids and retained tails), summaries, settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_large_imports import report_of, stored

from turnstore import Store
from turnstore.importers import get_importer, pi
from turnstore.importers.base import ImportOptions
from turnstore.importers.spill import SpilledRows
from turnstore.limits import Limits
from turnstore.repositories.imports import row_values

STAMP = "2026-03-02T09:15:01.000Z"


def _message(entry_id: str, parent: str | None, role: str, text: str, model: str = "m") -> dict[str, Any]:
    message: dict[str, Any] = {"role": role, "content": [{"type": "text", "text": text}], "timestamp": 1000}
    if role == "assistant":
        message.update(provider="p", model=model, stopReason="stop", usage={"input": 1, "output": 2})
    return {"type": "message", "id": entry_id, "parentId": parent, "timestamp": STAMP, "message": message}


def _entries() -> list[Any]:
    """Every tree shape the walk treats apart, in one file (lines given as text are written as they are)."""
    tool = {"type": "toolCall", "id": "c1", "name": "read", "arguments": {"path": "a"}}
    asks = _message("a2", "u1", "assistant", "reading")
    asks["message"]["content"].append(tool)
    asks["message"]["stopReason"] = "toolUse"
    result = {
        "type": "message",
        "id": "t1",
        "parentId": "a2",
        "timestamp": STAMP,
        "message": {
            "role": "toolResult",
            "toolCallId": "c1",
            "toolName": "read",
            "content": [{"type": "text", "text": "x"}],
            "isError": False,
            "timestamp": 1001,
        },
    }
    return [
        {"type": "model_change", "id": "mc", "parentId": None, "timestamp": STAMP, "provider": "p", "modelId": "first"},
        {"type": "thinking_level_change", "id": "tl", "parentId": "mc", "timestamp": STAMP, "thinkingLevel": "high"},
        _message("u1", "tl", "user", "hello"),
        asks,
        result,
        _message("a3", "t1", "assistant", "done", model="second"),
        _message("u2", "a3", "user", "again"),
        _message("a4", "u2", "assistant", "sure"),
        _message("u3", "a3", "user", "a branch"),  # a second child of a3
        _message("a5", "u3", "assistant", "branch answer"),
        {"type": "branch_summary", "id": "bs", "parentId": "a4", "timestamp": STAMP, "fromId": "a5", "summary": "s"},
        _message("u4", "bs", "user", "after the summary"),
        {
            "type": "compaction",
            "id": "cp",
            "parentId": "u4",
            "timestamp": STAMP,
            "summary": "c",
            "firstKeptEntryId": "u2",
            "tokensBefore": 10,
        },
        _message("u5", "cp", "user", "after the compaction"),
        {
            "type": "compaction",
            "id": "rt",
            "parentId": "u5",
            "timestamp": STAMP,
            "summary": "r",
            "firstKeptEntryId": "u5",
            "tokensBefore": 5,
            "retainedTail": [
                _message("x", None, "user", "kept")["message"],
                _message("y", None, "assistant", "kept too")["message"],
            ],
        },
        _message("u6", "rt", "user", "after the tail"),
        _message("u2", "a4", "user", "a duplicated id"),
        _message("d1", "u2", "user", "child of a duplicated id"),
        _message("o1", "nowhere", "user", "parent not in the file"),
        _message("o2", "o1", "assistant", "under an orphan"),
        _message("c1", "c3", "user", "cycle 1"),
        _message("c2", "c1", "assistant", "cycle 2"),
        _message("c3", "c2", "user", "cycle 3"),
        _message("s1", "s1", "user", "its own parent"),
        _message("f1", "c3", "user", "forward: under the cycle"),
        '{"type":"message","id":"bad","parentId":"u6","message": {',
        _message("k1", "bad", "user", "child of a line that is not JSON"),
        {"type": "session_info", "id": "si", "parentId": "k1", "timestamp": STAMP, "name": "A title"},
        _message("k2", "si", "assistant", "under the session info"),
        _message("z9", "later", "user", "its parent comes later"),
        _message("later", "k2", "user", "a parent after its child"),
    ]


def _write(path: Path) -> Path:
    header = {"type": "session", "version": 3, "id": "compact", "timestamp": STAMP, "cwd": "/"}
    lines = [json.dumps(header)] + [item if isinstance(item, str) else json.dumps(item) for item in _entries()]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _spill_from(monkeypatch: pytest.MonkeyPatch, after: int) -> None:
    monkeypatch.setattr(pi, "SPILL_AFTER_MESSAGES", after)


@pytest.mark.parametrize("after", [0, 5])
def test_a_compact_tree_is_stored_as_the_tree_of_nodes(
    after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _write(tmp_path / "tree.jsonl")
    _spill_from(monkeypatch, after)
    with Store(tmp_path / "compact.db") as store:
        compact_report = store.import_("pi", source, skip_invalid=True)
        compact_rows = stored(store)
    _spill_from(monkeypatch, 10**9)
    with Store(tmp_path / "nodes.db") as store:
        held_report = store.import_("pi", source, skip_invalid=True)
        held_rows = stored(store)
    assert report_of(compact_report) == report_of(held_report)
    assert compact_rows == held_rows and compact_rows
    reasons = " | ".join(error.reason for error in held_report.skipped)
    for what in ("duplicate entry id", "is not in the file", "its own parent", "its own ancestor", "invalid JSON"):
        assert what in reasons


def test_a_compact_tree_bundle_holds_its_rows_as_columns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _spill_from(monkeypatch, 0)
    (bundle,) = get_importer("pi").bundles(
        _write(tmp_path / "tree.jsonl"), ImportOptions(limits=Limits(), row_values=row_values)
    )
    try:
        assert isinstance(bundle.messages, SpilledRows)
        assert len(bundle.messages) == len(list(bundle.messages)) > 20
        assert bundle.messages[-1] == list(bundle.messages)[-1]
    finally:
        bundle.spill.close()


def test_a_large_file_is_spilled_from_its_first_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstore.importers import spill

    monkeypatch.setattr(spill, "SPILL_FILE_BYTES", 100)
    (bundle,) = get_importer("pi").bundles(
        _write(tmp_path / "tree.jsonl"), ImportOptions(limits=Limits(), row_values=row_values)
    )
    try:
        assert isinstance(bundle.messages, SpilledRows)
    finally:
        bundle.spill.close()
