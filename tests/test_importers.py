"""Importers: phi-core message arrays and session files, and turnstore's own JSONL (docs/design.md §6, §7).

The phi-core fixtures under ``fixtures/phi_core`` are written by hand from
``docs/wire-format.md`` (its examples, and the session file shape).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, extension, tool_result, usage, user

from turnstore import ImportFailed, Store
from turnstore.importers.base import loads_json, parse_agent_message
from turnstore.importers.turnstore import _fast_message_line
from turnstore.repositories.messages import dump_message

FIXTURES = Path(__file__).parent / "fixtures"
ARRAY = FIXTURES / "phi_core" / "messages" / "save_messages.json"
SESSIONS = FIXTURES / "phi_core" / "sessions"
SMALL_TURNSTORE = FIXTURES / "turnstore" / "small.jsonl"

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

TOKEN_FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=timezone.utc)


def source_records() -> list[dict[str, Any]]:
    return json.loads(ARRAY.read_text(encoding="utf-8"))


def write_array(path: Path, records: list[Any]) -> Path:
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def snapshot(store: Store, session_id: str) -> dict[str, Any]:
    """Everything a session holds, for before/after comparisons."""
    return {
        "session": store.sessions.get(session_id),
        "loops": store.loops.list(session_id),
        "messages": list(store.messages.records(session_id)),
        "usage": store.usage.session(session_id),
    }


def tokens(totals: Any) -> tuple[int, ...]:
    return tuple(getattr(totals, name) for name in TOKEN_FIELDS)


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
    assert loops[L3].config == {"model": "gpt-5", "provider": "openai", "config_id": "openai.gpt-5", "api": "open_ai_responses"}
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


# --- turnstore JSONL -------------------------------------------------------------------------


def build_rich_session(store: Store, *, prelude: bool = False) -> str:
    """A session with a branch (fork_after), a compaction (keep_from, usage on the summary),
    extension messages and a sub-agent loop spawned by a tool call."""
    if prelude:  # another session first, so message ids differ from a fresh store's
        other = store.sessions.create("prelude").session_id
        loop = store.loops.start(other, config={"model": "gpt-5", "provider": "openai"})
        store.messages.append_turn(loop.loop_id, 0, [user("x"), assistant("y"), user("z")])
    sid = store.sessions.create(
        "rich", agent_id="agent-1", title="Rich session", metadata={"project": "dates", "tags": ["a", "b"]}
    ).session_id
    first = store.loops.start(sid, config={"model": "claude-sonnet-4-5", "provider": "anthropic", "thinking_level": "medium"})
    store.messages.append_turn(first.loop_id, 0, [
        user("fix it", 1_000),
        assistant("looking", calls=("c1",), thinking="run the test", signature="Sig+/==\u00e9xyz", timestamp=2_000),
        tool_result("c1", "1 failed", error=True, timestamp=3_000),
    ])
    store.messages.append(extension("ui_notice", {"text": "tests ran"}), loop_id=first.loop_id)
    store.messages.append_turn(first.loop_id, 1, [assistant("fixed", u=usage(300, 40, cache_read=900), timestamp=4_000)])
    store.loops.end(first.loop_id)

    second = store.loops.start(sid, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    prompt, _ = store.messages.append_turn(second.loop_id, 0, [
        user("research it", 5_000),
        assistant(None, calls=("s1",), timestamp=6_000),
    ])
    sub = store.loops.start(sid, config={"model": "gpt-5-mini", "provider": "openai"}, continuation="initial",
                            spawn_loop_id=second.loop_id, spawn_tool_call_id="s1")
    store.messages.append_turn(sub.loop_id, 0, [
        user("sub task", 6_100),
        assistant("sub answer", model="gpt-5-mini", provider="openai", timestamp=6_200),
    ])
    store.loops.end(sub.loop_id)
    store.messages.append(tool_result("s1", "sub answer", timestamp=6_300), loop_id=second.loop_id, turn_index=0)
    final = store.messages.append_turn(second.loop_id, 1, [assistant("final", timestamp=7_000)])[0]
    store.loops.end(second.loop_id)

    branch = store.loops.start(sid, config={"model": "gpt-5", "provider": "openai"}, parent_loop_id=second.loop_id,
                               continuation="branch", fork_after=prompt)
    store.messages.append_turn(branch.loop_id, 0, [assistant("alternative", model="gpt-5", provider="openai", timestamp=8_000)])
    store.loops.end(branch.loop_id, "aborted")

    compacted = store.loops.compact(second.loop_id, "summary of the research", keep_from=final,
                                    tokens_before=1_234, usage=usage(500, 50))
    store.messages.append_turn(compacted.loop_id, 0, [user("continue", 9_000), assistant("ok", timestamp=9_100)])
    return sid


def export_to(store: Store, session_id: str, path: Path) -> Path:
    store.export(session_id, "turnstore", path)
    return path


def position(store: Store, message_id: int | None) -> tuple[str, int] | None:
    """Where a message is: (loop, seq); ids differ between stores, places do not."""
    if message_id is None:
        return None
    stored = store.messages.get(message_id)
    return stored.loop_id, stored.seq


@pytest.fixture
def round_trip(tmp_path: Path) -> Any:
    """A rich session exported from one store (ids offset by a prelude) and imported into a fresh one."""
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        sid = build_rich_session(a, prelude=True)
        path = export_to(a, sid, tmp_path / "rich.jsonl")
        report = b.import_("turnstore", path)
        yield a, b, sid, report


def test_turnstore_round_trip_report(round_trip: Any) -> None:
    a, _b, sid, report = round_trip

    assert report.ok and report.sessions_written == [sid]
    assert report.loops == 5
    assert report.messages == len(list(a.messages.records(sid))) == 15
    assert dict(report.by_kind) == {"ui_notice": 1, "compaction_summary": 1}


def test_turnstore_round_trip_session_and_messages(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert b.sessions.get(sid) == a.sessions.get(sid)

    def rows(store: Store) -> list[Any]:
        return [(m.loop_id, m.turn_index, m.seq, m.message, m.source) for m in store.messages.records(sid)]

    assert rows(b) == rows(a)
    signature = next(m.message for m in b.messages.records(sid) if m.message.role == "assistant").content[0].signature
    assert signature == "Sig+/==\u00e9xyz"


def test_turnstore_round_trip_loops_with_fork_points_remapped(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    source_loops, imported_loops = a.loops.list(sid), b.loops.list(sid)
    assert [loop.model_dump(exclude={"fork_after", "keep_from"}) for loop in imported_loops] == [
        loop.model_dump(exclude={"fork_after", "keep_from"}) for loop in source_loops
    ]
    for old, new in zip(source_loops, imported_loops):
        assert position(b, new.fork_after) == position(a, old.fork_after)
        assert position(b, new.keep_from) == position(a, old.keep_from)
    kinds = {loop.continuation_kind.value: loop for loop in imported_loops}
    assert kinds["branch"].fork_after is not None and kinds["branch"].fork_after != next(
        loop.fork_after for loop in source_loops if loop.continuation_kind.value == "branch"
    )  # the ids really were remapped
    assert kinds["compaction"].keep_from is not None


def test_turnstore_round_trip_context(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    for loop in a.loops.list(sid):
        assert b.messages.context(loop.loop_id) == a.messages.context(loop.loop_id)


def test_turnstore_round_trip_usage_tokens(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert tokens(b.usage.session(sid)) == tokens(a.usage.session(sid))
    assert b.usage.session(sid).requests == a.usage.session(sid).requests
    assert [(row.loop_id, tokens(row)) for row in b.usage.by_loop(sid)] == [
        (row.loop_id, tokens(row)) for row in a.usage.by_loop(sid)
    ]


def test_turnstore_round_trip_usage_cost(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert b.usage.session(sid).cost == pytest.approx(a.usage.session(sid).cost)
    assert [(row.model, row.provider, row.cost) for row in b.usage.by_model(sid)] == [
        (row.model, row.provider, row.cost) for row in a.usage.by_model(sid)
    ]


def test_turnstore_round_trip_usage_by_day(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert [(row.day, tokens(row)) for row in b.usage.by_day(sid)] == [
        (row.day, tokens(row)) for row in a.usage.by_day(sid)
    ]


def test_turnstore_export_again_gives_identical_text(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        sid = build_rich_session(a)
        first = a.export(sid, "turnstore")
        b.import_("turnstore", export_to(a, sid, tmp_path / "rich.jsonl"))

        assert b.export(sid, "turnstore") == first


def test_turnstore_second_generation_export_is_stable(tmp_path: Path) -> None:
    """Once imported, exporting and importing again reproduces the same text."""
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b, Store(tmp_path / "c.db") as c:
        sid = build_rich_session(a)
        b.import_("turnstore", export_to(a, sid, tmp_path / "one.jsonl"))
        second = b.export(sid, "turnstore")
        c.import_("turnstore", export_to(b, sid, tmp_path / "two.jsonl"))

        assert c.export(sid, "turnstore") == second


def test_turnstore_reimport_is_unchanged(round_trip: Any, tmp_path: Path) -> None:
    _a, b, sid, _ = round_trip
    before = snapshot(b, sid)

    again = b.import_("turnstore", tmp_path / "rich.jsonl")

    assert again.sessions_unchanged == [sid] and again.sessions_written == []
    assert snapshot(b, sid) == before


def test_handwritten_turnstore_file(store: Store) -> None:
    report = store.import_("turnstore", SMALL_TURNSTORE)

    assert report.ok and report.sessions_written == ["small-session"]
    assert report.records == 6 and report.messages == 4 and report.loops == 2
    session = store.sessions.get("small-session")
    assert (session.agent_id, session.title, session.metadata) == ("agent-7", "Small handwritten session", {"origin": "hand"})
    branch = store.loops.get("small-session.anthropic.claude-haiku-4-5.2")
    assert branch.continuation_kind.value == "branch" and branch.status.value == "aborted"
    assert position(store, branch.fork_after) == ("small-session.anthropic.claude-haiku-4-5.1", 0)
    assert [m.text() for m in store.messages.context(branch.loop_id)] == ["What is 2+2?", "Four."]
    assert tokens(store.usage.session("small-session")) == (40, 5, 0, 0, 0, 45)


def test_turnstore_bad_line_is_reported_with_file_and_line(store: Store, tmp_path: Path) -> None:
    lines = SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3][:-5]  # line 4: cut-off JSON
    bad = json.loads(lines[5])
    bad["message"]["role"] = "robot"
    lines[5] = json.dumps(bad)  # line 6: unknown role
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    report = store.import_("turnstore", path)

    assert [error.place for error in report.errors] == [f"{path}:4", f"{path}:6"]
    assert report.sessions_failed == ["small-session"]
    assert not store.sessions.exists("small-session")

    skipping = store.import_("turnstore", path, skip_invalid=True)

    assert skipping.ok and [error.place for error in skipping.skipped] == [f"{path}:4", f"{path}:6"]
    assert [str(m.message.role) for m in store.messages.records("small-session")] == ["assistant", "assistant"]


def test_turnstore_one_pass_message_lines_equal_the_general_parse(round_trip: Any, tmp_path: Path) -> None:
    # Export message lines are read in one pass of pydantic's JSON reader; what that gives must be
    # exactly what parsing the line and validating its message gives.
    lines = (tmp_path / "rich.jsonl").read_text(encoding="utf-8").splitlines()
    message_lines = [line for line in lines if line.startswith('{"type":"message",')]
    assert len(message_lines) >= 10
    for line in message_lines:
        fast = _fast_message_line(line)
        general = loads_json(line)
        assert fast is not None
        assert {key: value for key, value in fast.items() if key != "message"} == {
            key: value for key, value in general.items() if key in fast and key != "message"
        }
        expected = parse_agent_message(general["message"], "here")
        assert type(fast["message"]) is type(expected)
        assert dump_message(fast["message"]) == dump_message(expected)
        assert fast["message"].model_extra == expected.model_extra


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('{"type":"loop","loop_id":"l"}', id="not-a-message-line"),
        pytest.param('{"type":"message","loop_id":"l","message":{"role":"robot"}}', id="invalid-message"),
        pytest.param('{"type":"message","loop_id":"l"}', id="no-message"),
        pytest.param('{"type":"message","loop_id":"l","message":null}', id="null-message"),
        pytest.param('{"type":"message","loop_id":"l","message":{"role":"user","content":[],"timestamp":1},'
                     '"type":"loop"}', id="repeated-type-key"),
        pytest.param('{"type":"message","loop_id":"l","message":{"role":"user","content":[{"type":"text",'
                     '"text":"\\ud800"}],"timestamp":1}}', id="lone-surrogate"),
        pytest.param('{"type":"message","loop_id":"l","message":{"role":"user","content":[],"timestamp":1}', id="cut-off"),
    ],
)
def test_turnstore_lines_the_one_pass_refuses_go_the_general_way(line: str) -> None:
    assert _fast_message_line(line) is None


def test_turnstore_compact_message_line_with_an_invalid_message_names_its_line(store: Store, tmp_path: Path) -> None:
    lines = SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[4])
    bad["message"]["stopReason"] = "sleepy"
    lines[4] = json.dumps(bad, separators=(",", ":"))  # as an export writes it: one-pass candidate
    assert lines[4].startswith('{"type":"message",')
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    report = store.import_("turnstore", path)

    assert [error.place for error in report.errors] == [f"{path}:5"]
    assert "stopReason" in report.errors[0].reason
    assert not store.sessions.exists("small-session")


def test_turnstore_file_not_starting_with_a_session_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "headless.jsonl"
    path.write_text("\n".join(SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()[1:]) + "\n", encoding="utf-8")

    report = store.import_("turnstore", path)

    assert not report.ok
    assert [error.place for error in report.errors] == [f"{path}:1"]
    assert store.sessions.count() == 0


@pytest.mark.parametrize("dry_run", [False, True])
def test_reimporting_the_stores_own_export_is_unchanged(store: Store, tmp_path: Path, dry_run: bool) -> None:
    session_id = store.sessions.create("own", title="written by the app", metadata={"k": [1, "é"]}).session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(loop_id, 0, [user("hi"), assistant("hello", u=usage(3, 2), calls=("c1",))])
    store.messages.append_turn(loop_id, 1, [tool_result("c1", "out"), extension("note", {"n": 1})])
    path = tmp_path / "own.jsonl"
    store.export(session_id, "turnstore", path)

    again = store.import_("turnstore", path, dry_run=dry_run)

    assert again.ok and again.sessions_unchanged == ["own"] and again.sessions_written == []
    store.messages.append(user("later"), loop_id=loop_id)
    changed = store.import_("turnstore", path, dry_run=dry_run)
    assert changed.sessions_failed == ["own"] and "with other content" in changed.errors[0].reason
    assert store.messages.last(session_id, 1)[0].text() == "later"
