"""The ``tau`` importer: Tau / Operator-Use JSONL session files and Tau's SQLite ``entries`` table.

Fixtures under ``fixtures/tau`` are written by hand from ``docs/importers/tau.md``
(the verified Tau dumps of §3.4, the Operator-Use shape of §3.5) and Tau's
``tau/message/types.py`` / ``tau/session/types.py``:

* ``sessions/…_0198c0de….jsonl`` — a Tau session: thinking with a signature, tool
  calls, a tool error, images, a tool message with two results, a compaction with
  usage, a branch summary with usage, leaf / label / model_change / custom /
  custom_message / session_info entries, Gemini usage with
  ``input_tokens_include_cache_read`` and Anthropic usage with ``cache_write_1h_tokens``.
* ``sessions/…_0198c1aa….jsonl`` — a ``fork_from`` copy: explicit ``null``s everywhere.
* ``sessions/…_01970a1e….jsonl`` — an Operator-Use era file: ``session_header``,
  role-first messages, no ``tool_name``, a system prompt, audio, an image URL, a ``channel`` entry.
* ``malformed/…`` — an unknown role, an unknown entry type, a line cut short.

The SQLite database is built by :func:`build_sessions_db` with Tau's own schema.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import TOKEN_FIELDS, token_counts

from turnstore import Store
from turnstore.cli import main
from turnstore.models import (
    AssistantMessage,
    AudioContent,
    ExtensionMessage,
    ImageContent,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    UserMessage,
)

FIXTURES = Path(__file__).parent / "fixtures" / "tau"
SESSIONS = FIXTURES / "sessions"

TAU = "0198c0de-7a1b-7c2d-8e3f-4a5b6c7d8e9f"
FORK = "0198c1aa-3b4c-7d5e-8f60-718293a4b5c6"
OPERATOR = "01970a1e-5c2b-7d3e-9f10-2a3b4c5d6e7f"
BROKEN = "0198d2bb-0000-7000-8000-00000000beef"

TAU_FILE = SESSIONS / f"2026-01-01T00-00-00-123456_{TAU}.jsonl"
FORK_FILE = SESSIONS / f"2026-01-02T00-00-00-500000_{FORK}.jsonl"
OPERATOR_FILE = SESSIONS / f"2025-05-07T06-40-00-120000_{OPERATOR}.jsonl"
BROKEN_FILE = FIXTURES / "malformed" / f"2026-01-03T00-00-00-000000_{BROKEN}.jsonl"

L1, L2, L3, L4 = (f"{TAU}.tau.{n}" for n in range(1, 5))


TAU_SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    id         TEXT NOT NULL,
    type       TEXT NOT NULL,
    payload    TEXT NOT NULL,
    UNIQUE (session_id, id)
);
CREATE INDEX IF NOT EXISTS entries_session_seq ON entries (session_id, seq);
CREATE INDEX IF NOT EXISTS entries_session_type ON entries (session_id, type);
"""


# --- helpers --------------------------------------------------------------------------


def lines(path: Path) -> list[str]:
    """The file's lines, verbatim."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line]


def entries(path: Path) -> dict[str, dict[str, Any]]:
    """The file's entries by id (the header left out)."""
    return {entry["id"]: entry for entry in map(json.loads, lines(path)[1:])}


def rows_by_entry(store: Store, session_id: str) -> dict[str, list[Any]]:
    """Stored messages grouped by the id of the entry they came from (read from their source)."""
    rows: dict[str, list[Any]] = {}
    for row in store.messages.records(session_id):
        rows.setdefault(json.loads(row.source)["id"], []).append(row)
    return rows


def message_of(store: Store, session_id: str, entry_id: str) -> Any:
    (row,) = rows_by_entry(store, session_id)[entry_id]
    return row.message


def text_of(message: Any) -> str:
    return "".join(block.text for block in message.content if isinstance(block, TextContent))


def shape(store: Store, loop_id: str) -> list[tuple[str, int | None]]:
    """``(role or extension kind, turn index)`` of each message of a loop, in order."""
    return [
        (row.message.kind if isinstance(row.message, ExtensionMessage) else str(row.message.role), row.turn_index)
        for row in store.messages.records(loop_id=loop_id)
    ]


def expected_usage(path: Path) -> tuple[dict[str, int], float]:
    """Token totals and reported dollars, read straight from a Tau file (formats.md §3, §9)."""
    totals = dict.fromkeys(TOKEN_FIELDS, 0)
    dollars = 0.0
    for entry in entries(path).values():
        message = entry.get("message") or {}
        usage = message.get("usage") if message.get("role") == "assistant" else entry.get("usage")
        if not usage:
            continue
        cache_read = usage.get("cache_read_tokens", 0)
        fresh = usage["input_tokens"] - (cache_read if usage.get("input_tokens_include_cache_read") else 0)
        parts = {
            "input": fresh,
            "output": usage["output_tokens"],
            "cache_read": cache_read,
            "cache_write": usage.get("cache_write_tokens", 0),
        }
        for name, value in parts.items():
            totals[name] += value
        totals["total_tokens"] += sum(parts.values())
        dollars += usage["cost"]["total"]
    return totals, dollars


def build_sessions_db(path: Path, files: Iterable[Path]) -> Path:
    """A Tau ``sessions.db`` holding the sessions of ``files``, rows interleaved as concurrent sessions write them."""
    sessions = []
    for file in files:
        file_lines = lines(file)
        session_id = json.loads(file_lines[0])["id"]
        sessions.append([(session_id, line) for line in file_lines])
    with sqlite3.connect(path) as connection:
        connection.executescript(TAU_SCHEMA)
        for index in range(max(map(len, sessions))):
            for rows in sessions:
                if index < len(rows):
                    session_id, payload = rows[index]
                    value = json.loads(payload)
                    connection.execute(
                        "INSERT INTO entries (session_id, id, type, payload) VALUES (?, ?, ?, ?)",
                        (session_id, value["id"], value["type"], payload),
                    )
    connection.close()
    return path


def comparable(store: Store, session_id: str) -> dict[str, Any]:
    """A session's stored content with message ids replaced by positions (ids depend on import order)."""
    records = list(store.messages.records(session_id))
    position = {row.message_id: index for index, row in enumerate(records)}
    session = store.sessions.get(session_id)
    return {
        "session": (session.title, session.metadata, session.created_at, session.updated_at),
        "loops": [
            (
                loop.loop_id,
                loop.parent_loop_id,
                loop.continuation_kind,
                position.get(loop.fork_after),
                position.get(loop.keep_from),
                loop.config,
                loop.started_at,
            )
            for loop in store.loops.list(session_id)
        ],
        "messages": [
            (row.loop_id, row.turn_index, row.seq, row.message.model_dump(mode="json"), row.source) for row in records
        ],
        "usage": store.usage.session(session_id),
    }


def tau_file(tmp_path: Path, *records: dict[str, Any], name: str = "session.jsonl") -> Path:
    """A small Tau session file: a header, then ``records`` chained one after another."""
    header = {
        "type": "session",
        "version": 3,
        "id": "0198ffff-0000-7000-8000-000000000001",
        "timestamp": 1767225600.0,
        "cwd": "/tmp",
    }
    out = [json.dumps(header)]
    parent = None
    for number, record in enumerate(records, start=1):
        entry = {
            "id": f"e{number:07d}",
            "timestamp": 1767225600.0 + number,
            **({"parent_id": parent} if parent else {}),
            **record,
        }
        parent = entry["id"]
        out.append(json.dumps(entry, ensure_ascii=False))
    path = tmp_path / name
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def user_entry(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "message": {
            "role": "user",
            "contents": [{"type": "text", "content": text}],
            "id": "u",
            "timestamp": 1767225600.5,
        },
    }


def assistant_entry(text: str, stop: str = "stop", **usage: Any) -> dict[str, Any]:
    return {
        "type": "message",
        "message": {
            "role": "assistant",
            "contents": [{"type": "text", "content": text}],
            "id": "a",
            "timestamp": 1767225601.0,
            "usage": {"input_tokens": 10, "output_tokens": 2, **usage},
            "stop_reason": stop,
            "error": "",
        },
    }


@pytest.fixture
def tau(store: Store) -> Store:
    """A store holding the main Tau session."""
    assert store.import_("tau", TAU_FILE).ok
    return store


# --- the Tau session -------------------------------------------------------------------


def test_report_counts_what_became_what(store: Store) -> None:
    report = store.import_("tau", TAU_FILE)

    assert report.ok
    assert report.files == 1
    assert report.records == 28  # every line, the header included
    assert report.messages == 27  # session_info became session data; the two-result tool message two rows
    assert report.loops == 4
    assert dict(report.by_role) == {"user": 4, "assistant": 8, "toolResult": 5, "extension": 10}
    assert dict(report.by_kind) == {
        "model_change": 2,
        "thinking_level_change": 1,
        "label": 1,
        "compaction_summary": 1,
        "custom_message": 1,
        "custom": 1,
        "branch_summary": 1,
        "terminal_execution": 1,
        "leaf": 1,
    }
    assert report.sessions_written == [TAU]


def test_header_and_session_info_become_the_session(tau: Store) -> None:
    session = tau.sessions.get(TAU)

    assert session.title == "List and fix src/"
    assert session.created_at == datetime(2026, 1, 1, 0, 0, 0, 123456, tzinfo=timezone.utc)
    assert session.metadata is not None
    assert session.metadata["cwd"] == "/home/me/proj"
    assert session.metadata["version"] == 3
    assert session.metadata["session_info"] == [entries(TAU_FILE)["7c6b5a49"]]


def test_entry_tree_becomes_a_loop_tree(tau: Store) -> None:
    rows = rows_by_entry(tau, TAU)
    loops = {loop.loop_id: loop for loop in tau.loops.list(TAU)}

    assert [(loop.loop_id, loop.parent_loop_id, str(loop.continuation_kind)) for loop in loops.values()] == [
        (L1, None, "initial"),
        (L2, L1, "default"),  # a new prompt after a final answer
        (L3, L2, "compaction"),
        (L4, L1, "branch"),  # the branch summary goes back to the first answer
    ]
    assert loops[L3].fork_after == rows["e2f3a4b5"][0].message_id  # the compaction's parent (a label)
    assert loops[L3].keep_from == rows["e6f7a8b9"][0].message_id  # first_kept_entry_id
    assert loops[L4].fork_after == rows["d5e6f7a8"][0].message_id


def test_session_info_is_transparent_in_the_tree(tau: Store) -> None:
    # d5e6f7a8's parent is the session_info entry; it continues the tool call's loop and turn.
    assert shape(tau, L1) == [
        ("model_change", None),
        ("thinking_level_change", None),
        ("user", 0),
        ("assistant", 0),
        ("toolResult", 0),
        ("assistant", 1),
    ]


def test_turn_indexes(tau: Store) -> None:
    assert shape(tau, L2) == [
        ("user", 0),
        ("assistant", 0),
        ("toolResult", 0),
        ("toolResult", 0),
        ("assistant", 1),
        ("toolResult", 1),
        ("assistant", 2),
        ("label", None),
    ]
    assert shape(tau, L3) == [
        ("compaction_summary", None),
        ("model_change", None),
        ("user", 0),
        ("assistant", 0),
        ("toolResult", 0),
        ("assistant", 1),
        ("custom_message", None),
        ("custom", None),
    ]
    assert shape(tau, L4) == [
        ("branch_summary", None),
        ("user", 0),
        ("terminal_execution", 0),
        ("assistant", 0),
        ("leaf", None),
    ]
    assert [message.role for message in tau.messages.turn(L2, 1).messages] == ["assistant", "toolResult"]


def test_context_after_compaction_is_summary_then_kept_then_later(tau: Store) -> None:
    context = tau.messages.context(L3)

    summary = entries(TAU_FILE)["f3a4b5c6"]["summary"]
    assert isinstance(context[0], UserMessage) and summary in text_of(context[0])
    assert [text_of(m) for m in context if isinstance(m, UserMessage)][1:] == [
        "Here is the mockup. Does main.rs match the logo in docs/?",  # the first kept entry
        "Fix the build error.",
    ]
    assert [type(m).__name__ for m in context[1:]] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "AssistantMessage",
    ]
    assert all("List the files in src/" not in text_of(m) for m in context)  # compacted away


def test_context_of_the_branch_starts_from_the_shared_history(tau: Store) -> None:
    context = tau.messages.context(L4)

    assert [text_of(m) for m in context[:4] if not isinstance(m, ToolResultMessage)] == [
        "List the files in src/",
        "Let me look.",
        "src/ contains lib.rs and main.rs.",
    ]
    assert entries(TAU_FILE)["a0b1c2d3"]["summary"] in text_of(context[4])
    assert [text_of(m) for m in context[5:]] == [
        "Instead, write a README for src/.",
        "# src\n\n- `lib.rs`: the library\n- `main.rs`: the binary entry point",
    ]


def test_usage_totals_equal_what_the_file_says(tau: Store) -> None:
    expected, dollars = expected_usage(TAU_FILE)
    totals = tau.usage.session(TAU)

    assert token_counts(totals) == expected
    assert totals.reported_cost == pytest.approx(dollars)
    assert totals.requests == 10  # 8 model calls + the compaction and branch summaries


def test_input_that_includes_cache_reads_is_reduced_by_them(tau: Store) -> None:
    usage = message_of(tau, TAU, "c6d7e8f9").usage  # Gemini: input_tokens 9000 include 6000 cached

    assert (usage.input, usage.cache_read, usage.output, usage.total_tokens) == (3000, 6000, 350, 9350)
    assert usage.cost == pytest.approx(entries(TAU_FILE)["c6d7e8f9"]["message"]["usage"]["cost"]["total"])


def test_one_hour_cache_writes_are_part_of_cache_write(tau: Store) -> None:
    usage = message_of(tau, TAU, "d5e6f7a8").usage  # cache_write_tokens 2600, of which 600 at 1h

    assert (usage.input, usage.cache_read, usage.cache_write, usage.total_tokens) == (
        310,
        2048,
        2600,
        310 + 22 + 2048 + 2600,
    )


def test_summary_usage_counts_in_its_loop_priced_as_the_model_in_force(tau: Store) -> None:
    compaction = entries(TAU_FILE)["f3a4b5c6"]["usage"]
    gemini = [entries(TAU_FILE)[e]["message"]["usage"] for e in ("c6d7e8f9", "e8f9a0b1")]

    loop = tau.usage.loop(L3)
    by_model = {row.model: row for row in tau.usage.by_model(TAU, loop_id=L3)}

    assert loop.output == compaction["output_tokens"] + sum(u["output_tokens"] for u in gemini)
    assert loop.requests == 3
    assert by_model["claude-sonnet-4-5"].input == compaction["input_tokens"]
    assert by_model["gemini-3-pro-preview"].provider == "google"


def test_assistant_model_is_the_last_model_change_on_its_path(tau: Store) -> None:
    # The Gemini model_change comes earlier in the file than the branch, but not on its path.
    branch = message_of(tau, TAU, "d3e4f5a6")
    after_change = message_of(tau, TAU, "e8f9a0b1")

    assert (branch.model, branch.provider) == ("claude-sonnet-4-5", "anthropic")
    assert (after_change.model, after_change.provider) == ("gemini-3-pro-preview", "google")
    assert tau.loops.get(L2).config == {
        "model": "claude-sonnet-4-5",
        "provider": "anthropic",
        "thinking_level": "medium",
    }


def test_signatures_and_arguments_are_byte_exact(tau: Store) -> None:
    raw = entries(TAU_FILE)["b2c3d4e5"]["message"]["contents"]
    message = message_of(tau, TAU, "b2c3d4e5")
    thinking, text, call = message.content
    dumped = json.dumps(message.model_dump(mode="json"))

    assert isinstance(thinking, ThinkingContent) and thinking.thinking == raw[0]["content"]
    assert thinking.signature == raw[0]["signature"]
    assert json.dumps(raw[0]["signature"]) in dumped
    assert isinstance(call, ToolCallContent)
    assert (call.id, call.name, call.arguments) == ("toolu_01A", "bash", {"command": "ls src/"})
    assert json.dumps(call.arguments, separators=(",", ":")) == json.dumps(raw[2]["args"], separators=(",", ":"))
    assert message.model_dump(mode="json")["content"][2]["kind"] == "execute"  # Tau's tool kind, kept


def test_an_empty_signature_means_none(tau: Store) -> None:
    thinking = message_of(tau, TAU, "c6d7e8f9").content[0]

    assert isinstance(thinking, ThinkingContent)
    assert thinking.signature is None
    assert "signature" not in thinking.model_dump(mode="json")


def test_a_tool_message_with_two_results_becomes_two_tool_results(tau: Store) -> None:
    first, second = (row.message for row in rows_by_entry(tau, TAU)["a8b9c0d1"])

    assert isinstance(first, ToolResultMessage) and isinstance(second, ToolResultMessage)
    assert (first.tool_call_id, first.tool_name, first.is_error) == ("toolu_02A", "read", False)
    assert text_of(first) == 'fn main() {\n    println!("{}", x);\n}\n'
    assert (second.tool_call_id, text_of(second)) == ("toolu_02B", "Read image docs/logo.gif (1x1)")
    image = second.content[1]
    assert isinstance(image, ImageContent) and image.mime_type == "image/gif"
    assert second.details == {"path": "docs/logo.gif", "bytes": 43}  # Tau's metadata: never sent to the model


def test_a_failed_tool_keeps_its_error(tau: Store) -> None:
    result = message_of(tau, TAU, "c0d1e2f3")

    assert result.is_error is True
    assert result.details == {"exit_code": 101}
    assert text_of(result).startswith("error[E0425]")


def test_user_images_detect_their_mime_type(tau: Store) -> None:
    message = message_of(tau, TAU, "e6f7a8b9")
    image = message.content[1]

    assert isinstance(image, ImageContent)
    assert image.mime_type == "image/png"
    assert image.data == entries(TAU_FILE)["e6f7a8b9"]["message"]["contents"][1]["images"][0]
    assert message.timestamp == 1767225659980  # float seconds -> ms


def test_other_entries_are_extension_messages_holding_the_entry(tau: Store) -> None:
    raw = entries(TAU_FILE)

    for entry_id, kind in [
        ("e2f3a4b5", "label"),
        ("9e8d7c6b", "model_change"),
        ("f9a0b1c2", "custom_message"),
        ("0a1b2c3d", "custom"),
        ("e4f5a6b7", "leaf"),
        ("8d7c6b5a", "thinking_level_change"),
    ]:
        message = message_of(tau, TAU, entry_id)
        assert isinstance(message, ExtensionMessage)
        assert (message.kind, message.data) == (kind, raw[entry_id])
    terminal = message_of(tau, TAU, "c2d3e4f5")
    assert (terminal.kind, terminal.data) == ("terminal_execution", raw["c2d3e4f5"]["message"])


def test_every_row_keeps_its_source_line_verbatim(tau: Store) -> None:
    source_lines = lines(TAU_FILE)
    stored = list(tau.messages.records(TAU))

    assert all(row.source in source_lines for row in stored)
    # Every line but the header and the session_info entry became at least one row.
    assert {row.source for row in stored} == set(source_lines) - {source_lines[0], source_lines[6]}


def test_reimport_changes_nothing(tau: Store) -> None:
    before = comparable(tau, TAU)

    report = tau.import_("tau", TAU_FILE)

    assert report.ok and report.sessions_unchanged == [TAU] and report.sessions_written == []
    assert comparable(tau, TAU) == before


def test_dry_run_reports_and_writes_nothing(store: Store) -> None:
    report = store.import_("tau", SESSIONS, dry_run=True)

    assert report.ok and report.dry_run
    assert sorted(report.sessions_written) == sorted([TAU, FORK, OPERATOR])
    assert store.sessions.list() == []


def test_directory_import_reads_every_session_file_and_ignores_locks(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "--home-me-proj--"
    folder.mkdir()
    for file in (TAU_FILE, FORK_FILE, OPERATOR_FILE):
        (folder / file.name).write_bytes(file.read_bytes())
        (folder / f"{file.name}.lock").write_text("", encoding="utf-8")

    report = store.import_("tau", folder)

    assert report.ok and report.files == 3
    assert {session.session_id for session in store.sessions.list()} == {TAU, FORK, OPERATOR}


# --- fork_from files: explicit nulls -------------------------------------------------------


def test_fork_file_with_explicit_nulls(store: Store) -> None:
    report = store.import_("tau", FORK_FILE)
    session = store.sessions.get(FORK)
    loops = store.loops.list(FORK)

    assert report.ok and report.messages == 9
    assert session.title is None  # session_info with "name": null
    assert session.metadata is not None and session.metadata["parent_session"].endswith(f"{TAU}.jsonl")
    assert [(loop.parent_loop_id, str(loop.continuation_kind)) for loop in loops] == [
        (None, "initial"),
        (f"{FORK}.tau.1", "compaction"),
    ]
    result = message_of(store, FORK, "44dd55ee")
    assert "terminate_message" not in result.model_dump(mode="json")  # null means unset
    assert message_of(store, FORK, "33cc44dd").content[1].model_dump(mode="json").get("kind") is None
    assert token_counts(store.usage.session(FORK)) == expected_usage(FORK_FILE)[0]  # "usage": null counts nothing


def test_assistant_error_keeps_its_message_and_kind(store: Store) -> None:
    store.import_("tau", FORK_FILE)
    message = message_of(store, FORK, "aabbccdd")

    assert isinstance(message, AssistantMessage)
    assert str(message.stop_reason) == "error"
    assert message.error_message == "overloaded_error: Overloaded"
    assert message.model_dump(mode="json")["error_kind"] == "overloaded"


# --- Operator-Use era -----------------------------------------------------------------------


def test_operator_use_session_header_file(store: Store) -> None:
    report = store.import_("tau", OPERATOR_FILE)

    assert report.ok
    assert dict(report.by_role) == {"extension": 2, "system": 1, "user": 2, "assistant": 3, "toolResult": 1}
    assert isinstance(message_of(store, OPERATOR, "1a2b3c4d"), SystemMessage)
    assert message_of(store, OPERATOR, "0f1e2d3c").kind == "channel"
    assert token_counts(store.usage.session(OPERATOR)) == expected_usage(OPERATOR_FILE)[0]


def test_operator_use_messages_without_tool_name_or_model(store: Store) -> None:
    store.import_("tau", OPERATOR_FILE)

    result = message_of(store, OPERATOR, "4d5e6f70")
    assistant = message_of(store, OPERATOR, "3c4d5e6f")
    aborted = message_of(store, OPERATOR, "8192a3b4")
    assert result.tool_name == "screenshot"  # the name of the call it answers
    assert (assistant.model, assistant.provider) == ("unknown", "unknown")  # no model_change in the file
    assert str(aborted.stop_reason) == "aborted"


def test_operator_use_audio_and_image_urls(store: Store) -> None:
    store.import_("tau", OPERATOR_FILE)
    _, image, audio = message_of(store, OPERATOR, "2b3c4d5e").content

    assert isinstance(image, ImageContent)
    assert (image.data, image.mime_type) == ("", "image/png")
    assert image.model_dump(mode="json")["url"] == "https://example.com/shots/screen-01.png"
    assert isinstance(audio, AudioContent) and audio.mime_type == "audio/ogg"


# --- bad input ----------------------------------------------------------------------------


def test_malformed_records_fail_their_session_with_places(store: Store) -> None:
    report = store.import_("tau", BROKEN_FILE)

    assert not report.ok
    assert report.sessions_failed == [BROKEN]
    assert [(error.place, error.reason.split(":")[0]) for error in report.errors] == [
        (f"{BROKEN_FILE}:4", "unknown message role 'narrator'"),
        (f"{BROKEN_FILE}:6", "unknown entry type 'bookmark'"),
        (f"{BROKEN_FILE}:8", "invalid JSON"),
    ]
    assert store.sessions.list() == []


def test_skip_invalid_skips_only_the_bad_records(store: Store) -> None:
    report = store.import_("tau", BROKEN_FILE, skip_invalid=True)

    assert report.ok and report.sessions_written == [BROKEN]
    assert [error.place for error in report.skipped] == [f"{BROKEN_FILE}:{n}" for n in (4, 6, 8)]
    loops = store.loops.list(BROKEN)
    # The children of skipped entries hang from their parents: the conversation stays whole.
    assert [text_of(m) for loop in loops for m in store.messages.loop(loop.loop_id)] == [
        "Hello",
        "Hi! How can I help?",
        "Count to three.",
        "1, 2, 3.",
    ]
    assert [str(loop.continuation_kind) for loop in loops] == ["initial", "default"]


def test_other_files_are_written_when_one_fails(store: Store) -> None:
    report = store.import_("tau", BROKEN_FILE, TAU_FILE)

    assert report.sessions_failed == [BROKEN]
    assert report.sessions_written == [TAU]


def test_a_file_without_a_header_is_reported_at_line_one(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "headless.jsonl"
    path.write_text("\n".join(lines(TAU_FILE)[1:]) + "\n", encoding="utf-8")

    report = store.import_("tau", path)

    assert [error.place for error in report.errors] == [f"{path}:1"]
    assert report.sessions_failed == [str(path)]


@pytest.mark.parametrize(
    ("stop", "expected"),
    [
        ("stop", "stop"),
        ("length", "length"),
        ("tool_calls", "toolUse"),
        ("content_filter", "guardRail"),
        ("abort", "aborted"),
        ("error", "error"),
    ],
)
def test_stop_reasons(store: Store, tmp_path: Path, stop: str, expected: str) -> None:
    path = tau_file(tmp_path, user_entry("hi"), assistant_entry("hello", stop))

    store.import_("tau", path)

    (message,) = [
        row.message
        for row in store.messages.records("0198ffff-0000-7000-8000-000000000001")
        if isinstance(row.message, AssistantMessage)
    ]
    assert str(message.stop_reason) == expected


@pytest.mark.parametrize(
    ("entry", "reason"),
    [
        (
            assistant_entry("hello", "paused"),
            "unknown stop_reason 'paused'; one of: stop, length, tool_calls, content_filter, abort, error",
        ),
        (
            assistant_entry("hello", input_tokens_include_cache_read=True, cache_read_tokens=50),
            "usage.input_tokens (10) is said to include cache_read_tokens (50) but is smaller",
        ),
        (assistant_entry("hello", output_tokens=-1), "usage.output_tokens is -1, not a token count"),
        (
            {"type": "message", "message": {"role": "tool", "contents": [{"type": "text", "content": "x"}]}},
            "a tool message holds tool_result contents only, and at least one",
        ),
        (
            {"type": "message", "message": {"role": "user", "contents": [{"type": "hologram"}]}},
            "unknown content type 'hologram' in a user message",
        ),
    ],
)
def test_malformed_messages_are_reported(store: Store, tmp_path: Path, entry: dict[str, Any], reason: str) -> None:
    path = tau_file(tmp_path, user_entry("hi"), entry)

    report = store.import_("tau", path)

    assert [(error.place, error.reason) for error in report.errors] == [(f"{path}:3", reason)]


def test_unicode_line_separators_inside_strings_stay_in_their_line(store: Store, tmp_path: Path) -> None:
    text = "first\u2028second\u2029third\x85end"
    path = tau_file(tmp_path, user_entry(text), assistant_entry("ok"))

    report = store.import_("tau", path)

    assert report.ok and report.records == 3
    messages = [row.message for row in store.messages.records("0198ffff-0000-7000-8000-000000000001")]
    assert text_of(messages[0]) == text


# --- Tau's SQLite backend ----------------------------------------------------------------------


def test_sqlite_sessions_equal_the_jsonl_sessions(tmp_path: Path) -> None:
    files = (OPERATOR_FILE, TAU_FILE, FORK_FILE)
    database = build_sessions_db(tmp_path / "sessions.db", files)

    with Store(tmp_path / "from-jsonl.db") as from_jsonl, Store(tmp_path / "from-sqlite.db") as from_sqlite:
        jsonl_report = from_jsonl.import_("tau", *files)
        sqlite_report = from_sqlite.import_("tau", database)

        assert sqlite_report.ok and sqlite_report.files == 1
        assert sqlite_report.sessions_written == [OPERATOR, TAU, FORK]  # one bundle per session_id
        assert (sqlite_report.records, sqlite_report.messages, sqlite_report.loops) == (
            jsonl_report.records,
            jsonl_report.messages,
            jsonl_report.loops,
        )
        for session_id in (TAU, FORK, OPERATOR):
            assert comparable(from_sqlite, session_id) == comparable(from_jsonl, session_id)


def test_sqlite_after_jsonl_is_the_same_import(tau: Store, tmp_path: Path) -> None:
    database = build_sessions_db(tmp_path / "sessions.db", [TAU_FILE])

    report = tau.import_("tau", database)

    assert report.sessions_unchanged == [TAU]


def test_sqlite_bad_row_is_reported_by_seq(store: Store, tmp_path: Path) -> None:
    database = build_sessions_db(tmp_path / "sessions.db", [TAU_FILE, FORK_FILE])
    with sqlite3.connect(database) as connection:
        (seq,) = connection.execute(
            "SELECT seq FROM entries WHERE session_id = ? AND id = 'b2c3d4e5'", (TAU,)
        ).fetchone()
        connection.execute("UPDATE entries SET payload = substr(payload, 1, 80) WHERE seq = ?", (seq,))
    connection.close()

    report = store.import_("tau", database)

    assert [error.place for error in report.errors] == [f"{database}: entries seq={seq}"]
    assert report.sessions_failed == [TAU]
    assert report.sessions_written == [FORK]


def test_sqlite_payload_that_is_not_utf8_is_reported_by_seq(store: Store, tmp_path: Path) -> None:
    # A damaged TEXT value (invalid UTF-8) is that row's error, not a crash of the whole import.
    database = build_sessions_db(tmp_path / "sessions.db", [TAU_FILE, FORK_FILE])
    with sqlite3.connect(database) as connection:
        (seq,) = connection.execute(
            "SELECT seq FROM entries WHERE session_id = ? AND id = 'b2c3d4e5'", (TAU,)
        ).fetchone()
        connection.execute("UPDATE entries SET payload = CAST(x'7b80ff7d' AS TEXT) WHERE seq = ?", (seq,))
    connection.close()

    report = store.import_("tau", database)

    assert (report.errors[0].place, report.errors[0].reason) == (
        f"{database}: entries seq={seq}",
        "payload is not UTF-8",
    )
    assert report.sessions_failed == [TAU]
    assert report.sessions_written == [FORK]


def test_skip_invalid_keeps_the_children_of_a_broken_line(store: Store, tmp_path: Path) -> None:
    # The line is cut inside the message, but its id and parent_id (written first) are readable.
    broken = tmp_path / TAU_FILE.name
    text = TAU_FILE.read_text(encoding="utf-8").split("\n")
    text[4] = text[4][:80]
    broken.write_text("\n".join(text), encoding="utf-8")

    report = store.import_("tau", broken, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{broken}:5"]
    assert report.messages == 26
    assert shape(store, L1) == [
        ("model_change", None),
        ("thinking_level_change", None),
        ("user", 0),
        ("toolResult", 0),
        ("assistant", 0),
    ]
    assert message_of(store, TAU, "d5e6f7a8").model == "claude-sonnet-4-5"  # the model_change path runs through it


def test_sqlite_session_without_its_header_is_reported_at_its_first_row(store: Store, tmp_path: Path) -> None:
    database = build_sessions_db(tmp_path / "sessions.db", [FORK_FILE])
    with sqlite3.connect(database) as connection:
        connection.execute("DELETE FROM entries WHERE type = 'session'")
        (first,) = connection.execute("SELECT MIN(seq) FROM entries").fetchone()
    connection.close()

    failed = store.import_("tau", database)
    kept = store.import_("tau", database, skip_invalid=True)

    assert [(e.place, e.reason) for e in failed.errors] == [
        (f"{database}: entries seq={first}", "the session does not start with a session header")
    ]
    assert kept.sessions_written == [FORK] and kept.messages == 9


def test_a_sqlite_file_that_is_not_a_tau_database(store: Store, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with Store(other):
        pass

    report = store.import_("tau", other)

    assert [error.place for error in report.errors] == [str(other)]
    assert "not a Tau sessions database" in report.errors[0].reason


def test_directory_walk_finds_tau_databases_only(store: Store, tmp_path: Path) -> None:
    build_sessions_db(tmp_path / "sessions.db", [FORK_FILE])
    with Store(tmp_path / "turnstore.db"):  # a SQLite file without an entries table
        pass
    (tmp_path / "notes.db").write_text("not a database", encoding="utf-8")

    report = store.import_("tau", tmp_path)

    assert report.ok and report.files == 1
    assert report.sessions_written == [FORK]


# --- the command line --------------------------------------------------------------------------


def test_cli_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.db"

    assert main(["--db", str(db), "--json", "import", "tau", str(TAU_FILE)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["records"], report["messages"], report["loops"]) == (28, 27, 4)
    assert report["sessions"]["written"] == [TAU]

    assert main(["--db", str(db), "import", "tau", str(BROKEN_FILE)]) == 1
    output = capsys.readouterr()
    assert f"{BROKEN_FILE}:4: unknown message role 'narrator'" in output.out + output.err
    with Store(db) as store:
        assert [session.session_id for session in store.sessions.list()] == [TAU]
