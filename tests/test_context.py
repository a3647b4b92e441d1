"""The pure context functions: provider-safe history, other models, planning the loop-tree walk, assembling rows."""

from __future__ import annotations

import json
from typing import Any

import pytest
from factories import assistant, extension, tool_result, user

from turnstore.context import (
    NO_RESULT,
    LoopNode,
    assemble,
    for_model,
    plan,
    provider_safe,
    render_summary,
    tail,
)
from turnstore.models import AssistantMessage, ExtensionMessage, StopReason, UserMessage

# --- provider_safe ------------------------------------------------------------------


def texts(messages: list[Any]) -> list[str]:
    """One label per message: its text, the tool call id of a tool result ("!id" for a synthetic one)."""
    labels = []
    for m in messages:
        if m.role != "toolResult":
            labels.append(m.text())
        elif m.is_error and m.text() == NO_RESULT:
            labels.append("!" + m.tool_call_id)
        else:
            labels.append(m.tool_call_id)
    return labels


def test_safe_keeps_complete_pairs_and_plain_messages() -> None:
    messages = [user("u1"), assistant("a1", calls=("c1",)), tool_result("c1"), assistant("a2"), user("u2")]
    assert provider_safe(messages) == messages


def test_safe_drops_leading_orphan_results() -> None:
    messages = [tool_result("gone1"), tool_result("gone2"), user("u1"), assistant("a1")]
    assert texts(provider_safe(messages)) == ["u1", "a1"]


def test_safe_answers_an_unanswered_call_at_the_end() -> None:
    call = assistant("a1", calls=("c1",), timestamp=7_000)
    safe = provider_safe([user("u1"), call])
    assert texts(safe) == ["u1", "a1", "!c1"]
    assert safe[1] is call  # the assistant message itself is kept, untouched
    synthetic = safe[2]
    assert synthetic.model_dump(mode="json") == {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "bash",
        "content": [{"type": "text", "text": "No result provided"}],
        "isError": True,
        "timestamp": 7_000,
    }


def test_safe_keeps_multi_call_turn_when_all_results_present() -> None:
    messages = [
        user("u1"),
        assistant("a1", calls=("c1", "c2", "c3")),
        tool_result("c2"),
        tool_result("c1"),
        tool_result("c3"),
    ]
    assert provider_safe(messages) == messages


def test_safe_adds_missing_results_after_the_present_ones_before_the_next_prompt() -> None:
    messages = [user("u1"), assistant("a1", calls=("c1", "c2", "c3")), tool_result("c2"), user("u2")]
    assert texts(provider_safe(messages)) == ["u1", "a1", "c2", "!c1", "!c3", "u2"]


def test_safe_adds_missing_results_before_the_next_assistant() -> None:
    messages = [user("u1"), assistant("a1", calls=("c1",)), assistant("a2", calls=("c2",)), tool_result("c2")]
    assert texts(provider_safe(messages)) == ["u1", "a1", "!c1", "a2", "c2"]


@pytest.mark.parametrize("stop", [StopReason.ERROR, StopReason.ABORTED])
def test_safe_drops_errored_and_aborted_assistants_and_their_results(stop: StopReason) -> None:
    messages = [
        user("u1"),
        assistant("", stop=stop),
        user("again"),
        assistant("half", calls=("c1", "c2"), stop=stop),
        tool_result("c1"),
        user("u2"),
        assistant("a2"),
    ]
    assert texts(provider_safe(messages)) == ["u1", "again", "u2", "a2"]


def test_safe_an_errored_assistant_ends_the_previous_run() -> None:
    messages = [user("u1"), assistant("a1", calls=("c1",)), assistant("", stop=StopReason.ERROR), tool_result("c1")]
    assert texts(provider_safe(messages)) == ["u1", "a1", "!c1"]


@pytest.mark.parametrize("stop", [StopReason.STOP, StopReason.LENGTH, StopReason.TOOL_USE, StopReason.USER_STOP])
def test_safe_keeps_assistants_with_other_stop_reasons(stop: StopReason) -> None:
    messages = [user("u1"), assistant("a1", stop=stop)]
    assert provider_safe(messages) == messages


def test_safe_empty() -> None:
    assert provider_safe([]) == []


def test_safe_result_before_its_call_does_not_answer_it() -> None:
    messages = [tool_result("c1"), user("u1"), assistant("a1", calls=("c1",))]
    assert texts(provider_safe(messages)) == ["u1", "a1", "!c1"]


def test_safe_result_after_the_next_prompt_is_left_out() -> None:
    messages = [user("u1"), assistant("a1", calls=("c1",)), user("u2"), tool_result("c1")]
    assert texts(provider_safe(messages)) == ["u1", "a1", "!c1", "u2"]


def test_safe_second_result_for_one_call_is_left_out() -> None:
    messages = [user("u1"), assistant("a1", calls=("c1",)), tool_result("c1", "first"), tool_result("c1", "second")]
    safe = provider_safe(messages)
    assert texts(safe) == ["u1", "a1", "c1"]
    assert safe[2].text() == "first"


def test_safe_reused_call_id_needs_its_own_result() -> None:
    messages = [
        user("u1"),
        assistant("a1", calls=("call_0",)),
        tool_result("call_0"),
        assistant("a2", calls=("call_0",)),
    ]
    assert texts(provider_safe(messages)) == ["u1", "a1", "call_0", "a2", "!call_0"]


def test_tail_never_starts_with_a_tool_result() -> None:
    messages = provider_safe([user("u1"), assistant("a1", calls=("c1", "c2")), tool_result("c1"), tool_result("c2")])
    assert texts(tail(messages, 2)) == []
    assert texts(tail(messages, 3)) == ["a1", "c1", "c2"]
    assert texts(tail(messages, 10)) == ["u1", "a1", "c1", "c2"]
    assert tail(messages, 0) == []


# --- for_model -----------------------------------------------------------------------


def rich(model: str = "claude-sonnet-4-5", provider: str = "anthropic") -> AssistantMessage:
    """An assistant message with every kind of block another model must not see as it is."""
    return AssistantMessage.model_validate(
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "plan it", "signature": "sig=="},
                {"type": "thinking", "thinking": "  ", "signature": "empty=="},
                {"type": "thinking", "thinking": "", "redacted": True, "signature": "opaque=="},
                {"type": "text", "text": "Running it.", "textSignature": "ts"},
                {
                    "type": "toolCall",
                    "id": "c1",
                    "name": "bash",
                    "arguments": {"b": 1, "a": [2]},
                    "thoughtSignature": "g==",
                },
                {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            ],
            "stopReason": "toolUse",
            "model": model,
            "provider": provider,
            "api": "anthropic-messages",
            "usage": {"input": 1, "output": 2},
            "timestamp": 5,
        }
    )


def test_for_model_rewrites_another_models_message_as_pi_does() -> None:
    message = rich()
    (moved,) = for_model([message], "gpt-5", "openai")
    assert moved.model_dump(mode="json")["content"] == [
        {"type": "text", "text": "plan it"},
        {"type": "text", "text": "Running it."},
        {"type": "toolCall", "id": "c1", "name": "bash", "arguments": {"b": 1, "a": [2]}},
        {"type": "image", "data": "AAAA", "mimeType": "image/png"},
    ]
    kept = {k: v for k, v in moved.model_dump(mode="json").items() if k != "content"}
    assert kept == {k: v for k, v in message.model_dump(mode="json").items() if k != "content"}
    assert message.model_dump(mode="json")["content"][0]["signature"] == "sig=="  # the original is not changed


def test_for_model_leaves_the_same_models_messages_byte_identical() -> None:
    message = rich()
    messages = [user("u"), message, tool_result("c1")]
    same = for_model(messages, "claude-sonnet-4-5", "anthropic")
    assert [m.model_dump_json() for m in same] == [m.model_dump_json() for m in messages]
    assert for_model(messages, "claude-sonnet-4-5") == messages  # provider not given: the model decides


def test_for_model_same_model_of_another_provider_is_another_model() -> None:
    (moved,) = for_model([rich()], "claude-sonnet-4-5", "bedrock")
    assert [block.type for block in moved.content] == ["text", "text", "toolCall", "image"]


def test_for_model_none_changes_nothing() -> None:
    messages = [user("u"), rich()]
    assert for_model(messages, None) == messages


def test_for_model_leaves_other_roles_alone() -> None:
    messages = [user("u"), tool_result("c1")]
    assert for_model(messages, "gpt-5", "openai") == messages


# --- plan + assemble -----------------------------------------------------------------


def row(id: int, loop_id: str, message: Any) -> tuple[int, str, str, str | None, str]:
    kind = message.kind if isinstance(message, ExtensionMessage) else None
    return (id, loop_id, str(message.role), kind, message.model_dump_json())


def node(
    loop_id: str,
    parent: str | None = None,
    kind: str = "initial",
    fork_after: int | None = None,
    keep_from: int | None = None,
) -> LoopNode:
    return LoopNode(loop_id, parent, kind, fork_after, keep_from)


def tree_of(*nodes: LoopNode) -> dict[str, LoopNode]:
    return {n.loop_id: n for n in nodes}


def context(tree: dict[str, LoopNode], rows: list[tuple[Any, ...]], loop_id: str) -> list[Any]:
    segments, _ = plan(tree, loop_id)
    return assemble(segments, sorted(rows))


# Loop P (initial): ids 1-4. Children below use ids > 4.
P_ROWS = [
    row(1, "P", user("p1")),
    row(2, "P", assistant("p2")),
    row(3, "P", user("p3")),
    row(4, "P", assistant("p4")),
]


def test_initial_loop_sees_only_its_own_messages() -> None:
    tree = tree_of(node("P"), node("D", "P", "default"))
    rows = [*P_ROWS, row(5, "D", user("d1"))]
    assert texts(context(tree, rows, "P")) == ["p1", "p2", "p3", "p4"]


def test_initial_loop_with_a_parent_starts_fresh() -> None:
    tree = tree_of(node("P"), node("S", "P", "initial"))
    rows = [*P_ROWS, row(5, "S", user("s1"))]
    assert texts(context(tree, rows, "S")) == ["s1"]


def test_default_continuation_sees_whole_parent_first() -> None:
    tree = tree_of(node("P"), node("D", "P", "default"))
    rows = [*P_ROWS, row(5, "D", user("d1")), row(6, "D", assistant("d2"))]
    assert texts(context(tree, rows, "D")) == ["p1", "p2", "p3", "p4", "d1", "d2"]


def test_default_chain_of_three() -> None:
    tree = tree_of(node("P"), node("D", "P", "default"), node("E", "D", "default"))
    rows = [*P_ROWS, row(5, "D", user("d1")), row(6, "D", assistant("d2")), row(7, "E", user("e1"))]
    assert texts(context(tree, rows, "E")) == ["p1", "p2", "p3", "p4", "d1", "d2", "e1"]


def test_sibling_loops_do_not_see_each_other() -> None:
    tree = tree_of(node("P"), node("B1", "P", "branch", fork_after=2), node("B2", "P", "branch", fork_after=2))
    rows = [*P_ROWS, row(5, "B1", user("b1")), row(6, "B2", user("b2"))]
    assert texts(context(tree, rows, "B2")) == ["p1", "p2", "b2"]


def test_branch_sees_parent_up_to_and_including_fork() -> None:
    tree = tree_of(node("P"), node("B", "P", "branch", fork_after=2))
    rows = [*P_ROWS, row(5, "B", user("b1")), row(6, "B", assistant("b2"))]
    assert texts(context(tree, rows, "B")) == ["p1", "p2", "b1", "b2"]


def test_branch_of_a_branch_applies_each_fork_point() -> None:
    tree = tree_of(node("P"), node("B", "P", "branch", fork_after=2), node("BB", "B", "branch", fork_after=5))
    rows = [*P_ROWS, row(5, "B", user("b1")), row(6, "B", assistant("b2")), row(7, "BB", user("bb1"))]
    assert texts(context(tree, rows, "BB")) == ["p1", "p2", "b1", "bb1"]


def test_rerun_replaces_its_parent() -> None:
    tree = tree_of(node("P"), node("D", "P", "default"), node("R", "D", "rerun"))
    rows = [
        *P_ROWS,
        row(5, "D", user("d1")),
        row(6, "D", assistant("d2")),
        row(7, "R", user("r1")),
        row(8, "R", assistant("r2")),
    ]
    assert texts(context(tree, rows, "R")) == ["p1", "p2", "p3", "p4", "r1", "r2"]


def test_rerun_of_a_branch_keeps_the_branch_fork_point() -> None:
    tree = tree_of(node("P"), node("B", "P", "branch", fork_after=2), node("R", "B", "rerun"))
    rows = [*P_ROWS, row(5, "B", user("b1")), row(6, "R", user("r1"))]
    assert texts(context(tree, rows, "R")) == ["p1", "p2", "r1"]


def summary(text: Any, kind: str = "compaction_summary") -> ExtensionMessage:
    return ExtensionMessage(kind=kind, data={"summary": text})


def split_summary(message: UserMessage) -> tuple[str, str]:
    prefix, tag, rest = message.text().partition("<summary>")
    assert tag, message.text()
    return prefix, tag + rest


def test_compaction_with_keep_from() -> None:
    tree = tree_of(node("P"), node("C", "P", "compaction", keep_from=3))
    rows = [*P_ROWS, row(5, "C", summary("S")), row(6, "C", user("c1")), row(7, "C", assistant("c2"))]
    result = context(tree, rows, "C")
    assert isinstance(result[0], UserMessage)
    prefix, body = split_summary(result[0])
    assert "compacted" in prefix
    assert body == "<summary>\nS\n</summary>"
    assert texts(result[1:]) == ["p3", "p4", "c1", "c2"]


def test_compaction_plan_bounds_ids_by_keep_from() -> None:
    tree = tree_of(node("P"), node("C", "P", "compaction", keep_from=3))
    segments, min_id = plan(tree, "C")
    assert [s.loop_id for s in segments] == ["P", "C"]
    assert min_id == 3


def test_compaction_without_keep_from_keeps_nothing_above() -> None:
    tree = tree_of(node("P"), node("C", "P", "compaction"))
    rows = [*P_ROWS, row(5, "C", summary("S")), row(6, "C", user("c1"))]
    segments, _ = plan(tree, "C")
    assert [s.loop_id for s in segments] == ["C"]
    result = context(tree, rows, "C")
    assert len(result) == 2
    assert split_summary(result[0])[1] == "<summary>\nS\n</summary>"
    assert texts(result[1:]) == ["c1"]


def test_loop_after_compaction_sees_summary_then_kept_history() -> None:
    tree = tree_of(node("P"), node("C", "P", "compaction", keep_from=3), node("D", "C", "default"))
    rows = [
        *P_ROWS,
        row(5, "C", summary("S")),
        row(6, "C", user("c1")),
        row(7, "C", assistant("c2")),
        row(8, "D", user("d1")),
    ]
    result = context(tree, rows, "D")
    assert split_summary(result[0])[1] == "<summary>\nS\n</summary>"
    assert texts(result[1:]) == ["p3", "p4", "c1", "c2", "d1"]
    assert plan(tree, "D")[1] == 3


def test_second_compaction_replaces_first() -> None:
    tree = tree_of(
        node("P"),
        node("C1", "P", "compaction", keep_from=3),
        node("D", "C1", "default"),
        node("C2", "D", "compaction", keep_from=8),
    )
    rows = [
        *P_ROWS,
        row(5, "C1", summary("S1")),
        row(6, "C1", user("c1")),
        row(7, "D", user("d1")),
        row(8, "D", assistant("d2")),
        row(9, "C2", summary("S2")),
        row(10, "C2", user("x1")),
    ]
    result = context(tree, rows, "C2")
    assert split_summary(result[0])[1] == "<summary>\nS2\n</summary>"
    assert texts(result[1:]) == ["d2", "x1"]


def test_rerun_of_compaction_starts_from_summary_and_kept_history() -> None:
    tree = tree_of(node("P"), node("C", "P", "compaction", keep_from=3), node("R", "C", "rerun"))
    rows = [
        *P_ROWS,
        row(5, "C", summary("S")),
        row(6, "C", user("c1")),
        row(7, "R", user("r1")),
    ]
    result = context(tree, rows, "R")
    assert isinstance(result[0], UserMessage) and "<summary>\nS\n</summary>" in result[0].text()
    assert texts(result[1:]) == ["p3", "p4", "r1"]


def test_compaction_summary_in_a_plain_loop_is_rendered_where_it_stands() -> None:
    # pi's compactionSummary *message* (not a compaction entry) is imported into the loop it stands in.
    tree = tree_of(node("P"), node("D", "P", "default"))
    rows = [*P_ROWS, row(5, "D", user("d1")), row(6, "D", summary("S")), row(7, "D", user("d2"))]
    result = context(tree, rows, "D")
    assert texts(result[:5]) == ["p1", "p2", "p3", "p4", "d1"]
    assert split_summary(result[5])[1] == "<summary>\nS\n</summary>"
    assert texts(result[6:]) == ["d2"]


def test_branch_summary_rendered_as_user_text() -> None:
    tree = tree_of(node("P"), node("B", "P", "branch", fork_after=2))
    rows = [*P_ROWS, row(5, "B", summary("tried X, failed", "branch_summary")), row(6, "B", user("b1"))]
    result = context(tree, rows, "B")
    assert texts(result[:2]) == ["p1", "p2"]
    assert isinstance(result[2], UserMessage)
    prefix, body = split_summary(result[2])
    assert "branch" in prefix
    assert body == "<summary>\ntried X, failed\n</summary>"
    assert texts(result[3:]) == ["b1"]


@pytest.mark.parametrize("kind", ["status_update", "leaf", "label", "model_change", "system", "custom"])
def test_other_extensions_dropped(kind: str) -> None:
    tree = tree_of(node("P"), node("D", "P", "default"))
    rows = [
        row(1, "P", user("p1")),
        row(2, "P", extension(kind)),
        row(3, "P", assistant("p2")),
        row(4, "D", extension(kind, {"summary": "not a summary"})),
        row(5, "D", user("d1")),
    ]
    result = context(tree, rows, "D")
    assert texts(result) == ["p1", "p2", "d1"]
    assert all(m.role != "extension" for m in result)


def test_assemble_pairs_tool_calls() -> None:
    tree = tree_of(node("P"), node("B", "P", "branch", fork_after=2))
    rows = [
        row(1, "P", user("p1")),
        row(2, "P", assistant("p2", calls=("c1",))),
        row(3, "P", tool_result("c1")),
        row(4, "B", user("b1")),
    ]
    # The fork cuts the call from its result: the call is answered by a synthetic result.
    assert texts(context(tree, rows, "B")) == ["p1", "p2", "!c1", "b1"]


def test_assemble_ignores_rows_of_loops_outside_the_plan() -> None:
    tree = tree_of(node("P"), node("X"))
    rows = [row(1, "X", user("other")), *P_ROWS]
    assert texts(context(tree, rows, "P")) == ["p1", "p2", "p3", "p4"]


def test_assembled_messages_keep_their_json() -> None:
    message = assistant("a", calls=("c1",), thinking="t", signature="sig==")
    tree = tree_of(node("P"))
    rows = [row(1, "P", user("u")), row(2, "P", message), row(3, "P", tool_result("c1"))]
    assert context(tree, rows, "P")[1].model_dump(mode="json") == message.model_dump(mode="json")


@pytest.mark.parametrize("kind", ["default", "rerun", "branch", "compaction"])
def test_cycle_in_parent_links_terminates(kind: str) -> None:
    tree = tree_of(node("A", "B", kind, keep_from=1 if kind == "compaction" else None), node("B", "A", "default"))
    segments, _ = plan(tree, "A")
    assert 1 <= len(segments) <= 2
    rows = [row(1, "A", user("a1")), row(2, "B", user("b1"))]
    result = assemble(segments, rows)
    assert len(result) <= 2


def test_missing_parent_stops_the_walk() -> None:
    tree = tree_of(node("D", "gone", "default"))
    segments, _ = plan(tree, "D")
    assert [s.loop_id for s in segments] == ["D"]


# --- render_summary ------------------------------------------------------------------


def test_render_summary_with_str_data() -> None:
    rendered = render_summary(ExtensionMessage(kind="compaction_summary", data="we fixed the build"))
    assert isinstance(rendered, UserMessage)
    prefix, body = split_summary(rendered)
    assert prefix.strip()
    assert body == "<summary>\nwe fixed the build\n</summary>"
    assert rendered.timestamp == 0


def test_render_summary_with_dict_data_and_timestamp() -> None:
    rendered = render_summary(
        ExtensionMessage(kind="branch_summary", data={"summary": "went left", "timestamp": 1767225600000})
    )
    assert split_summary(rendered)[1] == "<summary>\nwent left\n</summary>"
    assert rendered.timestamp == 1767225600000


def test_render_summary_with_structured_summary() -> None:
    data = {"summary": {"goal": "ship", "done": ["a", "ü"]}}
    rendered = render_summary(ExtensionMessage(kind="compaction_summary", data=data))
    body = split_summary(rendered)[1]
    inner = body.removeprefix("<summary>\n").removesuffix("\n</summary>")
    assert json.loads(inner) == data["summary"]
    assert "ü" in inner


def test_render_summary_prefixes_differ_by_kind() -> None:
    compaction = split_summary(render_summary(summary("S")))[0]
    branch = split_summary(render_summary(summary("S", "branch_summary")))[0]
    assert compaction != branch


@pytest.mark.parametrize("timestamp", [-5, "1767225600000", True, None])
def test_render_summary_ignores_bad_timestamp(timestamp: Any) -> None:
    data = {"summary": "s", "timestamp": timestamp}
    rendered = render_summary(ExtensionMessage(kind="compaction_summary", data=data))
    assert rendered.timestamp == 0


def test_render_summary_reads_float_seconds_as_tau_writes_them() -> None:
    data = {"summary": "s", "timestamp": 1767226000.25}
    rendered = render_summary(ExtensionMessage(kind="compaction_summary", data=data))
    assert rendered.timestamp == 1767226000250
