"""Canonical usage from the token counts of sources that count cache reads and writes inside their input.

OpenAI-style sources (the Agents SDK, LangChain's ``usage_metadata``) report
``input_tokens`` including the cached and cache-written tokens; turnstore's
``input`` excludes them. Shared by the importers of those sources, so the split
and its checks are written once.
"""

from __future__ import annotations

from ..errors import InvalidRecord
from ..models import MAX_INT, Usage

__all__ = ["usage_from_inclusive_input"]


def usage_from_inclusive_input(
    place: str,
    *,
    input_tokens: int,
    output_tokens: int,
    total: int,
    cached: int,
    written: int,
    reasoning: int,
    names: tuple[str, str] = ("cached", "cache-write"),
) -> Usage:
    """The usage of counts whose ``input_tokens`` include ``cached`` and ``written`` (named ``names`` in errors).

    A missing ``total`` (0) is input plus output.

    Raises:
        InvalidRecord: the cache parts exceed the input, or input plus output overflow 64 bits.
    """
    if cached + written > input_tokens:
        raise InvalidRecord(
            place, f"{names[0]} ({cached}) and {names[1]} ({written}) tokens exceed input_tokens ({input_tokens})"
        )
    if not total and input_tokens + output_tokens > MAX_INT:
        raise InvalidRecord(place, "input_tokens + output_tokens do not fit a 64-bit integer")
    return Usage(
        input=input_tokens - cached - written,
        output=output_tokens,
        reasoning=reasoning,
        cache_read=cached,
        cache_write=written,
        total_tokens=total or input_tokens + output_tokens,
    )
