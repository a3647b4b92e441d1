"""The ``clark`` importer: clark-agent AgentMessage rows as JSONL or a JSON array (docs/design.md §6, §7).

Fixtures under ``fixtures/clark`` are written from ``clark-labs-inc/clark-agent``
``src/types.rs`` and ``tests/agent_message_persistence_roundtrip.rs`` (see
``docs/importers/clark.md``):

* ``conversation-42.jsonl``: one row per line; a system prompt, all three
  reasoning channels (``reasoning``, signed ``reasoning_details``,
  ``thinking``), tool results with ``narration``/``details``, a tool error,
  images by URL and as a data URL, a ``custom`` message, an error assistant
  without usage, a user row without timestamp, and ``stop_reason: other``.
* ``support-ticket.json``: the same rows as a pretty-printed JSON array, with
  partial usage objects and ``max_tokens``.
* ``malformed/``: a bad line of each kind, and an array record of the wrong type.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import snapshot, stored, tokens

from turnstore import Store
from turnstore.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "clark"
ROWS = FIXTURES / "conversation-42.jsonl"
ARRAY = FIXTURES / "support-ticket.json"
BROKEN = FIXTURES / "malformed" / "broken.jsonl"
WRONG_TYPE = FIXTURES / "malformed" / "wrong-type.json"

SID = "conversation-42"
L1, L2, L3 = (f"{SID}.clark.{n}" for n in (1, 2, 3))
ARRAY_SID = "support-ticket"

CLARK_USAGE = {
    "input": "input_tokens",
    "output": "output_tokens",
    "cache_write": "cache_creation_input_tokens",
    "cache_read": "cache_read_input_tokens",
}


def lines() -> list[str]:
    return ROWS.read_text(encoding="utf-8").splitlines()


def rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in lines()]


def write_rows(path: Path, records: list[Any]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records), encoding="utf-8")
    return path


def expected_usage(records: list[dict[str, Any]]) -> tuple[int, ...]:
    """Session totals as clark's own usage objects add up (total = the sum of the four counts)."""
    usages = [r["usage"] for r in records if r["role"] == "assistant" and r.get("usage")]
    sums = {name: sum(u.get(key, 0) for u in usages) for name, key in CLARK_USAGE.items()}
    return (sums["input"], sums["output"], 0, sums["cache_read"], sums["cache_write"], sum(sums.values()))


# --- JSONL rows -------------------------------------------------------------------------------


def test_report_counts(store: Store) -> None:
    report = store.import_("clark", ROWS)

    assert report.ok
    assert (report.files, report.records, report.messages, report.loops) == (1, 14, 14, 3)
    assert dict(report.by_role) == {"system": 1, "user": 3, "assistant": 6, "toolResult": 3, "extension": 1}
    assert dict(report.by_kind) == {"ui_notification": 1}
    assert report.sessions_written == [SID]


def test_loops_and_turns_are_derived(store: Store) -> None:
    store.import_("clark", ROWS)

    shape = [(loop.loop_id, loop.parent_loop_id, loop.continuation_kind.value) for loop in store.loops.list(SID)]
    assert shape == [(L1, None, "initial"), (L2, L1, "default"), (L3, L2, "default")]
    placed = [(m.loop_id, m.turn_index, str(m.message.role)) for m in store.messages.records(SID)]
    assert placed == [
        (L1, None, "system"),  # before any model call: no turn
        (L1, 0, "user"), (L1, 0, "assistant"), (L1, 0, "toolResult"),
        (L1, 1, "assistant"), (L1, 1, "toolResult"),
        (L1, 2, "assistant"), (L1, 2, "toolResult"),
        (L1, 3, "assistant"),  # final answer
        (L1, None, "extension"),
        (L2, 0, "user"), (L2, 0, "assistant"),  # a prompt after a final answer opens a loop; the error ends it
        (L3, 0, "user"), (L3, 0, "assistant"),
    ]  # fmt: skip
    assert [str(m.role) for m in store.messages.context(L3)][:2] == ["system", "user"]


def test_rows_keep_each_line_verbatim(store: Store) -> None:
    store.import_("clark", ROWS)

    assert [m.source for m in store.messages.records(SID)] == lines()


def test_system_and_user_messages(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()
    messages = stored(store, SID)

    system = messages[0]
    assert str(system.role) == "system"
    assert (system.text(), system.timestamp) == (source[0]["content"], source[0]["timestamp"])
    prompt = messages[1]
    assert [(b.type, b.text) for b in prompt.content] == [("text", source[1]["content"])]
    assert messages[12].timestamp == 0 and "timestamp" not in source[12]  # missing: 0, never invented


def test_reasoning_channels_become_marked_thinking_blocks(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()[2]["content"]

    blocks = stored(store, SID)[2].model_dump(mode="json")["content"]

    assert [(b["type"], b.get("clarkKind")) for b in blocks] == [
        ("thinking", "reasoning"),
        ("thinking", "reasoning_details"),
        ("thinking", "thinking"),
        ("text", None),
        ("toolCall", None),
    ]
    assert blocks[0]["thinking"] == source[0]["text"]
    assert blocks[1]["thinking"] == "" and "signature" not in blocks[1]
    assert blocks[2]["thinking"] == source[2]["text"]
    assert (blocks[4]["id"], blocks[4]["name"]) == (source[4]["id"], source[4]["name"])


def test_reasoning_details_and_arguments_are_byte_exact(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()

    for index, block in ((2, 1), (4, 0)):
        details = stored(store, SID)[index].model_dump(mode="json")["content"][block]["reasoningDetails"]
        assert json.dumps(details) == json.dumps(source[index]["content"][block]["details"])  # key order too
    context = store.messages.context(L1)
    again = context[2].model_dump(mode="json")["content"][1]["reasoningDetails"]
    assert json.dumps(again) == json.dumps(source[2]["content"][1]["details"])
    call = stored(store, SID)[2].content[4]
    assert json.dumps(call.arguments) == json.dumps(source[2]["content"][4]["arguments"])


def test_tool_results_keep_details_narration_and_errors(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()
    messages = stored(store, SID)

    wrote = messages[3]
    assert (wrote.tool_call_id, wrote.tool_name, wrote.is_error) == ("call_1", "create_website", False)
    assert (wrote.narration, wrote.details) == (source[3]["narration"], source[3]["details"])
    failed = messages[5]
    assert failed.is_error is True and failed.text() == source[5]["content"][0]["text"]
    assert failed.details is None


def test_images_by_url_and_by_data_url(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()
    messages = stored(store, SID)

    by_url = messages[7].model_dump(mode="json")["content"][1]
    assert by_url == {"type": "image", "data": "", "mimeType": "image/png", "url": source[7]["content"][1]["source"]}
    inline = messages[10].model_dump(mode="json")["content"][1]
    data_url = source[10]["content"][1]["source"]
    assert inline == {
        "type": "image",
        "data": data_url.split(",", 1)[1],
        "mimeType": "image/png",
        "alt": "storefront photo",
    }


@pytest.mark.parametrize(
    ("source", "media_type", "expected"),
    [
        pytest.param(
            "data:image/jpeg;base64,/9j/4A", None, {"data": "/9j/4A", "mimeType": "image/jpeg"}, id="mime of the URL"
        ),
        pytest.param(
            "data:;base64,AAAA", "image/webp", {"data": "AAAA", "mimeType": "image/webp"}, id="mime from media_type"
        ),
        pytest.param(
            "data:image/png;base64,AAAA",
            "image/jpeg",
            {"data": "AAAA", "mimeType": "image/png"},
            id="the data URL's mime labels its bytes",
        ),
        pytest.param(
            "https://x.test/a.gif", None, {"data": "", "mimeType": "", "url": "https://x.test/a.gif"}, id="bare url"
        ),
        pytest.param(
            "data:image/svg+xml,%3Csvg%3E",
            "image/svg+xml",
            {"data": "", "mimeType": "image/svg+xml", "url": "data:image/svg+xml,%3Csvg%3E"},
            id="non-base64 data URL stays a url",
        ),
    ],
)
def test_image_sources(
    store: Store, tmp_path: Path, source: str, media_type: str | None, expected: dict[str, str]
) -> None:
    image = {"type": "image", "source": source} | ({"media_type": media_type} if media_type else {})
    store.import_("clark", write_rows(tmp_path / "img.jsonl", [{"role": "user", "content": [image]}]))

    (block,) = stored(store, "img")[0].model_dump(mode="json")["content"]

    assert block == {"type": "image", **expected}


def test_custom_becomes_an_extension_message(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()[9]

    custom = stored(store, SID)[9]

    assert (str(custom.role), custom.kind, custom.data) == ("extension", source["kind"], source["payload"])


def test_custom_timestamp_dates_the_row_and_a_missing_one_stays_unknown(store: Store) -> None:
    store.import_("clark", ROWS, ARRAY)

    def extension_rows(session_id: str) -> list[dict[str, Any]]:
        exported = (json.loads(line) for line in store.export(session_id, "turnstore").splitlines())
        return [r for r in exported if r.get("type") == "message" and r["message"]["role"] == "extension"]

    (survey,) = extension_rows(ARRAY_SID)
    assert survey["timestamp"] == json.loads(ARRAY.read_text(encoding="utf-8"))[5]["timestamp"]
    (notice,) = extension_rows(SID)
    assert "timestamp" not in notice and "timestamp" not in rows()[9]  # unknown, not invented


def test_assistant_fields(store: Store) -> None:
    store.import_("clark", ROWS)
    messages = stored(store, SID)

    assert {(m.model, m.provider) for m in messages if str(m.role) == "assistant"} == {("unknown", "unknown")}
    error = messages[11]
    assert (error.stop_reason.value, error.error_message) == ("error", "upstream returned 502")
    other = messages[13].model_dump(mode="json")
    assert (other["stopReason"], other["clarkStopReason"]) == ("stop", "other")
    assert "clarkStopReason" not in messages[8].model_dump(mode="json")  # end_turn maps one to one


@pytest.mark.parametrize(
    ("clark", "canonical"),
    [
        ("end_turn", "stop"),
        ("tool_use", "toolUse"),
        ("max_tokens", "length"),
        ("error", "error"),
        ("aborted", "aborted"),
        ("other", "stop"),
    ],
)
def test_stop_reasons(store: Store, tmp_path: Path, clark: str, canonical: str) -> None:
    path = write_rows(tmp_path / "stop.jsonl", [{"role": "assistant", "content": [], "stop_reason": clark}])

    store.import_("clark", path)

    assert stored(store, "stop")[0].stop_reason.value == canonical


def test_usage_totals_equal_the_source(store: Store) -> None:
    store.import_("clark", ROWS)
    source = rows()

    totals = store.usage.session(SID)

    assert tokens(totals) == expected_usage(source)
    assert totals.requests == sum(1 for r in source if r["role"] == "assistant" and "usage" in r) == 5
    assert tokens(store.usage.loop(L1)) == expected_usage(source[:10])


def test_assistant_without_usage_counts_no_tokens(store: Store) -> None:
    store.import_("clark", ROWS)

    error = store.messages.turn(L2, 0).messages[1]

    assert tokens(error.usage) == (0, 0, 0, 0, 0, 0)
    assert store.usage.turn(L2, 0).requests == 0  # usage columns NULL: not a zero-token request
    assert store.usage.turn(L3, 0).requests == 1


def test_usage_is_priced_per_the_canonical_mapping(tmp_path: Path) -> None:
    usage = {"input_tokens": 1_000_000, "cache_creation_input_tokens": 2_000_000}
    path = write_rows(
        tmp_path / "priced.jsonl", [{"role": "assistant", "content": [], "stop_reason": "end_turn", "usage": usage}]
    )
    prices = {"unknown": {"input": 1.0, "output": 0.0, "cache_read": 0.0, "cache_write": 10.0}}
    with Store(tmp_path / "p.db", prices=prices) as store:
        store.import_("clark", path)

        assert store.usage.session("priced").cost == pytest.approx(21.0)  # cache creation is charged as cache_write


# --- JSON arrays --------------------------------------------------------------------------------


def test_array_import(store: Store) -> None:
    report = store.import_("clark", ARRAY)
    records = json.loads(ARRAY.read_text(encoding="utf-8"))

    assert report.ok and (report.records, report.messages, report.loops) == (8, 8, 2)
    assert [m.source for m in store.messages.records(ARRAY_SID)] == [
        json.dumps(r, ensure_ascii=False, separators=(",", ":")) for r in records
    ]
    assert tokens(store.usage.session(ARRAY_SID)) == expected_usage(records)
    lookup = store.messages.turn(f"{ARRAY_SID}.clark.1", 0).messages[2]
    assert (lookup.is_error, lookup.details) == (False, records[3]["details"])  # is_error defaults to false
    cut = store.messages.turn(f"{ARRAY_SID}.clark.2", 0).messages[1]
    assert cut.stop_reason.value == "length"


def test_array_wrong_type_names_the_record(store: Store) -> None:
    report = store.import_("clark", WRONG_TYPE)

    assert [(e.place, e.reason) for e in report.errors] == [
        (f"{WRONG_TYPE}: record 2", "content must be a string or an array of blocks, got number")
    ]
    assert report.sessions_failed == ["wrong-type"] and not store.sessions.exists("wrong-type")


def test_array_syntax_error_names_the_line(store: Store, tmp_path: Path) -> None:
    text = ARRAY.read_text(encoding="utf-8").splitlines()
    text[6] = text[6].replace('"', "", 1)  # line 7 becomes `role": "user",`
    path = tmp_path / "cut.json"
    path.write_text("\n".join(text), encoding="utf-8")

    report = store.import_("clark", path)

    assert [e.place for e in report.errors] == [f"{path}:7"] and "invalid JSON" in report.errors[0].reason


def test_json_file_that_is_not_an_array(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "row.json"
    path.write_text(json.dumps(rows()[1]), encoding="utf-8")

    report = store.import_("clark", path)

    assert [(e.place, e.reason) for e in report.errors] == [
        (f"{path}:1", "expected a JSON array of clark AgentMessage objects")
    ]


# --- session ids, re-import, dry run ----------------------------------------------------------------


def test_session_id_option_and_file_stem(store: Store) -> None:
    assert store.import_("clark", ROWS, session_id="chosen").sessions_written == ["chosen"]
    assert store.loops.get("chosen.clark.3").parent_loop_id == "chosen.clark.2"
    assert store.import_("clark", ARRAY).sessions_written == [ARRAY_SID]


def test_reimport_changes_nothing(store: Store) -> None:
    store.import_("clark", ROWS, ARRAY)
    before = {sid: snapshot(store, sid) for sid in (SID, ARRAY_SID)}

    again = store.import_("clark", ROWS, ARRAY)

    assert again.ok and again.sessions_written == [] and again.sessions_unchanged == [SID, ARRAY_SID]
    assert {sid: snapshot(store, sid) for sid in (SID, ARRAY_SID)} == before


def test_dry_run_writes_nothing(store: Store) -> None:
    report = store.import_("clark", ROWS, dry_run=True)

    assert report.ok and report.dry_run and report.sessions_written == [SID] and report.messages == 14
    assert store.sessions.count() == 0
    assert store.import_("clark", ROWS).sessions_written == [SID]


# --- malformed input -------------------------------------------------------------------------------


def test_malformed_lines_fail_the_session_with_their_places(store: Store) -> None:
    report = store.import_("clark", BROKEN)

    assert [e.place for e in report.errors] == [f"{BROKEN}:3", f"{BROKEN}:5", f"{BROKEN}:6"]
    reasons = [e.reason for e in report.errors]
    assert reasons[0] == "is_error must be a boolean, got string"
    assert reasons[1].startswith("unknown role 'developer'")
    assert "invalid JSON" in reasons[2]
    assert report.sessions_failed == ["broken"] and not store.sessions.exists("broken")


def test_skip_invalid_skips_only_the_bad_lines(store: Store) -> None:
    report = store.import_("clark", BROKEN, skip_invalid=True)

    assert report.ok and [e.place for e in report.skipped] == [f"{BROKEN}:3", f"{BROKEN}:5", f"{BROKEN}:6"]
    source = BROKEN.read_text(encoding="utf-8").splitlines()
    kept = list(store.messages.records("broken"))
    assert [m.source for m in kept] == [source[0], source[1], source[3]]
    assert [(m.turn_index, str(m.message.role)) for m in kept] == [(0, "user"), (0, "assistant"), (1, "assistant")]


@pytest.mark.parametrize(
    ("record", "reason"),
    [
        pytest.param([1], "expected a clark AgentMessage object, got array", id="not an object"),
        pytest.param({"content": "hi"}, "no role; clark writes", id="no role"),
        pytest.param({"role": "toolResult", "tool_call_id": "c"}, "unknown role 'toolResult'", id="phi-core role"),
        pytest.param({"role": "system", "content": ["x"]}, "content must be a string, got array", id="system content"),
        pytest.param(
            {"role": "user", "content": "x", "timestamp": "2026-03-06"},
            "timestamp must be unix milliseconds",
            id="timestamp",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "audio", "data": ""}]},
            "content[0]: unknown block type 'audio'",
            id="user block",
        ),
        pytest.param(
            {"role": "user", "content": ["x"]}, "content[0]: expected a block object, got string", id="string block"
        ),
        pytest.param(
            {"role": "assistant", "content": [], "stop_reason": "stop"}, "unknown stop_reason 'stop'", id="stop reason"
        ),
        pytest.param(
            {"role": "assistant", "content": [{"type": "redacted"}], "stop_reason": "end_turn"},
            "content[0]: unknown block type 'redacted'",
            id="assistant block",
        ),
        pytest.param(
            {"role": "assistant", "stop_reason": "end_turn", "content": [{"type": "reasoning_details", "details": {}}]},
            "content[0]: details must be an array, got object",
            id="details",
        ),
        pytest.param(
            {
                "role": "assistant",
                "stop_reason": "tool_use",
                "content": [{"type": "tool_call", "id": "c", "name": "n"}],
            },
            "content[0]: tool_call has no arguments",
            id="arguments",
        ),
        pytest.param(
            {"role": "assistant", "content": [], "stop_reason": "end_turn", "usage": {"input_tokens": -1}},
            "usage.input_tokens must be a non-negative integer, got -1",
            id="negative usage",
        ),
        pytest.param(
            {"role": "assistant", "content": [], "stop_reason": "end_turn", "usage": 5},
            "usage must be an object",
            id="usage",
        ),
        pytest.param(
            {"role": "tool_result", "tool_name": "t", "content": []},
            "tool_call_id must be a string, got null",
            id="tool_call_id",
        ),
        pytest.param(
            {"role": "tool_result", "tool_call_id": "c", "tool_name": "t", "content": [], "narration": 3},
            "narration must be a string, got number",
            id="narration",
        ),
        pytest.param({"role": "custom", "payload": {}}, "kind must be a string, got null", id="custom kind"),
    ],
)
def test_malformed_record_reasons(store: Store, tmp_path: Path, record: Any, reason: str) -> None:
    path = write_rows(tmp_path / "bad.jsonl", [{"role": "user", "content": "hi"}, record])

    report = store.import_("clark", path)

    assert [e.place for e in report.errors] == [f"{path}:2"]
    assert reason in report.errors[0].reason
    assert not store.sessions.exists("bad")


# --- command line ----------------------------------------------------------------------------------


def test_cli_imports_and_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "cli.db")

    code = main(["--db", db, "import", "clark", str(ROWS), "--session-id", "from-cli", "--json"])

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["records"], report["messages"], report["loops"]) == (14, 14, 3)
    assert report["sessions"]["written"] == ["from-cli"]
    assert report["by_role"]["system"] == 1

    assert main(["--db", db, "import", "clark", str(BROKEN), "--skip-invalid"]) == 0
    assert f"{BROKEN}:5" in capsys.readouterr().err
