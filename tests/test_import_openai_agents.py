"""The ``openai-agents`` importer: OpenAI Agents SDK ``SQLiteSession`` / ``AdvancedSQLiteSession`` databases.

The fixture databases under ``fixtures/openai_agents`` were written by the SDK
itself (``make_fixtures.py``, openai-agents 0.24.0); these tests read them
with plain ``sqlite3`` for the expected values and never need the SDK.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import snapshot

from turnstore import Store
from turnstore.cli import main
from turnstore.models import AssistantMessage, ExtensionMessage, ToolResultMessage

FIXTURES = Path(__file__).parent / "fixtures" / "openai_agents"
PLAIN = FIXTURES / "sqlite_session.db"
ADVANCED = FIXTURES / "advanced_session.db"
EDITED = FIXTURES / "advanced_edited.db"

WEATHER, POLICY, TRIP = "chat-weather", "chat-policy", "trip"
TRIP_MAIN_1, TRIP_MAIN_2, TRIP_SHORTER = (f"{TRIP}.openai-agents.{n}" for n in (1, 2, 3))


def query(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of the SDK database, read the way the SDK stores them."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute(sql, params).fetchall()
    connection.close()
    return rows


def item(path: Path, row_id: int) -> dict[str, Any]:
    return json.loads(query(path, "SELECT message_data FROM agent_messages WHERE id = ?", row_id)[0][0])


def records(store: Store, session_id: str) -> list[Any]:
    return list(store.messages.records(session_id))


def copy_db(tmp_path: Path, source: Path = PLAIN) -> Path:
    target = tmp_path / source.name
    shutil.copyfile(source, target)
    return target


def corrupt(path: Path, row_id: int, message_data: str) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE agent_messages SET message_data = ? WHERE id = ?", (message_data, row_id))
    connection.close()


# --- SQLiteSession: items into messages ----------------------------------------------------


def test_plain_report_counts(store: Store) -> None:
    report = store.import_("openai-agents", PLAIN)

    assert report.ok
    assert report.records == 12  # agent_messages rows
    assert report.messages == 11  # reasoning + function_call grouped into one assistant message
    assert report.loops == 3
    assert dict(report.by_role) == {"user": 3, "assistant": 4, "toolResult": 1, "system": 2, "extension": 1}
    assert dict(report.by_kind) == {"web_search_call": 1}
    assert report.sessions_written == [WEATHER, POLICY]


def test_session_times_come_from_agent_sessions(store: Store) -> None:
    store.import_("openai-agents", PLAIN)
    sql = "SELECT created_at, updated_at FROM agent_sessions WHERE session_id = ?"
    created, updated = query(PLAIN, sql, WEATHER)[0]

    session = store.sessions.get(WEATHER)

    assert session.created_at == datetime.fromisoformat(created).replace(tzinfo=timezone.utc)
    assert session.updated_at == datetime.fromisoformat(updated).replace(tzinfo=timezone.utc)


def test_user_text_and_inline_image(store: Store) -> None:
    store.import_("openai-agents", PLAIN)
    rows = records(store, WEATHER)

    first_prompt = rows[0].message.model_dump(mode="json")
    assert first_prompt["content"] == [{"type": "text", "text": "What's the weather in Paris?"}]
    second_prompt = rows[4].message.model_dump(mode="json")
    assert second_prompt["role"] == "user"
    assert second_prompt["content"] == [
        {"type": "text", "text": "And what is in this picture?"},
        {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png", "detail": "auto"},
    ]


def test_reasoning_and_function_call_become_one_assistant_message(store: Store) -> None:
    store.import_("openai-agents", PLAIN)
    reasoning, call = item(PLAIN, 2), item(PLAIN, 3)

    message = records(store, WEATHER)[1].message

    assert isinstance(message, AssistantMessage)
    thinking, tool_call = message.content
    assert thinking.thinking == "\n\n".join(part["text"] for part in reasoning["summary"])
    assert thinking.signature == reasoning["encrypted_content"]  # byte-exact
    assert thinking.model_dump(mode="json")["itemId"] == reasoning["id"]
    assert (tool_call.id, tool_call.name) == (call["call_id"], call["name"])
    assert tool_call.arguments == json.loads(call["arguments"]) == {"city": "Paris", "days": 2}
    assert message.stop_reason.value == "toolUse"
    assert (message.model, message.provider) == ("unknown", "openai")


def test_assistant_messages_carry_no_usage(store: Store) -> None:
    store.import_("openai-agents", PLAIN)

    totals = store.usage.session(WEATHER)

    assert totals.requests == 0  # usage columns left NULL: the SDK recorded none per message
    assert totals.total_tokens == 0


def test_function_call_output_becomes_tool_result_named_by_its_call(store: Store) -> None:
    store.import_("openai-agents", PLAIN)
    output = item(PLAIN, 4)

    message = records(store, WEATHER)[2].message

    assert isinstance(message, ToolResultMessage)
    assert message.tool_call_id == output["call_id"]
    assert message.tool_name == "get_weather"
    assert message.text() == output["output"] == "Sunny, 21°C"
    assert message.is_error is False


def test_system_developer_file_and_refusal(store: Store) -> None:
    store.import_("openai-agents", PLAIN)

    system, developer, prompt, refusal = (row.message.model_dump(mode="json") for row in records(store, POLICY))

    assert (system["role"], system["content"][0]["text"]) == ("system", "You are a careful assistant.")
    assert (developer["role"], developer["content"][0]["text"]) == ("system", "Refuse unsafe requests.")
    pdf = {"type": "file", "data": "JVBERi0xLjQ=", "mimeType": "application/pdf", "name": "notes.pdf"}
    assert prompt["content"][1] == pdf
    assert refusal["stopReason"] == "refusal"
    assert refusal["content"][0]["text"] == "I can't share secrets."


def test_hosted_tool_item_kept_as_extension_in_its_response_turn(store: Store) -> None:
    store.import_("openai-agents", PLAIN)
    rows = records(store, WEATHER)

    answer, search = rows[5], rows[6]

    assert isinstance(search.message, ExtensionMessage)
    assert search.message.kind == "web_search_call"
    assert search.message.data == item(PLAIN, 7)
    assert isinstance(answer.message, AssistantMessage)
    assert (search.loop_id, search.turn_index) == (answer.loop_id, answer.turn_index)
    # the SDK's items of the response, in its order, are the assistant message's source; the search has none
    assert [json.loads(line) for line in answer.source.split("\n")] == [item(PLAIN, 7), item(PLAIN, 8)]
    assert search.source is None


def test_plain_loops_are_derived(store: Store) -> None:
    store.import_("openai-agents", PLAIN)

    first, second = store.loops.list(WEATHER)
    rows = records(store, WEATHER)

    assert (first.continuation_kind.value, second.continuation_kind.value) == ("initial", "default")
    assert second.parent_loop_id == first.loop_id
    assert [(row.loop_id, row.turn_index) for row in rows] == [
        (first.loop_id, 0),
        (first.loop_id, 0),
        (first.loop_id, 0),
        (first.loop_id, 1),
        (second.loop_id, 0),
        (second.loop_id, 0),
        (second.loop_id, 0),
    ]


@pytest.mark.parametrize("path", [PLAIN, ADVANCED, EDITED], ids=["plain", "advanced", "edited"])
def test_every_row_is_kept_verbatim_exactly_once(store: Store, path: Path) -> None:
    store.import_("openai-agents", path)
    source_rows = sorted(text for (text,) in query(path, "SELECT message_data FROM agent_messages"))

    sessions = [summary.session_id for summary in store.sessions.list()]
    rows = [row for sid in sessions for row in records(store, sid)]
    kept = sorted(line for row in rows if row.source is not None for line in row.source.split("\n"))

    assert kept == source_rows
    # only the hosted tool items of a response, kept in its assistant message's source, have none of their own
    assert all(row.message.role == "extension" for row in rows if row.source is None)


# --- AdvancedSQLiteSession: user turns, branches, turn_usage ---------------------------------


def test_advanced_loops_follow_user_turns_and_branches(store: Store) -> None:
    report = store.import_("openai-agents", ADVANCED)

    assert report.ok
    assert report.records == 15  # 12 agent_messages rows + 3 turn_usage rows
    assert report.messages == 10  # turn 1 is shared by both branches and stored once
    loops = {loop.loop_id: loop for loop in store.loops.list(TRIP)}
    assert list(loops) == [TRIP_MAIN_1, TRIP_MAIN_2, TRIP_SHORTER]
    assert loops[TRIP_MAIN_1].metadata == {"branch_id": "main", "user_turn_number": 1, "requests": 2}
    assert (loops[TRIP_MAIN_2].continuation_kind.value, loops[TRIP_MAIN_2].parent_loop_id) == ("default", TRIP_MAIN_1)
    assert (loops[TRIP_SHORTER].continuation_kind.value, loops[TRIP_SHORTER].parent_loop_id) == ("branch", TRIP_MAIN_1)
    assert loops[TRIP_SHORTER].metadata == {"branch_id": "shorter", "user_turn_number": 2, "requests": 2}
    assert store.sessions.get(TRIP).metadata == {"branches": ["main", "shorter"]}


def test_branch_forks_after_the_last_shared_message(store: Store) -> None:
    store.import_("openai-agents", ADVANCED)
    last_shared = [row for row in records(store, TRIP) if row.loop_id == TRIP_MAIN_1][-1]

    assert store.loops.get(TRIP_SHORTER).fork_after == last_shared.message_id
    assert [m.text() for m in store.messages.context(TRIP_SHORTER) if m.role == "user"] == [
        "Plan a trip to Lisbon",
        "Make it 1 day",
    ]


def test_branch_rows_keep_their_own_turns(store: Store) -> None:
    store.import_("openai-agents", ADVANCED)

    branch = [(str(row.message.role), row.turn_index) for row in records(store, TRIP) if row.loop_id == TRIP_SHORTER]

    assert branch == [("user", 0), ("assistant", 0), ("toolResult", 0), ("assistant", 1)]


def test_branch_made_after_main_rewrote_a_response_forks_inside_it(store: Store) -> None:
    """main popped and rewrote the answer of turn 1 after the ``retry`` branch copied it."""
    report = store.import_("openai-agents", EDITED)
    rows = records(store, "edited")
    loops = {loop.loop_id: loop for loop in store.loops.list("edited")}
    reasoning_row = query(EDITED, "SELECT message_data FROM agent_messages WHERE id = 2")[0][0]
    thinking = next(row for row in rows if row.source == reasoning_row)

    assert report.ok
    retry = [loop for loop in loops.values() if loop.metadata["branch_id"] == "retry"]
    assert retry[0].continuation_kind.value == "branch" and retry[0].fork_after == thinking.message_id
    context = store.messages.context(retry[-1].loop_id)
    assert [m.text() for m in context if m.role in ("user", "assistant")] == ["u1", "", "one", "u3", "three"]


def test_rows_no_branch_names_join_main_in_id_order(store: Store) -> None:
    store.import_("openai-agents", EDITED)
    main = [loop.loop_id for loop in store.loops.list("edited") if loop.metadata["branch_id"] == "main"]

    texts = [row.message.text() for row in records(store, "edited") if row.loop_id in main]

    assert texts == ["u1", "", "one, rewritten", "u4 from a plain session", "four"]


def test_turn_usage_becomes_the_loops_reported_usage(store: Store) -> None:
    store.import_("openai-agents", ADVANCED)

    main_1 = store.usage.loop(TRIP_MAIN_1)

    # turn_usage main/1: input_tokens 1200 (1024 of them cached), output 85 (40 reasoning), total 1285
    assert (main_1.input, main_1.cache_read, main_1.cache_write) == (176, 1024, 0)
    assert (main_1.output, main_1.reasoning, main_1.total_tokens) == (85, 40, 1285)


def test_session_usage_equals_the_sources_sums(store: Store) -> None:
    store.import_("openai-agents", ADVANCED)
    columns = "input_tokens, output_tokens, total_tokens, input_tokens_details, output_tokens_details"
    rows = query(ADVANCED, f"SELECT {columns} FROM turn_usage WHERE session_id = ?", TRIP)

    totals = store.usage.session(TRIP)

    assert totals.input + totals.cache_read + totals.cache_write == sum(row[0] for row in rows)
    assert totals.output == sum(row[1] for row in rows)
    assert totals.total_tokens == sum(row[2] for row in rows)
    assert totals.cache_read == sum(json.loads(row[3])["cached_tokens"] for row in rows)
    assert totals.reasoning == sum(json.loads(row[4])["reasoning_tokens"] for row in rows)


def test_turnstore_export_keeps_everything(tmp_path: Path) -> None:
    """Re-importing the lossless export gives the same session: loop metadata, usage rows and sources survive."""
    with Store(tmp_path / "a.db") as first, Store(tmp_path / "b.db") as second:
        first.import_("openai-agents", ADVANCED)
        exported = tmp_path / "trip.jsonl"
        first.export(TRIP, "turnstore", exported)
        second.import_("turnstore", exported)

        assert second.export(TRIP, "turnstore") == exported.read_text(encoding="utf-8")
        lines = [json.loads(line) for line in exported.read_text(encoding="utf-8").splitlines()]
        first_loop = next(line for line in lines if line["type"] == "loop")
        usage_id = query(ADVANCED, "SELECT id FROM turn_usage WHERE branch_id = 'main' AND user_turn_number = 1")[0][0]
        assert [row["id"] for row in json.loads(first_loop["source"])] == [usage_id]


# --- re-import, dry run ------------------------------------------------------------------------


def test_importing_again_changes_nothing(store: Store) -> None:
    store.import_("openai-agents", ADVANCED)
    before = snapshot(store, TRIP)

    report = store.import_("openai-agents", ADVANCED)

    assert report.sessions_unchanged == [TRIP] and report.sessions_written == []
    assert snapshot(store, TRIP) == before


def test_dry_run_writes_nothing(store: Store) -> None:
    report = store.import_("openai-agents", PLAIN, dry_run=True)

    assert report.ok and report.sessions_written == [WEATHER, POLICY]
    assert store.sessions.list() == []


# --- malformed input -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message_data", "reason"),
    [
        ('{"role": "user", "content": ', "invalid JSON"),
        ('{"content": "no type, no role"}', "neither a type nor a role"),
        ('{"role": "critic", "content": "hm"}', "unknown message role 'critic'"),
        ('{"role": "user", "content": [{"type": "input_video", "url": "x"}]}', "unknown content part type"),
        ('{"role": "user", "content": NaN}', "invalid JSON"),
    ],
)
def test_malformed_row_is_reported_and_its_session_not_written(
    store: Store, tmp_path: Path, message_data: str, reason: str
) -> None:
    source = copy_db(tmp_path)
    corrupt(source, 11, message_data)  # the user prompt of chat-policy

    report = store.import_("openai-agents", source)

    assert not report.ok
    assert [error.place for error in report.errors] == [f"{source}: agent_messages id=11"]
    assert reason in report.errors[0].reason
    assert report.sessions_failed == [POLICY]
    assert report.sessions_written == [WEATHER]
    assert [s.session_id for s in store.sessions.list()] == [WEATHER]


def test_skip_invalid_drops_only_the_bad_row(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path)
    corrupt(source, 11, "not json")

    report = store.import_("openai-agents", source, skip_invalid=True)

    assert report.ok
    assert [error.place for error in report.skipped] == [f"{source}: agent_messages id=11"]
    assert report.sessions_written == [WEATHER, POLICY]
    assert [str(row.message.role) for row in records(store, POLICY)] == ["system", "system", "assistant"]


def test_bad_turn_usage_row_is_reported_with_its_id(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, ADVANCED)
    with sqlite3.connect(source) as connection:
        connection.execute("UPDATE turn_usage SET input_tokens_details = '{broken' WHERE id = 2")
    connection.close()

    report = store.import_("openai-agents", source)

    assert [(e.place, e.reason) for e in report.errors] == [
        (f"{source}: turn_usage id=2", "input_tokens_details is not valid JSON")
    ]
    assert report.sessions_failed == [TRIP]


@pytest.mark.parametrize(
    ("column", "value", "reason"),
    [
        (
            "output_tokens_details",
            '{"reasoning_tokens": 18446744073709551616}',
            "reasoning_tokens must be a non-negative 64-bit integer",
        ),
        ("output_tokens", 2**63, "output_tokens must be a non-negative 64-bit integer"),
    ],
)
def test_turn_usage_beyond_64_bits_is_reported_with_its_id(
    store: Store, tmp_path: Path, column: str, value: object, reason: str
) -> None:
    source = copy_db(tmp_path, ADVANCED)
    with sqlite3.connect(source) as connection:
        connection.execute(
            f"UPDATE turn_usage SET {column} = ? WHERE id = 2", (str(value) if isinstance(value, int) else value,)
        )
    connection.close()

    report = store.import_("openai-agents", source)

    [error] = report.errors
    assert error.place == f"{source}: turn_usage id=2"
    assert error.reason.startswith(reason)
    assert report.sessions_failed == [TRIP]


def test_turn_usage_for_a_turn_that_does_not_exist_is_reported(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, ADVANCED)
    with sqlite3.connect(source) as connection:
        connection.execute("UPDATE turn_usage SET user_turn_number = 9 WHERE id = 3")
    connection.close()

    report = store.import_("openai-agents", source, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{source}: turn_usage id=3"]
    assert store.loops.get(TRIP_SHORTER).reported_usage is None


def test_a_file_that_is_not_an_sdk_database_is_reported(store: Store, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as connection:
        connection.execute("CREATE TABLE notes (id INTEGER)")
    connection.close()

    report = store.import_("openai-agents", other)

    assert not report.ok
    assert report.errors[0].place == str(other)
    assert "agent_sessions" in report.errors[0].reason


def test_directory_walk_takes_only_sdk_databases(store: Store, tmp_path: Path) -> None:
    copy_db(tmp_path)
    (tmp_path / "notes.txt").write_text("not a database", encoding="utf-8")
    with sqlite3.connect(tmp_path / "other.db") as connection:
        connection.execute("CREATE TABLE notes (id INTEGER)")
    connection.close()

    report = store.import_("openai-agents", tmp_path)

    assert report.ok and report.files == 1
    assert report.sessions_written == [WEATHER, POLICY]


def test_wal_database_is_read_without_being_changed(store: Store, tmp_path: Path) -> None:
    """The SDK leaves its files in WAL mode; the importer opens them read-only."""
    source = copy_db(tmp_path, ADVANCED)
    with sqlite3.connect(source) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
    connection.close()
    before = source.read_bytes()

    report = store.import_("openai-agents", source)

    assert report.ok and report.sessions_written == [TRIP]
    assert source.read_bytes() == before


# --- command line ----------------------------------------------------------------------------------


def test_cli_imports_the_fixture_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "cli.db"

    code = main(["--db", str(target), "import", "openai-agents", str(FIXTURES), "--json"])

    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["sessions"]["written"] == ["edited", TRIP, WEATHER, POLICY]
    assert report["by_kind"] == {"web_search_call": 1}


def test_a_blob_timestamp_is_kept_as_text_not_a_crash(store: Store, tmp_path: Path) -> None:
    # SQLite's columns take any type: a BLOB where the SDK writes a timestamp string is read as
    # text (undecodable bytes replaced) for the source record, and the message still imports.
    source = copy_db(tmp_path, PLAIN)
    with sqlite3.connect(source) as connection:
        (row_id,) = connection.execute("SELECT min(id) FROM agent_messages").fetchone()
        connection.execute("UPDATE agent_messages SET created_at = ? WHERE id = ?", (b"\xff\xfe", row_id))
    connection.close()

    report = store.import_("openai-agents", source)

    assert report.errors == [] and report.sessions_written
    again = store.import_("openai-agents", source)
    assert again.sessions_unchanged == report.sessions_written  # the digest reads the same text each time
