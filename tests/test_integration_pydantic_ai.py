"""pydantic-ai history in turnstore: byte-identical round trips, turns, usage equal to pydantic-ai's own."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from helpers import run_doc_example, run_example

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai.usage import RequestUsage, RunUsage

from turnstore import Store
from turnstore.errors import InvalidMessage
from turnstore.integrations.pydantic_ai import TurnstoreHistory
from turnstore.models import AssistantMessage, ExtensionMessage, ToolResultMessage, UserMessage


def _json(messages: list[ModelMessage]) -> bytes:
    return ModelMessagesTypeAdapter.dump_json(messages)


def _run_usage(result: Any) -> RunUsage:
    usage = result.usage
    return usage if isinstance(usage, RunUsage) else usage()


def _agent(model: Any) -> Agent[None, str]:
    agent: Agent[None, str] = Agent(model, system_prompt="Be terse.")

    @agent.tool_plain
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    return agent


def _scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Call ``add`` once, then answer with thinking and text."""
    last = messages[-1]
    if isinstance(last, ModelRequest) and any(p.part_kind == "user-prompt" for p in last.parts):
        return ModelResponse(
            parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="call-1")],
            usage=RequestUsage(input_tokens=40, output_tokens=7, cache_read_tokens=10),
            model_name="fn-model",
        )
    return ModelResponse(
        parts=[ThinkingPart("sum is 5", signature="sig/é=="), TextPart("5 ✓")],
        usage=RequestUsage(input_tokens=60, output_tokens=12),
        model_name="fn-model",
    )


def test_test_model_round_trip_is_byte_identical_and_usage_matches(sync_store: Store) -> None:
    agent = _agent(TestModel())
    history = TurnstoreHistory("chat", sync_store)
    assert history.load() == []
    first = agent.run_sync("What is 0 + 0?", message_history=history.load())
    history.save(first)
    assert _json(history.load()) == _json(first.all_messages())
    second = agent.run_sync("And again?", message_history=history.load())
    history.save(second)
    assert _json(history.load()) == _json(second.all_messages())
    totals = sync_store.usage.session("chat")
    expected = _run_usage(first) + _run_usage(second)
    assert (totals.input, totals.output, totals.requests) == (
        expected.input_tokens,
        expected.output_tokens,
        expected.requests,
    )
    assert len(sync_store.loops.list("chat")) == 2


def test_function_model_tool_calls_become_turns(sync_store: Store) -> None:
    agent = _agent(FunctionModel(_scripted))
    history = TurnstoreHistory("fn", sync_store)
    result = agent.run_sync("Add 2 and 3.")
    loop_id = history.save(result)
    assert _json(history.load()) == _json(result.all_messages())
    turns = sync_store.messages.turns(loop_id)
    assert [t.turn_index for t in turns] == [0, 1]
    roles0 = [m.role for m in turns[0].messages]
    assert roles0 == ["system", "user", "assistant", "toolResult"]
    call = turns[0].messages[2]
    assert isinstance(call, AssistantMessage)
    assert call.tool_calls()[0].id == "call-1" and call.tool_calls()[0].arguments == {"a": 2, "b": 3}
    answer = turns[0].messages[3]
    assert isinstance(answer, ToolResultMessage) and answer.tool_call_id == "call-1" and answer.text() == "5"
    final = turns[1].messages[0]
    assert isinstance(final, AssistantMessage)
    assert final.content[0].signature == "sig/é=="  # type: ignore[union-attr]
    last = result.all_messages()[-1]
    assert isinstance(last, ModelResponse)
    assert final.model == last.model_name and final.usage is not None and final.usage.cache_read == 0
    totals = sync_store.usage.session("fn")
    usage = _run_usage(result)
    # pydantic-ai's input_tokens include its cache reads, which canonical input leaves out (priced apart).
    assert (totals.input, totals.output, totals.cache_read, totals.requests) == (
        usage.input_tokens - usage.cache_read_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.requests,
    )
    assert usage.cache_read_tokens == 10
    context = sync_store.messages.context(loop_id)
    assert [m.role for m in context] == ["system", "user", "assistant", "toolResult", "assistant"]


def test_append_takes_run_usage_counted_once(sync_store: Store) -> None:
    history = TurnstoreHistory("run", sync_store)
    messages: list[ModelMessage] = [
        ModelRequest.user_text_prompt("hi"),
        ModelResponse(parts=[TextPart("hello")], usage=RequestUsage(input_tokens=5, output_tokens=2)),
    ]
    history.append(messages, usage=RunUsage(input_tokens=5, output_tokens=2, requests=1))
    totals = sync_store.usage.session("run")
    assert (totals.input, totals.output, totals.requests) == (5, 2, 1)
    assert _json(history.load()) == _json(messages)


def test_a_response_pydantic_ai_could_not_measure_has_unknown_usage_not_zeros(sync_store: Store) -> None:
    history = TurnstoreHistory("unmeasured", sync_store)
    messages: list[ModelMessage] = [
        ModelRequest.user_text_prompt("hi"),
        ModelResponse(
            parts=[TextPart("hello")], usage=RequestUsage(unmeasured_requests=1), model_name="claude-sonnet-4-5"
        ),
    ]
    loop_id = history.append(messages, usage=RunUsage(input_tokens=500_000, output_tokens=20, requests=1))
    totals = sync_store.usage.session("unmeasured")
    assert (totals.input, totals.output, totals.requests) == (500_000, 20, 1)  # the run's usage counts
    assert totals.cost is not None and totals.cost > 1  # priced at the reply's model, not a false $0
    reply = [r.message_id for r in sync_store.messages.records(loop_id=loop_id) if r.message.role == "assistant"]
    assert sync_store.usage.unknown(loop_id) == reply
    assert _json(history.load()) == _json(messages)


def test_retry_and_unmodelled_requests_are_kept(sync_store: Store) -> None:
    history = TurnstoreHistory("odd", sync_store)
    messages: list[ModelMessage] = [
        ModelRequest.user_text_prompt("go"),
        ModelResponse(parts=[ToolCallPart("add", '{"a": 1', tool_call_id="bad")]),
        ModelRequest(parts=[ToolReturnPart("add", "args are not JSON", tool_call_id="bad", outcome="retried")]),
        ModelResponse(parts=[TextPart("sorry")]),
        ModelRequest(
            parts=[RetryFeedbackPart("answer in JSON", retry=RetryInfo(cause="no_output", attempt=1, max_retries=1))]
        ),
        ModelRequest(parts=[]),
    ]
    loop_id = history.append(messages)
    assert _json(history.load()) == _json(messages)
    rows = list(sync_store.messages.records(loop_id=loop_id))
    retry = rows[2].message
    assert isinstance(retry, ToolResultMessage) and retry.is_error and retry.tool_call_id == "bad"
    assert isinstance(rows[4].message, UserMessage)
    assert isinstance(rows[5].message, ExtensionMessage) and rows[5].message.kind == "pydantic-ai"
    assert [r.source is not None for r in rows] == [True] * 6


def test_load_skips_rows_of_other_writers(sync_store: Store) -> None:
    history = TurnstoreHistory("mixed", sync_store)
    messages: list[ModelMessage] = [ModelRequest.user_text_prompt("hi")]
    loop_id = history.append(messages)
    other = sync_store.loops.start("mixed")
    from turnstore import Message

    sync_store.messages.append(Message.user("typed elsewhere"), loop_id=other.loop_id, turn_index=0, source='{"x":1}')
    assert loop_id != other.loop_id
    assert _json(history.load()) == _json(messages)


def test_a_failed_append_writes_nothing(sync_store: Store) -> None:
    history = TurnstoreHistory("atomic", sync_store)
    history.append([ModelRequest.user_text_prompt("hi")])
    bad = ModelResponse(parts=[TextPart("x")], model_name="m\x00")
    with pytest.raises(InvalidMessage, match="NUL"):
        history.append([ModelRequest.user_text_prompt("again"), bad])
    assert len(history.load()) == 1
    assert len(sync_store.loops.list("atomic")) == 1


def test_example_app_runs_offline_and_prints_usage(tmp_path: Path) -> None:
    done = run_example("pydantic_ai_app.py", f"sqlite:///{tmp_path / 'ex.db'}")
    assert done.returncode == 0, done.stderr
    assert "usage from turnstore: 4 requests, 560 input, 46 output tokens" in done.stdout


def test_the_docs_example_runs(tmp_path: Path) -> None:
    done = run_doc_example("integrations/pydantic-ai.md", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "requests=" in done.stdout


def test_a_tool_return_appended_after_its_call_keeps_the_tools_name(sync_store: Store) -> None:
    history = TurnstoreHistory("named", sync_store)
    history.append(
        [
            ModelRequest.user_text_prompt("weather?"),
            ModelResponse(parts=[ToolCallPart("weather", {}, tool_call_id="c1")]),
        ]
    )
    loop_id = history.append([ModelRequest(parts=[ToolReturnPart("weather", "sunny", tool_call_id="c1")])])
    (row,) = sync_store.messages.records(loop_id=loop_id)
    assert isinstance(row.message, ToolResultMessage)
    assert (row.message.tool_call_id, row.message.tool_name) == ("c1", "weather")


def test_built_with_the_wrong_arguments_it_says_which_in_one_line(sync_store: Store, tmp_path: Path) -> None:
    from turnstore import InvalidArgument

    with pytest.raises(InvalidArgument, match="^session_id: must be a string, got int"):
        TurnstoreHistory(42, sync_store)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument, match="^store: must be a turnstore Store or AsyncStore, got str"):
        TurnstoreHistory("chat", str(tmp_path / "a.db"))  # type: ignore[call-overload]
    with pytest.raises(InvalidArgument, match="^url: give a store or a url, not both"):
        TurnstoreHistory("chat", sync_store, url=str(tmp_path / "b.db"))


def test_the_old_argument_order_still_works_with_a_deprecation_warning(sync_store: Store) -> None:
    with pytest.warns(
        DeprecationWarning,
        match=r"^TurnstoreHistory\(store, session_id\) is deprecated.*"
        r"TurnstoreHistory\(session_id, store\)",
    ):
        history = TurnstoreHistory(sync_store, "old")
    assert (history.session_id, history.store) == ("old", sync_store)
    result = Agent(TestModel()).run_sync("hi")
    history.save(result)
    assert _json(history.load()) == _json(result.new_messages())
    assert _json(TurnstoreHistory(store=sync_store, session_id="old").load()) == _json(result.new_messages())


@pytest.mark.parametrize("kind", ["AsyncStore", "Store"])
def test_async_methods_take_either_store(tmp_path: Path, kind: str) -> None:
    import asyncio

    from turnstore import AsyncStore, InvalidArgument

    async def scenario() -> None:
        store: Any = await AsyncStore.open(tmp_path / "a.db") if kind == "AsyncStore" else Store(tmp_path / "a.db")
        try:
            history = TurnstoreHistory("chat", store)
            agent = _agent(FunctionModel(_scripted))
            first = await agent.run("What is 2 + 3?", message_history=await history.aload())
            await history.asave(first)
            second = await agent.run("Again", message_history=await history.aload())
            await history.aappend(second.new_messages(), usage=_run_usage(second))
            assert _json(await history.aload()) == _json(second.all_messages())
            if kind == "AsyncStore":
                with pytest.raises(InvalidArgument, match="^store: .*AsyncStore, .*await history.aload"):
                    history.load()
                with pytest.raises(InvalidArgument, match="await history.aappend"):
                    history.save(first)
        finally:
            await store.close() if kind == "AsyncStore" else store.close()

    asyncio.run(scenario())


def test_url_opens_and_closes_its_own_store(tmp_path: Path) -> None:
    url = str(tmp_path / "own.db")
    history = TurnstoreHistory("u", url=url)
    result = Agent(TestModel()).run_sync("hi")
    history.save(result)
    history.close()
    again = TurnstoreHistory("u", url=url)
    assert _json(again.load()) == _json(result.new_messages())
    again.close()


def test_a_loop_id_another_session_holds_is_never_written_to(sync_store: Store) -> None:
    history = TurnstoreHistory("chat", sync_store)
    first = history.save(Agent(TestModel()).run_sync("one"))
    taken = first.rsplit(".", 1)[0] + ".2"  # the id the next save would otherwise be given
    sync_store.sessions.create("other")
    sync_store.loops.start("other", loop_id=taken, continuation_kind="initial")
    second = history.save(Agent(TestModel()).run_sync("two"))
    assert second != taken and sync_store.loops.get(second).session_id == "chat"
    assert list(sync_store.messages.records(loop_id=taken)) == []
    assert len(history.load()) == 4


def test_images_and_files_in_a_prompt_are_media_blocks_not_text(sync_store: Store) -> None:
    from pydantic_ai.messages import BinaryContent, DocumentUrl, UserPromptPart

    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 200
    history = TurnstoreHistory("media", sync_store)
    messages: list[ModelMessage] = [
        ModelRequest(
            parts=[
                UserPromptPart(
                    ["what is this?", BinaryContent(png, media_type="image/png"), DocumentUrl("https://x.test/a.pdf")]
                )
            ]
        ),
        ModelResponse(parts=[TextPart("a picture")], usage=RequestUsage(input_tokens=5, output_tokens=2)),
    ]
    history.append(messages)
    prompt = next(iter(sync_store.messages.records("media"))).message
    blocks = [block.model_dump(mode="json") for block in prompt.content]  # type: ignore[union-attr]
    assert blocks[0] == {"type": "text", "text": "what is this?"}
    assert blocks[1] == {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"}
    assert blocks[2] == {"type": "file", "url": "https://x.test/a.pdf", "mimeType": "application/pdf"}
    assert sync_store.messages.search(base64.b64encode(png).decode()[:40]) == []  # base64 is never indexed
    assert _json(history.load()) == _json(messages)
