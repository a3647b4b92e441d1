"""The pydantic message models: phi-core's wire format (formats.md §1), yoagent spellings (§6), usage (§8)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from factories import assistant, extension, tool_result, user
from pydantic import TypeAdapter, ValidationError

from turnstore import InvalidMessage, parse_message
from turnstore.models import (
    AGENT_MESSAGE,
    AgentMessage,
    AssistantMessage,
    AudioContent,
    Content,
    CostConfig,
    ExtensionMessage,
    FileContent,
    ImageContent,
    Message,
    StopReason,
    SystemMessage,
    TextContent,
    ThinkingContent,
    ToolCallContent,
    ToolResultMessage,
    TurnId,
    Usage,
    UserMessage,
)
from turnstore.repositories.messages import dump_message

LOOP = "3f1c9a2e-7b4d-4c1e-9a55-0d2f6b8e1a77.anthropic.claude-sonnet-4-5.thinking.1"

# formats.md §1.5, verbatim.
USER = (
    '{"content":[{"text":"List the files in src/","type":"text"}],"role":"user","timestamp":1767225600000,'
    '"turnId":{"loopId":"' + LOOP + '","turnIndex":0}}'
)
ASSISTANT = (
    '{"content":[{"signature":"EqQBCkYIBxgCKkC...","thinking":"I should run ls on src/.","type":"thinking"},'
    '{"text":"Let me look.","type":"text"},{"arguments":{"command":"ls src/"},"id":"toolu_01A","name":"bash",'
    '"type":"toolCall"}],"model":"claude-sonnet-4-5","provider":"anthropic","role":"assistant",'
    '"stopReason":"toolUse","timestamp":1767225601234,"turnId":{"loopId":"' + LOOP + '","turnIndex":0},'
    '"usage":{"cache_read":1024,"cache_write":0,"input":1200,"output":85,"reasoning":0,"total_tokens":2309}}'
)
TOOL_RESULT = (
    '{"content":[{"text":"lib.rs\\nmain.rs\\n","type":"text"}],"isError":false,"role":"toolResult",'
    '"timestamp":1767225601500,"toolCallId":"toolu_01A","toolName":"bash","turnId":{"loopId":"' + LOOP + '",'
    '"turnIndex":0}}'
)
EXTENSION = '{"role":"extension","kind":"status_update","data":{"status":"running"}}'
LEGACY_USER = '{"content":[{"text":"legacy, no turn","type":"text"}],"role":"user","timestamp":1}'
ERROR_ASSISTANT = (
    '{"content":[],"error_message":"prompt is too long: 210000 tokens > 200000 maximum",'
    '"model":"claude-sonnet-4-5","provider":"anthropic","role":"assistant","stopReason":"error",'
    '"timestamp":1767225609000,"usage":{"cache_read":0,"cache_write":0,"input":0,"output":0,"reasoning":0,'
    '"total_tokens":0}}'
)

EXAMPLES = [
    pytest.param(USER, UserMessage, id="user"),
    pytest.param(ASSISTANT, AssistantMessage, id="assistant"),
    pytest.param(TOOL_RESULT, ToolResultMessage, id="toolResult"),
    pytest.param(EXTENSION, ExtensionMessage, id="extension"),
    pytest.param(LEGACY_USER, UserMessage, id="legacy-user"),
    pytest.param(ERROR_ASSISTANT, AssistantMessage, id="error-assistant"),
]


def minimal_assistant(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "content": [],
        "model": "m",
        "provider": "p",
        "role": "assistant",
        "stopReason": "stop",
        "timestamp": 1,
        "usage": {"input": 1, "output": 2, "reasoning": 0, "cache_read": 0, "cache_write": 0, "total_tokens": 3},
    }
    record.update(overrides)
    return record


def minimal_user(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"content": [{"type": "text", "text": "hi"}], "role": "user", "timestamp": 1}
    record.update(overrides)
    return record


def tool_call_record(arguments_json: str) -> str:
    return (
        '{"content":[{"type":"toolCall","id":"c1","name":"bash","arguments":' + arguments_json + "}],"
        '"model":"m","provider":"p","role":"assistant","stopReason":"toolUse","timestamp":1,'
        '"usage":{"input":1,"output":2}}'
    )


# --- the §1.5 examples round-trip ------------------------------------------------


@pytest.mark.parametrize(("text", "cls"), EXAMPLES)
def test_example_from_json_round_trips(text: str, cls: type) -> None:
    message = AGENT_MESSAGE.validate_json(text)
    assert type(message) is cls
    assert message.model_dump(mode="json") == json.loads(text)
    assert message.model_dump() == json.loads(text)
    assert json.loads(message.model_dump_json()) == json.loads(text)


@pytest.mark.parametrize(("text", "cls"), EXAMPLES)
def test_example_from_python_round_trips(text: str, cls: type) -> None:
    record = json.loads(text)
    message = AGENT_MESSAGE.validate_python(record)
    assert type(message) is cls
    assert message.model_dump(mode="json") == record
    assert AGENT_MESSAGE.validate_python(message.model_dump(mode="json")) == message


def test_assistant_example_fields() -> None:
    message = AGENT_MESSAGE.validate_json(ASSISTANT)
    thinking, text, call = message.content
    assert isinstance(thinking, ThinkingContent) and thinking.signature == "EqQBCkYIBxgCKkC..."
    assert isinstance(text, TextContent) and text.text == "Let me look."
    assert isinstance(call, ToolCallContent) and (call.id, call.name, call.arguments) == (
        "toolu_01A",
        "bash",
        {"command": "ls src/"},
    )
    assert message.stop_reason is StopReason.TOOL_USE
    assert message.usage == Usage(input=1200, output=85, cache_read=1024, total_tokens=2309)
    assert message.turn == TurnId(loop_id=LOOP, turn_index=0)


def test_tool_result_example_fields() -> None:
    message = AGENT_MESSAGE.validate_json(TOOL_RESULT)
    assert (message.tool_call_id, message.tool_name, message.is_error) == ("toolu_01A", "bash", False)


def test_legacy_user_has_no_turn_id_and_dumps_none() -> None:
    message = AGENT_MESSAGE.validate_json(LEGACY_USER)
    assert message.turn_id() is None
    assert "turnId" not in message.model_dump(mode="json")


def test_image_content_uses_mime_type_key() -> None:
    record = minimal_user(content=[{"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"}])
    message = AGENT_MESSAGE.validate_python(record)
    assert message.content[0].mime_type == "image/png"
    assert message.model_dump(mode="json") == record


# --- nothing lost -------------------------------------------------------------------


def test_unknown_keys_survive_round_trip() -> None:
    record = json.loads(ASSISTANT)
    record["nodeId"] = 7
    record["parentId"] = 6
    record["tags"] = [{"kind": "lesson", "text": "t", "created_at_turn": 0, "abandoned_node_ids": [1, 2]}]
    record["provenanceHint"] = {"source": "replay", "nested": {"a": [1, None]}}
    record["content"][2]["providerMetadata"] = {"openai": {"itemId": "fc_1"}}
    record["content"][0]["redacted"] = False
    record["usage"]["service_tier"] = {"name": "priority"}
    message = AGENT_MESSAGE.validate_json(json.dumps(record))
    assert message.model_dump(mode="json") == record
    assert message.model_dump() == record
    assert AGENT_MESSAGE.validate_json(message.model_dump_json()).model_dump(mode="json") == record


@pytest.mark.parametrize("text", [USER, TOOL_RESULT, EXTENSION])
def test_unknown_top_level_key_survives_on_every_role(text: str) -> None:
    record = json.loads(text)
    record["futureField"] = {"x": 1}
    assert AGENT_MESSAGE.validate_python(record).model_dump(mode="json") == record


@pytest.mark.parametrize("value", [3, "t-3", {"loopId": "l", "turnIndex": 0}])
def test_unknown_key_named_turn_survives(value: Any) -> None:
    record = {**json.loads(LEGACY_USER), "turn": value}
    assert AGENT_MESSAGE.validate_python(record).model_dump(mode="json") == record


@pytest.mark.parametrize(
    "arguments_json",
    [
        '{"z":1,"a":2,"m":{"y":null,"b":[true,false]}}',
        '{"text":"\\u00e9t\\u00e9 \\ud83d\\ude00 \\u4e2d\\u6587","raw":"é😀"}',
        '{"big":9007199254740993,"huge":18446744073709551617,"neg":-9223372036854775809}',
        '{"floats":[0.1,1e308,1.5e-07,-0.0,1.0,3.141592653589793]}',
        '[1,"two",{"three":3}]',
        '"just a string"',
        "{}",
    ],
)
def test_tool_call_arguments_come_back_exact(arguments_json: str) -> None:
    original = json.loads(tool_call_record(arguments_json))["content"][0]["arguments"]
    message = AGENT_MESSAGE.validate_json(tool_call_record(arguments_json))
    for dumped in (message.model_dump(mode="json"), message.model_dump(), json.loads(message.model_dump_json())):
        assert json.dumps(dumped["content"][0]["arguments"]) == json.dumps(original)
    assert json.dumps(message.tool_calls()[0].arguments) == json.dumps(original)


@pytest.mark.parametrize(
    "signature",
    ["EqQBCkYIBxgCKkC+/==", "a" * 10_000, "  leading and trailing  ", "line\nbreak\ttab", "ünïcødé😀", ""],
)
def test_thinking_signature_comes_back_exact(signature: str) -> None:
    record = minimal_assistant(content=[{"type": "thinking", "thinking": "hmm", "signature": signature}])
    message = AGENT_MESSAGE.validate_json(json.dumps(record))
    assert message.content[0].signature == signature
    assert message.model_dump(mode="json")["content"][0]["signature"] == signature
    assert json.loads(message.model_dump_json())["content"][0]["signature"] == signature


def test_signature_omitted_when_none() -> None:
    block = ThinkingContent(thinking="hmm")
    assert block.model_dump(mode="json") == {"type": "thinking", "thinking": "hmm"}
    record = minimal_assistant(content=[{"type": "thinking", "thinking": "hmm"}])
    assert AGENT_MESSAGE.validate_python(record).model_dump(mode="json") == record


def test_error_message_omitted_when_none() -> None:
    dumped = assistant().model_dump(mode="json")
    assert "error_message" not in dumped
    assert "errorMessage" not in dumped
    assert assistant(error="boom").model_dump(mode="json")["error_message"] == "boom"


# --- enums and alternative spellings --------------------------------------------------

PHI_CORE_STOP_REASONS = [
    "stop",
    "length",
    "toolUse",
    "error",
    "aborted",
    "maxTurns",
    "userStop",
    "handoff",
    "guardRail",
    "contextCompacted",
    "paused",
]


@pytest.mark.parametrize("value", [*PHI_CORE_STOP_REASONS, "refusal"])
def test_stop_reason_values_parse_and_dump_back(value: str) -> None:
    message = AGENT_MESSAGE.validate_python(minimal_assistant(stopReason=value))
    assert message.stop_reason == StopReason(value)
    assert message.model_dump(mode="json")["stopReason"] == value


def test_stop_reason_enum_has_phi_core_values_plus_refusal() -> None:
    assert {reason.value for reason in StopReason} == {*PHI_CORE_STOP_REASONS, "refusal"}


@pytest.mark.parametrize("value", ["end_turn", "tool_use", "ToolUse", "STOP", ""])
def test_unknown_stop_reason_rejected(value: str) -> None:
    with pytest.raises(ValidationError):
        AGENT_MESSAGE.validate_python(minimal_assistant(stopReason=value))


def test_yoagent_spellings_accepted_and_dumped_as_phi_core() -> None:
    record = minimal_assistant(
        usage={"input": 10, "output": 20, "cacheRead": 30, "cacheWrite": 40, "totalTokens": 100},
        errorMessage="rate limited",
        stopReason="refusal",
    )
    dumped = AGENT_MESSAGE.validate_json(json.dumps(record)).model_dump(mode="json")
    assert dumped["usage"] == {
        "input": 10,
        "output": 20,
        "reasoning": 0,
        "cache_read": 30,
        "cache_write": 40,
        "total_tokens": 100,
    }
    assert dumped["error_message"] == "rate limited"
    assert "errorMessage" not in dumped
    assert dumped["stopReason"] == "refusal"


def test_old_usage_without_optional_fields_defaults_to_zero() -> None:
    usage = AGENT_MESSAGE.validate_python(minimal_assistant(usage={"input": 5, "output": 6})).usage
    assert (usage.reasoning, usage.cache_read, usage.cache_write, usage.total_tokens) == (0, 0, 0, 0)
    assert usage.model_dump(mode="json") == {
        "input": 5,
        "output": 6,
        "reasoning": 0,
        "cache_read": 0,
        "cache_write": 0,
        "total_tokens": 0,
    }


# --- helpers ----------------------------------------------------------------------


def test_message_user_builds_a_user_text_message() -> None:
    message = Message.user("hello there")
    assert isinstance(message, UserMessage)
    assert message.text() == "hello there"
    assert message.turn_id() is None
    assert message.timestamp > 1_700_000_000_000  # unix milliseconds, not seconds
    assert Message.user("x", timestamp=42).timestamp == 42


@pytest.mark.parametrize(
    ("message", "role"),
    [
        (user(), "user"),
        (assistant(), "assistant"),
        (tool_result("c1"), "toolResult"),
        (extension(), "extension"),
        (Message.user("hi"), "user"),
        (ExtensionMessage.new("k"), "extension"),
        (AGENT_MESSAGE.validate_json(TOOL_RESULT), "toolResult"),
    ],
)
def test_role_is_both_attribute_and_method(message: Any, role: str) -> None:
    assert message.role == role
    assert message.role() == role


@pytest.mark.parametrize(
    "error",
    [
        "prompt is too long: 210000 tokens > 200000 maximum",
        "context_length_exceeded",
        "This model's maximum context length is 128000 tokens. However, your messages resulted in 130000 tokens.",
        "input is too long for requested model",
    ],
)
def test_context_overflow_detected(error: str) -> None:
    assert assistant(None, stop=StopReason.ERROR, error=error).is_context_overflow()


@pytest.mark.parametrize("error", [None, "", "rate_limit_error: too many requests per minute", "overloaded_error"])
def test_other_assistant_errors_are_not_overflow(error: str | None) -> None:
    assert not assistant(None, stop=StopReason.ERROR, error=error).is_context_overflow()


@pytest.mark.parametrize(
    "message", [user("prompt is too long"), tool_result("c1", "context_length_exceeded"), extension()]
)
def test_non_assistant_is_never_overflow(message: Any) -> None:
    assert message.is_context_overflow() is False


def test_error_example_is_overflow() -> None:
    assert AGENT_MESSAGE.validate_json(ERROR_ASSISTANT).is_context_overflow()
    assert not AGENT_MESSAGE.validate_json(ASSISTANT).is_context_overflow()


@pytest.mark.parametrize("message", [user(), assistant(), tool_result("c1")])
def test_as_llm_is_self_for_llm_messages(message: Any) -> None:
    assert message.as_llm() is message


def test_as_llm_is_none_for_extension() -> None:
    assert extension().as_llm() is None


def test_turn_id_reads_turn_id() -> None:
    assert AGENT_MESSAGE.validate_json(USER).turn_id() == TurnId(loop_id=LOOP, turn_index=0)
    assert extension().turn_id() is None


@pytest.mark.parametrize("message", [user(), assistant(calls=("c1",)), tool_result("c1")])
def test_with_turn_id_returns_a_copy(message: Any) -> None:
    before = message.model_dump(mode="json")
    tagged = message.with_turn_id(TurnId(loop_id="s.cfg.1", turn_index=3))
    assert tagged is not message
    assert message.turn_id() is None
    assert message.model_dump(mode="json") == before
    assert tagged.turn_id() == TurnId(loop_id="s.cfg.1", turn_index=3)
    assert tagged.model_dump(mode="json") == {**before, "turnId": {"loopId": "s.cfg.1", "turnIndex": 3}}
    assert tagged.with_turn_id(None).model_dump(mode="json") == before


def test_with_turn_id_is_noop_on_extension() -> None:
    message = extension()
    tagged = message.with_turn_id(TurnId(loop_id="s.cfg.1", turn_index=0))
    assert tagged.turn_id() is None
    assert tagged.model_dump(mode="json") == message.model_dump(mode="json")
    assert "turnId" not in tagged.model_dump(mode="json")


def test_extension_new() -> None:
    message = ExtensionMessage.new("status_update", {"status": "running"})
    assert message.model_dump(mode="json") == json.loads(EXTENSION)
    assert AGENT_MESSAGE.validate_json(EXTENSION) == message


def test_tool_calls_in_order() -> None:
    message = assistant("text", calls=("a", "b", "c"), thinking="think")
    assert [call.id for call in message.tool_calls()] == ["a", "b", "c"]
    assert assistant("plain").tool_calls() == []


def test_text_joins_text_blocks_only() -> None:
    message = AssistantMessage(
        content=[
            ThinkingContent(thinking="secret"),
            TextContent(text="one"),
            ToolCallContent(id="c", name="bash", arguments={}),
            TextContent(text="two"),
        ],
        stop_reason=StopReason.TOOL_USE,
        model="m",
        provider="p",
        usage=Usage(input=1, output=1),
        timestamp=1,
    )
    assert message.text() == "one\ntwo"
    assert assistant(None, calls=("c",)).text() == ""


# --- usage ------------------------------------------------------------------------


def test_usage_combine_adds_every_field() -> None:
    a = Usage(input=1, output=2, reasoning=3, cache_read=4, cache_write=5, total_tokens=6)
    b = Usage(input=10, output=20, reasoning=30, cache_read=40, cache_write=50, total_tokens=60)
    expected = Usage(input=11, output=22, reasoning=33, cache_read=44, cache_write=55, total_tokens=66)
    assert a.combine(b) == expected
    assert a + b == expected
    assert a == Usage(input=1, output=2, reasoning=3, cache_read=4, cache_write=5, total_tokens=6)


def test_usage_sum_starts_from_zero_usage() -> None:
    parts = [Usage(input=i, output=2 * i) for i in range(1, 4)]
    total = Usage(input=0, output=0)
    for part in parts:
        total = total + part
    assert (total.input, total.output) == (6, 12)


def test_estimated_cost_exact() -> None:
    usage = Usage(
        input=1_000_000,
        output=500_000,
        reasoning=200_000,
        cache_read=2_000_000,
        cache_write=100_000,
        total_tokens=3_600_000,
    )
    cost = CostConfig(
        input_per_million=3.0,
        output_per_million=15.0,
        cache_read_per_million=0.30,
        cache_write_per_million=3.75,
    )
    # 3.00 + 7.50 + 0.60 + 0.375; the 200k reasoning tokens are inside output, not charged again.
    assert usage.estimated_cost(cost) == pytest.approx(11.475, rel=1e-12)


def test_reasoning_is_not_charged_twice() -> None:
    cost = CostConfig(input_per_million=1.0, output_per_million=10.0)
    without = Usage(input=1000, output=1000)
    with_reasoning = Usage(input=1000, output=1000, reasoning=900)
    assert with_reasoning.estimated_cost(cost) == without.estimated_cost(cost) == pytest.approx(0.011, rel=1e-12)


def test_estimated_cost_of_zero_prices_is_zero() -> None:
    assert Usage(input=5, output=5, cache_read=5, cache_write=5).estimated_cost(CostConfig()) == 0.0


def test_cache_hit_rate() -> None:
    assert Usage(input=200, output=50, cache_read=600, cache_write=200).cache_hit_rate() == pytest.approx(0.6)
    assert Usage(input=100, output=5).cache_hit_rate() == 0.0


def test_cache_hit_rate_zero_denominator() -> None:
    assert Usage(input=0, output=100).cache_hit_rate() == 0.0


# --- rejection ------------------------------------------------------------------


@pytest.mark.parametrize(
    "record",
    [
        pytest.param({"content": [], "timestamp": 1}, id="no-role"),
        pytest.param({"role": "robot", "content": [], "timestamp": 1}, id="unknown-role"),
        pytest.param({"role": "User", "content": [], "timestamp": 1}, id="role-wrong-case"),
        pytest.param({"role": "user", "timestamp": 1}, id="missing-content"),
        pytest.param({"role": "user", "content": []}, id="missing-timestamp"),
        pytest.param(minimal_user(content=[{"type": "hologram", "data": "x"}]), id="unknown-content-type"),
        pytest.param(minimal_user(content=[{"text": "no type"}]), id="content-without-type"),
        pytest.param(minimal_user(content=[{"type": "text"}]), id="text-missing"),
        pytest.param(minimal_user(content=[{"type": "text", "text": 5}]), id="text-not-str"),
        pytest.param(minimal_user(content=5), id="content-not-list"),
        pytest.param(minimal_user(content=[{"type": "toolCall", "id": "c", "name": "n"}]), id="arguments-missing"),
        pytest.param(minimal_user(content=[{"type": "image", "data": "x"}]), id="mime-type-missing"),
        pytest.param(minimal_user(timestamp="1767225600000"), id="timestamp-str"),
        pytest.param(minimal_user(timestamp=1.5), id="timestamp-float"),
        pytest.param(minimal_user(timestamp=1.0), id="timestamp-integral-float"),
        pytest.param(minimal_user(timestamp=True), id="timestamp-bool"),
        pytest.param(minimal_user(timestamp=-1), id="timestamp-negative"),
        pytest.param(minimal_user(turnId={"loopId": "l"}), id="turn-index-missing"),
        pytest.param(minimal_user(turnId={"loopId": "l", "turnIndex": -1}), id="turn-index-negative"),
        pytest.param(minimal_user(turnId={"loopId": "l", "turnIndex": "0"}), id="turn-index-str"),
        pytest.param(minimal_assistant(usage={"input": -1, "output": 0}), id="input-negative"),
        pytest.param(minimal_assistant(usage={"input": 1, "output": -5}), id="output-negative"),
        pytest.param(minimal_assistant(usage={"input": 1, "output": 1, "cache_read": -1}), id="cache-read-negative"),
        pytest.param(minimal_assistant(usage={"input": True, "output": 1}), id="input-bool"),
        pytest.param(minimal_assistant(usage={"input": "1", "output": 1}), id="input-str"),
        pytest.param(minimal_assistant(usage={"input": 1.0, "output": 1}), id="input-float"),
        pytest.param(minimal_assistant(usage={"input": 1, "output": 1, "reasoning": 2.5}), id="reasoning-float"),
        pytest.param(minimal_assistant(usage={"output": 1}), id="input-missing"),
        pytest.param(minimal_assistant(usage={"input": 1, "output": 1, "cost": float("nan")}), id="cost-nan"),
        pytest.param(minimal_assistant(usage={"input": 1, "output": 1, "cost": float("inf")}), id="cost-inf"),
        pytest.param(minimal_assistant(usage={"input": 1, "output": 1, "cost": -1.0}), id="cost-negative"),
        pytest.param(
            minimal_assistant(content=[{"type": "toolCall", "id": "c", "name": "n", "arguments": {"x": float("nan")}}]),
            id="arguments-nan",
        ),
        pytest.param(
            {"role": "extension", "kind": "k", "data": {"x": float("inf")}},
            id="extension-data-inf",
        ),
        pytest.param({"role": "extension", "data": {}}, id="extension-kind-missing"),
        pytest.param(minimal_assistant(stopReason=None), id="stop-reason-null"),
        pytest.param(minimal_assistant(usage="none"), id="usage-not-object"),
        pytest.param({k: v for k, v in minimal_assistant().items() if k != "model"}, id="model-missing"),
        pytest.param(
            {"role": "toolResult", "toolName": "b", "content": [], "isError": False, "timestamp": 1},
            id="tool-call-id-missing",
        ),
    ],
)
def test_invalid_record_rejected(record: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AGENT_MESSAGE.validate_python(record)
    with pytest.raises(InvalidMessage):
        parse_message(record)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(tool_call_record('{"x":NaN}'), id="arguments-NaN"),
        pytest.param(tool_call_record('{"x":Infinity}'), id="arguments-Infinity"),
        pytest.param('{"role":"extension","kind":"k","data":{"x":-Infinity}}', id="extension-data-Infinity"),
        pytest.param('{"role":"user","content":[],"timestamp":1,"nodeId":NaN}', id="unknown-key-NaN"),
    ],
)
def test_non_finite_json_literals_refused_when_stored(text: str) -> None:
    # JSON cannot carry NaN/Infinity: a message holding one is refused before it is written,
    # instead of being written back as null.
    message = AGENT_MESSAGE.validate_json(text)
    with pytest.raises(InvalidMessage, match="NaN or Infinity"):
        dump_message(message)


LONG_TEXT = "NaN, Infinity, [{ " * 400
"""Over 4,300 characters: dump_message checks such a text with one parse instead of scans."""


@pytest.mark.parametrize(
    "record",
    [
        pytest.param({"nodeId": float("nan")}, id="NaN"),
        pytest.param({"nodeId": {"x": [float("-inf")]}}, id="-Infinity"),
    ],
)
def test_non_finite_refused_in_a_long_message(record: dict[str, Any]) -> None:
    message = AGENT_MESSAGE.validate_python(minimal_user(content=[{"type": "text", "text": LONG_TEXT}], **record))
    with pytest.raises(InvalidMessage, match="NaN or Infinity"):
        dump_message(message)


def test_long_message_with_the_words_nan_and_brackets_is_stored() -> None:
    message = user(LONG_TEXT)
    assert len(LONG_TEXT) > 4_300
    assert json.loads(dump_message(message))["content"][0]["text"] == LONG_TEXT


def test_long_message_nested_too_deeply_is_refused_naming_where() -> None:
    def nested(depth: int) -> list[Any]:
        value: list[Any] = []
        for _ in range(depth):
            value = [value]
        return value

    # The message object and 199 lists: 200 levels, the most the reader takes; one more is refused,
    # as it is for a short message.
    fits = AGENT_MESSAGE.validate_python(minimal_user(content=[{"type": "text", "text": LONG_TEXT}], extra=nested(198)))
    assert json.loads(dump_message(fits))["extra"] == nested(198)
    too_deep = AGENT_MESSAGE.validate_python(
        minimal_user(content=[{"type": "text", "text": LONG_TEXT}], extra=nested(199))
    )
    with pytest.raises(InvalidMessage, match=r"^extra\[0\]\[0\]\[0\]…: nested more than 200 levels deep"):
        dump_message(too_deep)


def test_non_finite_unknown_key_refused_when_stored() -> None:
    message = AGENT_MESSAGE.validate_python(minimal_user(nodeId=float("nan")))
    with pytest.raises(InvalidMessage, match="NaN or Infinity"):
        dump_message(message)


def test_words_nan_and_infinity_in_text_are_stored() -> None:
    message = user("NaN and Infinity are words here")
    assert json.loads(dump_message(message))["content"][0]["text"] == "NaN and Infinity are words here"


def test_non_finite_python_floats_in_json_values_rejected() -> None:
    with pytest.raises(ValidationError):
        AGENT_MESSAGE.validate_python({"role": "extension", "kind": "k", "data": {"x": float("inf")}})


@pytest.mark.parametrize("value", ["yes", 1])
def test_is_error_must_be_a_json_bool(value: Any) -> None:
    record = {"role": "toolResult", "toolCallId": "a", "toolName": "b", "content": [], "isError": value, "timestamp": 1}
    with pytest.raises(ValidationError):
        AGENT_MESSAGE.validate_python(record)


@pytest.mark.parametrize(
    "text",
    [
        '{"role":"user","content":[],"timestamp":1.0}',
        '{"role":"user","content":[],"timestamp":1e3}',
        '{"role":"user","content":[],"timestamp":true}',
        '{"role":"user","content":[],"timestamp":"1"}',
        '{"role":"user","content":[],"timestamp":null}',
        tool_call_record("{}").replace('"input":1', '"input":1.0'),
        tool_call_record("{}").replace('"input":1', '"input":-1'),
        tool_call_record("{}").replace('"input":1', '"input":true'),
    ],
)
def test_invalid_json_rejected(text: str) -> None:
    with pytest.raises(ValidationError):
        AGENT_MESSAGE.validate_json(text)


def test_valid_minimal_records_parse() -> None:
    # Guards the rejection tests above: the records they start from are valid.
    assert isinstance(AGENT_MESSAGE.validate_python(minimal_user()), UserMessage)
    assert isinstance(AGENT_MESSAGE.validate_python(minimal_assistant()), AssistantMessage)
    assert isinstance(AGENT_MESSAGE.validate_json(tool_call_record("{}")), AssistantMessage)


# --- parse_message and InvalidMessage -------------------------------------------------


@pytest.mark.parametrize(
    ("record", "path"),
    [
        (minimal_user(content=[{"type": "text", "text": "ok"}, {"type": "text"}]), "content[1].text"),
        (minimal_user(content=[{"type": "text", "text": 5}]), "content[0].text"),
        (minimal_user(content=[{"type": "hologram"}]), "content[0].type"),
        (minimal_assistant(content=[{"type": "toolCall", "name": "n", "arguments": {}}]), "content[0].id"),
        (minimal_assistant(content=[{"type": "thinking", "thinking": 1}]), "content[0].thinking"),
        ({"role": "robot", "content": [], "timestamp": 1}, "role"),
        ({"content": [], "timestamp": 1}, "role"),
        (minimal_assistant(usage={"input": -1, "output": 0}), "usage.input"),
        (minimal_assistant(usage={"input": 1, "output": "2"}), "usage.output"),
        ({"role": "user", "content": []}, "timestamp"),
        (minimal_user(timestamp=1.5), "timestamp"),
        (minimal_user(turnId={"loopId": "l", "turnIndex": -1}), "turnId.turnIndex"),
        (minimal_assistant(stopReason="nope"), "stopReason"),
        ({"role": "toolResult", "toolName": "b", "content": [], "isError": False, "timestamp": 1}, "toolCallId"),
        ({"role": "extension", "data": {}}, "kind"),
    ],
)
def test_parse_message_names_failing_field(record: dict[str, Any], path: str) -> None:
    with pytest.raises(InvalidMessage) as raised:
        parse_message(record)
    assert path in str(raised.value)
    assert [p for p, _ in raised.value.errors] == [path]
    assert all(isinstance(msg, str) and msg for _, msg in raised.value.errors)


def test_parse_message_lists_every_problem() -> None:
    record = minimal_assistant(usage={"input": -1, "output": "x"}, timestamp=None)
    with pytest.raises(InvalidMessage) as raised:
        parse_message(record)
    assert sorted(p for p, _ in raised.value.errors) == ["timestamp", "usage.input", "usage.output"]


def test_parse_message_returns_models_and_parses_dicts() -> None:
    model = user()
    assert parse_message(model) == model  # validated again, from its JSON: a new model
    model.timestamp = -1  # changed after it was built
    with pytest.raises(InvalidMessage, match="timestamp"):
        parse_message(model)
    parsed = parse_message(json.loads(ASSISTANT))
    assert isinstance(parsed, AssistantMessage)
    assert parsed.model_dump(mode="json") == json.loads(ASSISTANT)


@pytest.mark.parametrize("value", ["a string", ASSISTANT, None, 42, [json.loads(USER)], TextContent(text="x")])
def test_parse_message_rejects_non_messages(value: Any) -> None:
    with pytest.raises(InvalidMessage) as raised:
        parse_message(value)
    assert raised.value.errors


# --- content blocks: dumped by each block's own serializer ---------------------------------------

ALL_BLOCKS = [
    TextContent(text="t"),
    ImageContent(data="AAA", mime_type="image/png"),
    ThinkingContent(thinking="h", signature="s"),
    ThinkingContent(thinking="unsigned"),
    ToolCallContent(id="c", name="n", arguments={"a": [1, {"b": None}], "s": "x"}),
    AudioContent(data="BB", mime_type="audio/wav"),
    FileContent(url="http://x", name="f"),
    TextContent.model_validate({"type": "text", "text": "with extras", "cache_control": {"type": "ephemeral"}}),
]
DUMP_OPTIONS = [
    {},
    {"by_alias": False},
    {"mode": "json"},
    {"mode": "json", "by_alias": False},
    {"exclude_none": True},
    {"exclude_defaults": True},
    {"round_trip": True},
]


@pytest.mark.parametrize("options", DUMP_OPTIONS, ids=str)
@pytest.mark.parametrize(
    "make",
    [
        lambda blocks: UserMessage(content=blocks, timestamp=1),
        lambda blocks: AssistantMessage(
            content=blocks,
            stop_reason=StopReason.STOP,
            model="m",
            provider="p",
            usage=Usage(input=1, output=2),
            timestamp=1,
        ),
        lambda blocks: ToolResultMessage(tool_call_id="c", tool_name="n", content=blocks, is_error=False, timestamp=1),
        lambda blocks: SystemMessage(content=blocks),
    ],
    ids=["user", "assistant", "toolResult", "system"],
)
def test_content_dumps_as_the_content_union_does(make: Any, options: dict[str, Any]) -> None:
    message = make(ALL_BLOCKS)
    union = TypeAdapter(list[Content])

    assert message.model_dump(**options)["content"] == union.dump_python(ALL_BLOCKS, **options)
    dumped = json.loads(message.model_dump_json())["content"]
    assert dumped == json.loads(union.dump_json(ALL_BLOCKS))
    assert dumped[1] == {"type": "image", "data": "AAA", "mimeType": "image/png"}
    assert dumped[-1] == {"type": "text", "text": "with extras", "cache_control": {"type": "ephemeral"}}


def test_json_schemas_of_the_messages_are_made_without_warnings() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        schema = TypeAdapter(list[AgentMessage]).json_schema()

    roles = {
        name: spec["properties"]["role"]
        for name, spec in schema["$defs"].items()
        if "role" in spec.get("properties", {})
    }
    assert roles["UserMessage"] == {"const": "user", "default": "user", "title": "Role", "type": "string"}
    assert {role["const"] for role in roles.values()} == {"user", "assistant", "toolResult", "system", "extension"}
    assert UserMessage.model_validate_json('{"role":"user","content":[],"timestamp":1}').role() == "user"


# --- optional usage, helpers, hand-written dicts ------------------------------------------------------


def test_assistant_without_usage_dumps_no_usage_key_and_reads_back() -> None:
    record = {k: v for k, v in minimal_assistant().items() if k != "usage"}
    message = AGENT_MESSAGE.validate_python(record)
    assert isinstance(message, AssistantMessage) and message.usage is None
    assert "usage" not in json.loads(message.model_dump_json())
    assert AGENT_MESSAGE.validate_json(message.model_dump_json()) == message


def test_assistant_with_usage_dumps_as_before() -> None:
    record = minimal_assistant()
    assert json.loads(AGENT_MESSAGE.validate_python(record).model_dump_json()) == record


def test_message_user_and_system_take_a_string_or_blocks() -> None:
    assert Message.user("hi", timestamp=5) == UserMessage(content=[TextContent(text="hi")], timestamp=5)
    blocks = [TextContent(text="a"), {"type": "image", "data": "eA==", "mime_type": "image/png"}]
    user_message = Message.user(blocks, timestamp=5)
    assert user_message.content[1] == ImageContent(data="eA==", mime_type="image/png")
    system = Message.system("be brief", timestamp=7)
    assert isinstance(system, SystemMessage)
    assert json.loads(system.model_dump_json()) == {
        "role": "system",
        "content": [{"type": "text", "text": "be brief"}],
        "timestamp": 7,
    }


def test_message_assistant_defaults_its_stop_reason_from_the_content() -> None:
    call = ToolCallContent(id="c1", name="bash", arguments={"command": "ls"})
    assert Message.assistant("done", model="m").stop_reason == StopReason.STOP
    assert Message.assistant([call], model="m").stop_reason == StopReason.TOOL_USE
    as_dict = Message.assistant([{"type": "toolCall", "id": "c1", "name": "bash", "arguments": {}}], model="m")
    assert as_dict.stop_reason == StopReason.TOOL_USE
    stopped = Message.assistant("cut", model="m", stop_reason="length", usage={"input": 3, "output": 1})
    assert (stopped.stop_reason, stopped.usage) == (StopReason.LENGTH, Usage(input=3, output=1))


def test_message_helpers_take_strings_among_the_blocks_as_text_blocks_in_place() -> None:
    call = ToolCallContent(id="c1", name="bash", arguments={"command": "ls"})
    reply = Message.assistant(["let me look", call, "then report"], model="m", timestamp=1)
    assert reply.content == [TextContent(text="let me look"), call, TextContent(text="then report")]
    assert reply.stop_reason == StopReason.TOOL_USE
    image = {"type": "image", "data": "eA==", "mime_type": "image/png"}
    asked = Message.user(["what is this?", image], timestamp=2)
    assert asked.content == [TextContent(text="what is this?"), ImageContent(data="eA==", mime_type="image/png")]
    assert Message.system(["be brief", "be kind"], timestamp=3).text() == "be brief\nbe kind"
    answered = Message.tool_result(call, ["3 files", TextContent(text="done")], timestamp=4)
    assert answered.content == [TextContent(text="3 files"), TextContent(text="done")]
    with pytest.raises(InvalidMessage):
        Message.user(["fine", 5], timestamp=5)


def test_message_assistant_dumps_phi_core_wire_json() -> None:
    message = Message.assistant(
        "hi", model="m", provider="p", usage=Usage(input=1, output=2, total_tokens=3), timestamp=1
    )
    assert message.model_dump_json() == (
        '{"role":"assistant","content":[{"type":"text","text":"hi"}],"stopReason":"stop","model":"m",'
        '"provider":"p","usage":{"input":1,"output":2,"reasoning":0,"cache_read":0,"cache_write":0,'
        '"total_tokens":3},"timestamp":1}'
    )
    assert "usage" not in json.loads(Message.assistant("hi", model="m").model_dump_json())


def test_message_tool_result_answers_a_call_block_or_an_id() -> None:
    call = ToolCallContent(id="c1", name="bash", arguments={})
    result = Message.tool_result(call, "out", timestamp=9)
    assert (result.tool_call_id, result.tool_name, result.text(), result.is_error) == ("c1", "bash", "out", False)
    failed = Message.tool_result("c2", [TextContent(text="boom")], tool_name="grep", is_error=True, timestamp=9)
    assert (failed.tool_call_id, failed.tool_name, failed.is_error) == ("c2", "grep", True)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        pytest.param(lambda: Message.tool_result("c1", "out"), "tool_name", id="tool-result-without-name"),
        pytest.param(lambda: Message.assistant("x", model="m", stop_reason="nope"), "stop_reason", id="stop-reason"),
        pytest.param(
            lambda: Message.assistant("x", model="m", usage={"input": -1, "output": 0}),
            "usage.input",
            id="negative-usage",
        ),
        pytest.param(lambda: Message.user(5), "content", id="content-not-blocks"),  # type: ignore[arg-type]
        pytest.param(lambda: Message.user("x", timestamp=-1), "timestamp", id="negative-timestamp"),
    ],
)
def test_message_helpers_raise_invalid_message_naming_the_field(build: Any, field: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        build()
    assert "\n" not in str(caught.value)
    if field:
        assert field in [path for path, _ in caught.value.errors]


def test_parse_message_takes_python_field_names_and_string_content() -> None:
    wire = {
        "role": "toolResult",
        "toolCallId": "c1",
        "toolName": "bash",
        "content": [{"type": "text", "text": "out"}],
        "isError": False,
        "timestamp": 1,
        "turnId": {"loopId": "L", "turnIndex": 0},
    }
    by_name = {
        "role": "toolResult",
        "tool_call_id": "c1",
        "tool_name": "bash",
        "content": "out",
        "is_error": False,
        "timestamp": 1,
        "turnId": {"loop_id": "L", "turn_index": 0},
    }
    assert parse_message(by_name) == parse_message(wire)
    assert parse_message(by_name).model_dump_json() == json.dumps(wire, separators=(",", ":"))
    image = {"role": "user", "content": [{"type": "image", "data": "eA==", "mime_type": "image/png"}], "timestamp": 1}
    assert parse_message(image).content[0] == ImageContent(data="eA==", mime_type="image/png")
    assistant_record = {**minimal_assistant(), "stop_reason": "toolUse"}
    del assistant_record["stopReason"]
    assert parse_message(assistant_record).stop_reason == StopReason.TOOL_USE


def test_parse_message_keeps_a_python_name_given_beside_its_wire_name() -> None:
    record = {**minimal_assistant(), "stop_reason": "length"}
    message = parse_message(record)
    assert message.stop_reason == StopReason.STOP
    assert json.loads(message.model_dump_json())["stop_reason"] == "length"


def test_a_tool_result_for_a_call_id_says_to_name_the_tool() -> None:
    with pytest.raises(InvalidMessage, match="call is an id, so tool_name= must name the tool"):
        Message.tool_result("c1", "out")
    assert Message.tool_result("c1", "out", tool_name="ls").tool_name == "ls"
