"""The message model: phi-core's wire format, exactly, as pydantic v2 models.

A message is one of four shapes, told apart by ``role``:

* ``user`` — :class:`UserMessage`
* ``assistant`` — :class:`AssistantMessage` (carries :class:`Usage`, unless only a run's usage is known)
* ``toolResult`` — :class:`ToolResultMessage`
* ``extension`` — :class:`ExtensionMessage` (never enters the model's context)

The first three are the LLM lane (:data:`LlmMessage`); all four together are
:data:`AgentMessage`. Each LLM message may carry ``turnId`` (which loop and
turn produced it), flattened into the message object as phi-core does.

``model_dump(mode="json")`` gives phi-core's JSON: camelCase where phi-core
renames (``stopReason``, ``toolCallId``, ``mimeType``, ``turnId``), snake_case
elsewhere (``error_message`` and every Usage field). Keys the models do not
know (phi-core's ``nodeId``, ``parentId``, ``tags``, fields of a future
version) are kept and dumped back, so a record round-trips equal. yoagent's
spellings (``cacheRead``, ``errorMessage``, stop reason ``refusal``) are
accepted on read.

``Message.user/assistant/tool_result/system`` build messages from plain
strings; :func:`turnstore.wire_input.from_input` turns a hand-written dict
(Python field names, a string ``content``) into a wire record.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, TypeVar, cast

from pydantic import (
    AfterValidator,
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializeAsAny,
    StrictBool,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import core_schema

from .errors import InvalidMessage, StorageError

__all__ = [
    "AgentMessage",
    "AssistantMessage",
    "AudioContent",
    "Content",
    "ExtensionMessage",
    "FileContent",
    "ImageContent",
    "LlmMessage",
    "Message",
    "StopReason",
    "SystemMessage",
    "TextContent",
    "ThinkingContent",
    "ToolCallContent",
    "ToolResultMessage",
    "TurnId",
    "Usage",
    "UserMessage",
    "now_ms",
]

MAX_INT = 2**63 - 1
"""Largest integer a token count or timestamp may hold (a signed 64-bit column)."""

U64 = Annotated[int, Field(strict=True, ge=0, le=MAX_INT)]
"""A non-negative integer that fits the database's 64-bit integer columns."""


_M = TypeVar("_M", bound=BaseModel)


def now_ms() -> int:
    """The current time as unix milliseconds, phi-core's message timestamp."""
    return time.time_ns() // 1_000_000


def _omit_none(value: object) -> bool:
    return value is None


class RoleName(str):
    """A role string that can also be called, so ``msg.role`` and ``msg.role()`` agree.

    phi-core exposes the role as a method (``role()``); the JSON field and the
    natural Python attribute are both ``role``. This keeps both spellings working.
    """

    __slots__ = ()

    def __call__(self) -> str:
        return str(self)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> core_schema.CoreSchema:
        # A string to pydantic: the role defaults then appear in JSON schemas (without this, each
        # model_json_schema() warned that the default was not JSON serializable and left it out).
        return core_schema.no_info_after_validator_function(cls, core_schema.str_schema())


_ROLE_NAMES = {name: RoleName(name) for name in ("user", "assistant", "toolResult", "extension", "system")}
"""One shared RoleName per role: validating a message makes no new object for its role (strings are immutable)."""

_shared_role = _ROLE_NAMES.__getitem__

_Role = TypeVar("_Role", bound=str)


def _role(name: _Role) -> _Role:
    """The shared :class:`RoleName` for ``name``, typed as the literal it equals (a role field's default)."""
    return cast(_Role, _ROLE_NAMES[name])


UserRole = Annotated[Literal["user"], AfterValidator(_shared_role)]
AssistantRole = Annotated[Literal["assistant"], AfterValidator(_shared_role)]
ToolResultRole = Annotated[Literal["toolResult"], AfterValidator(_shared_role)]
ExtensionRole = Annotated[Literal["extension"], AfterValidator(_shared_role)]
SystemRole = Annotated[Literal["system"], AfterValidator(_shared_role)]


class WireModel(BaseModel):
    """Base of every wire model: aliases on output, extras kept.

    Python code may construct models by field name (``stop_reason=...``);
    records read from JSON or dicts (``model_validate``, :data:`AGENT_MESSAGE`)
    are matched by wire name only, so an unknown key that happens to equal a
    Python field name (``"turn"``) is kept as an unknown key.
    """

    model_config = ConfigDict(
        extra="allow",
        serialize_by_alias=True,
        validate_by_name=True,
        validate_by_alias=True,
        allow_inf_nan=False,
        # NaN and Infinity cannot be JSON; dumped as bare constants, they make the
        # store refuse the message (see repositories.message_json.dump_message).
        ser_json_inf_nan="constants",
    )

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Any:
        """Validate a wire record (dict), matching keys by their wire names."""
        kwargs.setdefault("by_alias", True)
        kwargs.setdefault("by_name", False)
        return super().model_validate(obj, **kwargs)

    @classmethod
    def model_validate_json(cls, json_data: str | bytes | bytearray, **kwargs: Any) -> Any:
        """Validate a wire record (JSON text), matching keys by their wire names."""
        kwargs.setdefault("by_alias", True)
        kwargs.setdefault("by_name", False)
        return super().model_validate_json(json_data, **kwargs)


class StopReason(str, Enum):
    """Why an assistant message's generation stopped (phi-core's 11 values, plus yoagent's ``refusal``)."""

    STOP = "stop"
    LENGTH = "length"
    TOOL_USE = "toolUse"
    ERROR = "error"
    ABORTED = "aborted"
    MAX_TURNS = "maxTurns"
    USER_STOP = "userStop"
    HANDOFF = "handoff"
    GUARD_RAIL = "guardRail"
    CONTEXT_COMPACTED = "contextCompacted"
    PAUSED = "paused"
    REFUSAL = "refusal"
    """yoagent only; exported to phi-core as ``guardRail``."""

    def __str__(self) -> str:
        return self.value


class Usage(WireModel):
    """Token counts of one model call, or a sum of them.

    ``reasoning`` is a subset of ``output`` and is never charged twice.
    ``cost`` is the provider-reported cost in USD where a source recorded one
    (pi, Tau); phi-core has no such field, so it is omitted when unknown.
    """

    input: U64
    output: U64
    reasoning: U64 = 0
    cache_read: U64 = Field(default=0, validation_alias=AliasChoices("cache_read", "cacheRead"))
    cache_write: U64 = Field(default=0, validation_alias=AliasChoices("cache_write", "cacheWrite"))
    total_tokens: U64 = Field(default=0, validation_alias=AliasChoices("total_tokens", "totalTokens"))
    cost: float | None = Field(default=None, ge=0, exclude_if=_omit_none)

    def combine(self, other: Usage) -> Usage:
        """Add two usages field by field (phi-core's ``combine``)."""
        cost = None if self.cost is None and other.cost is None else (self.cost or 0.0) + (other.cost or 0.0)
        return Usage(
            input=self.input + other.input,
            output=self.output + other.output,
            reasoning=self.reasoning + other.reasoning,
            cache_read=self.cache_read + other.cache_read,
            cache_write=self.cache_write + other.cache_write,
            total_tokens=self.total_tokens + other.total_tokens,
            cost=cost,
        )

    __add__ = combine

    def estimated_cost(self, cost: CostConfig) -> float:
        """Dollars for these tokens at ``cost``'s per-million rates; reasoning is inside output."""
        return cost.price(self.input, self.output, self.cache_read, self.cache_write)

    def cache_hit_rate(self) -> float:
        """Share of prompt tokens served from cache: ``cache_read / (input + cache_read + cache_write)``.

        0.0 when no prompt tokens were processed (Anthropic-style accounting,
        where ``input`` excludes cached tokens).
        """
        denominator = self.input + self.cache_read + self.cache_write
        return self.cache_read / denominator if denominator else 0.0


class CostConfig(BaseModel):
    """Per-million-token prices of one model, in USD (phi-core's ``CostConfig``)."""

    model_config = ConfigDict(extra="forbid")

    input_per_million: float = Field(default=0.0, ge=0)
    output_per_million: float = Field(default=0.0, ge=0)
    cache_read_per_million: float = Field(default=0.0, ge=0)
    cache_write_per_million: float = Field(default=0.0, ge=0)

    def price(self, input: int, output: int, cache_read: int = 0, cache_write: int = 0) -> float:
        """Dollars for the given token counts."""
        return (
            input * self.input_per_million
            + output * self.output_per_million
            + cache_read * self.cache_read_per_million
            + cache_write * self.cache_write_per_million
        ) / 1_000_000


# --- content blocks -------------------------------------------------------


class TextContent(WireModel):
    """Plain text sent to or from the model."""

    type: Literal["text"] = "text"
    text: str


class ImageContent(WireModel):
    """An image, inline as base64 data."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str = Field(alias="mimeType")


class ThinkingContent(WireModel):
    """The model's reasoning; ``signature`` must go back to the provider byte for byte."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = Field(default=None, exclude_if=_omit_none)


class ToolCallContent(WireModel):
    """The model's request to run a tool; ``id`` links it to its tool result."""

    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: JsonValue


class AudioContent(WireModel):
    """Audio, inline as base64 data (Tau). phi-core has no audio block; see ``docs/wire-format.md``."""

    type: Literal["audio"] = "audio"
    data: str
    mime_type: str = Field(default="", alias="mimeType")


class FileContent(WireModel):
    """A document, video or other file, inline (``data``, base64) or by ``url`` (Tau, appam)."""

    type: Literal["file"] = "file"
    data: str | None = Field(default=None, exclude_if=_omit_none)
    url: str | None = Field(default=None, exclude_if=_omit_none)
    mime_type: str | None = Field(default=None, alias="mimeType", exclude_if=_omit_none)
    name: str | None = Field(default=None, exclude_if=_omit_none)


Content = Annotated[
    TextContent | ImageContent | ThinkingContent | ToolCallContent | AudioContent | FileContent,
    Field(discriminator="type"),
]
"""One content block, told apart by ``type``."""

Blocks = SerializeAsAny[list[Content]]
"""A message's content blocks: validated as :data:`Content`, dumped by each block's own serializer.

Every block is one of the ``Content`` models, so the JSON is the same as the
tagged union's; finding the serializer from the block's class is about twice
as fast as the union's dispatch on ``type`` (≈1.9 vs 3.5 µs for a thinking,
text and tool-call block), and every stored message is dumped once.
"""


class TurnId(WireModel):
    """Which loop, and which turn within it, produced a message."""

    loop_id: str = Field(alias="loopId")
    turn_index: U64 = Field(alias="turnIndex")


# --- messages ---------------------------------------------------------------

_OVERFLOW_PATTERNS = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|"
    r"context window|too many tokens|input is too long|exceeds the (model'?s )?"
    r"(context|maximum)|request too large|reduce the length|token limit",
    re.IGNORECASE,
)


class Message(WireModel):
    """Base of the three LLM-lane messages; holds the helpers phi-core gives ``Message``.

    ``turn`` is phi-core's ``turnId``: set for messages produced inside an agent
    loop, ``None`` for older records.
    """

    ROLE: ClassVar[str]

    if TYPE_CHECKING:
        # Each subclass declares ``role`` and ``turn`` (as its last field, so a dumped message
        # ends with "turnId" and the store can stamp one onto stored JSON without a copy).
        role: str
        turn: TurnId | None

    @staticmethod
    def user(content: str | Sequence[Any], *, timestamp: int | None = None) -> UserMessage:
        """A user message, stamped now unless ``timestamp`` is given; a string becomes one text block (in a list too)."""
        return _build(UserMessage, content=_blocks(content), timestamp=_stamp(timestamp))

    @staticmethod
    def system(content: str | Sequence[Any], *, timestamp: int | None = None) -> SystemMessage:
        """A system prompt (see :class:`SystemMessage`), stamped now unless ``timestamp`` is given."""
        return _build(SystemMessage, content=_blocks(content), timestamp=_stamp(timestamp))

    @staticmethod
    def assistant(
        content: str | Sequence[Any],
        *,
        model: str,
        provider: str = "",
        usage: Usage | Mapping[str, Any] | None = None,
        stop_reason: StopReason | str | None = None,
        timestamp: int | None = None,
        error_message: str | None = None,
    ) -> AssistantMessage:
        """A model response; a string becomes one text block, in a list too (``["let me look", call]``).

        ``stop_reason`` defaults to ``toolUse`` when the content holds a tool
        call, else ``stop``. ``usage=None`` stores the message with unknown
        usage (give the run's usage to ``loops.end`` instead).
        """
        blocks = _blocks(content)
        if stop_reason is None:
            calls = any(isinstance(block, ToolCallContent) or _is_call(block) for block in blocks)
            stop_reason = StopReason.TOOL_USE if calls else StopReason.STOP
        return _build(
            AssistantMessage,
            content=blocks,
            stop_reason=stop_reason,
            model=model,
            provider=provider,
            usage=usage,
            timestamp=_stamp(timestamp),
            error_message=error_message,
        )

    @staticmethod
    def tool_result(
        call: ToolCallContent | str,
        content: str | Sequence[Any],
        *,
        tool_name: str | None = None,
        is_error: bool = False,
        details: JsonValue = None,
        timestamp: int | None = None,
    ) -> ToolResultMessage:
        """A tool's output answering ``call`` (the tool call block, or its id plus ``tool_name``).

        A string ``content`` becomes one text block, in a list too.
        """
        if isinstance(call, ToolCallContent):
            call_id, tool_name = call.id, call.name if tool_name is None else tool_name
        else:
            call_id = call
            if tool_name is None:
                raise InvalidMessage(
                    "tool_result: call is an id, so tool_name= must name the tool (or pass the ToolCallContent)",
                    [("tool_name", "missing")],
                )
        return _build(
            ToolResultMessage,
            tool_call_id=call_id,
            tool_name=tool_name,
            content=_blocks(content),
            is_error=is_error,
            details=details,
            timestamp=_stamp(timestamp),
        )

    def as_llm(self) -> Message:
        """This message, as it would enter the model's context."""
        return self

    def turn_id(self) -> TurnId | None:
        """The turn that produced this message, if known."""
        return self.turn

    def with_turn_id(self, turn_id: TurnId | None) -> Message:
        """A copy of this message with ``turnId`` set to ``turn_id``."""
        return self.model_copy(update={"turn": turn_id})

    def is_context_overflow(self) -> bool:
        """True when this is an assistant error that says the prompt did not fit the context window."""
        return False

    def text(self) -> str:
        """The text blocks joined with newlines (thinking and tool calls left out)."""
        return "\n".join(block.text for block in self.content if isinstance(block, TextContent))  # type: ignore[attr-defined]


class SystemMessage(Message):
    """A system (or developer) prompt, as clark, Tau and appam record one.

    phi-core keeps the system prompt outside the transcript; its export turns
    this into an extension message of kind ``system``.
    """

    ROLE: ClassVar[str] = "system"

    role: SystemRole = _role("system")
    content: Blocks
    timestamp: U64 = 0
    turn: TurnId | None = Field(default=None, alias="turnId", exclude_if=_omit_none)


class UserMessage(Message):
    """A user prompt or steering message."""

    ROLE: ClassVar[str] = "user"

    role: UserRole = _role("user")
    content: Blocks
    timestamp: U64
    turn: TurnId | None = Field(default=None, alias="turnId", exclude_if=_omit_none)


class AssistantMessage(Message):
    """One model response, with why it stopped, who served it and what it cost."""

    ROLE: ClassVar[str] = "assistant"

    role: AssistantRole = _role("assistant")
    content: Blocks
    stop_reason: StopReason = Field(alias="stopReason")
    model: str
    provider: str
    usage: Usage | None = Field(default=None, exclude_if=_omit_none)
    """None when the app knows usage per run only (see ``loops.end(usage=...)``): stored as unknown, not zeros."""
    timestamp: U64
    error_message: str | None = Field(
        None,
        validation_alias=AliasChoices("error_message", "errorMessage"),
        serialization_alias="error_message",
        exclude_if=_omit_none,
    )
    turn: TurnId | None = Field(default=None, alias="turnId", exclude_if=_omit_none)

    def is_context_overflow(self) -> bool:
        """True when ``error_message`` matches a known provider context-overflow message."""
        return bool(self.error_message) and bool(_OVERFLOW_PATTERNS.search(self.error_message or ""))

    def tool_calls(self) -> list[ToolCallContent]:
        """The tool calls this response asked for, in order."""
        return [block for block in self.content if isinstance(block, ToolCallContent)]


class ToolResultMessage(Message):
    """A tool's output, returned to the model; ``tool_call_id`` names the call it answers."""

    ROLE: ClassVar[str] = "toolResult"

    role: ToolResultRole = _role("toolResult")
    tool_call_id: str = Field(alias="toolCallId")
    tool_name: str = Field(alias="toolName")
    content: Blocks
    is_error: StrictBool = Field(alias="isError")
    timestamp: U64
    details: JsonValue = Field(default=None, exclude_if=_omit_none)
    """Structured output kept for the app, never sent to the model (clark, pi)."""
    narration: str | None = Field(default=None, exclude_if=_omit_none)
    """A one-line caption of what the tool did (clark)."""
    turn: TurnId | None = Field(default=None, alias="turnId", exclude_if=_omit_none)


class ExtensionMessage(WireModel):
    """An app-only message (UI notice, marker, imported side record); never sent to the model."""

    ROLE: ClassVar[str] = "extension"

    role: ExtensionRole = _role("extension")
    kind: str
    data: JsonValue = None

    @classmethod
    def new(cls, kind: str, data: JsonValue = None) -> ExtensionMessage:
        """phi-core's ``ExtensionMessage::new``."""
        return cls(kind=kind, data=data)

    def as_llm(self) -> None:
        """Extension messages never enter the model's context."""
        return

    def turn_id(self) -> None:
        """Extension messages carry no turn id."""
        return

    def with_turn_id(self, turn_id: TurnId | None) -> ExtensionMessage:
        """No-op: extension messages carry no turn id."""
        return self

    def is_context_overflow(self) -> bool:
        return False


LlmMessage = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage | SystemMessage,
    Field(discriminator="role"),
]
"""A message that enters the model's context (phi-core's ``LlmMessage``: a Message plus optional turnId)."""

AgentMessage = Annotated[
    UserMessage | AssistantMessage | ToolResultMessage | SystemMessage | ExtensionMessage,
    Field(discriminator="role"),
]
"""Any message an agent loop produces: the LLM lane or the extension lane."""


def _blocks(content: str | Sequence[Any]) -> list[Any]:
    """A helper's ``content``: a string as one text block, else the blocks as given (models or dicts), each
    string among them a text block in its place (``["let me look", call]``: a reply that talks and calls a tool)."""
    if isinstance(content, str):
        return [TextContent(text=content)]
    if not isinstance(content, Sequence):
        raise InvalidMessage(
            f"content must be a string or a list of content blocks, not {type(content).__name__}",
            [("content", "wrong type")],
        )
    return [TextContent(text=block) if isinstance(block, str) else block for block in content]


def _build(kind: type[_M], **fields: Any) -> _M:
    """``kind(**fields)``, a bad value raised as :class:`~turnstore.errors.InvalidMessage` naming the field."""
    try:
        return kind(**fields)
    except ValidationError as error:
        raise InvalidMessage.from_pydantic(error) from None


def _is_call(block: Any) -> bool:
    return isinstance(block, Mapping) and block.get("type") == "toolCall"


def _stamp(timestamp: int | None) -> int:
    return now_ms() if timestamp is None else timestamp


class WireAdapter:
    """A pydantic TypeAdapter that reads wire records: keys matched by wire name only."""

    __slots__ = ("_adapter", "_kind", "_validator")

    def __init__(self, kind: Any) -> None:
        # Built on first use, not at import: building the validator builds every message model's
        # schema, which programs that never validate a message (the CLI listing sessions) skip.
        self._kind = kind
        self._adapter: TypeAdapter[Any] | None = None
        self._validator: Any = None

    @property
    def adapter(self) -> TypeAdapter[Any]:
        """The TypeAdapter, built on first use."""
        if self._adapter is None:
            self._build()
        assert self._adapter is not None
        return self._adapter

    def _build(self) -> Any:
        self._adapter = TypeAdapter(self._kind)
        # pydantic-core's validator, called directly: TypeAdapter's own methods add a few µs of
        # argument handling per call (4% of reading the last 50 messages).
        self._validator = self._adapter.validator
        return self._validator

    def validate_python(self, value: Any) -> Any:
        """Validate a dict (or list of dicts)."""
        validator = self._validator
        if validator is None:
            validator = self._build()
        return validator.validate_python(value, by_alias=True, by_name=False)

    def validate_json(self, text: str | bytes | bytearray) -> Any:
        """Validate JSON text."""
        validator = self._validator
        if validator is None:
            validator = self._build()
        return validator.validate_json(text, by_alias=True, by_name=False)


def unreadable(message_id: int, error: ValidationError, *, in_array: bool = False) -> StorageError:
    """The error for a stored message text that is not a valid message (changed outside turnstore).

    ``in_array``: the text was validated as one element of a JSON array of
    messages (a batch read), so the error's location starts with its place in
    the array, which is left out: ``message_id`` already names the message.
    """
    first = error.errors()[0]
    location = first["loc"][1:] if in_array else first["loc"]
    place = ".".join(str(part) for part in location) or "message"
    return StorageError(
        f"stored message {message_id} cannot be read: {place}: {first['msg']} "
        "(the database was changed outside turnstore)"
    )


AGENT_MESSAGE = WireAdapter(AgentMessage)
"""Validates one AgentMessage from a dict (``validate_python``) or JSON text (``validate_json``)."""

AGENT_MESSAGES = WireAdapter(list[AgentMessage])
"""Validates a JSON array of AgentMessage in one pass."""
