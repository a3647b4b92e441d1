"""What the viewer's pages show, built from the store's public read API only.

Each function reads one page's worth (a page of sessions, a page of turns of
one loop, a page of a loop's context) and turns the stored models into plain
view objects the templates render. Stored text stays text here: the templates
escape it (autoescape) after :func:`turnstore.web.text.shown` made its control
characters visible.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import urlencode

from ..errors import InvalidArgument, LoopNotFound, SessionNotFound, TurnNotFound
from ..media import REF_PREFIX
from ..models import (
    AssistantMessage,
    AudioContent,
    ExtensionMessage,
    FileContent,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
)
from ..records import Loop, SearchHit, SessionSummary
from ..store import Store
from ..usage import UsageTotals

__all__ = [
    "IMAGE_TYPES",
    "Block",
    "HitView",
    "LoopNode",
    "LoopPart",
    "MessageView",
    "SessionRow",
    "TREE_INDENT",
    "TreeItem",
    "TurnView",
    "image_block",
    "image_of",
    "hit_views",
    "continues",
    "loop_of_session",
    "next_in_conversation",
    "loop_tree",
    "message_view",
    "pair",
    "pair_in_order",
    "session_rows",
    "snippet_pieces",
    "tree_items",
    "turn_views",
]

IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"})
"""MIME types served as images. Anything else stored as an image (``image/svg+xml`` above all: an SVG
is a document that may hold script) is offered as a download only, never as an image."""


@dataclass
class SessionRow:
    """One line of the sessions list."""

    summary: SessionSummary
    models: list[str]
    usage: UsageTotals

    @property
    def tokens(self) -> int:
        return self.usage.total_tokens


def session_rows(store: Store, summaries: list[SessionSummary]) -> list[SessionRow]:
    """The sessions of one page with their models and usage: two queries per session, never the whole store."""
    rows = []
    for summary in summaries:
        by_model = store.usage.by_model(summary.session_id)
        models = sorted({row.model for row in by_model if row.model})
        rows.append(SessionRow(summary, models, _sum(by_model)))
    return rows


def _sum(rows: list[Any]) -> UsageTotals:
    """Totals of a session from its per-model rows (one query instead of two)."""
    total = UsageTotals()
    costs = [row.cost for row in rows if row.cost is not None]
    for name in ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens", "requests"):
        setattr(total, name, sum(getattr(row, name) for row in rows))
    total.cost = sum(costs) if costs else None
    total.unpriced_records = sum(row.unpriced_records for row in rows)
    total.unpriced_tokens = sum(row.unpriced_tokens for row in rows)
    total.unpriced_models = sorted({name for row in rows for name in row.unpriced_models})
    seen = total.input + total.cache_read + total.cache_write
    total.cache_hit_rate = total.cache_read / seen if seen else 0.0
    return total


@dataclass
class LoopNode:
    """A loop in the session's tree: how it relates to its parent, and its children."""

    loop: Loop
    relation: str
    children: list[LoopNode] = field(default_factory=list)


def loop_tree(loops: list[Loop]) -> list[LoopNode]:
    """The session's loops as a forest: continuations, branches, reruns and compactions under their
    parent, sub-agents under the loop whose tool call spawned them."""
    nodes = {loop.loop_id: LoopNode(loop, _relation(loop)) for loop in loops}
    roots: list[LoopNode] = []
    for loop in loops:
        parent = loop.parent_loop_id or loop.spawn_loop_id
        if parent is not None and parent in nodes and parent != loop.loop_id:
            nodes[parent].children.append(nodes[loop.loop_id])
        else:
            roots.append(nodes[loop.loop_id])
    return roots


TREE_INDENT = 12
"""Levels the loop tree nests on the page; deeper loops are listed at that level, each with its depth."""


@dataclass
class TreeItem:
    """One step of drawing the loop tree: ``"loop"`` (a loop's line opens), ``"open"`` (its children's
    list opens), ``"end"`` (its line closes) or ``"close"`` (a children's list and its owner's line close).

    A loop nested deeper than :data:`TREE_INDENT` is listed at that level, ``depth`` saying how deep it
    is, and ``parent`` naming its parent when that is not the loop listed just above it.
    """

    kind: str
    node: LoopNode | None = None
    depth: int = 0
    parent: str | None = None


def tree_items(roots: list[LoopNode]) -> list[TreeItem]:
    """The loop tree as a flat sequence a template draws without recursion, so a tree of any depth renders
    (a chain of thousands of continuations would exhaust a recursive macro's stack).

    Nesting stops at :data:`TREE_INDENT` levels, so a deep chain stays readable: the loops under that
    level follow one another in tree order (depth first, children in order) at the same indentation.
    """
    items: list[TreeItem] = []
    seen: set[str] = set()
    above: str | None = None
    stack: list[tuple[LoopNode, int, str | None] | None] = [(root, 0, None) for root in reversed(roots)]
    while stack:
        entry = stack.pop()
        if entry is None:
            items.append(TreeItem("close"))
            continue
        node, depth, parent = entry
        if node.loop.loop_id in seen:  # only a damaged store has a cycle; draw each loop once
            continue
        seen.add(node.loop.loop_id)
        flat = depth > TREE_INDENT
        items.append(TreeItem("loop", node, depth, parent if flat and parent != above else None))
        above = node.loop.loop_id
        if node.children and depth < TREE_INDENT:
            items.append(TreeItem("open"))
            stack.append(None)
        else:
            items.append(TreeItem("end"))
        stack.extend((child, depth + 1, node.loop.loop_id) for child in reversed(node.children))
    return items


def _relation(loop: Loop) -> str:
    kind = loop.continuation_kind.value
    if loop.spawn_loop_id is not None:
        return f"sub-agent (tool call {loop.spawn_tool_call_id})" if loop.spawn_tool_call_id else "sub-agent"
    if kind == "branch":
        return f"branch after message #{loop.fork_after}" if loop.fork_after is not None else "branch"
    if kind == "compaction":
        return f"compaction, keeps from message #{loop.keep_from}" if loop.keep_from is not None else "compaction"
    return kind


CONTINUATIONS = frozenset({"default", "compaction"})
"""How a loop that carries the conversation on continues its parent: the next prompt, or a compaction."""


def continues(loop: Loop) -> bool:
    """Whether ``loop`` carries its parent's conversation on (not a branch, a rerun or a sub-agent)."""
    return (
        loop.parent_loop_id is not None and loop.spawn_loop_id is None and loop.continuation_kind.value in CONTINUATIONS
    )


def next_in_conversation(loops: list[Loop], loop_id: str) -> Loop | None:
    """The loop that carries ``loop_id``'s conversation on: the latest of its children that continue it."""
    following = [loop for loop in loops if loop.parent_loop_id == loop_id and continues(loop)]
    return following[-1] if following else None


@dataclass
class LoopPart:
    """The turns of one loop a session's page shows, in conversation order with the loops before and after."""

    loop: Loop
    relation: str
    turns: list[TurnView]
    suffix: str = ""
    """What tells this part's turn anchors apart from another loop's on the page ("" for the first part)."""


def loop_of_session(store: Store, session_id: str, loop_id: str) -> Loop:
    """The loop, refused as not found when it belongs to another session."""
    loop = store.loops.get(loop_id)
    if loop.session_id != session_id:
        raise LoopNotFound(f"loop {loop_id!r} not found in session {session_id!r}")
    return loop


@dataclass
class Block:
    """One content block as shown: ``kind`` picks the template's rendering."""

    kind: str
    text: str = ""
    name: str = ""
    arguments: Any = None
    anchor: str = ""
    target: str | None = None
    mime_type: str = ""
    src: str | None = None
    """Where the image is served from (the media route by digest, or the image route by place); None: nowhere."""
    is_image: bool = False


@dataclass
class MessageView:
    """One message as shown."""

    role: str
    blocks: list[Block]
    kind: str | None = None
    data: Any = None
    model: str | None = None
    stop_reason: str | None = None
    error: str | None = None
    tool_name: str | None = None
    is_error: bool = False
    anchor: str = ""
    target: str | None = None
    timestamp: datetime | None = None


@dataclass
class TurnView:
    """One turn of a loop with its usage."""

    turn_index: int
    messages: list[MessageView]
    usage: UsageTotals
    first: int = 0
    """Index in the turn of the first message shown (more than 0: the page starts within the turn)."""
    length: int = 0
    """Messages the turn holds, shown or not."""

    @property
    def rest(self) -> int:
        """Messages of the turn after the last one shown (more than 0: the page cut the turn)."""
        return max(self.length - self.first - len(self.messages), 0)


def _anchor(kind: str, loop_id: str, call_id: str, place: tuple[int, int] | None) -> str:
    """An HTML id for a tool call or result: a digest of the loop, the turn (a call id may repeat in
    another turn) and the call id, so stored ids never reach an attribute raw."""
    turn = "" if place is None else place[0]
    return kind + "-" + _digest(f"{loop_id}\x00{turn}\x00{call_id}")


def turn_views(store: Store, loop_id: str, start: int, stop: int, skip: int, limit: int) -> list[TurnView]:
    """Turns ``start <= k < stop`` of a loop, each tool call linked to its result and back; at most
    ``limit`` messages read, the first ``skip`` of turn ``start`` left out (a page of a huge turn).

    A turn shown in part says which of its messages it holds (``first``, ``length``): the page tells
    how many it left out and where they are.
    """
    if skip:  # within turn ``start``: never past it, where the skip would run into later turns
        held = store.messages.turn_lengths(loop_id, start, start + 1).get(start, 0)
        if skip >= held:
            raise InvalidArgument("offset", f"must be less than the {held:,} messages of turn {start}")
    views = []
    turns = store.messages.turns(loop_id, start, stop, skip=skip, limit=limit, media="ref")
    lengths = store.messages.turn_lengths(loop_id, turns[0].turn_index, turns[-1].turn_index + 1) if turns else {}
    for turn in turns:
        first = skip if turn.turn_index == start else 0
        messages = [
            message_view(message, loop_id, (turn.turn_index, first + i)) for i, message in enumerate(turn.messages)
        ]
        pair(messages)
        usage = store.usage.turn(loop_id, turn.turn_index)
        length = lengths.get(turn.turn_index, first + len(messages))
        views.append(TurnView(turn.turn_index, messages, usage, first, length))
    return views


def pair_in_order(messages: list[MessageView]) -> None:
    """Link each tool call of a context page to its result and back: the first result after it with its id.

    A context page spans turns and loops, where a call id may repeat: each call's anchor is told apart
    by where its message stands on the page, and its result takes the same one.
    """
    open_calls: dict[str, tuple[Block, str]] = {}
    for position, view in enumerate(messages):
        for block in view.blocks:
            if block.kind == "tool_call":
                key = block.anchor[len("call-") :]
                unique = _digest(f"{key}\x00{position}")
                block.anchor = f"call-{unique}"
                open_calls[key] = (block, unique)
        if view.role == "toolResult" and view.anchor:
            key = view.anchor[len("result-") :]
            found = open_calls.pop(key, None)
            if found is None:
                view.anchor = "result-" + _digest(f"{key}\x00result {position}")
                continue
            call, unique = found
            view.anchor = f"result-{unique}"
            call.target, view.target = view.anchor, call.anchor


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def pair(messages: list[MessageView]) -> None:
    """Link each tool call to the result shown on the same page, and each result to its call."""
    calls = {block.anchor: block for view in messages for block in view.blocks if block.kind == "tool_call"}
    results = {view.anchor: view for view in messages if view.role == "toolResult"}
    for anchor, block in calls.items():
        result = results.get("result-" + anchor[len("call-") :])
        if result is not None:
            block.target = result.anchor
            result.target = anchor


def message_view(
    message: Any, loop_id: str, place: tuple[int, int] | None = None, message_id: int | None = None
) -> MessageView:
    """One stored message as shown, read with ``media="ref"``: an image kept out of line is served by its
    digest; a small one stored inline by its place, ``place`` (turn, index in turn) or ``message_id``."""
    if isinstance(message, ExtensionMessage):
        return MessageView(role="extension", blocks=[], kind=message.kind, data=message.data)
    where: dict[str, Any] | None = None
    if place is not None:
        where = {"loop": loop_id, "turn": place[0], "message": place[1]}
    elif message_id is not None:
        where = {"id": message_id}
    blocks = [_block(block, loop_id, place, where, b) for b, block in enumerate(message.content)]
    view = MessageView(role=message.role, blocks=blocks)
    view.timestamp = _time(getattr(message, "timestamp", 0))  # one no calendar holds: shown as none
    if isinstance(message, AssistantMessage):
        view.model, view.stop_reason, view.error = message.model, message.stop_reason.value, message.error_message
    elif isinstance(message, ToolResultMessage):
        view.tool_name, view.is_error = message.tool_name, message.is_error
        view.anchor = _anchor("result", loop_id, message.tool_call_id, place)
    return view


def _block(block: Any, loop_id: str, place: tuple[int, int] | None, where: dict[str, Any] | None, index: int) -> Block:
    if isinstance(block, TextContent):
        return Block("text", text=block.text)
    if isinstance(block, ThinkingContent):
        return Block("thinking", text=block.thinking)
    if isinstance(block, ToolCallContent):
        anchor = _anchor("call", loop_id, block.id, place)
        return Block("tool_call", name=block.name, arguments=block.arguments, anchor=anchor)
    if isinstance(block, ImageContent):
        return Block(
            "image",
            mime_type=block.mime_type,
            src=_image_src(block, where, index),
            is_image=block.mime_type in IMAGE_TYPES,
        )
    if isinstance(block, (AudioContent, FileContent)):
        return Block(block.type, mime_type=block.mime_type or "", name=getattr(block, "name", None) or "")
    return Block("other", text=str(getattr(block, "type", "block")))


def _image_src(block: ImageContent, where: dict[str, Any] | None, index: int) -> str | None:
    """The address of an image: ``/media`` by digest when its data is kept out of line (a page read with
    ``media="ref"`` holds only the reference), else ``/image`` by its place, when it has one."""
    if block.data.startswith(REF_PREFIX):
        return "/media?" + urlencode({"sha256": block.data[len(REF_PREFIX) :], "type": block.mime_type})
    if where is None:
        return None
    return "/image?" + urlencode({**where, "block": index})


def image_block(store: Store, loop_id: str, turn_index: int, message_index: int, block_index: int) -> ImageContent:
    """The image block at that place of a loop's turn.

    Raises:
        LoopNotFound, TurnNotFound: no such loop or turn.
        IndexError: no image block at that place.
    """
    turns = store.messages.turns(loop_id, turn_index, turn_index + 1, skip=message_index, limit=1, media="ref")
    if not turns:
        if not store.messages.turn_lengths(loop_id, turn_index, turn_index + 1):
            raise TurnNotFound(f"loop {loop_id!r} has no turn {turn_index}")
        raise IndexError("no such message in the turn")
    return image_of(turns[0].messages[0], block_index)


def image_of(message: Any, block_index: int) -> ImageContent:
    """Block ``block_index`` of a message, when it is an image (its data as read: ``media="ref"`` keeps a
    reference to media kept out of line).

    Raises:
        IndexError: no image block there.
    """
    content = getattr(message, "content", None) or []
    if not 0 <= block_index < len(content) or not isinstance(content[block_index], ImageContent):
        raise IndexError("no image block at that place")
    image: ImageContent = content[block_index]
    return image


@dataclass
class HitView:
    """One search hit as shown: where it is, its session's title, and its snippet cut into pieces."""

    hit: SearchHit
    title: str
    pieces: list[tuple[str, bool]]
    timestamp: datetime | None


def snippet_pieces(snippet: str, highlights: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """``snippet`` cut at its highlight ranges: ``(text, matched)`` pieces in order.

    The template escapes each piece and wraps the matched ones in ``<mark>``, so
    the highlight never comes from markup in the stored text. Ranges out of the
    snippet, empty or overlapping an earlier one are skipped.
    """
    pieces: list[tuple[str, bool]] = []
    at = 0
    for start, end in sorted(highlights):
        start, end = max(start, at), min(end, len(snippet))
        if start >= end:
            continue
        if start > at:
            pieces.append((snippet[at:start], False))
        pieces.append((snippet[start:end], True))
        at = end
    if at < len(snippet):
        pieces.append((snippet[at:], False))
    return pieces


def hit_views(store: Store, hits: list[SearchHit]) -> list[HitView]:
    """The hits of one results page with their sessions' titles: one read per session on the page."""
    titles: dict[str, str] = {}
    views = []
    for hit in hits:
        if hit.session_id not in titles:
            try:
                titles[hit.session_id] = store.sessions.get(hit.session_id).title or hit.session_id
            except SessionNotFound:  # deleted since the search ran
                titles[hit.session_id] = hit.session_id
        views.append(
            HitView(hit, titles[hit.session_id], snippet_pieces(hit.snippet, hit.highlights), _time(hit.timestamp))
        )
    return views


def _time(milliseconds: int | None) -> datetime | None:
    """Unix milliseconds as a UTC time; None for none, or for one no calendar holds."""
    if not milliseconds:
        return None
    try:
        return datetime.fromtimestamp(milliseconds / 1000, timezone.utc)
    except (OverflowError, OSError, ValueError):
        return None
