"""Source files whose names are not valid UTF-8 (``os.fsencode`` bytes) import without ``--session-id``:
the session id derived from the name, and the origin kept for the import, hold each such byte as ``\\xNN``."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def _bytes_name(folder: Path, name: bytes) -> Path:
    """A path in ``folder`` whose file name is the bytes ``name``."""
    return Path(os.fsdecode(os.fsencode(folder) + b"/" + name))


def _pi_without_id(path: Path) -> None:
    """A pi session whose header names no session id (the id is then taken from the file name)."""
    lines = [
        {"type": "session", "version": 3, "timestamp": "2026-03-02T09:15:00.000Z", "cwd": "/"},
        {
            "type": "message",
            "id": "a1",
            "parentId": None,
            "timestamp": "2026-03-02T09:15:01.000Z",
            "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1000},
        },
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


@pytest.mark.parametrize(
    ("fmt", "name", "session_id"),
    [
        ("clark", b"conv\xff-42.jsonl", "conv\\xff-42"),
        ("pi", b"2026-03-02T09-15-00-000Z_s\xe9ss.jsonl", "s\\xe9ss"),
    ],
)
def test_a_file_name_that_is_not_utf8_names_its_session(
    fmt: str, name: bytes, session_id: str, store: Any, tmp_path: Path
) -> None:
    path = _bytes_name(tmp_path, name)
    if fmt == "clark":
        shutil.copy(FIXTURES / "clark" / "conversation-42.jsonl", path)
    else:
        _pi_without_id(path)
    report = store.import_(fmt, path)
    assert report.ok, report.errors
    assert [session.session_id for session in store.sessions.list()] == [session_id]
    assert report.messages > 0
    again = store.import_(fmt, path)
    assert again.sessions_unchanged == [session_id]


def test_a_folder_with_a_name_that_is_not_utf8_imports_every_file(store: Any, tmp_path: Path) -> None:
    shutil.copy(FIXTURES / "clark" / "conversation-42.jsonl", _bytes_name(tmp_path, b"a\x80\xfe.jsonl"))
    shutil.copy(FIXTURES / "clark" / "conversation-42.jsonl", tmp_path / "b.jsonl")
    report = store.import_("clark", tmp_path)
    assert report.ok, report.errors
    assert sorted(session.session_id for session in store.sessions.list()) == ["a\\x80\\xfe", "b"]
