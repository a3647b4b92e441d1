"""store.export(session_id, fmt, file): phi-core's two forms and turnstore's lossless JSONL (docs/design.md §7)."""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, extension, tool_result, usage, user

from turnstore import (
    ExportFailed,
    Message,
    SessionNotFound,
    StopReason,
    Store,
    parse_message,
)
from turnstore.cli import main
from turnstore.demo import build_demo
from turnstore.export import EXPORT_FORMATS, SESSION_KEY, _Exporter
from turnstore.repositories.message_json import dump_message

FIXTURES = Path(__file__).parent / "fixtures" / "phi_core"
ARRAY = FIXTURES / "messages" / "save_messages.json"
SESSIONS = FIXTURES / "sessions"
MAIN = "5b6f0d3c-8e21-4a7b-9c44-2f1e7a9d0b63"
CHILD = "c0ffee00-1d2e-4f3a-8b5c-6d7e8f9a0b1c"

# phi-core's StopReason values (formats.md §1.2): no "refusal".
PHI_STOP_REASONS = {
    "stop", "length", "toolUse", "error", "aborted", "maxTurns",
    "userStop", "handoff", "guardRail", "contextCompacted", "paused",
}  # fmt: skip
PHI_USAGE_KEYS = {"input", "output", "reasoning", "cache_read", "cache_write", "total_tokens"}
LOOP_RECORD_KEYS = {
    "loop_id", "session_id", "agent_id", "parent_loop_id", "continuation_kind", "started_at", "ended_at",
    "status", "rejection", "config", "messages", "turns", "usage", "metadata", "events",
    "children_loop_ids", "child_loop_refs", "parallel_group",
}  # fmt: skip
RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$")


def is_u64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def assert_phi_core_content(block: dict[str, Any]) -> None:
    kind = block["type"]
    if kind == "text":
        assert isinstance(block["text"], str)
    elif kind == "image":
        assert isinstance(block["data"], str) and isinstance(block["mimeType"], str)
    elif kind == "thinking":
        assert isinstance(block["thinking"], str)
        assert isinstance(block.get("signature", ""), str)
    elif kind == "toolCall":
        assert isinstance(block["id"], str) and isinstance(block["name"], str) and "arguments" in block
    else:
        raise AssertionError(f"content type {kind!r} is not phi-core's")


def assert_phi_core_message(message: dict[str, Any]) -> None:
    """What phi-core's serde definitions (formats.md §1.2-1.3) accept, checked independently of turnstore's models."""
    role = message["role"]
    if role == "extension":
        assert isinstance(message["kind"], str) and "data" in message
        return
    assert role in {"user", "assistant", "toolResult"}, role
    assert is_u64(message["timestamp"])
    for block in message["content"]:
        assert_phi_core_content(block)
    if "turnId" in message:
        assert isinstance(message["turnId"]["loopId"], str) and is_u64(message["turnId"]["turnIndex"])
    if role == "assistant":
        assert message["stopReason"] in PHI_STOP_REASONS
        assert isinstance(message["model"], str) and isinstance(message["provider"], str)
        assert {"input", "output"} <= set(message["usage"]) and all(
            is_u64(message["usage"][key]) for key in PHI_USAGE_KEYS & set(message["usage"])
        )
        assert "errorMessage" not in message
    if role == "toolResult":
        assert isinstance(message["toolCallId"], str) and isinstance(message["toolName"], str)
        assert isinstance(message["isError"], bool)


def build_session(store: Store) -> dict[str, Any]:
    """An API-built session: two loops, a branch, a compaction, a refusal, an extension message."""
    sid = store.sessions.create("api-session", agent_id="agent-9", title="Built through the API").session_id
    first = store.loops.start(sid, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    store.messages.append_turn(
        first.loop_id,
        0,
        [
            user("run the tests", 1_000),
            assistant("running", calls=("c1",), thinking="pytest first", signature="sig/+=", timestamp=2_000),
            tool_result("c1", "3 passed", timestamp=3_000),
        ],
    )
    store.messages.append(extension("status_update", {"status": "running"}), loop_id=first.loop_id)
    store.messages.append_turn(
        first.loop_id, 1, [assistant("all green", u=usage(200, 20, cache_read=800), timestamp=4_000)]
    )
    store.loops.end(first.loop_id)
    second = store.loops.start(sid, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    prompt, refusal = store.messages.append_turn(
        second.loop_id,
        0,
        [
            user("now delete prod", 5_000),
            assistant("I can't help with that.", stop=StopReason.REFUSAL, timestamp=6_000),
        ],
    )
    store.loops.end(second.loop_id)
    branch = store.loops.start(
        sid,
        config={"model": "gpt-5", "provider": "openai"},
        parent_loop_id=second.loop_id,
        continuation_kind="branch",
        fork_after=prompt,
    )
    store.messages.append_turn(branch.loop_id, 0, [assistant("No.", model="gpt-5", provider="openai", timestamp=7_000)])
    store.loops.end(branch.loop_id, "aborted")
    compaction = store.loops.compact(second.loop_id, "they asked to delete prod; refused", usage=usage(400, 30))
    return {
        "sid": sid,
        "loops": [first.loop_id, second.loop_id, branch.loop_id, compaction.loop_id],
        "refusal": refusal,
    }


@pytest.fixture
def api_session(store: Store) -> dict[str, Any]:
    return build_session(store)


# --- phi-core: save_messages() array ------------------------------------------------------


def test_phi_core_export_of_imported_array_gives_back_the_source(store: Store) -> None:
    report = store.import_("phi-core", ARRAY)

    session_id = report.sessions_written[0]

    exported = json.loads(store.export(session_id, "phi-core"))

    assert exported[0].pop(SESSION_KEY) == session_id  # the session it is, on the first message only
    assert exported == json.loads(ARRAY.read_text(encoding="utf-8"))


def test_phi_core_export_of_imported_session_files_is_the_loops_messages(store: Store) -> None:
    store.import_("phi-core", SESSIONS)
    source = json.loads((SESSIONS / f"{MAIN}.json").read_text(encoding="utf-8"))

    exported = json.loads(store.export(MAIN, "phi-core"))

    assert exported[0].pop(SESSION_KEY) == MAIN
    assert exported == [message for loop in source["loops"] for message in loop["messages"]]


def test_phi_core_export_of_api_session_is_loadable_by_phi_core(store: Store, api_session: dict[str, Any]) -> None:
    exported = json.loads(store.export(api_session["sid"], "phi-core"))

    assert isinstance(exported, list)
    for message in exported:
        assert_phi_core_message(message)
        parse_message(message)  # and turnstore reads it back
    stored = list(store.messages.records(api_session["sid"]))
    assert len(exported) == len(stored)
    assert [m["role"] for m in exported] == [str(m.message.role) for m in stored]  # in order


def test_phi_core_export_maps_refusal_to_guard_rail(store: Store, api_session: dict[str, Any]) -> None:
    exported = json.loads(store.export(api_session["sid"], "phi-core"))

    refusal = next(
        m for m in exported if m["role"] == "assistant" and m["content"][0].get("text") == "I can't help with that."
    )
    assert refusal["stopReason"] == "guardRail"
    # the store itself still knows it was a refusal
    assert store.messages.get(api_session["refusal"]).message.stop_reason == StopReason.REFUSAL


def test_phi_core_export_keeps_turn_ids_signatures_and_extensions(store: Store, api_session: dict[str, Any]) -> None:
    first = api_session["loops"][0]

    exported = json.loads(store.export(api_session["sid"], "phi-core"))

    assert exported[0]["turnId"] == {"loopId": first, "turnIndex": 0}
    assert exported[1]["content"][0] == {"type": "thinking", "thinking": "pytest first", "signature": "sig/+="}
    assert exported[3] == {"role": "extension", "kind": "status_update", "data": {"status": "running"}}


def test_phi_core_export_of_imported_yoagent_spellings_is_loadable(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "yo.json"
    path.write_text(json.dumps([
        {"content": [{"text": "hi", "type": "text"}], "role": "user", "timestamp": 1},
        {"content": [{"text": "no", "type": "text"}], "model": "m", "provider": "p", "role": "assistant",
         "stopReason": "refusal", "timestamp": 2,
         "usage": {"input": 5, "output": 1, "cacheRead": 3, "cacheWrite": 0, "totalTokens": 9}},
    ]), encoding="utf-8")  # fmt: skip
    store.import_("phi-core", path)

    exported = json.loads(store.export("yo", "phi-core"))

    for message in exported:
        assert_phi_core_message(message)
    assert exported[1]["stopReason"] == "guardRail"
    assert exported[1]["usage"]["cache_read"] == 3


# --- phi-core-session --------------------------------------------------------------------


def test_phi_core_session_export_of_imported_files_gives_back_the_source(store: Store) -> None:
    store.import_("phi-core", SESSIONS)

    for session_id in (MAIN, CHILD):
        exported = json.loads(store.export(session_id, "phi-core-session"))
        assert exported == json.loads((SESSIONS / f"{session_id}.json").read_text(encoding="utf-8"))


def test_phi_core_session_export_of_api_session(store: Store, api_session: dict[str, Any]) -> None:
    first, second, branch, compaction = api_session["loops"]

    exported = json.loads(store.export(api_session["sid"], "phi-core-session"))

    assert exported["session_id"] == api_session["sid"]
    assert exported["agent_id"] == "agent-9"
    assert RFC3339.match(exported["created_at"]) and RFC3339.match(exported["last_active_at"])
    records = {record["loop_id"]: record for record in exported["loops"]}
    assert list(records) == [loop.loop_id for loop in store.loops.list(api_session["sid"])]
    for record in records.values():
        assert set(record) >= LOOP_RECORD_KEYS
        assert record["session_id"] == api_session["sid"]
        assert RFC3339.match(record["started_at"])
        for message in record["messages"]:
            assert_phi_core_message(message)

    assert [records[lid]["continuation_kind"] for lid in (first, second, compaction)] == [
        "Initial",
        "Default",
        "Compaction",
    ]
    branch_kind = records[branch]["continuation_kind"]
    assert list(branch_kind) == ["Branch"] and RFC3339.match(branch_kind["Branch"]["tag"])
    assert [records[lid]["status"] for lid in (first, second, branch, compaction)] == [
        "Completed", "Completed", "Aborted", "Running",
    ]  # fmt: skip
    assert records[second]["parent_loop_id"] == first and records[branch]["parent_loop_id"] == second
    assert records[branch]["config"]["model"] == "gpt-5" and records[branch]["config"]["provider"] == "openai"
    assert records[first]["config"]["config_id"] == "anthropic.claude-sonnet-4-5"


def test_phi_core_session_export_messages_and_usage_per_loop(store: Store, api_session: dict[str, Any]) -> None:
    exported = json.loads(store.export(api_session["sid"], "phi-core-session"))

    for record in exported["loops"]:
        loop_id = record["loop_id"]
        canonical = [m.model_dump(mode="json") for m in store.messages.loop(loop_id)]
        expected_messages = [
            {**m, "stopReason": "guardRail"} if m.get("stopReason") == "refusal" else m for m in canonical
        ]
        assert record["messages"] == expected_messages
        totals = store.usage.loop(loop_id)
        assert record["usage"] == {key: getattr(totals, key) for key in PHI_USAGE_KEYS}
    by_id = {record["loop_id"]: record for record in exported["loops"]}
    first, _, _, compaction = api_session["loops"]
    assert by_id[first]["usage"] == {
        "input": 300, "output": 30, "reasoning": 0, "cache_read": 800, "cache_write": 0, "total_tokens": 1130,
    }  # fmt: skip
    assert by_id[compaction]["usage"]["input"] == 400  # the summary's own cost


# --- turnstore JSONL ---------------------------------------------------------------------


def test_turnstore_export_lines(store: Store, api_session: dict[str, Any]) -> None:
    text = store.export(api_session["sid"], "turnstore")

    assert text.endswith("\n")
    records = [json.loads(line) for line in text.splitlines()]
    loops = store.loops.list(api_session["sid"])
    stored = list(store.messages.records(api_session["sid"]))
    assert [r["type"] for r in records] == ["session"] + ["loop"] * len(loops) + ["message"] * len(stored)

    header = records[0]
    assert header["format"] == "turnstore" and header["version"] == 1
    assert (header["session_id"], header["agent_id"], header["title"]) == (
        api_session["sid"],
        "agent-9",
        "Built through the API",
    )

    loop_lines = records[1 : 1 + len(loops)]
    assert [r["loop_id"] for r in loop_lines] == [loop.loop_id for loop in loops]
    branch_line = next(r for r in loop_lines if r["continuation_kind"] == "branch")
    assert branch_line["fork_after"] == store.loops.get(api_session["loops"][2]).fork_after

    message_lines = records[1 + len(loops) :]
    assert [(r["id"], r["loop_id"], r["turn_index"], r["seq"]) for r in message_lines] == [
        (m.message_id, m.loop_id, m.turn_index, m.seq) for m in stored
    ]
    assert [r["message"] for r in message_lines] == [m.message.model_dump(mode="json") for m in stored]
    # the refusal stays a refusal in the lossless format
    assert any(r["message"].get("stopReason") == "refusal" for r in message_lines)
    summary = next(r for r in message_lines if r["message"].get("kind") == "compaction_summary")
    assert summary["usage"]["input"] == 400 and summary["usage"]["output"] == 30


def test_turnstore_export_keeps_source_records(store: Store) -> None:
    store.import_("phi-core", ARRAY)
    records = json.loads(ARRAY.read_text(encoding="utf-8"))

    lines = [
        json.loads(line) for line in store.export("3f1c9a2e-7b4d-4c1e-9a55-0d2f6b8e1a77", "turnstore").splitlines()
    ]

    assert lines[0]["source_format"] == "phi-core"
    assert [json.loads(r["source"]) for r in lines if r["type"] == "message"] == records


# --- where the text goes, and errors -------------------------------------------------------


@pytest.mark.parametrize("fmt", ["phi-core", "phi-core-session", "turnstore"])
def test_export_to_path_and_file_object_match_the_returned_text(
    store: Store, api_session: dict[str, Any], tmp_path: Path, fmt: str
) -> None:
    text = store.export(api_session["sid"], fmt)
    path = tmp_path / "out.txt"
    buffer = io.StringIO()

    assert store.export(api_session["sid"], fmt, path) is None
    assert store.export(api_session["sid"], fmt, str(path) + ".2") is None
    assert store.export(api_session["sid"], fmt, buffer) is None

    assert path.read_text(encoding="utf-8") == text
    assert Path(str(path) + ".2").read_text(encoding="utf-8") == text
    assert buffer.getvalue() == text
    assert text.strip()


def test_export_of_empty_session(store: Store) -> None:
    sid = store.sessions.create("empty").session_id

    assert json.loads(store.export(sid, "phi-core")) == []
    assert json.loads(store.export(sid, "phi-core-session"))["loops"] == []
    assert [json.loads(line)["type"] for line in store.export(sid, "turnstore").splitlines()] == ["session"]


def test_unknown_format_is_a_value_error(store: Store, api_session: dict[str, Any], tmp_path: Path) -> None:
    target = tmp_path / "never.json"

    with pytest.raises(ValueError, match="yaml"):
        store.export(api_session["sid"], "yaml", target)
    assert not target.exists()


@pytest.mark.parametrize("fmt", ["phi-core", "phi-core-session", "turnstore"])
def test_unknown_session_is_session_not_found(store: Store, tmp_path: Path, fmt: str) -> None:
    target = tmp_path / "never.json"

    with pytest.raises(SessionNotFound):
        store.export("no-such-session", fmt)
    with pytest.raises(SessionNotFound):
        store.export("no-such-session", fmt, target)
    assert not target.exists()


# --- every export names its session ------------------------------------------------------

TRICKY_IDS = [
    "proj.v2",
    "proj.v2.anthropic.claude-sonnet-4-5",  # looks like a whole minted loop id
    "a session. with spaces .",
    "セッション.日本語.ü",
]
SUFFIX = {"phi-core": ".json", "phi-core-session": ".json", "turnstore": ".jsonl"}


def dot_prefixes(session_id: str) -> list[str]:
    """``a.b.c`` -> ``a``, ``a.b``: ids that splitting a loop id at some dot could wrongly give."""
    parts = session_id.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts)) if ".".join(parts[:n])]


def build_conversation(store: Store, session_id: str, text: str) -> None:
    """Two loops with minted ids (``{session_id}.anthropic.claude-sonnet-4-5.N``), one tool call."""
    store.sessions.create(session_id, title=f"about {text}")
    config = {"model": "claude-sonnet-4-5", "provider": "anthropic"}
    first = store.loops.start(session_id, config=config)
    store.messages.append_turn(first.loop_id, 0, [
        user(f"{text}?", 1_000),
        assistant("looking", calls=("c1",), timestamp=2_000),
        tool_result("c1", text, timestamp=3_000),
    ])  # fmt: skip
    store.loops.end(first.loop_id)
    second = store.loops.start(session_id, config=config)
    store.messages.append_turn(second.loop_id, 0, [user("and then", 4_000), assistant(f"{text}!", timestamp=5_000)])
    store.loops.end(second.loop_id)


def contents(store: Store, session_id: str) -> list[tuple[str, int | None, dict[str, Any]]]:
    return [(r.loop_id, r.turn_index, r.message.model_dump(mode="json")) for r in store.messages.records(session_id)]


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("session_id", TRICKY_IDS)
def test_export_reimports_as_the_same_session_and_replace_touches_no_other(
    store: Store, tmp_path: Path, fmt: str, session_id: str
) -> None:
    others = dot_prefixes(session_id)
    for other in others:
        build_conversation(store, other, f"unrelated {other}")
    build_conversation(store, session_id, "the one exported")
    before = {other: contents(store, other) for other in others}
    expected = contents(store, session_id)
    path = tmp_path / f"export{SUFFIX[fmt]}"
    store.export(session_id, fmt, path)
    store.sessions.delete(session_id)

    report = store.import_("turnstore" if fmt == "turnstore" else "phi-core", path, replace=True)

    assert report.ok and report.sessions_written == [session_id], report.errors
    assert contents(store, session_id) == expected
    assert {other: contents(store, other) for other in others} == before


def test_phi_core_array_names_its_session_on_the_first_message_only(store: Store, api_session: dict[str, Any]) -> None:
    exported = json.loads(store.export(api_session["sid"], "phi-core"))

    assert exported[0][SESSION_KEY] == api_session["sid"]
    assert [SESSION_KEY in message for message in exported[1:]] == [False] * (len(exported) - 1)


def test_phi_core_array_session_key_wins_over_session_id_option(store: Store, tmp_path: Path) -> None:
    build_conversation(store, "proj.v2", "named")
    path = tmp_path / "renamed-file.json"
    store.export("proj.v2", "phi-core", path)
    store.sessions.delete("proj.v2")

    report = store.import_("phi-core", path, session_id="proj")

    assert report.sessions_written == ["proj.v2"]
    assert not store.sessions.exists("proj")


@pytest.mark.parametrize("value", [None, "", 7, ["proj"]])
def test_phi_core_array_with_a_bad_session_key_is_refused_naming_the_record(
    store: Store, tmp_path: Path, value: Any
) -> None:
    path = tmp_path / "bad.json"
    record = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1, SESSION_KEY: value}
    path.write_text(json.dumps([record]), encoding="utf-8")

    report = store.import_("phi-core", path)

    assert not report.ok and report.sessions_written == []
    assert [(error.place, SESSION_KEY in error.reason) for error in report.errors] == [(f"{path}: record 1", True)]
    assert store.sessions.count() == 0


def test_phi_core_session_header_names_the_stored_session(store: Store, tmp_path: Path) -> None:
    header = json.loads((SESSIONS / f"{MAIN}.json").read_text(encoding="utf-8"))
    path = tmp_path / "session.json"
    path.write_text(json.dumps({**header, "session_id": "proj.v2"}), encoding="utf-8")
    store.import_("phi-core", path)

    exported = json.loads(store.export("proj.v2", "phi-core-session"))

    assert exported["session_id"] == "proj.v2"
    assert list(exported) == list(header)  # the source header's keys, in its order


# --- export files: owner-only, written whole ---------------------------------------------


def file_mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
@pytest.mark.parametrize("existing", [None, 0o644, 0o666, 0o400], ids=["new", "0644", "0666", "0400"])
@pytest.mark.parametrize("umask", [0o022, 0o000, 0o077, 0o277], ids=["022", "000", "077", "277"])
def test_export_file_is_owner_only_whatever_the_umask(
    sqlite_store: Store, tmp_path: Path, umask: int, existing: int | None
) -> None:
    sid = build_session(sqlite_store)["sid"]
    target = tmp_path / "export.json"
    if existing is not None:
        target.write_text("old", encoding="utf-8")
        target.chmod(existing)
    old = os.umask(umask)
    try:
        sqlite_store.export(sid, "phi-core", target)
    finally:
        os.umask(old)

    assert file_mode(target) == 0o600
    assert target.read_text(encoding="utf-8") == sqlite_store.export(sid, "phi-core")
    assert [name for name in os.listdir(tmp_path) if "export" in name] == ["export.json"]  # no temporary file left


def full_disk_after_one_partial_write(monkeypatch: pytest.MonkeyPatch) -> None:
    """``os.write`` writes half of its first buffer, then fails as a full disk does."""
    real_write = os.write
    calls: list[int] = []

    def write(fd: int, data: Any) -> int:
        calls.append(fd)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, bytes(data)[: max(1, len(data) // 2)])

    monkeypatch.setattr(os, "write", write)


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
@pytest.mark.parametrize("existed", [False, True], ids=["new", "replacing"])
def test_export_on_a_full_disk_leaves_the_target_as_it_was(
    sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, existed: bool
) -> None:
    sid = build_session(sqlite_store)["sid"]
    folder = tmp_path / "out"
    folder.mkdir()
    target = folder / "export.json"
    if existed:
        target.write_text("the previous export", encoding="utf-8")
        target.chmod(0o640)
    full_disk_after_one_partial_write(monkeypatch)

    with pytest.raises(ExportFailed) as caught:
        sqlite_store.export(sid, fmt, target)

    monkeypatch.undo()
    message = str(caught.value)
    assert "\n" not in message and str(target) in message and "No space left on device" in message
    assert os.listdir(folder) == (["export.json"] if existed else [])  # no temporary file left behind
    if existed:
        assert target.read_text(encoding="utf-8") == "the previous export" and file_mode(target) == 0o640


def test_export_failing_while_reading_leaves_no_file(
    sqlite_store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = build_session(sqlite_store)["sid"]
    folder = tmp_path / "out"
    folder.mkdir()
    real_rows = _Exporter.rows

    def rows_then_failure(self: _Exporter) -> Any:
        yield next(iter(real_rows(self)))
        raise RuntimeError("the database went away")

    monkeypatch.setattr(_Exporter, "rows", rows_then_failure)

    with pytest.raises(RuntimeError, match="went away"):
        sqlite_store.export(sid, "turnstore", folder / "export.jsonl")

    assert os.listdir(folder) == []


@pytest.mark.parametrize(
    ("where", "reason"),
    [("missing/export.json", "No such file or directory"), ("a-folder", "Is a directory")],
)
def test_export_to_an_unwritable_place_is_one_line_export_failed(
    sqlite_store: Store, tmp_path: Path, where: str, reason: str
) -> None:
    sid = build_session(sqlite_store)["sid"]
    (tmp_path / "a-folder").mkdir()
    listing = sorted(os.listdir(tmp_path))

    with pytest.raises(ExportFailed) as caught:
        sqlite_store.export(sid, "phi-core", tmp_path / where)

    assert str(caught.value) == f"cannot write the export to {str(tmp_path / where)!r}: {reason}"
    assert sorted(os.listdir(tmp_path)) == listing and os.listdir(tmp_path / "a-folder") == []


def test_cli_export_on_a_full_disk_is_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "store.db"
    with Store(db) as opened:
        sid = build_session(opened)["sid"]
    target = tmp_path / "export.json"
    capsys.readouterr()
    full_disk_after_one_partial_write(monkeypatch)

    code = main(["--db", str(db), "export", sid, "-o", str(target)])

    monkeypatch.undo()
    err = capsys.readouterr().err
    assert code == 1
    assert err == f"error: cannot write the export to {str(target)!r}: No space left on device\n"
    assert not target.exists()


# --- what is exact, and what is equal by value ---------------------------------------------

NUMBERS_SOURCE = (
    '[{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"scale",'
    '"arguments":{"ratio":1.10,"count":1e5,"id":12345678901234567890123,"note":"caf\\u00e9"}}],'
    '"stopReason":"toolUse","model":"m","provider":"p","usage":{"input":1,"output":1},"timestamp":5}]'
)


def test_phi_core_export_is_equal_by_value_with_numbers_in_shortest_form(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "numbers.json"
    path.write_text(NUMBERS_SOURCE, encoding="utf-8")
    store.import_("phi-core", path)

    text = store.export("numbers", "phi-core")

    exported = json.loads(text)
    assert exported[0].pop(SESSION_KEY) == "numbers"
    assert exported[0]["content"] == json.loads(NUMBERS_SOURCE)[0]["content"]  # equal by value...
    # ...not byte for byte: 1.10 -> 1.1, 1e5 -> 100000.0, escapes decoded; key order and big integers kept.
    assert '"arguments":{"ratio":1.1,"count":100000.0,"id":12345678901234567890123,"note":"café"}' in text


def without_message_ids(text: str) -> str:
    """An export with its message ids (the exporting store's row ids) blanked."""
    return re.sub(r'^\{"type":"message","id":\d+,', '{"type":"message","id":_,', text, flags=re.MULTILINE)


def test_turnstore_export_carries_what_the_store_holds_verbatim(store: Store, tmp_path: Path) -> None:
    verbatim = '{"arguments": {"ratio": 1.10, "count": 1e5},  "note": "caf\\u00e9"}'
    lines = [
        {"type": "session", "format": "turnstore", "version": 1, "session_id": "proj.v2", "title": "numbers"},
        {"type": "loop", "loop_id": "proj.v2.p.m.1", "config": {"model": "m", "provider": "p"}},
        {"type": "message", "id": 1, "loop_id": "proj.v2.p.m.1", "turn_index": 0, "source": verbatim,
         "message": json.loads(NUMBERS_SOURCE)[0]},
    ]  # fmt: skip
    first_file = tmp_path / "first.jsonl"
    first_file.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    store.import_("turnstore", first_file)
    first = store.export("proj.v2", "turnstore")
    second_file = tmp_path / "second.jsonl"
    second_file.write_text(first, encoding="utf-8")
    store.sessions.delete("proj.v2")

    report = store.import_("turnstore", second_file)
    second = store.export("proj.v2", "turnstore")

    assert report.sessions_written == ["proj.v2"]
    assert without_message_ids(second) == without_message_ids(first)  # byte for byte
    [message_line] = [json.loads(line) for line in second.splitlines() if line.startswith('{"type":"message"')]
    assert message_line["source"] == verbatim  # the source record's own text, 1.10 and all
    assert message_line["message"]["content"][0]["arguments"] == {
        "ratio": 1.1,
        "count": 100000.0,
        "id": 12345678901234567890123,
        "note": "café",
    }


# --- messages without usage, run usage --------------------------------------------------------------


def run_usage_session(store: Store) -> tuple[str, list[dict[str, Any]]]:
    """A session whose assistant messages carry no usage; the run's usage went to ``loops.end``."""
    session_id = store.sessions.create("run-usage").session_id
    loop_id = store.loops.start(session_id, config={"model": "gpt-5", "provider": "openai"}).loop_id
    turn = [
        Message.user("q", timestamp=1_000),
        Message.assistant("a", model="gpt-5", provider="openai", timestamp=2_000),
    ]
    store.messages.append_turn(loop_id, 0, turn)
    store.loops.end(loop_id, usage=usage(1_000, 100), requests=3)
    return session_id, [m.message.model_dump(mode="json") for m in store.messages.records(session_id)]


@pytest.mark.parametrize("fmt", ["phi-core", "phi-core-session", "turnstore"])
def test_messages_without_usage_round_trip_through_every_export(store: Store, tmp_path: Path, fmt: str) -> None:
    session_id, messages = run_usage_session(store)
    assert "usage" not in messages[1]
    path = tmp_path / ("run-usage.jsonl" if fmt == "turnstore" else "run-usage.json")
    store.export(session_id, fmt, path)
    store.sessions.delete(session_id)

    report = store.import_("turnstore" if fmt == "turnstore" else "phi-core", path)

    (imported,) = report.sessions_written
    assert [m.message.model_dump(mode="json") for m in store.messages.records(imported)] == messages
    totals = store.usage.session(imported)
    if fmt == "phi-core":  # a message array has no place for a run's usage
        assert (totals.total_tokens, totals.requests) == (0, 0)
    else:  # the loop record's usage: the run's, with its count of requests where the format keeps one
        assert (totals.usage, totals.requests) == (usage(1_000, 100), 3 if fmt == "turnstore" else 1)


def test_turnstore_export_keeps_run_usage_and_its_requests(store: Store, tmp_path: Path) -> None:
    session_id, _ = run_usage_session(store)
    before = store.usage.session(session_id)
    path = tmp_path / "run-usage.jsonl"
    store.export(session_id, "turnstore", path)
    store.sessions.delete(session_id)

    store.import_("turnstore", path)

    (loop,) = store.loops.list(session_id)
    assert (loop.reported_usage, loop.reported_requests) == (usage(1_000, 100), 3)
    assert store.usage.session(session_id) == before


# --- the session title, and exports read through the repositories ------------------------


def test_phi_core_session_export_then_import_keeps_the_title(store: Store, tmp_path: Path) -> None:
    sid = build_session(store)["sid"]
    path = tmp_path / "session.json"
    store.export(sid, "phi-core-session", path)
    assert json.loads(path.read_text(encoding="utf-8"))["title"] == "Built through the API"

    store.sessions.delete(sid)
    store.import_("phi-core", path)

    assert store.sessions.get(sid).title == "Built through the API"


def test_phi_core_session_export_then_import_keeps_every_loop_s_context(store: Store, tmp_path: Path) -> None:
    """phi-core has no fork point (a branch) nor first kept message (a compaction): the export names them by
    place, and the import puts them back, so every loop's model call sees what it saw (regression: a branch
    came back as a continuation, its context grown by the parent's later messages)."""

    def contexts(of: Store, sid: str) -> list[tuple[str, str, list[str]]]:
        return [
            (loop.loop_id, loop.continuation_kind.value, [dump_message(m) for m in of.messages.context(loop.loop_id)])
            for loop in of.loops.list(sid)
        ]

    sessions = build_demo(store)
    kinds = set()
    for sid in sessions:
        before = contexts(store, sid)
        kinds.update(kind for _, kind, _ in before)
        path = tmp_path / f"{sid}.json"
        store.export(sid, "phi-core-session", path)
        store.sessions.delete(sid)
        assert store.import_("phi-core", path).ok
        assert contexts(store, sid) == before
    assert {"branch", "compaction"} <= kinds


def test_phi_core_session_export_of_an_untitled_session_has_no_title_key(store: Store) -> None:
    sid = store.sessions.create("untitled").session_id
    assert "title" not in json.loads(store.export(sid, "phi-core-session"))


def test_exports_never_reach_into_the_database_object(sqlite_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = build_session(sqlite_store)["sid"]
    expected = {fmt: sqlite_store.export(sid, fmt) for fmt in EXPORT_FORMATS}

    class NoDatabase:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"export used store._db.{name}")

    monkeypatch.setattr(sqlite_store, "_db", NoDatabase())
    assert {fmt: sqlite_store.export(sid, fmt) for fmt in EXPORT_FORMATS} == expected


def test_sources_of_an_imported_session_and_of_an_api_session(sqlite_store: Store) -> None:
    sqlite_store.import_("phi-core", SESSIONS / f"{MAIN}.json")
    imported = sqlite_store.sessions.sources(MAIN)
    assert imported.source_format == "phi-core"
    assert json.loads(imported.source or "null")["session_id"] == MAIN
    assert list(imported.loops) == [loop.loop_id for loop in sqlite_store.loops.list(MAIN)]
    assert all(json.loads(source or "null")["loop_id"] == loop_id for loop_id, source in imported.loops.items())

    sid = build_session(sqlite_store)["sid"]
    built = sqlite_store.sessions.sources(sid)
    assert (built.source, built.source_format) == (None, None)
    assert list(built.loops) == [loop.loop_id for loop in sqlite_store.loops.list(sid)]
    assert set(built.loops.values()) == {None}


def test_sources_and_rows_of_a_missing_session(sqlite_store: Store) -> None:
    with pytest.raises(SessionNotFound):
        sqlite_store.sessions.sources("nope")
    with pytest.raises(SessionNotFound):
        sqlite_store.messages.rows("nope")


def test_rows_are_the_stored_text_and_columns_by_name(sqlite_store: Store) -> None:
    built = build_session(sqlite_store)
    rows = list(sqlite_store.messages.rows(built["sid"]))
    records = list(sqlite_store.messages.records(built["sid"]))
    assert [row.id for row in rows] == [record.message_id for record in records]
    for row, record in zip(rows, records):
        assert (row.session_id, row.loop_id, row.turn_index, row.seq) == (
            record.session_id, record.loop_id, record.turn_index, record.seq,
        )  # fmt: skip
        assert json.loads(row.message) == record.message.model_dump(mode="json")
        assert row.role == record.message.role
    refusal = next(row for row in rows if row.id == built["refusal"])
    assert refusal.model == "claude-sonnet-4-5" and refusal.provider == "anthropic"
    assert refusal.usage_tokens() == (
        refusal.input_tokens,
        refusal.output_tokens,
        refusal.reasoning_tokens,
        refusal.cache_read_tokens,
        refusal.cache_write_tokens,
        refusal.total_tokens,
    )


def _branch_file(store: Store, tmp_path: Path) -> tuple[str, dict[str, Any], Path]:
    """The demo's coding session exported as a phi-core-session file: its id, the parsed file, the path."""
    sid = next(s for s in build_demo(store) if s.startswith("demo-coding"))
    path = tmp_path / f"{sid}.json"
    store.export(sid, "phi-core-session", path)
    return sid, json.loads(path.read_text(encoding="utf-8")), path


def test_a_fork_point_the_file_does_not_hold_is_a_note_and_the_branch_follows_its_parent(
    store: Store, tmp_path: Path
) -> None:
    sid, data, path = _branch_file(store, tmp_path)
    (branch,) = [loop for loop in data["loops"] if "fork_after" in loop]
    for bad in ({"loop_id": branch["loop_id"], "index": 0}, {"loop_id": branch["parent_loop_id"], "index": 99}, "1"):
        store.sessions.delete(sid)
        branch["fork_after"] = bad
        path.write_text(json.dumps(data), encoding="utf-8")
        report = store.import_("phi-core", path)
        assert report.ok and [note.reason.split(";")[0] for note in report.notes] == [
            "fork_after names no message of the parent loop's history in this file"
        ]
        assert store.loops.get(branch["loop_id"]).fork_after is None


def test_a_re_export_names_fork_points_by_their_places_in_the_new_file(store: Store, tmp_path: Path) -> None:
    """A record left out of an import moves the places after it: the next export names the fork point where
    it now is, not where the first file had it."""
    sid, data, path = _branch_file(store, tmp_path)
    before = [[dump_message(m) for m in store.messages.context(loop.loop_id)] for loop in store.loops.list(sid)]
    (branch,) = [loop for loop in data["loops"] if "fork_after" in loop]
    (parent,) = [loop for loop in data["loops"] if loop["loop_id"] == branch["fork_after"]["loop_id"]]
    parent["messages"].insert(0, {"role": "user", "content": 5, "timestamp": "bad"})
    branch["fork_after"]["index"] += 1
    path.write_text(json.dumps(data), encoding="utf-8")
    store.sessions.delete(sid)
    assert store.import_("phi-core", path, skip_invalid=True).skipped
    again = tmp_path / "again.json"
    store.export(sid, "phi-core-session", again)
    store.sessions.delete(sid)
    assert store.import_("phi-core", again).ok
    after = [[dump_message(m) for m in store.messages.context(loop.loop_id)] for loop in store.loops.list(sid)]
    assert after == before
