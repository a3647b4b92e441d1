"""The appam importer: appam's SQLite ``session_history`` (and web ``sessions``) tables (docs/design.md §6, §7).

The source database is built by ``fixtures/appam/make_fixture.py`` with
appam's exact schema (``docs/importers/appam.md``) and message elements as
serde writes them (§4.4).
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import sqlite3
from contextlib import closing
from datetime import datetime, timezone
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from helpers import snapshot, stored, tokens

from turnstore import ImportFailed, Store
from turnstore.cli import main
from turnstore.importers.appam import infer_provider


def _load_fixture_module() -> ModuleType:
    path = Path(__file__).parent / "fixtures" / "appam" / "make_fixture.py"
    spec = importlib.util.spec_from_file_location("appam_make_fixture", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fx = _load_fixture_module()
RICH, LEGACY, OLD, BAD_JSON, BAD_ROLE = fx.RICH, fx.LEGACY, fx.OLD, fx.BAD_JSON, fx.BAD_ROLE


@pytest.fixture
def source(tmp_path: Path) -> Path:
    """appam's sessions.db holding the fixture rows."""
    folder = tmp_path / "appam"
    folder.mkdir()
    return fx.build(folder / "sessions.db")


def elements(session_id: str) -> list[Any]:
    row = next(row for row in fx.ROWS if row["id"] == session_id)
    return json.loads(row["messages"])


def placed(store: Store, session_id: str) -> list[tuple[int | None, str]]:
    return [(m.turn_index, str(m.message.role)) for m in store.messages.records(session_id)]


def exported(store: Store, session_id: str) -> list[dict[str, Any]]:
    """The session's lossless ``turnstore`` export, one dict per line (session, loops, messages)."""
    return [json.loads(line) for line in store.export(session_id, "turnstore").splitlines()]


def place(path: Path, session_id: str, suffix: str = "") -> str:
    return f"{path}: session_history id={session_id}{suffix}"


# --- the report -----------------------------------------------------------------------


def test_report_counts_what_became_what(store: Store, source: Path) -> None:
    report = store.import_("appam", source)

    assert report.files == 1
    assert report.records == 5 + 8 + 7 + 3 + 4  # each row, and each element of the good arrays
    assert (report.messages, report.loops) == (18, 3)
    assert dict(report.by_role) == {"system": 3, "user": 4, "assistant": 7, "toolResult": 4}
    assert report.sessions_written == [RICH, LEGACY, OLD]
    assert report.sessions_failed == [BAD_JSON, BAD_ROLE]
    assert not report.ok


def test_malformed_rows_are_not_written_and_name_their_place(store: Store, source: Path) -> None:
    report = store.import_("appam", source)

    assert [(error.place, error.reason.split(":")[0]) for error in report.errors] == [
        (place(source, BAD_JSON), "messages"),
        (
            place(source, BAD_ROLE, " message 3"),
            "unknown role 'critic'; appam roles are system, user, assistant, developer, tool",
        ),
    ]
    assert not store.sessions.exists(BAD_JSON) and not store.sessions.exists(BAD_ROLE)
    assert store.sessions.count() == 3


def test_skip_invalid_skips_just_the_record(store: Store, source: Path) -> None:
    report = store.import_("appam", source, skip_invalid=True)

    assert report.ok
    assert [entry.place for entry in report.skipped] == [place(source, BAD_JSON), place(source, BAD_ROLE, " message 3")]
    assert placed(store, BAD_ROLE) == [(0, "user"), (0, "assistant"), (1, "user")]
    assert [json.loads(m.source) for m in store.messages.records(BAD_ROLE)] == [
        elements(BAD_ROLE)[i] for i in (0, 1, 3)
    ]
    # the unreadable messages column is the skipped record: the session and its loop remain
    assert placed(store, BAD_JSON) == []
    assert [loop.loop_id for loop in store.loops.list(BAD_JSON)] == [f"{BAD_JSON}.appam.1"]


# --- sessions, loops, turns ---------------------------------------------------------------


def test_session_keeps_the_row(store: Store, source: Path) -> None:
    store.import_("appam", source)

    session = store.sessions.get(LEGACY)
    assert session.agent_id == "weather"
    assert session.created_at == datetime(2026, 1, 2, 9, 0, tzinfo=timezone.utc)
    assert session.updated_at == datetime(2026, 1, 2, 9, 0, 3, tzinfo=timezone.utc)
    assert session.metadata == {
        "agent_name": "weather",
        "model": "gemini-3-pro-preview",
        "ended_at": None,
        "turn_count": 2,
        "tool_call_count": 2,
        "metadata": {"channel": "cli"},
    }
    rich = store.sessions.get(RICH)
    assert rich.created_at == datetime(2026, 1, 1, 0, 0, 0, 101202, tzinfo=timezone.utc)  # nanoseconds cut to µs
    row = next(row for row in fx.ROWS if row["id"] == RICH)
    header, loop = exported(store, RICH)[:2]
    assert json.loads(header["source"]) == {key: value for key, value in row.items() if key != "messages"}
    assert loop["source"] == row["usage"]  # the usage column, verbatim, is the loop's source


def test_one_loop_per_session_with_derived_turns(store: Store, source: Path) -> None:
    store.import_("appam", source)

    (rich,) = store.loops.list(RICH)
    assert rich.loop_id == f"{RICH}.appam.1"
    assert rich.config == {"model": "claude-sonnet-4-5-20250929", "provider": "anthropic"}
    assert (rich.status.value, rich.continuation_kind.value, rich.parent_loop_id) == ("completed", "initial", None)
    assert rich.ended_at == datetime(2026, 1, 1, 0, 1, 3, 500000, tzinfo=timezone.utc)
    # the system prompt is outside any turn; the second prompt opens the next turn of the same loop
    assert placed(store, RICH) == [
        (None, "system"),
        (0, "user"),
        (0, "assistant"),
        (0, "toolResult"),
        (0, "toolResult"),
        (1, "assistant"),
        (2, "user"),
        (2, "assistant"),
    ]
    (legacy,) = store.loops.list(LEGACY)
    assert legacy.status.value == "running"  # no ended_at
    # appam split one model call into a text message and a tool-call message: one turn
    assert placed(store, LEGACY) == [
        (None, "system"),
        (0, "user"),
        (0, "assistant"),
        (0, "assistant"),
        (0, "toolResult"),
        (0, "toolResult"),
        (1, "assistant"),
    ]


# --- usage ----------------------------------------------------------------------------------


def test_session_totals_equal_the_usage_column(store: Store, source: Path) -> None:
    store.import_("appam", source)

    rich = store.usage.session(RICH)
    # input/output fold in the compaction passes; total is the sum of the four counts
    assert tokens(rich) == (1200 + 50, 85 + 7, 0, 1024, 300, 1250 + 92 + 1024 + 300)
    assert rich.reported_cost == 0.005182
    assert store.loops.get(f"{RICH}.appam.1").reported_usage.cost == 0.005182

    legacy = store.usage.session(LEGACY)
    assert tokens(legacy) == (900, 140, 40, 128, 0, 900 + 140 + 128)
    # gemini-3-pro-preview has no price in the table: the cost is appam's own
    assert legacy.cost == legacy.reported_cost == 0.00231
    # a row from before the usage column: nothing is known, nothing is invented
    old = store.usage.session(OLD)
    assert (tokens(old), old.cost, old.requests) == ((0, 0, 0, 0, 0, 0), None, 0)
    assert store.loops.get(f"{OLD}.appam.1").reported_usage is None


def test_assistant_rows_carry_no_usage(store: Store, source: Path) -> None:
    store.import_("appam", source)

    for session_id in (RICH, LEGACY):
        assistants = [
            line for line in exported(store, session_id) if line.get("message", {}).get("role") == "assistant"
        ]
        assert assistants and all(line.get("usage_known") is False for line in assistants)
    assert all(store.usage.turn(f"{RICH}.appam.1", turn).requests == 0 for turn in range(3))
    assert store.usage.loop(f"{RICH}.appam.1").total_tokens == 2666


# --- messages -------------------------------------------------------------------------------


def test_each_row_source_is_its_element(store: Store, source: Path) -> None:
    store.import_("appam", source)

    for session_id in (RICH, LEGACY, OLD):
        rows = list(store.messages.records(session_id))
        assert [json.loads(m.source) for m in rows] == elements(session_id)
        assert [m.source for m in rows] == [fx.dumps(element) for element in elements(session_id)]


def test_thinking_signature_is_byte_exact(store: Store, source: Path) -> None:
    store.import_("appam", source)
    raw = elements(RICH)[2]["raw_content_blocks"][0]["signature"]

    thinking = stored(store, RICH)[2].content[0]
    assert raw == fx.SIGNATURE
    assert thinking.signature == raw
    assert thinking.signature.encode("utf-8") == fx.SIGNATURE.encode("utf-8")
    assert store.messages.context(f"{RICH}.appam.1")[2].content[0].signature == raw


def test_raw_blocks_take_precedence(store: Store, source: Path) -> None:
    store.import_("appam", source)

    call_message = stored(store, RICH)[2].model_dump(mode="json")
    assert [block["type"] for block in call_message["content"]] == ["thinking", "text", "toolCall", "toolCall"]
    assert call_message["content"][2] == {
        "type": "toolCall",
        "id": "toolu_01A",
        "name": "bash",
        "arguments": {"command": "ls src/"},
    }
    assert call_message["stopReason"] == "toolUse"
    assert (call_message["id"], call_message["status"]) == ("msg_4f0c2b9e7d1a4e5b8c3f6a2d9e1b7c40", "completed")
    assert (call_message["model"], call_message["provider"]) == ("claude-sonnet-4-5-20250929", "anthropic")
    answer = stored(store, RICH)[7].model_dump(mode="json")
    assert answer["content"] == [{"type": "text", "text": "A single transparent pixel."}]  # content not doubled
    assert answer["provider_response_id"] == "resp_0123456789"
    assert answer["timestamp"] == 1767225663000


def test_image_prompt(store: Store, source: Path) -> None:
    store.import_("appam", source)

    prompt = stored(store, RICH)[6].model_dump(mode="json")
    assert prompt["content"] == [
        {"type": "text", "text": "What is in this picture?"},
        {"type": "image", "data": fx.PNG, "mimeType": "image/png", "detail": "high"},
    ]


def test_flat_fields_without_raw_blocks(store: Store, source: Path) -> None:
    store.import_("appam", source)

    text_half, call_half = (m.model_dump(mode="json") for m in stored(store, LEGACY)[2:4])
    assert text_half["content"] == [
        {"type": "thinking", "thinking": "The user wants Paris weather; call get_weather."},
        {"type": "text", "text": "I'll check the weather."},
    ]
    weather, lookup = call_half["content"][1:]
    assert weather["arguments"] == {"city": "Paris", "units": "metric", "days": 12345678901234567890}
    assert lookup["arguments"] == "not json {"  # not JSON: kept as the string it was
    assert call_half["stopReason"] == "toolUse"


def test_tool_results(store: Store, source: Path) -> None:
    store.import_("appam", source)

    ok, failed = (m.model_dump(mode="json") for m in stored(store, RICH)[3:5])
    assert (ok["toolCallId"], ok["toolName"], ok["isError"]) == ("toolu_01A", "bash", False)
    assert ok["content"] == [{"type": "text", "text": '{"output":"lib.rs\\nmain.rs\\n","exit_code":0}'}]
    assert (failed["toolName"], failed["isError"]) == ("read_file", True)
    assert failed["toolMetadata"] == elements(RICH)[4]["tool_metadata"]
    # no name and no tool_metadata: the name of the call it answers
    nameless = stored(store, LEGACY)[5]
    assert (nameless.tool_name, nameless.is_error) == ("lookup", False)


def test_export_to_phi_core_loads(store: Store, source: Path, tmp_path: Path) -> None:
    store.import_("appam", source)
    out = tmp_path / "rich.json"

    store.export(RICH, "phi-core", out)

    exported = json.loads(out.read_text(encoding="utf-8"))
    assert exported[0]["role"] == "extension" and exported[0]["kind"] == "system"
    assert [m["role"] for m in exported[1:]] == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
        "user",
        "assistant",
    ]


# --- idempotence, dry run -------------------------------------------------------------------


def test_reimport_changes_nothing(store: Store, source: Path) -> None:
    store.import_("appam", source)
    before = {session_id: snapshot(store, session_id) for session_id in (RICH, LEGACY, OLD)}

    again = store.import_("appam", source)

    assert again.sessions_written == []
    assert again.sessions_unchanged == [RICH, LEGACY, OLD]
    assert (again.messages, again.loops) == (0, 0)
    assert {session_id: snapshot(store, session_id) for session_id in (RICH, LEGACY, OLD)} == before


def test_a_changed_row_is_not_silently_overwritten(store: Store, source: Path) -> None:
    store.import_("appam", source)
    with sqlite3.connect(source) as connection:
        connection.execute("UPDATE session_history SET turn_count = 3 WHERE id = ?", (OLD,))
    connection.close()

    again = store.import_("appam", source)

    (conflict,) = [error for error in again.errors if error.place == place(source, OLD)]
    assert OLD in again.sessions_failed and "--replace" in conflict.reason
    assert store.import_("appam", source, replace=True).sessions_written == [OLD]
    assert store.sessions.get(OLD).metadata["turn_count"] == 3


def test_dry_run_writes_nothing(store: Store, source: Path) -> None:
    report = store.import_("appam", source, dry_run=True)

    assert report.dry_run
    assert report.sessions_written == [RICH, LEGACY, OLD]
    assert store.sessions.count() == 0
    assert store.import_("appam", source).sessions_written == [RICH, LEGACY, OLD]


def test_the_source_database_is_left_unchanged(store: Store, source: Path) -> None:
    before = hashlib.sha256(source.read_bytes()).hexdigest()

    store.import_("appam", source)

    assert hashlib.sha256(source.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in source.parent.iterdir()) == ["sessions.db"]


# --- paths ----------------------------------------------------------------------------------


def test_a_directory_is_walked_for_appam_databases(store: Store, source: Path, tmp_path: Path) -> None:
    (source.parent / "notes.txt").write_text("not a database", encoding="utf-8")
    (source.parent / "sessions.db-wal").write_bytes(b"\x37\x7f\x06\x82" + b"\0" * 28)
    with Store(source.parent / "other-store.db"):  # a turnstore database also has a `sessions` table
        pass

    report = store.import_("appam", tmp_path / "appam", skip_invalid=True)

    assert report.files == 1
    assert report.sessions_written == [RICH, LEGACY, OLD, BAD_JSON, BAD_ROLE]


def test_a_file_that_is_not_sqlite_is_an_error(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    path.write_text("[]", encoding="utf-8")

    report = store.import_("appam", path)

    assert report.sessions_failed == [str(path)]
    assert report.errors[0].place == str(path)


def test_a_database_without_appam_tables_is_an_error(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE sessions (session_id TEXT PRIMARY KEY, title TEXT)")
    connection.close()

    report = store.import_("appam", path)

    assert report.errors[0].place == str(path)
    assert "no appam session_history" in report.errors[0].reason


# --- the command line -------------------------------------------------------------------------


def run(capsys: pytest.CaptureFixture[str], *args: Any) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main([str(arg) for arg in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_import(capsys: pytest.CaptureFixture[str], source: Path, tmp_path: Path) -> None:
    target = tmp_path / "cli.db"

    code, out, _ = run(capsys, "--db", target, "import", "appam", source, "--json")
    skipping, _, _ = run(capsys, "--db", target, "import", "appam", source, "--skip-invalid")
    _, sessions, _ = run(capsys, "--db", target, "sessions", "--json")

    report = json.loads(out)
    assert code == 1 and skipping == 0
    assert report["sessions"]["written"] == [RICH, LEGACY, OLD]
    assert [error["place"] for error in report["errors"]] == [
        place(source, BAD_JSON),
        place(source, BAD_ROLE, " message 3"),
    ]
    counts = {row["session_id"]: (row["loops"], row["messages"]) for row in json.loads(sessions)}
    assert counts == {RICH: (1, 8), LEGACY: (1, 7), OLD: (1, 3), BAD_JSON: (1, 0), BAD_ROLE: (1, 3)}


# --- edges ----------------------------------------------------------------------------------


def row(session_id: str, messages: Any, **columns: Any) -> dict[str, Any]:
    return {
        "id": session_id,
        "agent_name": "edge",
        "model": "claude-opus-4-5",
        "messages": messages if isinstance(messages, str) else fx.dumps(messages),
        "started_at": "2026-02-01T00:00:00+00:00",
        "updated_at": "2026-02-01T00:00:00+00:00",
        **columns,
    }


@pytest.mark.parametrize(
    ("columns", "suffix", "reason"),
    [
        pytest.param({"messages": '{"role":"user"}'}, "", "messages is a JSON dict, not an array", id="not an array"),
        pytest.param({"usage": "{"}, " usage", "usage is not valid JSON", id="bad usage JSON"),
        pytest.param(
            {"usage": '{"total_input_tokens":-1}'}, " usage", "usage has invalid total_input_tokens", id="negative"
        ),
        pytest.param(
            {"usage": '{"total_input_tokens":9223372036854775807,"total_compaction_input_tokens":1}'},
            " usage",
            "usage counts are too large for a 64-bit column",
            id="overflow",
        ),
        pytest.param(
            {"messages": fx.dumps([{"role": "tool", "content": "x"}])},
            " message 1",
            "tool message without a tool_call_id",
            id="tool without call id",
        ),
        pytest.param(
            {"messages": fx.dumps([{"role": "assistant", "raw_content_blocks": [{"type": "video"}]}])},
            " message 1 block 1",
            "unknown content block type 'video'",
            id="unknown block",
        ),
        pytest.param(
            {"messages": fx.dumps([{"role": "user", "content": 3}])},
            " message 1",
            "content must be a string",
            id="content type",
        ),
    ],
)
def test_malformed_edges(store: Store, tmp_path: Path, columns: dict[str, Any], suffix: str, reason: str) -> None:
    path = fx.build(tmp_path / "edge.db", [row("edge", [{"role": "user", "content": "hi"}]) | columns])

    report = store.import_("appam", path)

    assert [(error.place, error.reason) for error in report.errors] == [(place(path, "edge", suffix), reason)]
    assert not store.sessions.exists("edge")


def test_block_kinds_without_a_canonical_form_are_kept(store: Store, tmp_path: Path) -> None:
    compaction = {"type": "compaction", "content": "Earlier: the user asked for a summary."}
    blocks = [
        compaction,
        {"type": "thinking", "thinking": "opaque", "redacted": True, "encrypted_content": "gAAAA", "id": "rs_1"},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/a.png"}},
        {
            "type": "document",
            "source": {"type": "base64_pdf", "media_type": "application/pdf", "data": "JVBERi0="},
            "title": "spec",
        },
        {"type": "document", "source": {"type": "url_pdf", "url": "https://example.com/b.pdf"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "plain é"}},
        {"type": "text", "text": "Done."},
    ]
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Done.", "raw_content_blocks": blocks, "status": "incomplete"},
    ]
    path = fx.build(tmp_path / "edge.db", [row("edge", messages)])

    report = store.import_("appam", path)

    assert report.ok
    answer = stored(store, "edge")[1].model_dump(mode="json")
    assert answer["appamBlocks"] == [compaction]
    assert answer["content"] == [
        {"type": "thinking", "thinking": "opaque", "redacted": True, "encrypted_content": "gAAAA", "id": "rs_1"},
        {"type": "image", "data": "", "mimeType": "", "url": "https://example.com/a.png"},
        {"type": "file", "data": "JVBERi0=", "mimeType": "application/pdf", "name": "spec"},
        {"type": "file", "url": "https://example.com/b.pdf", "mimeType": "application/pdf"},
        {"type": "file", "data": base64.b64encode("plain é".encode()).decode(), "mimeType": "text/plain"},
        {"type": "text", "text": "Done."},
    ]
    assert answer["stopReason"] == "length"


def test_failed_status_is_an_error_stop(store: Store, tmp_path: Path) -> None:
    messages = [
        {"role": "developer", "content": "Use tools."},
        {"role": "user"},
        {"role": "assistant", "status": "failed"},
    ]
    path = fx.build(tmp_path / "edge.db", [row("edge", messages)])

    store.import_("appam", path)

    system, prompt, answer = stored(store, "edge")
    assert (str(system.role), system.text()) == ("system", "Use tools.")
    assert prompt.content == [] and prompt.timestamp == 0
    assert answer.stop_reason.value == "error"


def test_rows_without_an_id_are_reported_after_the_others(store: Store, tmp_path: Path) -> None:
    path = fx.build(tmp_path / "edge.db", [row("first", []), row(None, []), row("last", [])])  # type: ignore[arg-type]

    report = store.import_("appam", path)

    assert report.sessions_written == ["first", "last"]
    assert [error.place for error in report.errors] == [f"{path}: session_history rowid=2"]


def test_web_server_sessions_table(store: Store, tmp_path: Path) -> None:
    web = {
        "id": "web-1",
        "agent_name": "chat",
        "model": "gpt-5",
        "messages": fx.dumps(fx.old_messages()),
        "created_at": "2026-03-01T10:00:00+00:00",
        "updated_at": "2026-03-01T10:05:00+00:00",
    }
    path = fx.build_web(tmp_path / "web.db", [web])

    report = store.import_("appam", path)

    assert report.sessions_written == ["web-1"]
    (loop,) = store.loops.list("web-1")
    assert loop.config == {"model": "gpt-5", "provider": "openai"} and loop.reported_usage is None
    assert store.sessions.get("web-1").metadata == {"agent_name": "chat", "model": "gpt-5"}
    assert placed(store, "web-1") == [(None, "system"), (0, "user"), (0, "assistant")]


@pytest.mark.parametrize(
    ("model", "provider"),
    [
        ("claude-sonnet-4-5-20250929", "anthropic"),
        ("us.anthropic.claude-opus-4-6-v1", "anthropic"),
        ("gpt-5.4", "openai"),
        ("o3", "openai"),
        ("o4-mini", "openai"),
        ("gemini-2.5-pro", "google"),
        ("anthropic/claude-sonnet-4.5", "anthropic"),
        ("meta-llama/llama-3.3-70b-instruct", "meta-llama"),
        ("omni-large", "unknown"),
        ("", "unknown"),
    ],
)
def test_provider_is_inferred_from_the_model_name(model: str, provider: str) -> None:
    assert infer_provider(model) == provider


def test_text_that_is_not_utf8_is_reported_naming_the_file_and_table(store: Store, source: Path) -> None:
    # A damaged TEXT value (invalid UTF-8) is reported as an error of the table (the driver cannot read
    # past it), not raised as a UnicodeDecodeError; the sessions read before it are written whole.
    with sqlite3.connect(source) as connection:
        (rowid,) = connection.execute("SELECT rowid FROM session_history WHERE id = ?", (RICH,)).fetchone()
        before = [row[0] for row in connection.execute("SELECT id FROM session_history WHERE rowid < ?", (rowid,))]
        connection.execute("UPDATE session_history SET messages = CAST(x'5b80ff5d' AS TEXT) WHERE id = ?", (RICH,))
    connection.close()

    report = store.import_("appam", source)

    [error] = report.errors
    assert error.place == f"{source}: session_history"
    assert "not valid UTF-8" in error.reason
    assert sorted(report.sessions_written) == sorted(before)
    assert sorted(s.session_id for s in store.sessions.list()) == sorted(before)


def _schema_damaged_past_utf8(source: Path) -> Path:
    """A copy of ``source`` with one byte of its schema page set to 0x80, chosen so that SQLite's error
    message quotes it and Python's driver fails with UnicodeDecodeError instead of a sqlite3 error."""
    data = source.read_bytes()
    for offset in range(100, min(len(data), 4096)):
        damaged = source.with_name(f"damaged-{offset}.db")
        damaged.write_bytes(data[:offset] + b"\x80" + data[offset + 1 :])
        try:
            with closing(sqlite3.connect(damaged)) as connection:
                connection.execute("SELECT name FROM sqlite_master").fetchall()
        except UnicodeDecodeError:
            return damaged
        except sqlite3.Error:
            pass
        damaged.unlink()
    pytest.skip("no single byte of this fixture's schema page makes the driver fail on UTF-8")


def test_a_damaged_schema_is_a_typed_error_not_a_unicode_error(store: Store, source: Path) -> None:
    damaged = _schema_damaged_past_utf8(source)
    try:
        report = store.import_("appam", damaged)
    except ImportFailed as error:
        assert str(damaged) in str(error)
    else:
        assert report.errors and all(str(damaged) in error.place for error in report.errors)
    assert store.sessions.list() == []
