"""Importing phi-core: ``save_messages()`` arrays and session files (docs/design.md §6, §7).

The phi-core fixtures under ``fixtures/phi_core`` are written by hand from
``docs/wire-format.md`` (its examples, and the session file shape).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from helpers import TOKEN_FIELDS, snapshot, tokens

from turnstore import ImportFailed, Store

FIXTURES = Path(__file__).parent / "fixtures"
ARRAY = FIXTURES / "phi_core" / "messages" / "save_messages.json"
SESSIONS = FIXTURES / "phi_core" / "sessions"

ARRAY_SESSION = "3f1c9a2e-7b4d-4c1e-9a55-0d2f6b8e1a77"
ARRAY_L1 = f"{ARRAY_SESSION}.anthropic.claude-sonnet-4-5.thinking.1"
ARRAY_L2 = f"{ARRAY_SESSION}.anthropic.claude-haiku-4-5.1"

MAIN = "5b6f0d3c-8e21-4a7b-9c44-2f1e7a9d0b63"
CHILD = "c0ffee00-1d2e-4f3a-8b5c-6d7e8f9a0b1c"
L1 = f"{MAIN}.anthropic.claude-sonnet-4-5.thinking.1"
L2 = f"{MAIN}.anthropic.claude-sonnet-4-5.thinking.2"
L3 = f"{MAIN}.openai.gpt-5.1"
L4 = f"{MAIN}.anthropic.claude-sonnet-4-5.thinking.3"
CHILD_LOOP = f"{CHILD}.sub.1"


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def source_records() -> list[dict[str, Any]]:
    return json.loads(ARRAY.read_text(encoding="utf-8"))


def write_array(path: Path, records: list[Any]) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


# --- phi-core: save_messages() arrays ----------------------------------------------------


def test_array_import_report_counts(store: Store) -> None:
    report = store.import_("phi-core", ARRAY)

    assert report.ok
    assert report.files == 1
    assert report.records == 8
    assert report.messages == 8
    assert report.loops == 2
    assert dict(report.by_role) == {"user": 3, "assistant": 3, "toolResult": 1, "extension": 1}
    assert dict(report.by_kind) == {"status_update": 1}
    assert report.sessions_written == [ARRAY_SESSION]
    assert report.sessions_unchanged == [] and report.sessions_failed == []
    assert report.errors == [] and report.skipped == []


def test_array_import_places_messages_by_turn_id_and_derives_the_rest(store: Store) -> None:
    store.import_("phi-core", ARRAY)

    placed = [(m.loop_id, m.turn_index, m.seq, str(m.message.role)) for m in store.messages.records(ARRAY_SESSION)]
    assert placed == [
        (ARRAY_L1, 0, 0, "user"),
        (ARRAY_L1, 0, 1, "assistant"),
        (ARRAY_L1, 0, 2, "toolResult"),
        (ARRAY_L1, 0, 3, "extension"),  # inside the open turn 0
        (ARRAY_L1, 1, 4, "user"),  # legacy record without turnId: the next turn
        (ARRAY_L1, 1, 5, "assistant"),
        (ARRAY_L2, 0, 0, "user"),
        (ARRAY_L2, 0, 1, "assistant"),
    ]


def test_array_import_loops_follow_each_other(store: Store) -> None:
    store.import_("phi-core", ARRAY)

    first, second = store.loops.list(ARRAY_SESSION)
    assert (first.loop_id, first.parent_loop_id, first.continuation_kind.value) == (ARRAY_L1, None, "initial")
    assert (second.loop_id, second.parent_loop_id, second.continuation_kind.value) == (ARRAY_L2, ARRAY_L1, "default")
    assert first.model == "claude-sonnet-4-5" and first.provider == "anthropic"
    assert second.model == "claude-haiku-4-5"


def test_array_import_keeps_records_verbatim_and_usage(store: Store) -> None:
    store.import_("phi-core", ARRAY)
    records = source_records()

    stored = list(store.messages.records(ARRAY_SESSION))
    assert [json.loads(m.source) for m in stored] == records
    # unknown keys (nodeId, parentId, tags) survive in the canonical message too
    tool = stored[2].message.model_dump(mode="json")
    assert (tool["nodeId"], tool["parentId"], tool["tags"]) == (3, 2, records[2]["tags"])
    # the legacy error assistant keeps its snake_case error_message
    assert stored[5].message.error_message == records[5]["error_message"]

    totals = store.usage.session(ARRAY_SESSION)
    assert tokens(totals) == (1500, 125, 0, 1024, 512, 3161)


def test_array_signature_and_arguments_are_byte_exact(store: Store) -> None:
    store.import_("phi-core", ARRAY)
    source = source_records()[1]

    stored = list(store.messages.records(ARRAY_SESSION))[1].message
    thinking, _, call = stored.content
    assert thinking.signature == source["content"][0]["signature"] == "EqQBCkYIBxgCKkC..."
    assert json.dumps(call.arguments) == json.dumps(source["content"][2]["arguments"])
    # and what the next model call sees carries the same bytes
    context_assistant = store.messages.context(ARRAY_L1)[1]
    assert context_assistant.content[0].signature == source["content"][0]["signature"]


@pytest.mark.parametrize(
    ("records", "options", "expected"),
    [
        pytest.param(None, {"session_id": "chosen-id"}, "chosen-id", id="--session-id wins"),
        pytest.param(None, {}, ARRAY_SESSION, id="first turnId session part"),
        pytest.param(
            [
                {"content": [{"text": "hi", "type": "text"}], "role": "user", "timestamp": 1},
                {"role": "extension", "kind": "note", "data": None},
            ],
            {},
            "old-chat",
            id="file stem without turnIds",
        ),
    ],
)
def test_array_session_id_rules(
    store: Store, tmp_path: Path, records: list[Any] | None, options: dict[str, Any], expected: str
) -> None:
    path = write_array(tmp_path / "old-chat.json", records if records is not None else source_records())

    report = store.import_("phi-core", path, **options)

    assert report.sessions_written == [expected]
    assert store.sessions.exists(expected)


def test_array_reimport_is_unchanged(store: Store) -> None:
    store.import_("phi-core", ARRAY)
    before = snapshot(store, ARRAY_SESSION)

    again = store.import_("phi-core", ARRAY)

    assert again.ok
    assert again.sessions_written == []
    assert again.sessions_unchanged == [ARRAY_SESSION]
    assert again.messages == 0 and again.loops == 0
    assert snapshot(store, ARRAY_SESSION) == before
    assert store.sessions.count() == 1


def test_dry_run_writes_nothing(store: Store) -> None:
    report = store.import_("phi-core", ARRAY, dry_run=True)

    assert report.ok and report.dry_run
    assert report.sessions_written == [ARRAY_SESSION]  # what it would write
    assert report.messages == 8
    assert store.sessions.count() == 0
    # nothing was recorded either: the real import still writes
    assert store.import_("phi-core", ARRAY).sessions_written == [ARRAY_SESSION]


def test_json_syntax_error_names_file_and_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text(
        '[{"content":[{"text":"hi","type":"text"}],"role":"user","timestamp":1},\n'
        '{"content":[{"text":"again","type":"text"}],"role":"user","timestamp":2},\n'
        '{"role": "user", "content": [}\n'
        "]\n",
        encoding="utf-8",
    )

    report = store.import_("phi-core", path)

    assert not report.ok
    assert [error.place for error in report.errors] == [f"{path}:3"]
    assert "invalid JSON" in report.errors[0].reason
    assert store.sessions.count() == 0


def test_bad_record_fails_its_session_with_record_number(store: Store, tmp_path: Path) -> None:
    records = source_records()
    records[4] = {"content": [{"text": "beep", "type": "text"}], "role": "robot", "timestamp": 2}
    path = write_array(tmp_path / "bad.json", records)

    report = store.import_("phi-core", path)

    assert not report.ok
    assert [error.place for error in report.errors] == [f"{path}: record 5"]
    assert "role" in report.errors[0].reason
    assert report.sessions_failed == [ARRAY_SESSION]
    assert report.sessions_written == []
    assert not store.sessions.exists(ARRAY_SESSION)


def test_skip_invalid_skips_only_the_bad_record(store: Store, tmp_path: Path) -> None:
    records = source_records()
    records[4] = {"content": [{"text": "beep", "type": "text"}], "role": "robot", "timestamp": 2}
    path = write_array(tmp_path / "bad.json", records)

    report = store.import_("phi-core", path, skip_invalid=True)

    assert report.ok
    assert [error.place for error in report.skipped] == [f"{path}: record 5"]
    assert report.sessions_written == [ARRAY_SESSION]
    assert report.messages == 7
    stored = [json.loads(m.source) for m in store.messages.records(ARRAY_SESSION)]
    assert stored == records[:4] + records[5:]


def test_other_sessions_are_still_written_when_one_fails(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "histories"
    folder.mkdir()
    write_array(folder / "a-good.json", [{"content": [{"text": "hi", "type": "text"}], "role": "user", "timestamp": 1}])
    write_array(folder / "b-bad.json", [{"role": "robot"}])

    report = store.import_("phi-core", folder)

    assert report.sessions_written == ["a-good"]
    assert report.sessions_failed == ["b-bad"]
    assert [error.place for error in report.errors] == [f"{folder / 'b-bad.json'}: record 1"]
    assert store.sessions.exists("a-good") and not store.sessions.exists("b-bad")


def test_unknown_format_raises(store: Store) -> None:
    with pytest.raises(ImportFailed, match="no-such-format"):
        store.import_("no-such-format", ARRAY)


def test_missing_path_raises(store: Store, tmp_path: Path) -> None:
    with pytest.raises(ImportFailed, match="no such file"):
        store.import_("phi-core", tmp_path / "missing.json")
    assert store.sessions.count() == 0


def test_conflicting_session_needs_replace(store: Store) -> None:
    store.sessions.create(ARRAY_SESSION, title="written by the app")

    report = store.import_("phi-core", ARRAY)

    assert not report.ok
    assert report.sessions_failed == [ARRAY_SESSION]
    assert "already exists" in report.errors[0].reason
    assert store.sessions.get(ARRAY_SESSION).title == "written by the app"
    assert list(store.messages.records(ARRAY_SESSION)) == []

    replaced = store.import_("phi-core", ARRAY, replace=True)

    assert replaced.ok and replaced.sessions_written == [ARRAY_SESSION]
    assert len(list(store.messages.records(ARRAY_SESSION))) == 8


def test_changed_source_is_not_silently_merged(store: Store, tmp_path: Path) -> None:
    path = write_array(tmp_path / "history.json", source_records())
    store.import_("phi-core", path)
    changed = source_records()
    changed[0]["content"][0]["text"] = "List the files in lib/"
    write_array(path, changed)

    refused = store.import_("phi-core", path)

    assert refused.sessions_failed == [ARRAY_SESSION] and "already exists" in refused.errors[0].reason
    assert store.messages.turn(ARRAY_L1, 0).messages[0].text() == "List the files in src/"

    replaced = store.import_("phi-core", path, replace=True)

    assert replaced.sessions_written == [ARRAY_SESSION]
    assert store.messages.turn(ARRAY_L1, 0).messages[0].text() == "List the files in lib/"
    assert len(list(store.messages.records(ARRAY_SESSION))) == 8


# --- phi-core: session files ------------------------------------------------------------------


def test_session_dir_report_ignores_lock_files(store: Store) -> None:
    assert (SESSIONS / f"{MAIN}.json.lock").exists()

    report = store.import_("phi-core", SESSIONS)

    assert report.ok
    assert report.files == 2
    assert sorted(report.sessions_written) == sorted([MAIN, CHILD])
    assert report.records == 5  # one record per LoopRecord
    assert report.loops == 5
    assert report.messages == 11
    assert dict(report.by_role) == {"user": 5, "assistant": 5, "toolResult": 1}
    assert dict(report.by_kind) == {}


def test_session_file_header(store: Store) -> None:
    store.import_("phi-core", SESSIONS)

    session = store.sessions.get(MAIN)
    assert session.agent_id == "9b2d4c6e-1f3a-4b5c-8d7e-6f5a4b3c2d1e"
    assert session.created_at == utc(2026, 1, 1, 0, 0, 0, 123)  # nanoseconds trimmed to microseconds
    assert session.updated_at == utc(2026, 1, 1, 0, 3, 0)


def test_session_file_loop_tree(store: Store) -> None:
    store.import_("phi-core", SESSIONS)
    source = json.loads((SESSIONS / f"{MAIN}.json").read_text(encoding="utf-8"))

    loops = {loop.loop_id: loop for loop in store.loops.list(MAIN)}
    assert list(loops) == [L1, L2, L3, L4]
    shape = {
        loop_id: (loop.parent_loop_id, loop.continuation_kind.value, loop.status.value)
        for loop_id, loop in loops.items()
    }
    assert shape == {
        L1: (None, "initial", "completed"),
        L2: (L1, "default", "completed"),
        L3: (L1, "branch", "aborted"),
        L4: (L2, "rerun", "running"),
    }
    assert loops[L1].config == source["loops"][0]["config"]
    assert loops[L3].config == {
        "model": "gpt-5",
        "provider": "openai",
        "config_id": "openai.gpt-5",
        "api": "open_ai_responses",
    }
    assert loops[L1].started_at == utc(2026, 1, 1, 0, 0, 0, 123)
    assert loops[L1].ended_at == utc(2026, 1, 1, 0, 0, 32, 500000)
    assert loops[L3].started_at == utc(2026, 1, 1, 0, 2, 0, 123456)
    assert loops[L4].ended_at is None
    # children: the sub-agent loop it spawned (another session), then its continuations
    assert [child.loop_id for child in store.loops.children(L1)] == [CHILD_LOOP, L2, L3]


def test_session_file_turn_indexes(store: Store) -> None:
    store.import_("phi-core", SESSIONS)

    placed = [(m.loop_id, m.turn_index, m.seq) for m in store.messages.records(MAIN)]
    assert placed == [
        (L1, 0, 0), (L1, 0, 1), (L1, 0, 2), (L1, 1, 3),
        (L2, 0, 0), (L2, 0, 1),
        (L3, 0, 0), (L3, 0, 1),
        (L4, 0, 0),
    ]  # fmt: skip
    turn = store.messages.turn(L1, 0)
    assert [str(m.role) for m in turn.messages] == ["user", "assistant", "toolResult"]


def test_sub_agent_session_links_to_the_spawning_tool_call(store: Store) -> None:
    store.import_("phi-core", SESSIONS)

    (loop,) = store.loops.list(CHILD)
    assert loop.loop_id == CHILD_LOOP
    assert loop.continuation_kind.value == "initial" and loop.parent_loop_id is None
    assert (loop.spawn_loop_id, loop.spawn_tool_call_id) == (L1, "toolu_02")
    assert store.sessions.get(CHILD).created_at == utc(2026, 1, 1, 0, 0, 1, 500000)


def test_sub_agent_session_imports_before_its_parent(store: Store) -> None:
    # a cross-session reference is a plain value: the child may come first
    store.import_("phi-core", SESSIONS / f"{CHILD}.json")

    assert store.loops.get(CHILD_LOOP).spawn_loop_id == L1
    assert not store.sessions.exists(MAIN)


def test_session_file_totals_equal_what_the_source_says(store: Store) -> None:
    store.import_("phi-core", SESSIONS)

    for session_id in (MAIN, CHILD):
        source = json.loads((SESSIONS / f"{session_id}.json").read_text(encoding="utf-8"))
        expected = tuple(sum(loop["usage"][name] for loop in source["loops"]) for name in TOKEN_FIELDS)
        assert tokens(store.usage.session(session_id)) == expected
        for record in source["loops"]:
            assert tokens(store.usage.loop(record["loop_id"])) == tuple(record["usage"][name] for name in TOKEN_FIELDS)


def test_session_file_signature_and_arguments_are_byte_exact(store: Store) -> None:
    store.import_("phi-core", SESSIONS)
    source = json.loads((SESSIONS / f"{MAIN}.json").read_text(encoding="utf-8"))["loops"][0]["messages"][1]

    stored = store.messages.turn(L1, 0).messages[1]
    assert stored.content[0].signature == source["content"][0]["signature"]
    assert json.dumps(stored.content[1].arguments) == json.dumps(source["content"][1]["arguments"])


def test_session_dir_reimport_is_unchanged(store: Store) -> None:
    store.import_("phi-core", SESSIONS)
    before = {sid: snapshot(store, sid) for sid in (MAIN, CHILD)}
    total = store.usage.total()

    again = store.import_("phi-core", SESSIONS)

    assert sorted(again.sessions_unchanged) == sorted([MAIN, CHILD])
    assert again.sessions_written == []
    assert {sid: snapshot(store, sid) for sid in (MAIN, CHILD)} == before
    assert store.usage.total() == total


def test_bad_message_in_session_file_is_reported_and_skippable(store: Store, tmp_path: Path) -> None:
    data = json.loads((SESSIONS / f"{MAIN}.json").read_text(encoding="utf-8"))
    data["loops"][1]["messages"][0]["role"] = "robot"
    path = tmp_path / f"{MAIN}.json"
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")

    report = store.import_("phi-core", path)

    assert report.sessions_failed == [MAIN]
    assert len(report.errors) == 1 and report.errors[0].place.startswith(f"{path}:")
    assert not store.sessions.exists(MAIN)

    skipping = store.import_("phi-core", path, skip_invalid=True)

    assert skipping.ok and skipping.sessions_written == [MAIN]
    assert len(skipping.skipped) == 1
    assert [str(m.role) for m in store.messages.loop(L2)] == ["assistant"]
