"""What the next model call sees: walking the loop tree, honouring compaction, pairing tool calls.

Pure functions over rows; the message repository runs the queries.

A loop's context is the context of its parent up to the fork point, then the
loop's own messages. ``initial`` loops start fresh. A ``rerun`` replaces its
parent, so it starts from what the parent started from. A ``compaction`` loop
opens with a summary extension message: the history before its ``keep_from``
message is replaced by that summary (rendered as a user message, as pi and
Tau do), the history from ``keep_from`` on is kept after it. Other extension
messages never enter the context.

Providers reject a tool result without its tool call, a tool call without its
results, and replayed incomplete turns, so :func:`provider_safe` makes the
history one they accept, as pi does; :func:`for_model` prepares it for another
model than the one that wrote it. ``docs/context.md`` says where this differs
from pi.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from .models import (
    AGENT_MESSAGE,
    AssistantMessage,
    ExtensionMessage,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    UserMessage,
    unreadable,
)

__all__ = [
    "NO_RESULT",
    "SUMMARY_KINDS",
    "LoopNode",
    "Piece",
    "Segment",
    "assemble",
    "choose",
    "for_model",
    "loop_nodes",
    "path_pieces",
    "pieces",
    "plan",
    "provider_safe",
    "provider_safe_placed",
    "render_summary",
    "run_edge",
    "starts_afresh",
    "tail",
    "to_messages",
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


@dataclass(frozen=True)
class Piece:
    """A run of one loop's rows in a context: ids from ``lower`` to ``upper`` (None: unbounded).

    ``summaries`` True selects a compaction loop's compaction summaries only (it
    opens with them, above the history it keeps), False its other rows; None
    (a loop that is not a compaction) every row, a summary where it stands.
    """

    loop_id: str
    lower: int | None
    upper: int | None
    summaries: bool | None = None

    def admits(self, row: Sequence[Any]) -> bool:
        """Whether an ``(id, loop_id, role, kind, ...)`` row of this piece's loop belongs to it."""
        message_id, _loop_id, role, kind, *_rest = row
        if self.summaries is not None and (role == "extension" and kind == COMPACTION_SUMMARY) != self.summaries:
            return False
        return (self.lower is None or message_id >= self.lower) and (self.upper is None or message_id <= self.upper)


def pieces(segments: Sequence[Segment]) -> list[Piece]:
    """The order a context takes its rows in: each piece's rows in id order, one piece after another.

    A plain segment is one piece. A compaction segment puts its summaries first,
    then what came before it from ``keep_from`` on, then its own other rows.
    """
    result: list[Piece] = []
    for segment in segments:
        if not segment.compaction:
            result.append(Piece(segment.loop_id, None, segment.upper))
            continue
        keep = segment.keep_from
        kept = (
            []
            if keep is None
            else [
                Piece(p.loop_id, keep if p.lower is None else max(p.lower, keep), p.upper, p.summaries) for p in result
            ]
        )
        result = [
            Piece(segment.loop_id, None, None, summaries=True),
            *kept,
            Piece(segment.loop_id, None, segment.upper, summaries=False),
        ]
    return [piece for piece in result if piece.upper is None or piece.upper >= 0]


@lru_cache(maxsize=256)
def path_pieces(tree: tuple[tuple[Any, ...], ...], loop_id: str) -> tuple[Piece, ...]:
    """:func:`pieces` of ``loop_id``'s path in a tree given as ``loop_tree`` rows (cached: ``last()`` asks often)."""
    return tuple(pieces(plan(loop_nodes(tree), loop_id)[0]))


def loop_nodes(rows: Iterable[Sequence[Any]]) -> dict[str, LoopNode]:
    """The loop tree from ``queries.loop_tree`` rows (loop id, parent, kind, fork_after, keep_from), by loop id."""
    return {
        loop_id: LoopNode(loop_id, parent_loop_id, continuation_kind, fork_after, keep_from)
        for loop_id, parent_loop_id, continuation_kind, fork_after, keep_from in rows
    }


def choose(pieces: Sequence[Piece], rows: Iterable[Sequence[Any]]) -> list[Any]:
    """The rows of a context's path in order, from ``(id, loop_id, role, kind, ...)`` rows in id order."""
    by_loop: dict[str, list[Sequence[Any]]] = {piece.loop_id: [] for piece in pieces}
    for row in rows:
        _id, loop_id, *_rest = row
        own = by_loop.get(loop_id)
        if own is not None:
            own.append(row)
    return [row for piece in pieces for row in by_loop[piece.loop_id] if piece.admits(row)]


def to_messages(rows: Iterable[Sequence[Any]]) -> list[Any]:
    """The stored messages of ``(id, loop_id, role, kind, message_json, ...)`` path rows that can reach the model.

    Extension rows other than summaries are left out unread.
    """
    messages = []
    for message_id, _loop_id, role, kind, text, *_rest in rows:
        if role != "extension" or kind in SUMMARY_KINDS:
            try:
                messages.append(AGENT_MESSAGE.validate_json(text))
            except ValidationError as error:  # changed outside turnstore
                raise unreadable(message_id, error) from None
    return messages


def assemble(segments: Sequence[Segment], rows: Iterable[tuple[Any, ...]]) -> list[Any]:
    """Build the context from ``(id, loop_id, role, kind, message_json)`` rows in id order."""
    return provider_safe(to_messages(choose(pieces(segments), rows)))


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


NO_RESULT = "No result provided"
"""The text of the tool result that stands in for one that was never written (pi's words)."""

DROPPED_STOPS = frozenset({StopReason.ERROR, StopReason.ABORTED})
"""Stop reasons of assistant messages a provider should never see again: incomplete turns."""


def provider_safe(messages: Iterable[Any]) -> list[Any]:
    """Stored messages as a provider accepts them, made the way pi's ``transformMessages`` makes them.

    * Compaction and branch summaries become user text; other extension
      messages are left out.
    * An assistant message that stopped with ``error`` or ``aborted`` is left
      out, and so are the results of its calls.
    * The results of an assistant message's calls are the tool results after
      it, up to the next user or assistant message. A call without one gets a
      synthetic result (``isError``, text :data:`NO_RESULT`) at the end of that
      run, or at the end of the context.
    * Any other tool result (its call is not in the context, is not the
      nearest assistant's, or already has a result) is left out.
    """
    return [message for _key, message in provider_safe_placed((None, message) for message in messages)]


def provider_safe_placed(items: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """:func:`provider_safe` of ``(key, message)`` pairs, each message kept with its key; a synthetic
    result takes the key of the last message of the run it closes (what a page of a context is cut by)."""
    result: list[tuple[Any, Any]] = []
    caller: AssistantMessage | None = None  # the kept assistant message whose results may follow
    calls: set[str] = set()  # its call ids
    answered: set[str] = set()
    last: Any = None  # the key of the message before this one
    for key, message in items:
        role = message.role
        if role == "extension":
            if message.kind not in SUMMARY_KINDS:
                last = key
                continue
            message, role = render_summary(message), "user"
        elif role == "toolResult":
            call_id = message.tool_call_id
            if call_id in calls and call_id not in answered:
                answered.add(call_id)
                result.append((key, message))
            last = key
            continue
        if caller is not None:
            if len(answered) < len(calls):
                result.extend((last, missing) for missing in _no_results(caller, answered))
            caller, calls = None, set()
        last = key
        if role == "assistant":
            if message.stop_reason in DROPPED_STOPS:
                continue
            ids = {block.id for block in message.content if isinstance(block, ToolCallContent)}
            if ids:
                caller, calls, answered = message, ids, set()
        result.append((key, message))
    if caller is not None:
        result.extend((last, missing) for missing in _no_results(caller, answered))
    return result


def starts_afresh(row: Sequence[Any]) -> bool:
    """Whether :func:`provider_safe` forgets what came before at an ``(id, loop_id, role, kind, ...)`` row:
    a user or assistant message or a summary. A context cut only at such rows is cut between runs of a
    call and its results, so each part comes out as it does in the whole."""
    _id, _loop_id, role, kind, *_rest = row
    return role in ("user", "assistant") or (role == "extension" and kind in SUMMARY_KINDS)


def run_edge(rows: Sequence[Sequence[Any]], at: int, step: int) -> int:
    """From index ``at`` of a context's rows, the nearest index (``step`` -1: back, 1: on) where a run
    starts afresh, or an end of the rows."""
    while 0 < at < len(rows) and not starts_afresh(rows[at]):
        at += step
    return at


def _no_results(caller: AssistantMessage, answered: set[str]) -> list[ToolResultMessage]:
    """Synthetic results for the calls of ``caller`` that have none, in call order."""
    missing: list[ToolResultMessage] = []
    for call in caller.tool_calls():
        if call.id in answered:
            continue
        answered.add(call.id)
        missing.append(
            ToolResultMessage(
                tool_call_id=call.id,
                tool_name=call.name,
                content=[TextContent(text=NO_RESULT)],
                is_error=True,
                timestamp=caller.timestamp,
                turn=caller.turn,
            )
        )
    return missing


def for_model(messages: Sequence[Any], model: str | None, provider: str | None = None) -> list[Any]:
    """The messages prepared for ``model`` (of ``provider``, when given), as pi prepares another model's.

    An assistant message written by another model (a different ``model``, or
    ``provider`` when one is given) keeps its text as plain text blocks (text
    signatures dropped), its thinking as text (empty thinking dropped), its
    tool calls without ``thoughtSignature``; redacted thinking is dropped.
    Messages of the same model are returned as they are, signatures and all.
    """
    if model is None:
        return list(messages)
    result: list[Any] = []
    for message in messages:
        if message.role != "assistant" or (
            message.model == model and (provider is None or message.provider == provider)
        ):
            result.append(message)
            continue
        content: list[Any] = []
        for block in message.content:
            if isinstance(block, ThinkingContent):
                if not _extra(block).get("redacted") and block.thinking.strip():
                    content.append(TextContent(text=block.thinking))
            elif isinstance(block, TextContent):
                content.append(TextContent(text=block.text))
            elif isinstance(block, ToolCallContent) and FOREIGN_SIGNATURE in _extra(block):
                extra = {key: value for key, value in _extra(block).items() if key != FOREIGN_SIGNATURE}
                content.append(ToolCallContent(id=block.id, name=block.name, arguments=block.arguments, **extra))
            else:
                content.append(block)
        result.append(message.model_copy(update={"content": content}))
    return result


FOREIGN_SIGNATURE = "thoughtSignature"
"""The key of a tool call's provider signature (Gemini), meaningless to another model."""


def _extra(block: Any) -> dict[str, Any]:
    return block.__pydantic_extra__ or {}


def tail(messages: Sequence[Any], n: int) -> list[Any]:
    """The last ``n`` messages, without tool results cut from their call at the front."""
    start = max(len(messages) - n, 0)
    while start < len(messages) and messages[start].role == "toolResult":
        start += 1
    return list(messages[start:])
