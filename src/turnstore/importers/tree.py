"""Entry trees (pi, Tau, yoagent sessions) into loop trees.

Tree formats store one entry per line with an ``id`` and a ``parent id``; a
session's branches share their common history. turnstore stores that shared
history once and turns the tree into loops:

* Walking depth first (children in file order), the first child of an entry
  continues its line; every further child starts a ``branch`` loop that forks
  after the parent entry.
* Along a line, loops are cut where a user prompt follows a final answer
  (``default`` continuation of the loop before), and turns are derived as in
  :mod:`turnstore.importers.derive`.
* A ``compaction`` entry opens a ``compaction`` loop: its summary is the first
  message, and ``keep_from`` points at the first kept entry.
* A ``branch_summary`` entry opens a ``branch`` loop that starts with the summary.
* Every other entry becomes a message (or an extension message) of the loop it
  falls in.

An entry whose parent is not in the file is malformed; its subtree becomes a
history of its own (kept when malformed records are skipped). So does a cycle
of parent links (an entry that is its own parent, or its own ancestor), which
no root leads to: it is reported at the entry of the cycle that comes first
in the file, cut from its parent there, and walked from that entry.

Loops without model settings of their own take the model of their first
assistant message (:func:`turnstore.importers.derive.fill_configs`).

A malformed entry that is skipped loses only itself: the importers note its
id and parent (:func:`skip_unparsed` reads them from the start of a line that
is not even JSON) and hang its children from its parent
(:func:`resolve_skipped`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ..models import ExtensionMessage, Message, Usage
from .base import LoopRow, MessageRow, RecordError, SessionBundle
from .derive import TurnDeriver, asked_tools, fill_configs

__all__ = ["Node", "build_loops", "resolve_skipped", "skip_unparsed"]

COMPACTION = "compaction"
BRANCH_SUMMARY = "branch_summary"
UNKNOWN_MODELS = ("", "unknown")
"""Model names of assistant messages that do not say which model answered: no loop config is taken from them."""


@dataclass(slots=True)
class Node:
    """One tree entry, already converted to the message it becomes."""

    id: str
    parent_id: str | None
    message: Message | ExtensionMessage
    source: str
    place: str
    opens: str | None = None
    """``compaction`` or ``branch_summary`` when the entry opens a loop of its own."""
    keep_from_id: str | None = None
    """Compaction entries: the id of the first entry kept after the summary."""
    usage: Usage | None = None
    priced_as: tuple[str | None, str | None] = (None, None)
    timestamp: int | None = None
    config: dict[str, object] | None = None
    """Model settings in force at this entry (from model_change entries), for the loops it opens."""
    children: list[Node] = field(default_factory=list)


class _Line:
    """The loop a walk is filling, and how its turns are counted."""

    __slots__ = ("deriver", "loop")

    def __init__(self, loop: LoopRow) -> None:
        self.loop = loop
        self.deriver = TurnDeriver()


def build_loops(bundle: SessionBundle, nodes: Iterable[Node], loop_prefix: str) -> None:
    """Fill ``bundle.loops`` and ``bundle.messages`` from tree entries (in file order).

    Loop ids are ``{loop_prefix}.{N}``, numbered in walk order.
    """
    errors = bundle.errors
    by_id: dict[str, Node] = {}
    for node in nodes:
        if node.id in by_id:
            errors.append(RecordError(node.place, f"duplicate entry id {node.id!r}"))
            continue
        by_id[node.id] = node
    roots: list[Node] = []
    for node in by_id.values():
        parent_id = node.parent_id
        if parent_id is None:
            roots.append(node)
            continue
        parent = by_id.get(parent_id)
        if parent is not None:
            parent.children.append(node)
        else:
            # Malformed; with --skip-invalid its subtree is still kept, as a history of its own.
            errors.append(RecordError(node.place, f"parent entry {parent_id!r} is not in the file"))
            roots.append(node)
    row_of: dict[str, int] = {}
    count = _walk(bundle, roots, loop_prefix, row_of, 0)
    if len(row_of) < len(by_id):  # some entries sit on (or below) a cycle of parent links
        unplaced = [node for node in by_id.values() if node.id not in row_of]
        _walk(bundle, _cut_cycles(unplaced, by_id, errors), loop_prefix, row_of, count)
    fill_configs(bundle, UNKNOWN_MODELS)


CYCLE_IDS_SHOWN = 6
"""How many entry ids an error about a parent cycle lists (a cycle may be thousands of entries long)."""


def _cut_cycles(unplaced: list[Node], by_id: dict[str, Node], errors: list[RecordError]) -> list[Node]:
    """Cut every cycle of parent links among ``unplaced`` entries (in file order); the entries cut.

    An entry no root leads to has its parent in the file, and that parent is
    unplaced too: following parents from it ends in a cycle. Each cycle is cut
    once, at its entry that comes first in the file, which is reported and
    becomes a root; the rest of the cycle, and whatever hangs from it, follow.
    """
    position = {node.id: index for index, node in enumerate(unplaced)}
    walked: dict[str, int] = {}  # entry id -> the walk that met it first
    cut: list[Node] = []
    for walk, start in enumerate(unplaced):
        node = start
        path: list[Node] = []
        while node.id not in walked:
            walked[node.id] = walk
            path.append(node)
            node = by_id[node.parent_id]  # type: ignore[index]  # unplaced: not a root
        if walked[node.id] != walk:
            continue  # leads into a cycle found on an earlier walk
        cycle = path[path.index(node) :]
        first = min(cycle, key=lambda member: position[member.id])
        by_id[first.parent_id].children.remove(first)  # type: ignore[index]
        errors.append(RecordError(first.place, _cycle_reason(first, by_id, len(cycle))))
        cut.append(first)
    cut.sort(key=lambda node: position[node.id])
    return cut


def _cycle_reason(first: Node, by_id: dict[str, Node], length: int) -> str:
    """What is wrong with a cycle of ``length`` parent links starting at ``first``, on one line."""
    if length == 1:
        return f"entry {first.id!r} is its own parent"
    chain = [first.id]
    node = first
    while len(chain) < min(length, CYCLE_IDS_SHOWN):
        node = by_id[node.parent_id]  # type: ignore[index]
        chain.append(node.id)
    shown = " -> ".join(repr(ident) for ident in chain)
    more = f" -> ... ({length} entries)" if length > CYCLE_IDS_SHOWN else ""
    return f"entry {first.id!r} is its own ancestor (parent links {shown}{more} -> {first.id!r})"


def _walk(bundle: SessionBundle, roots: list[Node], loop_prefix: str, row_of: dict[str, int], count: int) -> int:
    """Place every entry under ``roots``, depth first, children in file order.

    The first child of an entry continues its line; every later child starts a
    branch that forks after the entry. Iterative (histories are thousands of
    entries deep), and a line of single children is followed without the stack.
    ``row_of`` maps each placed entry's id to its row in ``bundle.messages``
    (filled here); loops are numbered on from ``count``, the loops opened
    before. Returns the loops opened in all.
    """
    loops = bundle.loops
    messages = bundle.messages

    def new_loop(kind: str, parent: LoopRow | None, fork_node: Node | None, config: dict[str, object] | None) -> _Line:
        nonlocal count
        count += 1
        loop = LoopRow(
            loop_id=f"{loop_prefix}.{count}",
            parent_loop_id=parent.loop_id if parent else None,
            continuation_kind=kind if parent else "initial",
            fork_after=row_of.get(fork_node.id) if fork_node is not None else None,
            config=dict(config) if config else None,
        )
        loops.append(loop)
        return _Line(loop)

    stack: list[tuple[Node, _Line | None, bool, Node | None]] = [(root, None, False, None) for root in reversed(roots)]
    while stack:
        node, line, branching, parent = stack.pop()
        while True:
            # Put the entry into a loop (opening a loop first when needed).
            message = node.message
            role = message.role
            opens = node.opens
            if opens is not None or branching or line is None:
                base = line.loop if line is not None else None
                if opens == COMPACTION:
                    line = new_loop("compaction", base, parent, node.config)
                    line.loop.keep_from = row_of.get(node.keep_from_id) if node.keep_from_id else None
                elif opens == BRANCH_SUMMARY or branching:
                    line = new_loop("branch", base, parent, node.config)
                elif line is None:
                    line = new_loop("initial", None, None, node.config)
            tools = role == "assistant" and asked_tools(message)
            opens_loop, turn = line.deriver.step(role, tools)
            if opens_loop:
                line = new_loop("default", line.loop, None, node.config)
                _, turn = line.deriver.step(role, tools)
            if opens is not None:
                turn = None
            row_of[node.id] = len(messages)
            messages.append(
                MessageRow(
                    message=message,
                    loop_id=line.loop.loop_id,
                    turn_index=turn,
                    source=node.source,
                    usage=node.usage,
                    priced_as=node.priced_as,
                    ref=node.id,
                    timestamp=node.timestamp,
                    place=node.place,
                )
            )
            children = node.children
            if not children:
                break
            for index in range(len(children) - 1, 0, -1):
                # Later children branch off after this node, once the first child's subtree is placed.
                stack.append((children[index], line, True, node))
            node, branching, parent = children[0], False, node
    return count


def resolve_skipped(skipped: dict[str, str | None], entry_id: str | None) -> str | None:
    """The entry a child of ``entry_id`` hangs from: ``entry_id``, or, when that entry was skipped
    (``skipped`` maps a skipped entry's id to its parent's), its nearest ancestor that was not.

    A cycle of skipped entries ends the walk at the first id met twice.
    """
    if entry_id is None or entry_id not in skipped:
        return entry_id
    seen: set[str] = set()
    while entry_id is not None and entry_id in skipped and entry_id not in seen:
        seen.add(entry_id)
        entry_id = skipped[entry_id]
    return entry_id


def skip_unparsed(skipped: dict[str, str | None], start: re.Pattern[str], line: str) -> None:
    """Note the id and parent of a line that is not JSON, so its children can hang from its parent.

    ``start`` is the format's pattern for the beginning of an entry line, with
    the named groups ``id`` and ``parent`` (None for a root). A line whose
    start does not match is not noted: its children cannot be placed.
    """
    found = start.match(line)
    if found is not None:
        skipped[found["id"]] = found["parent"]
