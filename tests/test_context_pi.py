"""context() and last() on a realistic pi session, against pi's own rules read off the raw file.

``fixtures/pi/context/make_session.py`` writes the session: over a thousand
entries, branches, two compactions, model switches, errored and aborted turns,
a call never answered. The expected context is computed here from the JSONL
alone, the way pi's ``buildSessionContext`` and ``transformMessages`` build it,
and compared with what the store returns after importing the file (the
differences ``docs/context.md`` lists are applied on the pi side, by name).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.context import NO_RESULT

HERE = Path(__file__).parent / "fixtures" / "pi" / "context"
FILE = next(HERE.glob("*.jsonl"))
SESSION_ID = FILE.stem.split("_", 1)[1]

# pi's convertToLlm texts (packages/coding-agent/src/core/messages.ts)
COMPACTION = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n",
    "\n</summary>",
)
BRANCH = ("The following is a summary of a branch that this conversation came back from:\n\n<summary>\n", "</summary>")


def records() -> list[dict[str, Any]]:
    return [json.loads(line) for line in FILE.read_text(encoding="utf-8").splitlines()[1:] if line.strip()]


def pi_path(entries: list[dict[str, Any]], leaf_id: str) -> list[dict[str, Any]]:
    by_id = {entry["id"]: entry for entry in entries}
    path: list[dict[str, Any]] = []
    current: dict[str, Any] | None = by_id[leaf_id]
    while current is not None:
        path.insert(0, current)
        current = by_id.get(current["parentId"]) if current["parentId"] else None
    return path


def pi_build_session_context(entries: list[dict[str, Any]], leaf_id: str) -> list[dict[str, Any]]:
    """pi's buildSessionContext, then convertToLlm: the entries whose message the model gets, in order."""
    path = pi_path(entries, leaf_id)
    sent = [e for e in path if e["type"] in ("message", "branch_summary")]
    compactions = [index for index, e in enumerate(path) if e["type"] == "compaction"]
    if compactions:
        at = compactions[-1]
        compaction = path[at]
        kept_from = next(index for index, e in enumerate(path[:at]) if e["id"] == compaction["firstKeptEntryId"])
        sent = [compaction] + [
            e for e in path[kept_from:] if e["type"] in ("message", "branch_summary") and e is not compaction
        ]
    return sent


def pi_transform_messages(sent: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """pi's transformMessages (second pass), as (what, entry or call) pairs: what = entry | synthetic."""
    result: list[tuple[str, Any]] = []
    pending: list[dict[str, Any]] = []
    existing: set[str] = set()

    def flush() -> None:
        nonlocal pending, existing
        result.extend(("synthetic", call) for call in pending if call["id"] not in existing)
        pending, existing = [], set()

    for entry in sent:
        role = entry["message"]["role"] if entry["type"] == "message" else "user"
        if role == "assistant":
            flush()
            message = entry["message"]
            if message["stopReason"] in ("error", "aborted"):
                continue
            calls = [block for block in message["content"] if block["type"] == "toolCall"]
            if calls:
                pending, existing = calls, set()
            result.append(("entry", entry))
        elif role == "toolResult":
            existing.add(entry["message"]["toolCallId"])
            result.append(("entry", entry))
        else:
            flush()
            result.append(("entry", entry))
    return result


def without_results_outside_their_run(items: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The documented difference: turnstore leaves out a result not answering the nearest kept call (pi sends it)."""
    kept: list[tuple[str, Any]] = []
    calls: set[str] = set()
    for what, item in items:
        if what == "entry" and item["type"] == "message" and item["message"]["role"] == "toolResult":
            call_id = item["message"]["toolCallId"]
            if call_id not in calls:
                continue
            calls.discard(call_id)
        elif what == "entry":
            message = item.get("message", {})
            calls = (
                {b["id"] for b in message.get("content", []) if b["type"] == "toolCall"}
                if message.get("role") == "assistant"
                else set()
            )
        kept.append((what, item))
    return kept


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Any:
    with Store(tmp_path_factory.mktemp("pi") / "context.db") as store:
        assert store.import_("pi", FILE).ok
        yield store


def leaf_loop(store: Any) -> str:
    leaf_id = records()[-1]["id"]
    return next(
        r.loop_id for r in store.messages.records(SESSION_ID) if r.source and json.loads(r.source)["id"] == leaf_id
    )


def entry_of(record: Any) -> str:
    return json.loads(record.source)["id"]


# --- the fixture is what the tests need ------------------------------------------------------------------------


def test_the_fixture_is_written_by_its_generator(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("make_pi_context_session", HERE / "make_session.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.write(tmp_path / "again.jsonl").read_bytes() == FILE.read_bytes()


def test_the_fixture_has_branches_compactions_failed_turns_and_an_unanswered_call() -> None:
    entries = records()
    path = pi_path(entries, entries[-1]["id"])
    messages = [e["message"] for e in path if e["type"] == "message"]
    assert len(entries) >= 1_000
    assert sum(e["type"] == "compaction" for e in path) == 2
    assert any(e["type"] == "branch_summary" for e in path)
    children: dict[str, int] = {}
    for e in entries:
        children[e["parentId"]] = children.get(e["parentId"], 0) + 1
    assert sum(count > 1 for count in children.values()) >= 2  # two branch points at least
    stops = [m["stopReason"] for m in messages if m["role"] == "assistant"]
    assert stops.count("error") >= 2 and stops.count("aborted") >= 1
    answered = {m["toolCallId"] for m in messages if m["role"] == "toolResult"}
    calls = [
        b["id"]
        for m in messages
        if m["role"] == "assistant" and m["stopReason"] not in ("error", "aborted")
        for b in m["content"]
        if b["type"] == "toolCall"
    ]
    assert len([c for c in calls if c not in answered]) == 3  # one before the last compaction, two after it


# --- the leaf's context ---------------------------------------------------------------------------------------


def test_context_of_the_last_leaf_is_what_pi_sends(imported: Store) -> None:
    entries = records()
    expected = without_results_outside_their_run(
        pi_transform_messages(pi_build_session_context(entries, entries[-1]["id"]))
    )
    loop_id = leaf_loop(imported)
    by_entry = {entry_of(r): r for r in imported.messages.path(loop_id)}

    context = imported.messages.context(loop_id)

    assert len(context) == len(expected)
    for got, (what, item) in zip(context, expected):
        if what == "synthetic":
            assert (got.role, got.tool_call_id, got.tool_name, got.is_error) == (
                "toolResult",
                item["id"],
                item["name"],
                True,
            )
            assert got.text() == NO_RESULT
        elif item["type"] == "compaction":
            assert got.role == "user" and got.text() == COMPACTION[0] + item["summary"] + COMPACTION[1]
        elif item["type"] == "branch_summary":  # turnstore writes a newline before </summary>: documented
            assert got.role == "user" and got.text() == BRANCH[0] + item["summary"] + "\n" + BRANCH[1]
        else:
            assert got == by_entry[item["id"]].message


def test_context_of_the_last_leaf_has_no_failed_turn_no_unanswered_call_no_orphan_result(imported: Store) -> None:
    context = imported.messages.context(leaf_loop(imported))
    assert not [m for m in context if m.role == "assistant" and m.stop_reason.value in ("error", "aborted")]
    open_calls: set[str] = set()
    synthetic = 0
    for message in context:
        if message.role == "toolResult":
            assert message.tool_call_id in open_calls, message.tool_call_id
            open_calls.discard(message.tool_call_id)
            synthetic += message.text() == NO_RESULT
        else:
            assert not open_calls, f"calls without a result before a {message.role} message: {open_calls}"
            if message.role == "assistant":
                open_calls = {call.id for call in message.tool_calls()}
    assert not open_calls
    assert synthetic == 2  # the two calls of the three that were never answered


def test_path_traces_every_context_message_to_its_row(imported: Store) -> None:
    loop_id = leaf_loop(imported)
    path = imported.messages.path(loop_id)
    context = imported.messages.context(loop_id)
    rows = iter(path)
    for message in context:
        if message.role == "toolResult" and message.text() == NO_RESULT:
            continue
        row = next(
            r
            for r in rows
            if r.message.role != "extension" or r.message.kind in ("compaction_summary", "branch_summary")
        )
        if row.message.role == "extension":
            assert message.role == "user" and row.message.data["summary"] in message.text()
        elif not (row.message.role == "assistant" and row.message.stop_reason.value in ("error", "aborted")):
            assert message == row.message
        else:
            row = next(rows)  # the failed turn has no context message: the next row is this one's
            assert message == row.message
    assert {r.session_id for r in path} == {SESSION_ID}
    assert any(r.message.role == "extension" and r.message.kind == "model_change" for r in path)
    assert len({r.message_id for r in path}) == len(path)


@pytest.mark.parametrize(("model", "provider"), [("gpt-5", "openai"), ("claude-sonnet-4-5", "anthropic")])
def test_context_for_another_model_on_the_pi_session(imported: Store, model: str, provider: str) -> None:
    loop_id = leaf_loop(imported)
    plain = imported.messages.context(loop_id)
    moved = imported.messages.context(loop_id, model=model, provider=provider)
    assert len(moved) == len(plain)
    foreign = 0
    for before, after in zip(plain, moved):
        if before.role != "assistant" or (before.model, before.provider) == (model, provider):
            assert after.model_dump_json() == before.model_dump_json()
            continue
        foreign += 1
        blocks = after.model_dump(mode="json")["content"]
        assert all(b["type"] in ("text", "toolCall") for b in blocks)
        assert not any("signature" in b or "thoughtSignature" in b or "textSignature" in b for b in blocks)
        thoughts = [
            b.thinking
            for b in before.content
            if b.type == "thinking" and b.thinking.strip() and not (b.__pydantic_extra__ or {}).get("redacted")
        ]
        texts = [b.text for b in before.content if b.type == "text"]
        assert [b["text"] for b in blocks if b["type"] == "text"] == thoughts + texts
    assert foreign >= 5  # both models wrote a share of the leaf's context


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 13, 50, 400, 10_000])
def test_last_is_the_tail_of_the_leaf_context(imported: Store, n: int) -> None:
    context = imported.messages.context(leaf_loop(imported))
    window = imported.messages.last(SESSION_ID, n)
    assert window == context[len(context) - len(window) :]
    assert len(window) <= n and (not window or window[0].role != "toolResult")
    assert len(window) >= min(n, len(context)) - 3  # only tool results cut from their call are left out


def test_last_follows_the_current_path_on_every_backend(store: Any) -> None:
    assert store.import_("pi", FILE).ok
    leaf = leaf_loop(store)
    context = store.messages.context(leaf)
    for n in (1, 7, 60, 5_000):
        window = store.messages.last(SESSION_ID, n)
        assert window == context[len(context) - len(window) :]
        assert len(window) >= min(n, len(context)) - 3
    # Another branch's loop, named: the tail of its own context, not of the session's newest rows.
    other = next(loop.loop_id for loop in store.loops.list(SESSION_ID) if loop.continuation_kind == "branch")
    branch_context = store.messages.context(other)
    window = store.messages.last(SESSION_ID, 25, loop_id=other)
    assert window and window == branch_context[len(branch_context) - len(window) :]
    assert window != store.messages.last(SESSION_ID, 25)
