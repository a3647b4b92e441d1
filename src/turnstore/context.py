"""What the next model call sees: walking the loop tree, honouring compaction, pairing tool calls.

Pure functions over rows; the message repository runs the queries.

A loop's context is the context of its parent up to the fork point, then the
loop's own messages. ``initial`` loops start fresh. A ``rerun`` replaces its
parent, so it starts from what the parent started from. A ``compaction`` loop
opens with a summary extension message: the history before its ``keep_from``
message is replaced by that summary (rendered as a user message, as pi and
Tau do), the history from ``keep_from`` on is kept after it. Other extension
messages never enter the context.

Providers reject a tool result without its tool call and a tool call without
its results, so :func:`pair_tool_calls` removes both kinds of orphan.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .collector import collector_paused
from .models import AGENT_MESSAGE, ExtensionMessage, TextContent, ToolCallContent, UserMessage

__all__ = [
    "SUMMARY_KINDS",
    "LoopNode",
    "Segment",
    "assemble",
    "pair_tool_calls",
    "plan",
    "render_summary",
]

COMPACTION_SUMMARY = "compaction_summary"
BRANCH_SUMMARY = "branch_summary"
SUMMARY_KINDS = frozenset({COMPACTION_SUMMARY, BRANCH_SUMMARY})
"""Extension kinds that do enter the context, rendered as user text."""

_PREFIX = {
    COMPACTION_SUMMARY: "The conversation history before this point was compacted into the following summary:",
    BRANCH_SUMMARY: "The following is a summary of a branch that this conversation came back from:",
}

_EXCLUDE_ALL = -1
"""An upper bound no message id is under: the loop contributes nothing (a rerun's parent)."""


@dataclass(frozen=True)
class LoopNode:
    """The part of a loop row the context walk needs."""

    loop_id: str
    parent_loop_id: str | None
    continuation_kind: str
    fork_after: int | None
    keep_from: int | None


@dataclass(frozen=True)
class Segment:
    """One loop's share of a context: its messages with ``id <= upper`` (None: all)."""

    loop_id: str
    upper: int | None
    compaction: bool
    keep_from: int | None


def plan(tree: Mapping[str, LoopNode], loop_id: str) -> tuple[list[Segment], int | None]:
    """The segments of ``loop_id``'s context, root first, and the smallest message id it can need.

    The id bound is the nearest compaction's ``keep_from``; None means the
    caller must find the first message of the topmost segment.
    """
    segments: list[Segment] = []
    current: str | None = loop_id
    upper: int | None = None
    lower: int | None = None
    seen: set[str] = set()
    while current is not None and current in tree and current not in seen:
        seen.add(current)
        node = tree[current]
        compaction = node.continuation_kind == "compaction"
        segments.append(Segment(current, upper, compaction, node.keep_from))
        if compaction and lower is None:
            if node.keep_from is None:
                lower = _EXCLUDE_ALL  # nothing above a summary without a kept tail
                break
            lower = node.keep_from
        if node.continuation_kind == "initial" or node.parent_loop_id is None:
            break
        if node.continuation_kind == "rerun" and node.fork_after is None:
            upper = _EXCLUDE_ALL
        else:
            upper = node.fork_after
        current = node.parent_loop_id
    segments.reverse()
    return segments, (None if lower in (None, _EXCLUDE_ALL) else lower)


def assemble(segments: Sequence[Segment], rows: Iterable[tuple[Any, ...]]) -> list[Any]:
    """Build the context from ``(id, loop_id, role, kind, message_json)`` rows in id order."""
    wanted = {segment.loop_id: segment for segment in segments}
    by_loop: dict[str, list[tuple[Any, ...]]] = {loop_id: [] for loop_id in wanted}
    for row in rows:
        segment = wanted.get(row[1])
        if segment is None:
            continue
        # A compaction loop starts from its summary, even when the loop itself is cut
        # (a rerun of a compaction loop starts from the summary too).
        if segment.upper is None or row[0] <= segment.upper or (segment.compaction and _is_summary(row)):
            by_loop[row[1]].append(row)
    chosen: list[tuple[Any, ...]] = []
    for segment in segments:
        own = by_loop[segment.loop_id]
        if not segment.compaction:
            chosen.extend(own)
            continue
        summaries = [row for row in own if _is_summary(row)]
        rest = [row for row in own if not _is_summary(row)]
        kept = [row for row in chosen if segment.keep_from is not None and row[0] >= segment.keep_from]
        chosen = summaries + kept + rest
    messages = []
    with collector_paused():
        for row in chosen:
            if row[2] != "extension":
                messages.append(AGENT_MESSAGE.validate_json(row[4]))
            elif row[3] in SUMMARY_KINDS:
                messages.append(render_summary(AGENT_MESSAGE.validate_json(row[4])))
    return pair_tool_calls(messages)


def _is_summary(row: tuple[Any, ...]) -> bool:
    return row[2] == "extension" and row[3] == COMPACTION_SUMMARY


def render_summary(message: ExtensionMessage) -> UserMessage:
    """A compaction or branch summary as the user text the model sees."""
    data = message.data
    summary = data.get("summary") if isinstance(data, dict) else data
    text = summary if isinstance(summary, str) else json.dumps(summary, ensure_ascii=False)
    timestamp = data.get("timestamp") if isinstance(data, dict) else None
    if isinstance(timestamp, float) and timestamp >= 0:
        timestamp = int(timestamp * 1000)  # float unix seconds (Tau, Operator-Use)
    prefix = _PREFIX.get(message.kind, _PREFIX[COMPACTION_SUMMARY])
    return UserMessage(
        content=[TextContent(text=f"{prefix}\n\n<summary>\n{text}\n</summary>")],
        timestamp=timestamp if isinstance(timestamp, int) and not isinstance(timestamp, bool) and timestamp >= 0 else 0,
    )


def pair_tool_calls(messages: Sequence[Any]) -> list[Any]:
    """Drop tool results without their call and assistant messages whose calls lack results.

    A tool result answers the nearest earlier unanswered call with its id (ids
    may repeat across turns). An assistant message is kept only if every call
    it makes is answered; a result is kept only if the call it answers is kept.
    """
    open_calls: dict[str, int] = {}  # call id -> index of the assistant message that made it
    answers: dict[int, int] = {}  # tool result index -> assistant index
    unanswered: dict[int, int] = {}  # assistant index -> calls still without a result
    for index, message in enumerate(messages):
        role = message.role
        if role == "assistant":
            calls = [block.id for block in message.content if isinstance(block, ToolCallContent)]
            unanswered[index] = len(calls)
            for call in calls:
                open_calls[call] = index
        elif role == "toolResult":
            caller = open_calls.pop(message.tool_call_id, None)
            if caller is not None:
                answers[index] = caller
                unanswered[caller] -= 1
    result: list[Any] = []
    for index, message in enumerate(messages):
        role = message.role
        if role == "assistant" and unanswered[index]:
            continue
        if role == "toolResult" and (index not in answers or unanswered[answers[index]]):
            continue
        result.append(message)
    return result
