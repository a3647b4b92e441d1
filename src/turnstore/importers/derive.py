"""Loops and turns for sources that record neither (DESIGN §6).

* A loop starts at a user prompt that follows a final answer (an assistant
  message that asked for no tool).
* A turn is one assistant message with the tool results that answer it, plus
  the user or steering messages just before it.
* Side records (a system prompt, extension records) stay in the loop they
  fall in; they join the open turn if there is one, else they have no turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["TurnDeriver", "asked_tools", "derive_positions"]


class TurnDeriver:
    """Walks one line of messages and says, for each, whether it opens a loop and which turn it is in."""

    __slots__ = ("turn", "answered", "last_final", "open")

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
    return any(getattr(block, "type", None) == "toolCall" for block in getattr(message, "content", ()) or ())
