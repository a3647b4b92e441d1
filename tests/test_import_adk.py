"""The ``adk`` importer: Google ADK ``DatabaseSessionService`` / ``SqliteSessionService`` databases.

The fixture databases under ``fixtures/adk`` were written by ADK itself
(``make.py``, google-adk 2.13.0); these tests read them with plain ``sqlite3``
for the expected values and never need ADK.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.cli import main
from turnstore.models import (
    AssistantMessage,
    ExtensionMessage,
    ToolResultMessage,
    UserMessage,
)

FIXTURES = Path(__file__).parent / "fixtures" / "adk"
DATABASE = FIXTURES / "database.db"
SQLITE = FIXTURES / "sqlite.db"
PICKLED = FIXTURES / "pickled.db"
JSON_SOURCES = [DATABASE, SQLITE]
SIGNATURE = bytes(range(256)) + b"\x00\xff signature"
"""The thought signature ``make.py`` wrote."""

WEATHER, HELLO = "s-weather", "s-hello"


def query(path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as connection:
        rows = connection.execute(sql, params).fetchall()
    connection.close()
    return rows


def events(path: Path, session_id: str) -> list[dict[str, Any]]:
    """The session's events as ADK stored them, in append order."""
    rows = query(path, "SELECT event_data FROM events WHERE session_id = ? ORDER BY rowid", session_id)
    return [json.loads(row[0]) for row in rows]


def records(store: Store, session_id: str) -> list[Any]:
    return list(store.messages.records(session_id))


def copy_db(tmp_path: Path, source: Path) -> Path:
    target = tmp_path / source.name
    shutil.copyfile(source, target)
    return target


def execute(path: Path, sql: str, *params: Any) -> None:
    with sqlite3.connect(path) as connection:
        connection.execute(sql, params)
    connection.close()


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_report_counts(store: Store, source: Path) -> None:
    report = store.import_("adk", source)

    assert report.ok
    assert report.records == query(source, "SELECT COUNT(*) FROM events")[0][0] == 8
    assert report.sessions_written == [WEATHER, HELLO]
    assert report.loops == query(source, "SELECT COUNT(DISTINCT invocation_id) FROM events")[0][0] == 3
    assert dict(report.by_role) == {"user": 3, "assistant": 4, "toolResult": 1, "extension": 2}
    assert dict(report.by_kind) == {"adk.actions": 2}


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_one_loop_per_invocation(store: Store, source: Path) -> None:
    store.import_("adk", source)

    loops = store.loops.list(WEATHER)

    assert [loop.metadata["invocation_id"] for loop in loops] == ["inv-1", "inv-2"]
    assert [loop.continuation_kind for loop in loops] == ["initial", "default"]
    assert loops[1].parent_loop_id == loops[0].loop_id
    by_loop = [[str(r.message.role) for r in records(store, WEATHER) if r.loop_id == loop.loop_id] for loop in loops]
    assert by_loop == [
        ["user", "assistant", "toolResult", "extension", "assistant"],
        ["user", "assistant", "extension"],
    ]


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_thought_signature_and_tool_call(store: Store, source: Path) -> None:
    store.import_("adk", source)
    event = events(source, WEATHER)[1]
    thought, call = event["content"]["parts"]

    message = records(store, WEATHER)[1].message

    assert isinstance(message, AssistantMessage)
    thinking, tool_call = message.content
    assert thinking.thinking == thought["text"]
    assert base64.b64decode(thinking.signature) == SIGNATURE  # the bytes, byte-exact
    assert base64.urlsafe_b64decode(thought["thought_signature"]) == SIGNATURE
    assert (tool_call.id, tool_call.name, tool_call.arguments) == (
        "adk-call-1",
        "get_weather",
        call["function_call"]["args"],
    )
    assert (message.model, message.provider, message.stop_reason.value) == ("gemini-2.5-flash", "google", "toolUse")
    assert message.timestamp == int(event["timestamp"] * 1000)
    assert message.model_dump(mode="json")["adk"]["author"] == "weather_agent"


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_function_response_becomes_the_tool_result_of_its_call(store: Store, source: Path) -> None:
    store.import_("adk", source)
    response = events(source, WEATHER)[2]["content"]["parts"][0]["function_response"]

    result = records(store, WEATHER)[2].message

    assert isinstance(result, ToolResultMessage)
    assert (
        (result.tool_call_id, result.tool_name) == (response["id"], response["name"]) == ("adk-call-1", "get_weather")
    )
    assert result.details == response["response"]
    assert not result.is_error


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_state_deltas_become_actions_messages(store: Store, source: Path) -> None:
    store.import_("adk", source)
    stored = events(source, WEATHER)

    actions = [r.message for r in records(store, WEATHER) if isinstance(r.message, ExtensionMessage)]

    assert [m.kind for m in actions] == ["adk.actions", "adk.actions"]
    assert actions[0].data["actions"] == stored[2]["actions"]
    assert actions[1].data["actions"]["state_delta"] == {"user:units": "C"}
    assert actions[1].data["actions"]["transfer_to_agent"] == "helper"


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_usage_totals_equal_the_source(store: Store, source: Path) -> None:
    store.import_("adk", source)
    usages = [event["usage_metadata"] for event in events(source, WEATHER) if "usage_metadata" in event]

    totals = store.usage.session(WEATHER)

    assert totals.requests == len(usages) == 3
    assert totals.total_tokens == sum(u["total_token_count"] for u in usages)
    assert totals.input + totals.cache_read == sum(u["prompt_token_count"] for u in usages)
    assert totals.cache_read == sum(u.get("cached_content_token_count", 0) for u in usages)
    assert totals.reasoning == sum(u.get("thoughts_token_count", 0) for u in usages)
    assert totals.output == sum(u["candidates_token_count"] + u.get("thoughts_token_count", 0) for u in usages)


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_session_data_names_app_user_and_state(store: Store, source: Path) -> None:
    store.import_("adk", source)
    state = json.loads(query(source, "SELECT state FROM sessions WHERE id = ?", WEATHER)[0][0])

    session = store.sessions.get(WEATHER)

    assert session.metadata["app_name"] == "weather_app"
    assert session.metadata["user_id"] == "u1"
    assert session.metadata["state"] == state == {"started": True, "last_city": "Paris"}
    assert session.metadata["user_state"] == {"units": "C"}


@pytest.mark.parametrize("source", JSON_SOURCES, ids=["database", "sqlite"])
def test_event_data_is_the_verbatim_source(store: Store, source: Path) -> None:
    store.import_("adk", source)
    texts = [
        row[0] for row in query(source, "SELECT event_data FROM events WHERE session_id = ? ORDER BY rowid", HELLO)
    ]

    assert [r.source for r in records(store, HELLO)] == texts


@pytest.mark.parametrize("source", [*JSON_SOURCES, PICKLED], ids=["database", "sqlite", "pickled"])
def test_reimport_changes_nothing_and_the_source_is_untouched(store: Store, source: Path) -> None:
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    first = store.import_("adk", source)
    exported = store.export(WEATHER, "turnstore")

    again = store.import_("adk", source)

    assert first.sessions_written and again.sessions_written == []
    assert again.sessions_unchanged == first.sessions_written
    assert store.export(WEATHER, "turnstore") == exported
    assert hashlib.sha256(source.read_bytes()).hexdigest() == digest


def test_pickled_actions_are_kept_not_unpickled(store: Store) -> None:
    report = store.import_("adk", PICKLED)
    blobs = [row[0] for row in query(PICKLED, "SELECT actions FROM events ORDER BY rowid")]

    assert report.ok and report.sessions_written == [WEATHER]
    assert dict(report.by_role) == {"user": 2, "assistant": 3, "toolResult": 1}
    kept = [r.message.model_dump(mode="json")["adk"]["actions_pickle"] for r in records(store, WEATHER)]
    assert [base64.b64decode(value) for value in kept] == blobs
    assert base64.b64decode(records(store, WEATHER)[1].message.content[0].signature) == SIGNATURE
    assert store.usage.session(WEATHER).total_tokens == 162 + 215 + 58


def test_the_report_notes_the_pickles_kept_in_the_file(store: Store) -> None:
    pickled = store.import_("adk", PICKLED)
    assert [(note.place, note.reason.split(":")[0]) for note in pickled.notes] == [
        (f"{PICKLED}: events.actions", "6 event(s) hold their actions as a Python pickle")
    ]
    assert "never unpickled; the state and artifact deltas inside are not imported" in pickled.notes[0].reason
    assert pickled.as_dict()["notes"] == [{"place": f"{PICKLED}: events.actions", "reason": pickled.notes[0].reason}]
    assert all(not store.import_("adk", source).notes for source in JSON_SOURCES)


def test_a_file_of_two_sessions_gets_one_note(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, PICKLED)
    with sqlite3.connect(source) as connection:
        connection.execute(
            "INSERT INTO sessions (app_name, user_id, id, state, create_time, update_time)"
            " SELECT app_name, user_id, 's-two', state, create_time, update_time FROM sessions"
        )
    report = store.import_("adk", source)
    assert report.sessions_written == [WEATHER, "s-two"]
    assert len(report.notes) == 1


def test_the_cli_prints_the_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["import", "adk", str(PICKLED), "--db", str(tmp_path / "cli.db")]) == 0
    out = capsys.readouterr().out
    assert f"  note: {PICKLED}: events.actions: 6 event(s) hold their actions as a Python pickle" in out


def test_pickled_rows_never_reach_pickle(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import pickle

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("unpickled")

    monkeypatch.setattr(pickle, "loads", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    monkeypatch.setattr(pickle, "Unpickler", refuse)

    assert store.import_("adk", PICKLED).ok


@pytest.mark.parametrize(
    ("event_data", "reason"),
    [
        ("not json", "event_data is not valid JSON"),
        ("[1]", "event_data must be a JSON object"),
        ('{"content": {"role": "model", "parts": "x"}}', "content.parts must be a list of objects"),
        (
            '{"content": {"role": "model", "parts": [{"text": "t", "thought": true, "thought_signature": "!!"}]}}',
            "thought_signature is not valid base64",
        ),
        (
            '{"content": {"role": "model", "parts": []}, "usage_metadata": {"prompt_token_count": -1}}',
            "prompt_token_count must be a non-negative 64-bit integer, got -1",
        ),
    ],
)
def test_malformed_event_is_reported_with_its_row(store: Store, tmp_path: Path, event_data: str, reason: str) -> None:
    source = copy_db(tmp_path, SQLITE)
    rowid = query(source, "SELECT rowid FROM events WHERE session_id = ? ORDER BY rowid", HELLO)[1][0]
    execute(source, "UPDATE events SET event_data = ? WHERE rowid = ?", event_data, rowid)

    report = store.import_("adk", source)

    assert not report.ok
    assert [(e.place, e.reason) for e in report.errors] == [(f"{source}: events rowid={rowid}", reason)]
    assert report.sessions_failed == [HELLO]
    assert report.sessions_written == [WEATHER]
    assert [s.session_id for s in store.sessions.list()] == [WEATHER]


def test_skip_invalid_drops_only_the_bad_event(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, SQLITE)
    rowid = query(source, "SELECT rowid FROM events WHERE session_id = ? ORDER BY rowid", HELLO)[1][0]
    execute(source, "UPDATE events SET event_data = 'x' WHERE rowid = ?", rowid)

    report = store.import_("adk", source, skip_invalid=True)

    assert report.ok
    assert [e.place for e in report.skipped] == [f"{source}: events rowid={rowid}"]
    assert [type(r.message) for r in records(store, HELLO)] == [UserMessage]


def test_same_session_id_for_two_users_is_qualified(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, SQLITE)
    execute(source, "UPDATE sessions SET id = ? WHERE id = ?", WEATHER, HELLO)
    execute(source, "UPDATE events SET session_id = ? WHERE session_id = ?", WEATHER, HELLO)

    report = store.import_("adk", source)

    assert report.sessions_written == [f"weather_app.u1.{WEATHER}", f"weather_app.u2.{WEATHER}"]


def test_a_file_that_is_not_an_adk_database_is_reported(store: Store, tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    execute(other, "CREATE TABLE notes (id INTEGER)")

    report = store.import_("adk", other)

    assert not report.ok
    assert report.errors[0].place == str(other)
    assert "not a Google ADK session database" in report.errors[0].reason


def test_directory_walk_takes_only_adk_databases(store: Store, tmp_path: Path) -> None:
    copy_db(tmp_path, SQLITE)
    execute(tmp_path / "other.db", "CREATE TABLE notes (id INTEGER)")

    report = store.import_("adk", tmp_path)

    assert report.ok and report.files == 1
    assert report.sessions_written == [WEATHER, HELLO]


def test_cli_import(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "store.db"

    code = main(["import", "adk", str(SQLITE), "--db", str(db), "--json"])

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sessions"]["written"] == [WEATHER, HELLO]
    assert report["messages"] == 10


def test_event_without_content_becomes_one_adk_event_message(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, SQLITE)
    rowid, text = query(source, "SELECT rowid, event_data FROM events WHERE session_id = ? ORDER BY rowid", HELLO)[1]
    event = json.loads(text)
    del event["content"], event["usage_metadata"], event["model_version"]
    event["actions"]["state_delta"] = {"greeted": True}
    execute(source, "UPDATE events SET event_data = ? WHERE rowid = ?", json.dumps(event), rowid)

    report = store.import_("adk", source)

    assert report.ok
    last = records(store, HELLO)[-1]
    assert isinstance(last.message, ExtensionMessage)
    assert (last.message.kind, last.message.data) == ("adk.event", event)
    assert [str(r.message.role) for r in records(store, HELLO)] == ["user", "extension"]


def test_a_session_without_events_is_written_empty(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, SQLITE)
    execute(
        source, "INSERT INTO sessions VALUES ('weather_app', 'u3', 's-empty', '{\"k\": 1}', 1764000000.0, 1764000000.0)"
    )

    report = store.import_("adk", source)

    assert report.sessions_written == [WEATHER, HELLO, "s-empty"]
    assert store.sessions.get("s-empty").metadata == {"app_name": "weather_app", "user_id": "u3", "state": {"k": 1}}
    assert records(store, "s-empty") == []


def test_an_error_event_stops_with_error(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, SQLITE)
    rowid, text = query(source, "SELECT rowid, event_data FROM events WHERE session_id = ? ORDER BY rowid", HELLO)[1]
    event = json.loads(text)
    event.update(error_code="SAFETY", error_message="blocked")
    execute(source, "UPDATE events SET event_data = ? WHERE rowid = ?", json.dumps(event), rowid)

    store.import_("adk", source)

    message = records(store, HELLO)[1].message
    assert (message.stop_reason.value, message.error_message) == ("error", "blocked")
    assert message.model_dump(mode="json")["adk"]["error_code"] == "SAFETY"


def test_malformed_column_of_the_pickled_schema_is_reported_with_its_row(store: Store, tmp_path: Path) -> None:
    source = copy_db(tmp_path, PICKLED)
    rowid = query(source, "SELECT rowid FROM events ORDER BY rowid")[3][0]
    execute(source, "UPDATE events SET content = '{broken' WHERE rowid = ?", rowid)

    report = store.import_("adk", source, skip_invalid=True)

    assert [(e.place, e.reason) for e in report.skipped] == [
        (f"{source}: events rowid={rowid}", "content is not valid JSON")
    ]
    assert len(records(store, WEATHER)) == 5
