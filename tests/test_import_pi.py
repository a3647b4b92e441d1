"""The ``pi`` importer: pi-mono session files, versions 1 to 3 (docs/design.md §6, §7; ``docs/importers/pi.md``).

The fixtures under ``fixtures/pi`` are written by hand from pi-mono's
``session-manager.ts``, ``messages.ts`` and ``packages/ai/src/types.ts``, in
``JSON.stringify`` form. Expected values are worked out from the files
themselves (their lines, usages, signatures), not from the importer.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import snapshot, tokens

from turnstore import Store, UserMessage
from turnstore.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "pi"
V3 = FIXTURES / "2026-03-02T09-15-00-000Z_0b8f5c1e-6a2d-4e9b-9f3a-2c7d1e5b8a40.jsonl"
V2 = FIXTURES / "2025-12-19T07-40-00-000Z_4c2a8e6f-9d1b-4a3c-b5e7-0f8d6c4b2a19.jsonl"
V1 = FIXTURES / "2025-11-20T14-02-11-512Z_7d3e9a10-2b4c-4f6d-8e1a-5c9b0d2f4a67.jsonl"
RETAINED = FIXTURES / "retained_tail.jsonl"
MALFORMED = FIXTURES / "malformed"

V3_ID = "0b8f5c1e-6a2d-4e9b-9f3a-2c7d1e5b8a40"
V2_ID = "4c2a8e6f-9d1b-4a3c-b5e7-0f8d6c4b2a19"
V1_ID = "7d3e9a10-2b4c-4f6d-8e1a-5c9b0d2f4a67"
RETAINED_ID = "5e1d3c2b-retained-tail"
CONTEXT_ID = "9c4e2a71-5b3d-4f80-a6e2-1d7c0b9e8f35"

# pi's convertToLlm text for a compaction summary (packages/coding-agent/src/core/messages.ts)
COMPACTION_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
COMPACTION_SUFFIX = "\n</summary>"

TOKEN_KEYS = ("input", "output", "cacheRead", "cacheWrite")

PI_TOKEN_FIELDS = ("input", "output", "cache_read", "cache_write", "total_tokens")
"""The token counts pi records (it has no reasoning count)."""


# --- reading the fixtures independently of the importer ------------------------------------------


def lines(path: Path) -> list[str]:
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def entries(path: Path) -> dict[str, dict[str, Any]]:
    """v2+ entries by id."""
    return {record["id"]: record for record in map(json.loads, lines(path)[1:])}


def file_usages(path: Path) -> list[dict[str, Any]]:
    """Every usage a pi file records: on messages (assistant, newer tool results) and on
    compaction and branch-summary entries. A retained tail repeats messages: not counted."""
    found = []
    for record in map(json.loads, lines(path)[1:]):
        holder = record.get("message", record)
        if isinstance(holder.get("usage"), dict):
            found.append(holder["usage"])
    return found


def file_totals(path: Path) -> tuple[tuple[int, ...], float, int]:
    """(input, output, cache_read, cache_write, total) summed as pi counts them, the reported cost, the count."""
    usages = file_usages(path)
    sums = [sum(u[key] for u in usages) for key in TOKEN_KEYS]
    total = sum(u.get("totalTokens", sum(u[key] for key in TOKEN_KEYS)) for u in usages)
    return (*sums, total), sum(u["cost"]["total"] for u in usages), len(usages)


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp() * 1000)


# --- reading the store ---------------------------------------------------------------------------------


def by_entry(store: Store, session_id: str) -> dict[str, Any]:
    """Stored rows by the pi entry id of their source line."""
    return {json.loads(row.source)["id"]: row for row in store.messages.records(session_id) if row.source}


def entry_of(store: Store, message_id: int | None) -> str | None:
    if message_id is None:
        return None
    return json.loads(store.messages.get(message_id).source)["id"]


def loop_no(loop_id: str | None) -> int | None:
    return None if loop_id is None else int(loop_id.rsplit(".", 1)[1])


@pytest.fixture
def v3(store: Store) -> Store:
    report = store.import_("pi", V3)
    assert report.ok, report.errors
    return store


# --- the v3 session: report, session, loops, turns ----------------------------------------------------------


def test_report_counts_what_became_what(store: Store) -> None:
    report = store.import_("pi", V3)

    assert report.ok and report.errors == [] and report.skipped == []
    assert report.files == 1
    assert report.records == len(lines(V3)) - 1  # every entry line; the header is session data
    assert report.messages == 28  # every entry but session_info, which is session data
    assert report.loops == 6
    assert dict(report.by_role) == {"user": 6, "assistant": 10, "toolResult": 4, "extension": 8}
    assert dict(report.by_kind) == {
        "model_change": 1,
        "thinking_level_change": 1,
        "label": 1,
        "bashExecution": 1,
        "custom": 1,
        "custom_message": 1,
        "compaction_summary": 1,
        "branch_summary": 1,
    }
    assert report.sessions_written == [V3_ID]


def test_session_takes_the_header_and_the_session_info_name(v3: Store) -> None:
    header = json.loads(lines(V3)[0])
    info = [record for record in map(json.loads, lines(V3)) if record["type"] == "session_info"]

    session = v3.sessions.get(V3_ID)
    assert session.title == "Checkout crash on empty cart"
    assert session.created_at == datetime.fromisoformat(header["timestamp"].replace("Z", "+00:00"))
    assert session.metadata == {"version": 3, "cwd": "/home/ana/src/webshop", "session_info": info}


def test_entry_tree_becomes_a_loop_tree(v3: Store) -> None:
    loops = [
        (
            loop_no(loop.loop_id),
            loop_no(loop.parent_loop_id),
            loop.continuation_kind.value,
            entry_of(v3, loop.fork_after),
            entry_of(v3, loop.keep_from),
        )
        for loop in v3.loops.list(V3_ID)
    ]
    assert loops == [
        (1, None, "initial", None, None),
        (2, 1, "default", None, None),  # a prompt after a final answer starts a loop
        (3, 2, "default", None, None),
        (4, 3, "compaction", "a4b5c6d7", "93a4b5c6"),  # keeps from firstKeptEntryId
        (5, 2, "branch", "5f607182", None),  # a second child of 5f607182
        (6, 1, "branch", "f6a7b8c9", None),  # the branch_summary entry's parent
    ]
    assert all(loop.loop_id.startswith(f"{V3_ID}.pi.") for loop in v3.loops.list(V3_ID))


def test_turn_indexes(v3: Store) -> None:
    placed = [
        (json.loads(row.source)["id"], loop_no(row.loop_id), row.turn_index, row.seq)
        for row in v3.messages.records(V3_ID)
    ]
    assert placed == [
        ("5c0d9e11", 1, None, 0),  # model_change: before any turn
        ("6a1b2c33", 1, None, 1),  # thinking_level_change
        ("a1b2c3d4", 1, 0, 2),
        ("b2c3d4e5", 1, 0, 3),
        ("c3d4e5f6", 1, 0, 4),
        ("d4e5f6a7", 1, 1, 5),  # a second model call after the tool round
        ("e5f6a7b8", 1, 1, 6),
        ("f6a7b8c9", 1, 2, 7),
        ("0a1b2c3d", 1, None, 8),  # label after the final answer
        ("1b2c3d4e", 2, 0, 0),
        ("2c3d4e5f", 2, 0, 1),
        ("3d4e5f60", 2, 0, 2),
        ("5f607182", 2, 1, 3),
        ("60718293", 2, None, 4),  # bashExecution
        ("71829304", 2, None, 5),  # custom
        ("8293a4b5", 2, None, 6),  # custom_message
        ("93a4b5c6", 3, 0, 0),
        ("a4b5c6d7", 3, 0, 1),
        ("b5c6d7e8", 4, None, 0),  # the compaction summary opens its loop
        ("c6d7e8f9", 4, 0, 1),
        ("d7e8f90a", 4, 0, 2),
        ("e8f90a1b", 4, 0, 3),
        ("f90a1b2c", 4, 1, 4),
        ("3d4e5f61", 5, 0, 0),
        ("4e5f6072", 5, 0, 1),
        ("0a1b2c3e", 6, None, 0),  # the branch summary opens its loop
        ("1b2c3d4f", 6, 0, 1),
        ("2c3d4e60", 6, 0, 2),
    ]


def test_loop_config_is_the_model_in_force_at_its_first_call(v3: Store) -> None:
    configs = {loop_no(loop.loop_id): loop.config for loop in v3.loops.list(V3_ID)}
    assert set(configs) == {1, 2, 3, 4, 5, 6}
    for config in configs.values():
        assert config == {"model": "claude-sonnet-4-5", "provider": "anthropic", "thinking_level": "medium"}


# --- what the next model call sees ---------------------------------------------------------------------------


def test_context_of_the_compaction_leaf_is_what_pi_sends(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    compaction = entries(V3)["b5c6d7e8"]

    context = v3.messages.context(f"{V3_ID}.pi.4")

    # pi: the summary, the kept entries from firstKeptEntryId up to the compaction, then what follows
    summary, *rest = context
    assert isinstance(summary, UserMessage)
    assert summary.text() == COMPACTION_PREFIX + compaction["summary"] + COMPACTION_SUFFIX
    assert summary.timestamp == ms(compaction["timestamp"])
    kept_and_after = ["93a4b5c6", "a4b5c6d7", "c6d7e8f9", "d7e8f90a", "e8f90a1b", "f90a1b2c"]
    assert rest == [rows[entry_id].message for entry_id in kept_and_after]


def test_context_of_the_branch_summary_leaf_is_what_pi_sends(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    branch = entries(V3)["0a1b2c3e"]

    context = v3.messages.context(f"{V3_ID}.pi.6")

    # pi: the path root -> f6a7b8c9 (messages only), the branch summary as user text, then the branch
    before = ["a1b2c3d4", "b2c3d4e5", "c3d4e5f6", "d4e5f6a7", "e5f6a7b8", "f6a7b8c9"]
    assert context[:6] == [rows[entry_id].message for entry_id in before]
    assert isinstance(context[6], UserMessage)
    assert branch["summary"] in context[6].text()
    assert context[6].text().startswith("The following is a summary of a branch that this conversation came back from:")
    assert context[6].timestamp == ms(branch["timestamp"])
    assert context[7:] == [rows["1b2c3d4f"].message, rows["2c3d4e60"].message]


def test_context_of_the_plain_branch_leaf_is_what_pi_sends(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)

    context = v3.messages.context(f"{V3_ID}.pi.5")

    path = [
        "a1b2c3d4",
        "b2c3d4e5",
        "c3d4e5f6",
        "d4e5f6a7",
        "e5f6a7b8",
        "f6a7b8c9",
        "1b2c3d4e",
        "2c3d4e5f",
        "3d4e5f60",
        "5f607182",
        "3d4e5f61",
        "4e5f6072",
    ]
    assert context == [rows[entry_id].message for entry_id in path]


def test_side_entries_are_extension_rows_outside_the_context(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)

    context = v3.messages.context(f"{V3_ID}.pi.3")

    # docs/design.md §7: bashExecution and custom_message are extension messages, which the
    # context leaves out (pi itself would send both as user text; see docs/importers/pi.md).
    path = [
        "a1b2c3d4",
        "b2c3d4e5",
        "c3d4e5f6",
        "d4e5f6a7",
        "e5f6a7b8",
        "f6a7b8c9",
        "1b2c3d4e",
        "2c3d4e5f",
        "3d4e5f60",
        "5f607182",
        "93a4b5c6",
        "a4b5c6d7",
    ]
    assert context == [rows[entry_id].message for entry_id in path]


# --- messages, kept exactly ------------------------------------------------------------------------------------


def test_every_row_keeps_its_line_verbatim(v3: Store) -> None:
    stored = [row.source for row in v3.messages.records(V3_ID)]

    session_info = [line for line in lines(V3) if '"type":"session_info"' in line]
    assert sorted(stored) == sorted(line for line in lines(V3)[1:] if line not in session_info)
    exported = [json.loads(line) for line in v3.export(V3_ID, "turnstore").splitlines()]  # type: ignore[union-attr]
    assert exported[0]["source"] == lines(V3)[0]  # the header is the session's source


def test_thinking_signatures_and_block_extras_are_byte_exact(store: Store) -> None:
    store.import_("pi", V3, V1, V2)
    checked = 0
    for path, session_id in ((V3, V3_ID), (V1, V1_ID), (V2, V2_ID)):
        stored = {row.source: row for row in store.messages.records(session_id)}
        for line in lines(path)[1:]:
            message = json.loads(line).get("message", {})
            if message.get("role") != "assistant":
                continue
            stored_text = store.messages.get(stored[line].message_id).message.model_dump_json()
            blocks = json.loads(stored_text)["content"]
            raw_blocks = message["content"]
            assert len(blocks) == len(raw_blocks)
            for raw, block in zip(raw_blocks, blocks):
                if raw["type"] == "thinking":
                    assert block["thinking"] == raw["thinking"]
                    assert block.get("signature") == raw.get("thinkingSignature")
                    assert block.get("redacted") == raw.get("redacted")
                    if "thinkingSignature" in raw:  # the very characters of the file, escaping included
                        token = json.dumps(raw["thinkingSignature"], ensure_ascii=False)
                        assert f'"thinkingSignature":{token}' in line
                        assert f'"signature":{token}' in stored_text
                        checked += 1
                else:
                    assert block == raw  # text (textSignature) and toolCall (thoughtSignature, arguments) as written
    assert checked == 4  # three in v3 (one redacted), one OpenAI reasoning item in v1


def test_assistant_fields_map_to_the_canonical_message(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    raw = entries(V3)["b2c3d4e5"]["message"]

    message = rows["b2c3d4e5"].message
    assert (message.model, message.provider, message.stop_reason.value, message.timestamp) == (
        raw["model"],
        raw["provider"],
        raw["stopReason"],
        raw["timestamp"],
    )
    assert message.model_dump(mode="json")["api"] == "anthropic-messages"  # kept as an extra key
    usage = message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write, usage.total_tokens) == (
        raw["usage"]["input"],
        raw["usage"]["output"],
        raw["usage"]["cacheRead"],
        raw["usage"]["cacheWrite"],
        raw["usage"]["totalTokens"],
    )
    assert usage.cost == raw["usage"]["cost"]["total"]


def test_user_content_images_and_plain_strings(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    raw = entries(V3)

    first = rows["a1b2c3d4"].message.model_dump(mode="json")
    assert first["content"] == raw["a1b2c3d4"]["message"]["content"]  # text + image block, as written
    plain = rows["1b2c3d4e"].message.model_dump(mode="json")
    assert plain["content"] == [{"type": "text", "text": raw["1b2c3d4e"]["message"]["content"]}]


def test_tool_results_keep_error_flag_and_details(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    raw = entries(V3)

    failed = rows["e5f6a7b8"].message
    assert failed.is_error is True
    assert failed.details == raw["e5f6a7b8"]["message"]["details"]
    assert rows["3d4e5f60"].message.details == raw["3d4e5f60"]["message"]["details"]
    assert "usage" not in rows["e8f90a1b"].message.model_dump(mode="json")  # moved to the row's usage


def test_extension_rows_carry_the_entry_fields(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    raw = entries(V3)

    def without_base(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in entry.items() if k not in ("type", "id", "parentId", "timestamp")}

    for entry_id in ("5c0d9e11", "6a1b2c33", "0a1b2c3d", "71829304", "8293a4b5"):
        message = rows[entry_id].message
        assert (message.kind, message.data) == (raw[entry_id]["type"], without_base(raw[entry_id]))
    bash = rows["60718293"].message
    bash_message = raw["60718293"]["message"]
    assert (bash.kind, bash.data) == ("bashExecution", {k: v for k, v in bash_message.items() if k != "role"})
    compaction = rows["b5c6d7e8"].message
    assert compaction.kind == "compaction_summary"
    assert compaction.data == {
        **{k: v for k, v in without_base(raw["b5c6d7e8"]).items() if k != "usage"},
        "timestamp": ms(raw["b5c6d7e8"]["timestamp"]),
    }
    assert rows["0a1b2c3e"].message.kind == "branch_summary"


# --- usage ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path, session_id", [(V3, V3_ID), (V2, V2_ID), (V1, V1_ID), (RETAINED, RETAINED_ID)])
def test_usage_totals_equal_what_the_file_records(store: Store, path: Path, session_id: str) -> None:
    expected_tokens, expected_cost, count = file_totals(path)

    store.import_("pi", path)

    totals = store.usage.session(session_id)
    assert tokens(totals, PI_TOKEN_FIELDS) == expected_tokens
    assert totals.reported_cost == pytest.approx(expected_cost)
    assert totals.cost == pytest.approx(expected_cost)  # it costs what pi says it cost
    assert totals.requests == count


def test_summary_and_tool_usage_count_at_the_model_in_force(v3: Store) -> None:
    rows = by_entry(v3, V3_ID)
    raw = entries(V3)
    compaction = v3.usage.loop(f"{V3_ID}.pi.4")

    # loop 4 = the compaction summary's usage + three assistant calls + the review tool's own model call
    parts = [raw["b5c6d7e8"]["usage"], raw["e8f90a1b"]["message"]["usage"]] + [
        raw[entry_id]["message"]["usage"] for entry_id in ("d7e8f90a", "f90a1b2c")
    ]
    assert compaction.input == sum(part["input"] for part in parts)
    assert compaction.requests == 4
    assert rows["e8f90a1b"].turn_index == 0
    assert v3.usage.turn(f"{V3_ID}.pi.4", 0).input == raw["d7e8f90a"]["message"]["usage"]["input"] + parts[1]["input"]
    models = {(row.model, row.provider): row.requests for row in v3.usage.by_model(V3_ID)}
    assert models == {("claude-sonnet-4-5", "anthropic"): 13}


# --- re-import, dry run, export ---------------------------------------------------------------------------------


def test_importing_again_changes_nothing(store: Store) -> None:
    store.import_("pi", FIXTURES)
    before = {sid: snapshot(store, sid) for sid in (V3_ID, V2_ID, V1_ID, RETAINED_ID)}

    again = store.import_("pi", V3, V2, V1, RETAINED)

    assert again.ok
    assert sorted(again.sessions_unchanged) == sorted(before)
    assert again.sessions_written == [] and again.messages == 0
    assert {sid: snapshot(store, sid) for sid in before} == before


def test_dry_run_writes_nothing(store: Store) -> None:
    report = store.import_("pi", V3, dry_run=True)

    assert report.ok and report.dry_run
    assert report.records == len(lines(V3)) - 1
    assert store.sessions.list() == []


def test_turnstore_export_reimports_equal(v3: Store, store_url: str, tmp_path: Path) -> None:
    exported = tmp_path / "session.jsonl"
    assert main(["--db", store_url, "export", V3_ID, "--format", "turnstore", "-o", str(exported)]) == 0

    with Store(tmp_path / "second.db") as second:
        report = second.import_("turnstore", exported)
        assert report.ok, report.errors
        original, copy = snapshot(v3, V3_ID), snapshot(second, V3_ID)
    assert copy["session"] == original["session"]
    assert [(l.loop_id, l.parent_loop_id, l.continuation_kind, l.config) for l in copy["loops"]] == [
        (l.loop_id, l.parent_loop_id, l.continuation_kind, l.config) for l in original["loops"]
    ]
    assert [(m.loop_id, m.turn_index, m.seq, m.message, m.source) for m in copy["messages"]] == [
        (m.loop_id, m.turn_index, m.seq, m.message, m.source) for m in original["messages"]
    ]
    assert copy["usage"] == original["usage"]


# --- older versions and newer pi -----------------------------------------------------------------------------


def test_v1_entries_form_one_line_and_compaction_keeps_by_index(store: Store) -> None:
    report = store.import_("pi", V1)
    assert report.ok and report.records == 11 and report.loops == 3

    rows = list(store.messages.records(V1_ID))
    # no ids in v1: every row is the line after the one before
    assert [row.source for row in rows] == lines(V1)[1:]
    loops = store.loops.list(V1_ID)
    compaction = loops[2]
    assert compaction.continuation_kind.value == "compaction"
    # firstKeptEntryIndex 7 counts parsed lines from the header: the "Group them by file" prompt
    assert store.messages.get(compaction.keep_from).source == lines(V1)[7]
    assert store.messages.get(compaction.fork_after).source == lines(V1)[8]
    context = store.messages.context(compaction.loop_id)
    assert context[0].text().startswith(COMPACTION_PREFIX)
    assert [m.text() for m in context[1:]] == [
        "Group them by file and estimate the effort.",
        "src/parser.ts: 2 TODOs, about half a day.\nsrc/cli.ts: 1 TODO, under an hour.",
        "Start with the parser ones.",
        "I'll begin with escaped quotes in the tokenizer.",
    ]


def test_v1_header_model_and_later_switches_set_loop_configs(store: Store) -> None:
    store.import_("pi", V1)

    configs = [loop.config for loop in store.loops.list(V1_ID)]
    assert configs == [
        {"model": "claude-sonnet-4-5", "provider": "anthropic", "thinking_level": "off"},  # from the v1 header
        {"model": "gpt-5", "provider": "openai", "thinking_level": "high"},  # after the two setting entries
        {"model": "gpt-5", "provider": "openai", "thinking_level": "high"},
    ]


def test_v1_usage_without_total_tokens_sums_the_counts(store: Store) -> None:
    raw = json.loads(lines(V1)[2])["message"]["usage"]
    assert "totalTokens" not in raw

    store.import_("pi", V1)

    first = next(row for row in store.messages.records(V1_ID) if row.message.role == "assistant")
    assert first.message.usage.total_tokens == sum(raw[key] for key in TOKEN_KEYS)


def test_v2_hook_messages_are_custom_and_branches_fork(store: Store) -> None:
    store.import_("pi", V2)
    rows = by_entry(store, V2_ID)
    hook = entries(V2)["5a7b8c9d"]["message"]

    assert (rows["5a7b8c9d"].message.kind, rows["5a7b8c9d"].message.data) == (
        "custom",
        {k: v for k, v in hook.items() if k != "role"},
    )
    branch = store.loops.list(V2_ID)[-1]
    assert branch.continuation_kind.value == "branch"
    assert entry_of(store, branch.fork_after) == "6b8c9d0e"
    assert branch.config == {"model": "gemini-2.5-pro", "provider": "google"}
    error = rows["3f5a6b7c"].message
    raw_error = entries(V2)["3f5a6b7c"]["message"]
    assert (error.stop_reason.value, error.error_message) == ("error", raw_error["errorMessage"])


def test_retained_tail_is_the_context_after_a_newer_compaction(store: Store) -> None:
    store.import_("pi", RETAINED)
    compaction = entries(RETAINED)["aa000005"]
    last = store.loops.list(RETAINED_ID)[-1]

    context = store.messages.context(last.loop_id)

    # newer pi: summary + retainedTail (not firstKeptEntryId) + what follows
    assert context[0].text() == COMPACTION_PREFIX + compaction["summary"] + COMPACTION_SUFFIX
    assert [m.text() for m in context[1:]] == [
        "Why did the migration fail?",
        "A NOT NULL column was added without a default.",
        "Write the fix.",
        "Added DEFAULT 0 to the column.",
    ]
    tail = [row for row in store.messages.records(RETAINED_ID) if row.source is None]
    assert [row.message.role for row in tail] == ["user", "assistant"]  # copies: no source, usage not counted again
    header = json.loads(lines(RETAINED)[0])
    assert store.sessions.get(RETAINED_ID).metadata == {
        "version": 3,
        "cwd": "/srv/app",
        "parentSession": header["parentSession"],
    }  # a forked session


# --- malformed files ---------------------------------------------------------------------------------------------


MALFORMED_CASES = [
    ("torn_last_line.jsonl", 5, "invalid JSON", 3),
    ("unknown_entry_type.jsonl", 4, "unknown entry type 'checkpoint'", 4),
    ("unknown_role.jsonl", 4, "unknown message role 'pythonExecution'", 4),
]


@pytest.mark.parametrize("name, line, reason, _", MALFORMED_CASES)
def test_malformed_record_fails_its_session_with_file_and_line(
    store: Store, name: str, line: int, reason: str, _: int
) -> None:
    path = MALFORMED / name

    report = store.import_("pi", path)

    assert not report.ok
    assert [(error.place, reason in error.reason) for error in report.errors] == [(f"{path}:{line}", True)]
    assert report.sessions_failed == [f"bad-{path.stem}"]
    assert report.sessions_written == [] and store.sessions.list() == []


@pytest.mark.parametrize("name, line, reason, kept", MALFORMED_CASES)
def test_skip_invalid_skips_the_record_and_writes_the_rest(
    store: Store, name: str, line: int, reason: str, kept: int
) -> None:
    path = MALFORMED / name

    report = store.import_("pi", path, skip_invalid=True)

    assert report.ok
    assert [error.place for error in report.skipped] == [f"{path}:{line}"]
    assert report.sessions_written == [f"bad-{path.stem}"]
    assert report.messages == kept
    texts = [row.message.text() for row in store.messages.records(f"bad-{path.stem}")]
    assert texts[:3] == ["Check the disk usage.", "The disk is 71% full.", "And the inodes?"]


def test_skipped_entry_keeps_its_children_on_the_path(store: Store) -> None:
    store.import_("pi", MALFORMED / "unknown_role.jsonl", skip_invalid=True)

    last = store.loops.list("bad-unknown_role")[-1]
    assert [m.text() for m in store.messages.context(last.loop_id)] == [
        "Check the disk usage.",
        "The disk is 71% full.",
        "And the inodes?",
        "12% of inodes are used.",
    ]


def write(path: Path, records: list[Any]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n", encoding="utf-8")
    return path


HEADER = {"type": "session", "version": 3, "id": "s-tmp", "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/tmp"}
USER = {
    "type": "message",
    "id": "u1",
    "parentId": None,
    "timestamp": "2026-01-01T00:00:01.000Z",
    "message": {"role": "user", "content": "hi", "timestamp": 1767225601000},
}


def test_message_failing_validation_is_named_with_its_field(store: Store, tmp_path: Path) -> None:
    broken = {
        "type": "message",
        "id": "a1",
        "parentId": "u1",
        "timestamp": "2026-01-01T00:00:02.000Z",
        "message": {
            "role": "assistant",
            "content": [],
            "provider": "anthropic",
            "model": "m",
            "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0},
            "timestamp": 1,
        },
    }
    path = write(tmp_path / "broken.jsonl", [HEADER, USER, broken])

    report = store.import_("pi", path)

    assert [error.place for error in report.errors] == [f"{path}:3"]
    assert "stopReason" in report.errors[0].reason


def test_unknown_parent_is_reported_and_skipping_keeps_its_subtree_apart(store: Store, tmp_path: Path) -> None:
    orphan = {**USER, "id": "o1", "parentId": "gone"}
    child = {**USER, "id": "o2", "parentId": "o1"}
    path = write(tmp_path / "orphan.jsonl", [HEADER, USER, orphan, child])

    assert [error.place for error in store.import_("pi", path).errors] == [f"{path}:3"]
    report = store.import_("pi", path, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{path}:3"]
    assert "'gone'" in report.skipped[0].reason
    first, second = store.loops.list("s-tmp")  # the orphan's subtree: a history of its own
    assert (second.parent_loop_id, second.continuation_kind.value) == (None, "initial")
    assert len(store.messages.loop(second.loop_id)) == 2


def test_entries_that_are_their_own_ancestors_are_reported_and_kept_when_skipping(store: Store, tmp_path: Path) -> None:
    a = {**USER, "id": "c1", "parentId": "c2"}
    b = {**USER, "id": "c2", "parentId": "c1"}
    path = write(tmp_path / "cycle.jsonl", [HEADER, USER, a, b])

    report = store.import_("pi", path, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{path}:3"]  # the cycle, cut at its first entry
    assert report.messages == 3


def test_a_line_that_is_not_json_loses_only_itself(store: Store, tmp_path: Path) -> None:
    torn = json.dumps({**USER, "id": "x1", "parentId": "u1"}, separators=(",", ":"))[:70]
    child = {**USER, "id": "x2", "parentId": "x1", "message": {**USER["message"], "content": "after"}}
    path = write(tmp_path / "torn.jsonl", [HEADER, USER, torn, child])

    report = store.import_("pi", path, skip_invalid=True)

    assert [error.place for error in report.skipped] == [f"{path}:3"]
    # pi writes {"type","id","parentId",...} first: the child hangs from the torn line's parent
    assert [row.message.text() for row in store.messages.records("s-tmp")] == ["hi", "after"]


def test_session_info_names_the_session_and_stays_out_of_the_tree(store: Store, tmp_path: Path) -> None:
    first = {
        "type": "session_info",
        "id": "n1",
        "parentId": "u1",
        "timestamp": "2026-01-01T00:00:02.000Z",
        "name": " Old ",
    }
    second = {**first, "id": "n2", "parentId": "n1", "name": "Deploy fix"}
    cleared = {**first, "id": "n3", "parentId": "n2", "name": ""}
    child = {**USER, "id": "u2", "parentId": "n3", "message": {**USER["message"], "content": "next"}}
    path = write(tmp_path / "named.jsonl", [HEADER, USER, first, second, cleared, child])

    report = store.import_("pi", path)

    assert report.ok and report.records == 5 and report.messages == 2
    session = store.sessions.get("s-tmp")
    assert session.title == "Deploy fix"  # the newest non-empty name, as pi's getSessionName
    assert session.metadata["session_info"] == [first, second, cleared]
    (loop,) = store.loops.list("s-tmp")  # u2 continues u1's line
    assert [m.text() for m in store.messages.loop(loop.loop_id)] == ["hi", "next"]


@pytest.mark.parametrize(
    "first, reason",
    [
        ('{"type":"message","id":"x"}', "header"),
        ({**HEADER, "version": 4}, "unsupported pi session version 4"),
        ("{not json", "invalid JSON: Expecting property name enclosed in double quotes at column 2"),
        ('{"type": "session', "invalid JSON: Unterminated string starting at column 10"),  # not "at at"
    ],
)
def test_a_file_without_a_pi_header_is_refused(store: Store, tmp_path: Path, first: Any, reason: str) -> None:
    path = write(tmp_path / "nothing.jsonl", [first, USER])

    report = store.import_("pi", path)

    assert [(error.place, reason in error.reason) for error in report.errors] == [(f"{path}:1", True)]
    assert report.sessions_failed == [str(path)]


def test_session_id_without_one_in_the_header(store: Store, tmp_path: Path) -> None:
    header = {k: v for k, v in HEADER.items() if k != "id"}
    path = write(tmp_path / "2026-01-01T00-00-00-000Z_1f2e3d4c-aaaa.jsonl", [header, USER])

    assert store.import_("pi", path).sessions_written == ["1f2e3d4c-aaaa"]  # pi's file name: <time>_<id>
    assert store.import_("pi", path, session_id="given", replace=True).sessions_written == ["given"]


def test_a_directory_imports_each_file_as_its_session(store: Store) -> None:
    report = store.import_("pi", FIXTURES)

    assert report.files == 8  # context/ holds the long session of test_context_pi
    assert sorted(report.sessions_written) == sorted([V3_ID, V2_ID, V1_ID, RETAINED_ID, CONTEXT_ID])
    assert sorted(report.sessions_failed) == ["bad-torn_last_line", "bad-unknown_entry_type", "bad-unknown_role"]


# --- the command line ---------------------------------------------------------------------------------------------


def test_cli_import_reports_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "cli.db"

    code = main(["--db", str(db), "--json", "import", "pi", str(V3)])

    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["records"], report["messages"], report["loops"]) == (29, 28, 6)
    assert report["by_kind"]["compaction_summary"] == 1
    assert report["sessions"]["written"] == [V3_ID]
    with Store(db) as store:
        assert len(list(store.messages.records(V3_ID))) == 28


def test_cli_malformed_exits_1_naming_the_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = MALFORMED / "unknown_role.jsonl"

    code = main(["--db", str(tmp_path / "cli.db"), "import", "pi", str(path)])

    assert code == 1
    assert f"{path}:4" in capsys.readouterr().err
