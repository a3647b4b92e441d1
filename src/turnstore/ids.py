"""Loop ids: phi-core's ``"{session_id}.{config_id}.{N}"`` form, minted and parsed.

The config segment may itself contain dots
(``3f1c….anthropic.claude-sonnet-4-5.thinking.1``), so an id is read as:
session id up to the first dot, N after the last dot, the config between.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

__all__ = ["LoopIdParts", "mint_loop_id", "next_loop_number", "parse_loop_id"]

DEFAULT_CONFIG_SEGMENT = "loop"
"""Config segment of minted ids for loops started without a config."""


class LoopIdParts(NamedTuple):
    """The three parts of a minted loop id."""

    session_id: str
    config_id: str
    number: int


def mint_loop_id(session_id: str, config_id: str | None, number: int) -> str:
    """``"{session_id}.{config_id}.{number}"``."""
    return f"{session_id}.{config_id or DEFAULT_CONFIG_SEGMENT}.{number}"


def parse_loop_id(loop_id: str) -> LoopIdParts | None:
    """Split a minted loop id; None when ``loop_id`` does not have that form (e.g. a bare UUID)."""
    session_id, dot, rest = loop_id.partition(".")
    if not dot or not session_id:
        return None
    config_id, dot, number = rest.rpartition(".")
    if not dot or not config_id or not (number.isascii() and number.isdigit()):
        return None
    return LoopIdParts(session_id, config_id, int(number))


def session_of_loop_id(loop_id: str) -> str | None:
    """The session part of a minted loop id, or None."""
    parts = parse_loop_id(loop_id)
    return parts.session_id if parts else None


def next_loop_number(taken_ids: Iterable[str]) -> int:
    """One more than the largest N among ``taken_ids`` (1 when there is none)."""
    numbers = [parts.number for parts in map(parse_loop_id, taken_ids) if parts is not None]
    return max(numbers, default=0) + 1
