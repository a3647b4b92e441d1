"""Loops and turns for sources that record neither (DESIGN §6).

* A loop starts at a user prompt that follows a final answer (an assistant
  message that asked for no tool).
* A turn is one assistant message with the tool results that answer it, plus
  the user or steering messages just before it.
* Messages outside any model call (a system prompt before the first user
  message, extension records) keep the loop they fall in and no turn... unless
  they sit inside an open turn, which they then join.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["derive_positions"]


def derive_positions(roles: Sequence[tuple[str, bool]]) -> list[tuple[int, int | None]]:
    """``(loop number from 0, turn index or None)`` for each message.

    Args:
        roles: per message, its role (``user``, ``assistant``, ``toolResult``,
            or anything else for side records) and, for assistants, whether it
            asked for tools.
    """
    positions: list[tuple[int, int | None]] = []
    loop, turn = 0, 0
    turn_open = False  # the current turn has had any LLM message
    turn_answered = False  # the current turn's model call has happened
    last_final = False  # the last assistant was a final answer
    started = False  # any LLM message seen yet
    for role, asked_tools in roles:
        if role == "user":
            if last_final:
                loop, turn, last_final = loop + 1, 0, False
                turn_answered = False
            elif turn_answered:
                turn += 1
                turn_answered = False
            turn_open = started = True
            positions.append((loop, turn))
        elif role == "assistant":
            if turn_answered:
                turn += 1
            turn_open = turn_answered = started = True
            last_final = not asked_tools
            positions.append((loop, turn))
        elif role == "toolResult":
            turn_open = started = True
            positions.append((loop, turn))
        else:
            positions.append((loop, turn if turn_open and started and not last_final else None))
    return positions


def asked_tools(message: Any) -> bool:
    """Whether a canonical assistant message asked for tools."""
    return any(getattr(block, "type", None) == "toolCall" for block in getattr(message, "content", ()) or ())
