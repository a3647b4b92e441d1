"""The ``langchain`` importer: the ``message_store`` table of LangChain's ``SQLChatMessageHistory``.

The fixture database under ``fixtures/langchain`` was written by LangChain
itself (``make.py``, langchain-community 0.4.2 / langchain-core 1.8.3); these
tests read it with plain ``sqlite3`` for the expected values and never need LangChain.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.cli import main
from turnstore.models import (
    AssistantMessage,
    ExtensionMessage,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)

HISTORY = Path(__file__).parent / "fixtures" / "langchain" / "history.db"
WEATHER, KINDS = "weather", "kinds"


def query(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(sql, params).fetchall()
    connection.close()
    return rows


def stored(session_id: str) -> list[dict[str, Any]]:
    """The session's rows as LangChain stored them: ``{"type", "data"}``."""
    rows = query(HISTORY, "SELECT message FROM message_store WHERE session_id = ? ORDER BY id", session_id)
    return [json.loads(row[0]) for row in rows]


def records(store: Store, session_id: str) -> list[Any]:
    return list(store.messages.records(session_id))


def copy_db(tmp_path: Path) -> Path:
    target = tmp_path / HISTORY.name
    shutil.copyfile(HISTORY, target)
    return target


def execute(path: Path, sql: str, *params: Any) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(sql, params)
    connection.close()


def test_report_counts(store: Store) -> None:
    report = store.import_("langchain", HISTORY)

    assert report.ok
    assert report.records == query(HISTORY, "SELECT COUNT(*) FROM message_store")[0][0] == 12
    assert report.messages == 12
    assert report.sessions_written == [WEATHER, KINDS]
    assert dict(report.by_role) == {"system": 1, "user": 3, "assistant": 4, "toolResult": 2, "extension": 2}
    assert dict(report.by_kind) == {"langchain.chat": 1, "langchain.function": 1}


def test_roles_follow_the_types(store: Store) -> None:
    store.import_("langchain", HISTORY)
    roles = {"system": SystemMessage, "human": UserMessage, "ai": AssistantMessage, "tool": ToolResultMessage}

    for session_id in (WEATHER, KINDS):
        kinds = [roles.get(row["type"], ExtensionMessage) for row in stored(session_id)]
        assert [type(r.message) for r in records(store, session_id)] == kinds


def test_tool_calls_and_results_keep_their_ids(store: Store) -> None:
    store.import_("langchain", HISTORY)
    ai = stored(WEATHER)[2]["data"]

    rows = records(store, WEATHER)
    call_message, first, second = rows[2].message, rows[3].message, rows[4].message

    assert [(c.id, c.name, c.arguments) for c in call_message.content] == [
        (call["id"], call["name"], call["args"]) for call in ai["tool_calls"]
    ]
    assert call_message.stop_reason.value == "toolUse"
    assert (call_message.model, call_message.provider) == ("gpt-4o-mini", "openai")
    assert (first.tool_call_id, first.tool_name, first.is_error) == ("call_1", "get_weather", False)
    assert (second.tool_call_id, second.tool_name, second.is_error) == ("call_2", "get_time", True)
    assert second.details == {"retry": True}


def test_usage_totals_equal_the_source(store: Store) -> None:
    store.import_("langchain", HISTORY)
    usages = [row["data"]["usage_metadata"] for row in stored(WEATHER) if row["data"].get("usage_metadata")]

    totals = store.usage.session(WEATHER)

    assert totals.requests == len(usages) == 2
    assert totals.total_tokens == sum(u["total_tokens"] for u in usages)
    assert totals.input + totals.cache_read + totals.cache_write == sum(u["input_tokens"] for u in usages)
    assert totals.cache_read == 40 and totals.cache_write == 10
    assert totals.output == sum(u["output_tokens"] for u in usages)
    assert totals.reasoning == 12


def test_ai_message_without_usage_is_unknown_usage(store: Store) -> None:
    store.import_("langchain", HISTORY)

    last = records(store, WEATHER)[-1].message

    assert isinstance(last, AssistantMessage)
    assert last.usage is None
    assert last.model == "unknown"


def test_thinking_signature_image_and_other_kinds(store: Store) -> None:
    store.import_("langchain", HISTORY)
    ai = stored(KINDS)[1]["data"]

    rows = records(store, KINDS)

    prompt = rows[0].message.model_dump(mode="json")
    assert prompt["content"][1]["type"] == "image"
    assert (prompt["content"][1]["mimeType"], prompt["content"][1]["data"]) == ("image/png", "iVBORw0KGgo=")
    thinking, text = rows[1].message.content
    assert thinking.signature == ai["content"][0]["signature"]  # byte-exact
    assert text.text == "A tiny PNG."
    assert rows[2].message.kind == "langchain.chat" and rows[2].message.data["role"] == "critic"
    assert rows[3].message.data["name"] == "legacy_fn"


def test_unknown_fields_are_kept(store: Store) -> None:
    store.import_("langchain", HISTORY)

    dumped = records(store, WEATHER)[2].message.model_dump(mode="json")

    assert dumped["langchain"]["id"] == "run-1"
    assert dumped["langchain"]["response_metadata"]["finish_reason"] == "tool_calls"
    assert dumped["content"][0]["langchain"] == {"type": "tool_call"}


def test_rows_are_the_verbatim_source(store: Store) -> None:
    store.import_("langchain", HISTORY)
    texts = [
        row[0] for row in query(HISTORY, "SELECT message FROM message_store WHERE session_id = ? ORDER BY id", WEATHER)
    ]

    assert [r.source for r in records(store, WEATHER)] == texts


def test_turns_and_loops_are_derived_from_user_messages(store: Store) -> None:
    store.import_("langchain", HISTORY)

    rows = records(store, WEATHER)
    loops = store.loops.list(WEATHER)

    assert len(loops) == 2 and loops[1].continuation_kind == "default"
    assert [r.turn_index for r in rows] == [None, 0, 0, 0, 0, 1, 0, 0]
    assert [r.loop_id for r in rows].count(loops[1].loop_id) == 2


def test_reimport_changes_nothing_and_the_source_is_untouched(store: Store) -> None:
    digest = hashlib.sha256(HISTORY.read_bytes()).hexdigest()
    store.import_("langchain", HISTORY)
    exported = store.export(WEATHER, "turnstore")

    again = store.import_("langchain", HISTORY)

    assert again.sessions_written == [] and again.sessions_unchanged == [WEATHER, KINDS]
    assert store.export(WEATHER, "turnstore") == exported
    assert hashlib.sha256(HISTORY.read_bytes()).hexdigest() == digest


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ("not json", "message is not valid JSON"),
        ('{"type": "ai"}', 'message must be a JSON object {"type": str, "data": object}'),
        ('{"type": "tool", "data": {"content": "x"}}', "a tool message needs a string tool_call_id"),
        (
            '{"type": "ai", "data": {"content": "x", "tool_calls": [{"name": "f"}]}}',
            "each tool call needs a string id and name",
        ),
        (
            '{"type": "ai", "data": {"content": "x", "usage_metadata": {"input_tokens": "9"}}}',
            "input_tokens must be a non-negative 64-bit integer, got '9'",
        ),
        ('{"type": "human", "data": {"content": 5}}', "content must be a string or a list, got int"),
    ],
)
def test_malformed_row_is_reported_with_its_id(store: Store, tmp_path: Path, message: str, reason: str) -> None:
    source = copy_db(tmp_path)
    row_id = query(source, "SELECT id FROM message_store WHERE session_id = ? ORDER BY id", KINDS)[1][0]
    execute(source, "UPDATE message_store SET message = ? WHERE id = ?", message, row_id)

    report = store.import_("langchain", source)

    assert not report.ok
    assert [(e.place, e.reason) for e in report.errors] == [(f"{source}: message_store id={row_id}", reason)]
    assert report.sessions_failed == [KINDS]
    assert report.sessions_written == [WEATHER]
    assert [s.session_id for s in store.sessions.list()] == [WEATHER]


def test_skip_invalid_drops_only_the_bad_row(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path)
    execute(source, "UPDATE message_store SET message = 'x' WHERE id = 1")

    report = store.import_("langchain", source, skip_invalid=True)

    assert report.ok
    assert [e.place for e in report.skipped] == [f"{source}: message_store id=1"]
    assert len(records(store, WEATHER)) == 7


def test_a_file_without_message_store_is_reported(store: Store, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    execute(other, "CREATE TABLE notes (id INTEGER)")

    report = store.import_("langchain", other)

    assert not report.ok
    assert report.errors[0].place == str(other)
    assert "no message_store table" in report.errors[0].reason


def test_the_importers_import_no_framework(tmp_path: Path) -> None:
    """The adk and langchain importers read with plain sqlite3: importing from either loads neither package."""
    code = (
        "import sys; from turnstore import Store\n"
        f"with Store({str(tmp_path / 'store.db')!r}) as store:\n"
        f"    assert store.import_('langchain', {str(HISTORY)!r}).ok\n"
        f"    assert store.import_('adk', {str(HISTORY.parent.parent / 'adk' / 'sqlite.db')!r}).ok\n"
        "print([m for m in sys.modules if m.startswith(('langchain', 'google'))])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)

    assert done.stdout.strip() == "[]"


def test_cli_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["import", "langchain", str(HISTORY), "--db", str(tmp_path / "store.db"), "--json"])

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sessions"]["written"] == [WEATHER, KINDS]
