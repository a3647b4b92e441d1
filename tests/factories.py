"""Small builders for test messages, so tests say what matters and nothing else."""

from __future__ import annotations

from typing import Any

from turnstore import (
    AssistantMessage,
    ExtensionMessage,
    StopReason,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    Usage,
    UserMessage,
)


def user(text: str = "hello", timestamp: int = 1_000) -> UserMessage:
    return UserMessage(content=[TextContent(text=text)], timestamp=timestamp)


def usage(input: int = 100, output: int = 10, cache_read: int = 0, cache_write: int = 0, reasoning: int = 0) -> Usage:
    return Usage(
        input=input,
        output=output,
        reasoning=reasoning,
        cache_read=cache_read,
        cache_write=cache_write,
        total_tokens=input + output + cache_read + cache_write,
    )


def assistant(
    text: str | None = "ok",
    *,
    calls: tuple[str, ...] = (),
    model: str = "claude-sonnet-4-5",
    provider: str = "anthropic",
    u: Usage | None = None,
    thinking: str | None = None,
    signature: str | None = None,
    stop: StopReason | None = None,
    timestamp: int = 2_000,
    error: str | None = None,
) -> AssistantMessage:
    content: list[Any] = []
    if thinking is not None:
        content.append(ThinkingContent(thinking=thinking, signature=signature))
    if text is not None:
        content.append(TextContent(text=text))
    for call_id in calls:
        content.append(ToolCallContent(id=call_id, name="bash", arguments={"command": f"echo {call_id}"}))
    return AssistantMessage(
        content=content,
        stop_reason=stop or (StopReason.TOOL_USE if calls else StopReason.STOP),
        model=model,
        provider=provider,
        usage=u or usage(),
        timestamp=timestamp,
        error_message=error,
    )


def tool_result(call_id: str, text: str = "done", *, error: bool = False, timestamp: int = 3_000) -> ToolResultMessage:
    return ToolResultMessage(
        tool_call_id=call_id, tool_name="bash", content=[TextContent(text=text)], is_error=error, timestamp=timestamp
    )


def extension(kind: str = "status", data: Any = None) -> ExtensionMessage:
    return ExtensionMessage(kind=kind, data=data if data is not None else {"status": "running"})
