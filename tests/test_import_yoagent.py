"""The ``yoagent`` importer: session entry trees (JSONL) and saved message arrays (docs/design.md §6, §7).

Fixtures under ``fixtures/yoagent`` are written from ``yologdev/yoagent``
``src/types.rs`` / ``src/session.rs`` (see ``docs/importers/yoagent.md``):

* ``sessions/rename-refactor.jsonl``: a ``Session::to_jsonl`` tree (no
  trailing newline) with a signed thinking block, a tool error, an image, an
  error assistant (``errorMessage``), an extension message, two checkpoint
  labels, and a branch after ``e3`` re-run on Gemini (``providerMetadata``).
* ``messages/weather-chat.json``: ``Agent::messages()`` saved by a yoagent
  older than 0.13 (snake_case usage, ``error_message``), with a ``refusal``
  and one usage without a total.
* ``malformed/``: a bad line of each kind, and an array record of the wrong type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import TOKEN_FIELDS, snapshot, tokens

from turnstore import Store
from turnstore.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "yoagent"
TREE = FIXTURES / "sessions" / "rename-refactor.jsonl"
ARRAY = FIXTURES / "messages" / "weather-chat.json"
BROKEN = FIXTURES / "malformed" / "broken.jsonl"
WRONG_TYPE = FIXTURES / "malformed" / "wrong-type.json"

SID = "rename-refactor"
L1, L2, L3 = (f"{SID}.yoagent.{n}" for n in (1, 2, 3))
ARRAY_SID = "weather-chat"
A1, A2, A3 = (f"{ARRAY_SID}.yoagent.{n}" for n in (1, 2, 3))

CAMEL = {
    "input": "input",
    "output": "output",
    "cache_read": "cacheRead",
    "cache_write": "cacheWrite",
    "total_tokens": "totalTokens",
}


def tree_lines() -> list[str]:
    return TREE.read_text(encoding="utf-8").split("\n")


def entries() -> dict[str, dict[str, Any]]:
    """The tree fixture's entries by id."""
    return {entry["id"]: entry for entry in map(json.loads, tree_lines())}


def array_records() -> list[dict[str, Any]]:
    return json.loads(ARRAY.read_text(encoding="utf-8"))


def placed(store: Store, session_id: str) -> list[tuple[str, int | None, int, str]]:
    return [(m.loop_id, m.turn_index, m.seq, str(m.message.role)) for m in store.messages.records(session_id)]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- session files: entry trees -------------------------------------------------------------


def test_tree_report_counts(store: Store) -> None:
    report = store.import_("yoagent", TREE)

    assert report.ok
    assert (report.files, report.records, report.messages, report.loops) == (1, 13, 13, 3)
    assert dict(report.by_role) == {"user": 2, "assistant": 7, "toolResult": 3, "extension": 1}
    assert dict(report.by_kind) == {"ui_note": 1}
    assert report.sessions_written == [SID]
    assert report.errors == [] and report.skipped == []


def test_tree_becomes_a_loop_tree_with_the_branch_forking_after_its_parent_entry(store: Store) -> None:
    store.import_("yoagent", TREE)

    shape = [(loop.loop_id, loop.parent_loop_id, loop.continuation_kind.value) for loop in store.loops.list(SID)]
    assert shape == [(L1, None, "initial"), (L2, L1, "default"), (L3, L1, "branch")]
    branch = store.loops.get(L3)
    fork = store.messages.get(branch.fork_after)
    assert (fork.loop_id, fork.seq, json.loads(fork.source)["id"]) == (L1, 2, "e3")
    assert (branch.model, branch.provider) == ("gemini-2.5-pro", "google")
    assert (store.loops.get(L1).model, store.loops.get(L1).provider) == ("claude-sonnet-4-5", "anthropic")


def test_tree_shared_history_is_stored_once_and_the_branch_sees_it(store: Store) -> None:
    store.import_("yoagent", TREE)
    by_id = entries()

    context = store.messages.context(L3)

    expected = [by_id[ident]["message"] for ident in ("e1", "e2", "e3", "e11", "e12", "e13")]
    assert [str(m.role) for m in context] == [m["role"] for m in expected]
    assert [m.timestamp for m in context] == [m["timestamp"] for m in expected]
    assert len(list(store.messages.records(SID))) == len(by_id)  # e1..e3 not copied into the branch


def test_tree_derives_loops_and_turns_along_each_line(store: Store) -> None:
    store.import_("yoagent", TREE)

    assert placed(store, SID) == [
        (L1, 0, 0, "user"), (L1, 0, 1, "assistant"), (L1, 0, 2, "toolResult"),
        (L1, 1, 3, "assistant"), (L1, 1, 4, "toolResult"),  # the failed edit
        (L1, 2, 5, "assistant"),  # final answer
        (L1, None, 6, "extension"),  # after the final answer: no turn
        (L2, 0, 0, "user"), (L2, 0, 1, "assistant"),  # a new prompt after a final answer opens a loop
        (L2, 1, 2, "assistant"),  # the retry after the error is the next model call
        (L3, 0, 0, "assistant"), (L3, 0, 1, "toolResult"), (L3, 1, 2, "assistant"),
    ]  # fmt: skip
    turn = store.messages.turn(L1, 1)
    assert [str(m.role) for m in turn.messages] == ["assistant", "toolResult"]
    assert turn.messages[1].is_error is True


def test_tree_rows_keep_each_line_verbatim(store: Store) -> None:
    store.import_("yoagent", TREE)

    sources = [m.source for m in store.messages.records(SID)]
    assert sorted(sources) == sorted(tree_lines())
    labelled = {json.loads(source)["id"]: json.loads(source).get("label") for source in sources}
    assert (labelled["e3"], labelled["e13"]) == ("grep-done", "renamed")


def test_tree_messages_keep_yoagent_fields(store: Store) -> None:
    store.import_("yoagent", TREE)
    by_id = entries()
    stored = {json.loads(m.source)["id"]: m.message for m in store.messages.records(SID)}

    error = stored["e9"]
    assert (error.stop_reason.value, error.error_message) == ("error", by_id["e9"]["message"]["errorMessage"])
    image, source_image = stored["e8"].content[1], by_id["e8"]["message"]["content"][1]
    assert (image.type, image.data, image.mime_type) == ("image", source_image["data"], source_image["mimeType"])
    assert stored["e7"].kind == "ui_note" and stored["e7"].data == by_id["e7"]["message"]["data"]
    assert stored["e5"].is_error is True


def test_tree_signature_metadata_and_arguments_are_byte_exact(store: Store) -> None:
    store.import_("yoagent", TREE)
    by_id = entries()
    stored = {json.loads(m.source)["id"]: m.message for m in store.messages.records(SID)}

    source_thinking = by_id["e2"]["message"]["content"][0]
    assert stored["e2"].content[0].signature == source_thinking["signature"]
    assert store.messages.context(L1)[1].content[0].signature == source_thinking["signature"]
    source_call = by_id["e11"]["message"]["content"][0]
    call = stored["e11"].content[0].model_dump(mode="json")
    assert json.dumps(call["providerMetadata"]) == json.dumps(source_call["providerMetadata"])
    assert json.dumps(call["arguments"]) == json.dumps(source_call["arguments"])
    source_arguments = by_id["e2"]["message"]["content"][2]["arguments"]
    assert json.dumps(stored["e2"].content[2].arguments) == json.dumps(source_arguments)


def test_tree_usage_totals_equal_the_source(store: Store) -> None:
    store.import_("yoagent", TREE)
    assistants = [e["message"] for e in entries().values() if e["message"]["role"] == "assistant"]

    def summed(messages: list[dict[str, Any]]) -> tuple[int, ...]:
        return tuple(
            0 if name == "reasoning" else sum(m["usage"][CAMEL[name]] for m in messages) for name in TOKEN_FIELDS
        )

    totals = store.usage.session(SID)
    assert tokens(totals) == summed(assistants)
    assert totals.requests == len(assistants) == 7
    gemini = [m for m in assistants if m["model"] == "gemini-2.5-pro"]
    assert tokens(store.usage.loop(L3)) == summed(gemini)


def test_tree_head_and_checkpoints_are_session_metadata(store: Store) -> None:
    store.import_("yoagent", TREE)

    state = store.sessions.get(SID).metadata["yoagent"]

    assert state["head"] == {"entry": "e13", "loop_id": L3, "seq": 2}  # the last line, where yoagent resumes
    assert state["checkpoints"] == [
        {"label": "grep-done", "entry": "e3", "loop_id": L1, "seq": 2},
        {"label": "renamed", "entry": "e13", "loop_id": L3, "seq": 2},
    ]
    for point in state["checkpoints"]:
        rows = [m for m in store.messages.records(loop_id=point["loop_id"]) if m.seq == point["seq"]]
        assert json.loads(rows[0].source)["id"] == point["entry"]


def test_tree_entry_timestamp_dates_extension_messages(store: Store) -> None:
    store.import_("yoagent", TREE)

    exported = [json.loads(line) for line in store.export(SID, "turnstore").splitlines()]

    extension = next(rec for rec in exported if rec.get("type") == "message" and rec["message"]["role"] == "extension")
    assert extension["timestamp"] == entries()["e7"]["timestamp"]
    assert "timestamp" not in extension["message"]  # the canonical extension message has none of its own


def test_tree_without_trailing_newline_and_with_blank_lines(store: Store, tmp_path: Path) -> None:
    assert not TREE.read_text(encoding="utf-8").endswith("\n")
    path = tmp_path / "spaced.jsonl"
    path.write_text("\n\n".join(tree_lines()) + "\n\n", encoding="utf-8")

    report = store.import_("yoagent", path)

    assert report.ok and report.records == 13 and report.messages == 13


# --- message arrays ------------------------------------------------------------------------------


def test_array_report_and_derived_loops(store: Store) -> None:
    report = store.import_("yoagent", ARRAY)

    assert report.ok
    assert (report.records, report.messages, report.loops) == (9, 9, 3)
    assert dict(report.by_role) == {"user": 3, "assistant": 4, "toolResult": 1, "extension": 1}
    assert report.sessions_written == [ARRAY_SID]
    shape = [
        (loop.loop_id, loop.parent_loop_id, loop.continuation_kind.value, loop.model)
        for loop in store.loops.list(ARRAY_SID)
    ]
    assert shape == [
        (A1, None, "initial", "gpt-4.1"),
        (A2, A1, "default", "claude-sonnet-4-5"),
        (A3, A2, "default", "claude-sonnet-4-5"),
    ]
    assert placed(store, ARRAY_SID) == [
        (A1, 0, 0, "user"), (A1, 0, 1, "assistant"), (A1, 0, 2, "toolResult"), (A1, 1, 3, "assistant"),
        (A1, None, 4, "extension"),
        (A2, 0, 0, "user"), (A2, 0, 1, "assistant"),  # the refusal is a final answer
        (A3, 0, 0, "user"), (A3, 0, 1, "assistant"),
    ]  # fmt: skip


def test_array_rows_keep_each_record_as_compact_json(store: Store) -> None:
    store.import_("yoagent", ARRAY)
    records = array_records()

    sources = [m.source for m in store.messages.records(ARRAY_SID)]
    assert sources == [json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records]
    assert "°C" in sources[3]


def test_array_refusal_and_snake_case_spellings(store: Store) -> None:
    store.import_("yoagent", ARRAY)
    records = array_records()

    refusal = store.messages.turn(A2, 0).messages[1]
    assert refusal.stop_reason.value == "refusal"
    assert refusal.error_message == records[6]["error_message"]
    assert refusal.usage.input == records[6]["usage"]["input"]


def test_array_usage_without_total_gets_the_sum(store: Store) -> None:
    store.import_("yoagent", ARRAY)
    records = array_records()
    counted = records[3]["usage"]
    assert "total_tokens" not in counted

    answer = store.messages.turn(A1, 1).messages[0]
    assert answer.usage.total_tokens == sum(counted[key] for key in ("input", "output", "cache_read", "cache_write"))
    assert "total_tokens" not in json.loads(list(store.messages.records(ARRAY_SID))[3].source)["usage"]

    def total(usage: dict[str, int]) -> int:
        return usage.get("total_tokens", usage["input"] + usage["output"] + usage["cache_read"] + usage["cache_write"])

    assistants = [r for r in records if r["role"] == "assistant"]
    assert store.usage.session(ARRAY_SID).total_tokens == sum(total(r["usage"]) for r in assistants)
    assert store.usage.session(ARRAY_SID).cache_read == sum(r["usage"]["cache_read"] for r in assistants)


def test_camel_case_usage_without_total_gets_the_sum(store: Store, tmp_path: Path) -> None:
    lines = tree_lines()[:2]
    entry = json.loads(lines[1])
    del entry["message"]["usage"]["totalTokens"]
    lines[1] = json.dumps(entry)

    store.import_("yoagent", write_lines(tmp_path / "s.jsonl", lines))

    usage = entry["message"]["usage"]
    assert store.usage.session("s").total_tokens == sum(
        usage[key] for key in ("input", "output", "cacheRead", "cacheWrite")
    )


def test_json_file_that_is_not_an_array(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "session.json"
    path.write_text('{"id": "e1"}', encoding="utf-8")

    report = store.import_("yoagent", path)

    assert [(e.place, e.reason) for e in report.errors] == [(f"{path}:1", "expected a JSON array of yoagent messages")]


# --- session ids, re-import, dry run ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("turn_id", "options", "expected"),
    [
        pytest.param(None, {"session_id": "chosen"}, "chosen", id="--session-id wins"),
        pytest.param({"loopId": "3f1c9a2e.anthropic.claude.1", "turnIndex": 0}, {}, "3f1c9a2e", id="first turnId"),
        pytest.param(None, {}, "old-chat", id="file stem"),
    ],
)
def test_session_id_rules(store: Store, tmp_path: Path, turn_id: Any, options: dict[str, Any], expected: str) -> None:
    records = array_records()
    if turn_id is not None:
        records[1]["turnId"] = turn_id
    path = tmp_path / "old-chat.json"
    path.write_text(json.dumps(records), encoding="utf-8")

    report = store.import_("yoagent", path, **options)

    assert report.sessions_written == [expected]
    assert store.loops.list(expected)[0].loop_id == f"{expected}.yoagent.1"


def test_session_id_option_names_a_tree_session(store: Store) -> None:
    report = store.import_("yoagent", TREE, session_id="mine")

    assert report.sessions_written == ["mine"]
    assert store.loops.get("mine.yoagent.3").continuation_kind.value == "branch"


def test_reimport_changes_nothing(store: Store) -> None:
    store.import_("yoagent", TREE, ARRAY)
    before = {sid: snapshot(store, sid) for sid in (SID, ARRAY_SID)}

    again = store.import_("yoagent", TREE, ARRAY)

    assert again.ok and again.sessions_written == []
    assert again.sessions_unchanged == [SID, ARRAY_SID]
    assert {sid: snapshot(store, sid) for sid in (SID, ARRAY_SID)} == before


def test_dry_run_writes_nothing(store: Store) -> None:
    report = store.import_("yoagent", TREE, dry_run=True)

    assert report.ok and report.dry_run
    assert report.sessions_written == [SID] and report.messages == 13
    assert store.sessions.count() == 0
    assert store.import_("yoagent", TREE).sessions_written == [SID]


def test_directory_walk_finds_both_kinds(store: Store) -> None:
    report = store.import_("yoagent", FIXTURES / "sessions", FIXTURES / "messages")

    assert report.ok and report.files == 2
    assert sorted(report.sessions_written) == sorted([SID, ARRAY_SID])


# --- malformed input ---------------------------------------------------------------------------------


def test_malformed_lines_fail_the_session_with_their_places(store: Store) -> None:
    report = store.import_("yoagent", BROKEN)

    assert not report.ok
    assert [e.place for e in report.errors] == [f"{BROKEN}:3", f"{BROKEN}:5", f"{BROKEN}:6"]
    reasons = [e.reason for e in report.errors]
    assert "isError" in reasons[0]
    assert "unknown role 'robot'" in reasons[1]
    assert "invalid JSON" in reasons[2]
    assert report.sessions_failed == ["broken"]
    assert not store.sessions.exists("broken")


def test_skip_invalid_skips_the_bad_lines_and_keeps_their_children(store: Store) -> None:
    report = store.import_("yoagent", BROKEN, skip_invalid=True)

    assert report.ok
    assert [e.place for e in report.skipped] == [f"{BROKEN}:3", f"{BROKEN}:5", f"{BROKEN}:6"]
    lines = BROKEN.read_text(encoding="utf-8").split("\n")
    stored = list(store.messages.records("broken"))
    assert [m.source for m in stored] == [lines[0], lines[1], lines[3]]
    # e4's parent e3 was skipped: e4 hangs from e2, as the next model call of the loop
    assert [(m.turn_index, str(m.message.role)) for m in stored] == [(0, "user"), (0, "assistant"), (1, "assistant")]


def test_wrong_type_in_an_array_names_the_record(store: Store) -> None:
    report = store.import_("yoagent", WRONG_TYPE)

    assert [e.place for e in report.errors] == [f"{WRONG_TYPE}: record 2"]
    assert "timestamp" in report.errors[0].reason
    assert not store.sessions.exists("wrong-type")

    skipping = store.import_("yoagent", WRONG_TYPE, skip_invalid=True)

    assert skipping.ok and [str(m.message.role) for m in store.messages.records("wrong-type")] == ["user", "toolResult"]


def test_json_syntax_error_in_an_array_names_the_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text(json.dumps(array_records(), indent=2)[:-40], encoding="utf-8")

    report = store.import_("yoagent", path)

    assert len(report.errors) == 1 and report.errors[0].place.startswith(f"{path}:")
    assert report.errors[0].place.rsplit(":", 1)[1].isdigit() and "invalid JSON" in report.errors[0].reason


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        pytest.param(lambda e: e["message"].update(role="system"), "unknown role 'system'", id="no system role"),
        pytest.param(lambda e: e["message"].pop("role"), "message has no role", id="no role"),
        pytest.param(lambda e: e.pop("id"), "entry has no id", id="no id"),
        pytest.param(lambda e: e.pop("message"), "has no message", id="no message"),
        pytest.param(lambda e: e.update(parent_id=7), "parent_id must be a string or null", id="numeric parent"),
        pytest.param(lambda e: e.update(parent_id="e99"), "parent entry 'e99' is not in the file", id="orphan"),
        pytest.param(lambda e: e.update(timestamp="now"), "timestamp must be unix milliseconds", id="entry timestamp"),
        pytest.param(lambda e: e.update(label=["x"]), "label must be a string", id="label"),
    ],
)
def test_malformed_entry_reasons(store: Store, tmp_path: Path, change: Any, reason: str) -> None:
    lines = tree_lines()[:3]
    entry = json.loads(lines[2])
    change(entry)
    lines[2] = json.dumps(entry)
    path = write_lines(tmp_path / "bad.jsonl", lines)

    report = store.import_("yoagent", path)

    assert [e.place for e in report.errors] == [f"{path}:3"]
    assert reason in report.errors[0].reason
    assert not store.sessions.exists("bad")


def test_duplicate_entry_ids_are_malformed(store: Store, tmp_path: Path) -> None:
    lines = tree_lines()[:3]
    lines.append(lines[2])

    report = store.import_("yoagent", write_lines(tmp_path / "dup.jsonl", lines))

    assert [e.place for e in report.errors] == [f"{tmp_path / 'dup.jsonl'}:4"]
    assert "duplicate entry id 'e3'" in report.errors[0].reason


# --- command line ----------------------------------------------------------------------------------


def test_cli_imports_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "cli.db")

    code = main(["--db", db, "import", "yoagent", str(TREE), "--json"])

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["records"], report["messages"], report["loops"]) == (13, 13, 3)
    assert report["sessions"]["written"] == [SID]

    failed = main(["--db", db, "import", "yoagent", str(BROKEN)])

    assert failed == 1
    assert f"{BROKEN}:3" in capsys.readouterr().err
