"""Loops and turns for sources that record neither (docs/design.md §6).

* A loop starts at a user prompt that follows a final answer (an assistant
  message that asked for no tool).
* A turn is one assistant message with the tool results that answer it, plus
  the user or steering messages just before it.
* Side records (a system prompt, extension records) stay in the loop they
  fall in; they join the open turn if there is one, else they have no turn.

Derived loops follow each other: the first is ``initial``, each later one a
``default`` continuation of the one before (:func:`next_loop`,
:func:`add_derived`); a loop with no config of its own runs with the model of
its first assistant message (:func:`fill_configs`). clark and yoagent message
arrays are placed this way, phi-core arrays where a message has no
``turnId``; the entry trees of :mod:`turnstore.importers.tree` count turns
with :class:`TurnDeriver`.
"""

from __future__ import annotations

from collections.abc import Container, Sequence
from typing import Any

from ..models import AssistantMessage, ToolCallContent
from .base import LoopRow, MessageRow, SessionBundle, SpilledMessage

__all__ = ["TurnDeriver", "add_derived", "asked_tools", "derive_positions", "fill_configs", "next_loop"]


class TurnDeriver:
    """Walks one line of messages and says, for each, whether it opens a loop and which turn it is in."""

    __slots__ = ("answered", "last_final", "open", "turn")

    def __init__(self) -> None:
        self.turn = 0
        self.answered = False  # the current turn's model call has happened
        self.last_final = False  # the last assistant message asked for no tool
        self.open = False  # the current loop has had an LLM message

    def step(self, role: str, asked_tools: bool = False) -> tuple[bool, int | None]:
        """``(opens a new loop, turn index or None)`` for the next message of the line."""
        if role == "user":
            new_loop = self.last_final
            if new_loop:
                self.turn, self.answered, self.last_final = 0, False, False
            elif self.answered:
                self.turn, self.answered = self.turn + 1, False
            self.open = True
            return new_loop, self.turn
        if role == "assistant":
            if self.answered:
                self.turn += 1
            self.open = self.answered = True
            self.last_final = not asked_tools
            return False, self.turn
        if role == "toolResult":
            self.open = True
            return False, self.turn
        return False, self.turn if self.open and not self.last_final else None


def derive_positions(roles: Sequence[tuple[str, bool]]) -> list[tuple[int, int | None]]:
    """``(loop number from 0, turn index or None)`` for each message of one linear history.

    Args:
        roles: per message, its role (``user``, ``assistant``, ``toolResult``,
            or anything else for side records) and, for assistants, whether it
            asked for tools.
    """
    deriver = TurnDeriver()
    loop = 0
    positions: list[tuple[int, int | None]] = []
    for role, tools in roles:
        new_loop, turn = deriver.step(role, tools)
        loop += new_loop
        positions.append((loop, turn))
    return positions


def asked_tools(message: Any) -> bool:
    """Whether a canonical assistant message asked for tools."""
    if type(message) is SpilledMessage:
        return message.asks_tools
    content = getattr(message, "content", None)
    if not content:
        return False
    return ToolCallContent in map(type, content)


def next_loop(loop_id: str, previous: Sequence[LoopRow]) -> LoopRow:
    """A derived loop: the first is ``initial``, each later one a ``default`` continuation of the one before."""
    if not previous:
        return LoopRow(loop_id=loop_id)
    return LoopRow(loop_id=loop_id, parent_loop_id=previous[-1].loop_id, continuation_kind="default")


def add_derived(bundle: SessionBundle, loop_prefix: str, rows: list[MessageRow]) -> None:
    """Append the rows of one linear history to ``bundle``, in loops and turns derived from their roles.

    Loop ids are ``{loop_prefix}.{N}`` from 1, chained by :func:`next_loop`;
    each row's ``loop_id`` and ``turn_index`` are set here.
    """
    positions = derive_positions([(str(row.message.role), asked_tools(row.message)) for row in rows])
    for row, (loop, turn) in zip(rows, positions):
        loop_id = f"{loop_prefix}.{loop + 1}"
        if not bundle.loops or bundle.loops[-1].loop_id != loop_id:
            bundle.loops.append(next_loop(loop_id, bundle.loops))
        row.loop_id, row.turn_index = loop_id, turn
        bundle.messages.append(row)


def fill_configs(bundle: SessionBundle, unknown_models: Container[str] = ()) -> None:
    """Loops without a config take the model and provider of their first assistant message.

    Args:
        unknown_models: model names that say nothing (a source's placeholder
            for "not recorded"); a loop whose first assistant message names
            one of them keeps no config.
    """
    first: dict[str, AssistantMessage | SpilledMessage] = {}
    for row in bundle.messages:
        message = row.message
        if isinstance(message, AssistantMessage) or (type(message) is SpilledMessage and message.role == "assistant"):
            first.setdefault(row.loop_id, message)
    for loop in bundle.loops:
        reply = first.get(loop.loop_id)
        if reply is not None and loop.config is None and reply.model not in unknown_models:
            loop.config = {"model": reply.model, "provider": reply.provider}
