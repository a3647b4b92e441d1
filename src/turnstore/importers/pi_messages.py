"""pi's message lines read in one pass: JSON parsing, pi's spellings and the canonical models together.

Nearly every line of a pi session file is a ``message`` entry whose message is
a user prompt, an assistant reply or a tool result. The general way
(:mod:`turnstore.importers.pi`) parses the line to Python objects, rewrites
pi's spellings in place (``thinkingSignature`` → ``signature``; ``usage.cost``
an object whose ``total`` is the cost; a missing ``totalTokens`` summed) and
validates the result, building every string and container twice.
:func:`fast_message_line` does it in one pass of pydantic's JSON reader, into
models that read pi's spellings (:class:`PiAssistantMessage` and its parts,
subclasses of the canonical models that dump to the same canonical JSON).

Any line it does not take (another entry type, another role, a plain-string
content, a timestamp that is not integer ms, a tool result with usage of its
own, anything malformed) goes the general way, which handles or names it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializeAsAny, ValidationError, model_validator
from typing_extensions import TypedDict

from ..models import (
    AssistantMessage,
    AudioContent,
    FileContent,
    ImageContent,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    Usage,
    UserMessage,
    WireAdapter,
    _omit_none,
)

__all__ = ["PiAssistantMessage", "PiThinkingContent", "PiUsage", "canonical_usage", "fast_message_line"]


def canonical_usage(data: dict[str, Any]) -> dict[str, Any]:
    """pi's Usage (camelCase, ``cost`` an object) as canonical Usage input, in place.

    ``cost.total`` is the provider-reported cost; a missing ``totalTokens`` is
    the sum of the four counts, as pi computes it.
    """
    cost = data.get("cost")
    if isinstance(cost, dict):
        data["cost"] = cost.get("total")
    if "totalTokens" not in data and "total_tokens" not in data:
        counts = [data.get(key, 0) for key in ("input", "output", "cacheRead", "cacheWrite")]
        if all(isinstance(count, int) for count in counts):
            data["totalTokens"] = sum(counts)
    return data


class PiThinkingContent(ThinkingContent):
    """A thinking block as pi writes it: the signature is ``thinkingSignature``; dumped canonically."""

    signature: str | None = Field(
        None, validation_alias="thinkingSignature", serialization_alias="signature", exclude_if=_omit_none
    )


class PiUsage(Usage):
    """pi's usage: ``cost`` an object (its ``total`` is kept), ``totalTokens`` summed when missing."""

    @model_validator(mode="before")
    @classmethod
    def _pi_spelling(cls, data: Any) -> Any:
        return canonical_usage(dict(data)) if isinstance(data, dict) else data


PiContent = Annotated[
    TextContent | ImageContent | PiThinkingContent | ToolCallContent | AudioContent | FileContent,
    Field(discriminator="type"),
]


class PiAssistantMessage(AssistantMessage):
    """An assistant message in pi's spellings; the same fields, in the same order, as the canonical one."""

    content: SerializeAsAny[list[PiContent]]  # type: ignore[assignment]
    usage: PiUsage


class _MessageLine(TypedDict):
    """A ``message`` entry with one of the LLM roles; other keys (its ISO timestamp) are not needed here."""

    type: Literal["message"]
    id: str
    parentId: str | None
    message: Annotated[UserMessage | PiAssistantMessage | ToolResultMessage, Field(discriminator="role")]


_MESSAGE_LINE = WireAdapter(_MessageLine)

_MESSAGE_START = '{"type":"message",'
"""How pi's ``JSON.stringify`` starts every message entry."""


def fast_message_line(line: str) -> dict[str, Any] | None:
    """A message entry parsed, and its message validated, in one pass; None for a line it leaves to the general way.

    The value is the entry as a dict whose ``message`` is already a model.
    """
    if not line.startswith(_MESSAGE_START) or '"signature"' in line:
        # A thinking block may spell its signature both ways; the general way decides which one wins.
        return None
    try:
        value: dict[str, Any] = _MESSAGE_LINE.validate_json(line)
    except (ValidationError, ValueError, RecursionError):
        return None
    message = value["message"]
    extra = message.__pydantic_extra__
    if extra and "usage" in extra and message.role == "toolResult":
        return None  # newer pi: a tool's own model calls, counted on the row (the general way)
    return value
