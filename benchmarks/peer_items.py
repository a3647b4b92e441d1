"""The benchmark workload in each peer store's own types, built once before any timing.

Every workload message (``workload.Turn.dicts``: phi-core user / assistant /
toolResult messages) becomes what an app on that framework would hand to its
store, so each system is timed storing the same content in its native form,
as its users would hold it:

* OpenAI Agents SDK: Responses-API input items, as the SDK persists a run
  (``RunItem.to_input_item()``: output items dumped with ``exclude_unset``).
  User message -> ``{"content", "role": "user"}`` (what a string input becomes);
  assistant message -> a ``reasoning`` item (thinking as its summary, the
  thinking signature as ``encrypted_content``), an assistant output
  ``message`` and one ``function_call`` per tool call; tool result ->
  ``function_call_output``. Usage is not an item: a ``RunResult`` carrying
  the turn's ``Usage`` is built for ``AdvancedSQLiteSession.store_run_usage``.
* LangChain: ``HumanMessage``; ``AIMessage`` with content blocks as
  langchain-anthropic returns them (thinking + signature, text, tool_use),
  ``tool_calls``, ``usage_metadata`` and the model in ``response_metadata``;
  ``ToolMessage``.
* Google ADK: ``Event`` objects with genai ``Content`` parts (thought part with
  its ``thought_signature``, text, ``function_call``), ``usage_metadata`` and
  ``model_version``; tool results as ``function_response`` parts (one event per
  result when appended one message per commit; one event for all results of a
  model response, as ADK's runner merges them, when appended per turn).

Images (the image mix's screenshots, the tool mix's occasional ones) go where
each framework puts them: OpenAI an ``input_image`` data URL in the output
(or user content) list, LangChain a base64 ``image`` content block, ADK an
``inline_data`` part (bytes) after the function response or text.

Usage mapping (so totals compare across systems): prompt tokens = input +
cache_read + cache_write; output tokens include reasoning; total as recorded.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Any

import workload
from agents import Agent, RunContextWrapper, RunResult, Usage
from agents.usage import InputTokensDetails, OutputTokensDetails
from google.adk.events import Event
from google.genai import types as genai
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary

ADK_APP = "turnstore-bench"
ADK_USER = "bench-user"
ADK_AGENT = "bench_agent"

_AGENT = Agent(name=ADK_AGENT)


def _id(prefix: str, *parts: Any) -> str:
    """A deterministic provider-style id."""
    return prefix + hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()[:24]


def _text(message: dict[str, Any]) -> str:
    return "".join(block["text"] for block in message["content"] if block["type"] == "text")


def _blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [block for block in message["content"] if block["type"] == kind]


def _images(message: dict[str, Any]) -> list[dict[str, Any]]:
    return _blocks(message, "image")


def _openai_content(message: dict[str, Any], text_type: str) -> Any:
    """A user message's or tool result's content as OpenAI holds it: the text, or a list with its images."""
    images = _images(message)
    if not images:
        return _text(message)
    return [
        {"type": text_type, "text": _text(message)},
        *(
            {"type": "input_image", "image_url": f"data:{image['mimeType']};base64,{image['data']}", "detail": "auto"}
            for image in images
        ),
    ]


def _langchain_content(message: dict[str, Any]) -> Any:
    """A user message's or tool result's content as LangChain holds it: the text, or blocks with its images."""
    images = _images(message)
    if not images:
        return _text(message)
    return [
        {"type": "text", "text": _text(message)},
        *({"type": "image", "base64": image["data"], "mime_type": image["mimeType"]} for image in images),
    ]


def _adk_images(message: dict[str, Any]) -> list[genai.Part]:
    return [
        genai.Part(inline_data=genai.Blob(data=base64.b64decode(image["data"]), mime_type=image["mimeType"]))
        for image in _images(message)
    ]


def usage_parts(message: dict[str, Any]) -> tuple[int, int, int]:
    """(prompt tokens incl. cache, output tokens incl. reasoning, total) of an assistant message."""
    u = message["usage"]
    return u["input"] + u["cache_read"] + u["cache_write"], u["output"], u["total_tokens"]


# --- OpenAI Agents SDK ----------------------------------------------------------------


def openai_items(message: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The Responses input items of one workload message."""
    role = message["role"]
    if role == "user":
        return [{"content": _openai_content(message, "input_text"), "role": "user"}]
    if role == "toolResult":
        return [
            {
                "call_id": message["toolCallId"],
                "output": _openai_content(message, "input_text"),
                "type": "function_call_output",
            }
        ]
    items: list[Any] = []
    for n, block in enumerate(_blocks(message, "thinking")):
        items.append(
            ResponseReasoningItem(
                id=_id("rs_", key, n),
                type="reasoning",
                encrypted_content=block["signature"],
                summary=[Summary(text=block["thinking"], type="summary_text")],
            )
        )
    text = _text(message)
    if text:
        items.append(
            ResponseOutputMessage(
                id=_id("msg_", key),
                role="assistant",
                status="completed",
                type="message",
                content=[ResponseOutputText(annotations=[], text=text, type="output_text", logprobs=[])],
            )
        )
    for call in _blocks(message, "toolCall"):
        items.append(
            ResponseFunctionToolCall(
                id=_id("fc_", key, call["id"]),
                call_id=call["id"],
                name=call["name"],
                type="function_call",
                status="completed",
                arguments=json.dumps(call["arguments"]),
            )
        )
    return [item.model_dump(exclude_unset=True) for item in items]


def openai_run_result(message: dict[str, Any]) -> RunResult:
    """What ``Runner.run`` returns after this model call, with its usage (for ``store_run_usage``)."""
    u = message["usage"]
    prompt, output, total = usage_parts(message)
    usage = Usage(
        requests=1,
        input_tokens=prompt,
        output_tokens=output,
        total_tokens=total,
        input_tokens_details=InputTokensDetails(cached_tokens=u["cache_read"], cache_write_tokens=u["cache_write"]),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=u["reasoning"]),
    )
    return RunResult(
        input=[],
        new_items=[],
        raw_responses=[],
        final_output=_text(message),
        input_guardrail_results=[],
        output_guardrail_results=[],
        tool_input_guardrail_results=[],
        tool_output_guardrail_results=[],
        context_wrapper=RunContextWrapper(context=None, usage=usage),
        _last_agent=_AGENT,
    )


# --- LangChain ------------------------------------------------------------------------


def langchain_message(message: dict[str, Any]) -> BaseMessage:
    """The LangChain message of one workload message."""
    role = message["role"]
    if role == "user":
        return HumanMessage(content=_langchain_content(message))
    if role == "toolResult":
        return ToolMessage(
            content=_langchain_content(message),
            tool_call_id=message["toolCallId"],
            name=message["toolName"],
            status="error" if message["isError"] else "success",
        )
    content: list[dict[str, Any]] = []
    for block in message["content"]:
        if block["type"] == "thinking":
            content.append({"type": "thinking", "thinking": block["thinking"], "signature": block["signature"]})
        elif block["type"] == "text":
            content.append({"type": "text", "text": block["text"]})
        elif block["type"] == "toolCall":
            content.append({"type": "tool_use", "id": block["id"], "name": block["name"], "input": block["arguments"]})
    u = message["usage"]
    prompt, output, total = usage_parts(message)
    return AIMessage(
        content=content,
        tool_calls=[
            {"name": c["name"], "args": c["arguments"], "id": c["id"], "type": "tool_call"}
            for c in _blocks(message, "toolCall")
        ],
        usage_metadata={
            "input_tokens": prompt,
            "output_tokens": output,
            "total_tokens": total,
            "input_token_details": {"cache_read": u["cache_read"], "cache_creation": u["cache_write"]},
            "output_token_details": {"reasoning": u["reasoning"]},
        },
        response_metadata={
            "model_name": message["model"],
            "model_provider": message["provider"],
            "stop_reason": message["stopReason"],
        },
    )


# --- Google ADK -----------------------------------------------------------------------


def _adk_response(message: dict[str, Any], invocation: str) -> Event:
    result = _text(message)
    return Event(
        invocation_id=invocation,
        author=ADK_AGENT,
        timestamp=message["timestamp"] / 1000,
        content=genai.Content(
            role="user",
            parts=[
                genai.Part(
                    function_response=genai.FunctionResponse(
                        id=message["toolCallId"],
                        name=message["toolName"],
                        response={"error": result} if message["isError"] else {"result": result},
                    )
                ),
                *_adk_images(message),
            ],
        ),
    )


def adk_events(messages: list[dict[str, Any]], invocation: str, merge_results: bool) -> list[Event]:
    """The ADK events of one turn's messages (tool results merged into one event if ``merge_results``)."""
    events: list[Event] = []
    results: list[Event] = []
    for message in messages:
        role = message["role"]
        if role == "user":
            events.append(
                Event(
                    invocation_id=invocation,
                    author="user",
                    timestamp=message["timestamp"] / 1000,
                    content=genai.Content(role="user", parts=[genai.Part(text=_text(message)), *_adk_images(message)]),
                )
            )
        elif role == "toolResult":
            results.append(_adk_response(message, invocation))
        else:
            parts: list[genai.Part] = []
            for block in message["content"]:
                if block["type"] == "thinking":
                    parts.append(
                        genai.Part(
                            text=block["thinking"], thought=True, thought_signature=base64.b64decode(block["signature"])
                        )
                    )
                elif block["type"] == "text":
                    parts.append(genai.Part(text=block["text"]))
                elif block["type"] == "toolCall":
                    parts.append(
                        genai.Part(
                            function_call=genai.FunctionCall(
                                id=block["id"], name=block["name"], args=block["arguments"]
                            )
                        )
                    )
            u = message["usage"]
            prompt, output, total = usage_parts(message)
            events.append(
                Event(
                    invocation_id=invocation,
                    author=ADK_AGENT,
                    timestamp=message["timestamp"] / 1000,
                    content=genai.Content(role="model", parts=parts),
                    model_version=message["model"],
                    finish_reason=genai.FinishReason.STOP,
                    usage_metadata=genai.GenerateContentResponseUsageMetadata(
                        prompt_token_count=prompt,
                        cached_content_token_count=u["cache_read"],
                        candidates_token_count=output - u["reasoning"],
                        thoughts_token_count=u["reasoning"],
                        total_token_count=total,
                    ),
                )
            )
    if results and merge_results:
        merged = results[-1].model_copy(deep=True)
        merged.content.parts = [part for event in results for part in event.content.parts]  # type: ignore[union-attr]
        events.append(merged)
    else:
        events += results
    return events


# --- one turn in every form -------------------------------------------------------------


@dataclass
class PeerTurn:
    """One workload turn in every peer's form: per message (for one commit each) and per turn."""

    turn: workload.Turn
    openai: list[list[dict[str, Any]]]  # items of each message
    run_result: RunResult | None  # the turn's model call, for store_run_usage
    langchain: list[BaseMessage]
    adk_each: list[list[Event]]  # events of each message
    adk_turn: list[Event]  # events of the turn (tool results merged)

    @property
    def openai_turn(self) -> list[dict[str, Any]]:
        return [item for items in self.openai for item in items]


def convert(turn: workload.Turn) -> PeerTurn:
    key = f"{turn.loop_id}/{turn.turn_index}"
    invocation = _id("e-", key)
    assistant = next((m for m in turn.dicts if m["role"] == "assistant"), None)
    return PeerTurn(
        turn=turn,
        openai=[openai_items(message, f"{key}/{n}") for n, message in enumerate(turn.dicts)],
        run_result=openai_run_result(assistant) if assistant is not None else None,
        langchain=[langchain_message(message) for message in turn.dicts],
        adk_each=[adk_events([message], invocation, False) for message in turn.dicts],
        adk_turn=adk_events(turn.dicts, invocation, True),
    )


def records_for_last(turns: list[PeerTurn], session_id: str, n: int) -> dict[str, int]:
    """How many of each system's records hold the last ``n`` messages of a session (at least n messages).

    OpenAI stores several items per assistant message and ADK (per-turn form)
    one event for all tool results of a response, so "the last 50 messages"
    is a different number of records in each.
    """
    per_message: list[tuple[int, int]] = []  # (openai items, adk events started here) for each message
    for peer in (p for p in turns if p.turn.session_id == session_id):
        results = [i for i, m in enumerate(peer.turn.dicts) if m["role"] == "toolResult"]
        for i, items in enumerate(peer.openai):
            per_message.append((len(items), 1 if not results or i == results[0] or i not in results else 0))
    window = per_message[-n:]
    adk = sum(events for _, events in window)
    if window and window[0][1] == 0:  # the window starts inside a merged tool-results event
        adk += 1
    return {"messages": len(window), "openai": sum(items for items, _ in window), "adk": adk}
