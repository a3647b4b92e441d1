"""LangChain chat history in turnstore: lossless for every message kind, usage counted, RunnableWithMessageHistory."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import run_doc_example, run_example

pytest.importorskip("langchain_core")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory

from turnstore import Store
from turnstore.integrations.langchain import TurnstoreChatMessageHistory
from turnstore.models import AssistantMessage, ExtensionMessage, ToolResultMessage
from turnstore.usage import DEFAULT_PRICES


def _every_kind() -> list[BaseMessage]:
    usage = {
        "input_tokens": 30,
        "output_tokens": 9,
        "total_tokens": 39,
        "input_token_details": {"cache_read": 4, "cache_creation": 2},
        "output_token_details": {"reasoning": 3},
    }
    return [
        SystemMessage("Be terse.", id="s1"),
        HumanMessage("Weather in Paris? ☂", additional_kwargs={"x": 1}, name="ann"),
        AIMessage(
            content=[{"type": "text", "text": "Checking."}],
            tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "call-1", "type": "tool_call"}],
            invalid_tool_calls=[
                {"name": "w", "args": "{bad", "id": "call-2", "error": "bad json", "type": "invalid_tool_call"}
            ],
            usage_metadata=usage,
            response_metadata={"model_name": "gpt-test", "finish_reason": "tool_calls"},
            id="run-1",
        ),
        ToolMessage("18C", tool_call_id="call-1", name="weather", artifact={"raw": [1, 2]}),
        ToolMessage("boom", tool_call_id="call-2", status="error"),
        AIMessage("It is 18C.", usage_metadata={"input_tokens": 50, "output_tokens": 5, "total_tokens": 55}),
        FunctionMessage(content="42", name="answer"),
        ChatMessage(content="note", role="critic"),
        AIMessageChunk(content="chunk \x00 text", id="c1"),
        HumanMessage(""),
    ]


def test_every_message_kind_round_trips(sync_store: Store) -> None:
    history = TurnstoreChatMessageHistory("all", sync_store)
    assert history.messages == []
    sent = _every_kind()
    history.add_messages(sent)
    got = history.messages
    assert json.dumps(messages_to_dict(got)) == json.dumps(messages_to_dict(sent))
    assert [type(m) for m in got] == [type(m) for m in sent]
    rows = [r.message for r in sync_store.messages.records("all")]
    assert [r.role for r in rows] == [
        "system", "user", "assistant", "toolResult", "toolResult", "assistant",
        "extension", "extension", "assistant", "user",
    ]  # fmt: skip
    call = rows[2]
    assert isinstance(call, AssistantMessage) and call.model == "gpt-test"
    assert call.tool_calls()[0].id == "call-1"
    failed = rows[4]
    assert isinstance(failed, ToolResultMessage) and failed.is_error
    assert isinstance(rows[6], ExtensionMessage) and rows[6].kind == "langchain.function"
    turns = [r.turn_index for r in sync_store.messages.records("all")]
    assert turns == [0, 1, 1, 1, 1, 2, None, None, 2, 3]


def test_usage_metadata_counts_in_turnstore_usage(sync_store: Store) -> None:
    history = TurnstoreChatMessageHistory("usage", sync_store)
    history.add_messages(_every_kind())
    totals = sync_store.usage.session("usage")
    # LangChain's input_tokens (30 + 50) include the 4 cache reads and 2 cache writes, which are priced apart.
    assert (totals.input, totals.output, totals.total_tokens) == (74, 14, 94)
    assert (totals.cache_read, totals.cache_write, totals.reasoning) == (4, 2, 3)
    assert totals.requests == 2  # the chunk carries no usage: unknown, not zeros


def test_cached_tokens_are_priced_once(sync_store: Store) -> None:
    usage = {
        "input_tokens": 1000,
        "output_tokens": 10,
        "total_tokens": 1010,
        "input_token_details": {"cache_read": 800},
    }
    history = TurnstoreChatMessageHistory("cached", sync_store)
    history.add_messages(
        [HumanMessage("q"), AIMessage("a", usage_metadata=usage, response_metadata={"model_name": "gpt-5"})]
    )
    totals = sync_store.usage.session("cached")
    assert (totals.input, totals.cache_read) == (200, 800)
    assert totals.cache_hit_rate == pytest.approx(0.8)
    price = DEFAULT_PRICES.for_model("gpt-5")
    assert price is not None
    assert totals.cost == pytest.approx(price.price(200, 10, 800, 0))


def test_clear_and_add_again(sync_store: Store) -> None:
    history = TurnstoreChatMessageHistory("c", sync_store)
    history.add_user_message("one")
    history.add_ai_message("two")
    assert [m.content for m in history.messages] == ["one", "two"]
    history.clear()
    assert history.messages == []
    history.clear()  # nothing to clear: no error
    history.add_user_message("three")
    assert [m.content for m in history.messages] == ["three"]


def test_async_methods(sync_store: Store) -> None:
    history = TurnstoreChatMessageHistory("a", sync_store)

    async def go() -> list[BaseMessage]:
        await history.aadd_messages([HumanMessage("hi"), AIMessage("hello")])
        got = await history.aget_messages()
        await history.aclear()
        assert await history.aget_messages() == []
        return got

    assert [m.content for m in asyncio.run(go())] == ["hi", "hello"]


def test_url_opens_and_closes_its_own_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'own.db'}"
    history = TurnstoreChatMessageHistory("u", url=url)
    history.add_user_message("kept")
    history.close()
    again = TurnstoreChatMessageHistory("u", url=url)
    assert [m.content for m in again.messages] == ["kept"]
    again.close()
    with pytest.raises(ValueError, match="not both"):
        TurnstoreChatMessageHistory("u", Store(url), url=url)


def test_runnable_with_message_history(sync_store: Store) -> None:
    replies = iter(
        [
            AIMessage("Hello Ann.", usage_metadata={"input_tokens": 12, "output_tokens": 3, "total_tokens": 15}),
            AIMessage("Your name is Ann.", usage_metadata={"input_tokens": 20, "output_tokens": 5, "total_tokens": 25}),
        ]
    )
    model = GenericFakeChatModel(messages=replies)
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    seen: list[int] = []

    def history_for(session_id: str) -> TurnstoreChatMessageHistory:
        history = TurnstoreChatMessageHistory(session_id, sync_store)
        seen.append(len(history.messages))
        return history

    chain = RunnableWithMessageHistory(
        prompt | model, history_for, input_messages_key="question", history_messages_key="history"
    )
    config = {"configurable": {"session_id": "chat"}}
    chain.invoke({"question": "I am Ann."}, config=config)  # type: ignore[arg-type]
    answer = chain.invoke({"question": "Who am I?"}, config=config)  # type: ignore[arg-type]
    assert answer.content == "Your name is Ann."
    stored = TurnstoreChatMessageHistory("chat", sync_store).messages
    assert [m.content for m in stored] == ["I am Ann.", "Hello Ann.", "Who am I?", "Your name is Ann."]
    totals = sync_store.usage.session("chat")
    assert (totals.input, totals.output, totals.requests) == (32, 8, 2)


def test_example_app_runs_offline_and_prints_usage(tmp_path: Path) -> None:
    done = run_example("langchain_app.py", f"sqlite:///{tmp_path / 'ex.db'}")
    assert done.returncode == 0, done.stderr
    assert "usage from turnstore: 2 requests, 33 input, 7 output tokens" in done.stdout


def test_the_docs_example_runs(tmp_path: Path) -> None:
    done = run_doc_example("integrations/langchain.md", tmp_path)
    assert done.returncode == 0, done.stderr
    assert "requests=" in done.stdout


def test_a_tool_message_is_named_after_its_call_stored_earlier_or_in_the_same_add(sync_store: Store) -> None:
    history = TurnstoreChatMessageHistory("named", sync_store)
    asks = AIMessage(
        "", tool_calls=[{"name": "weather", "args": {}, "id": "c1"}, {"name": "clock", "args": {}, "id": "c2"}]
    )
    history.add_messages([HumanMessage("Weather and time?"), asks, ToolMessage("sunny", tool_call_id="c1")])
    history.add_messages([ToolMessage("noon", tool_call_id="c2"), ToolMessage("?", tool_call_id="unknown")])
    history.add_messages([ToolMessage("mine", tool_call_id="c1", name="own")])
    results = [
        row.message for row in sync_store.messages.records("named") if isinstance(row.message, ToolResultMessage)
    ]
    assert [(m.tool_call_id, m.tool_name) for m in results] == [
        ("c1", "weather"),
        ("c2", "clock"),
        ("unknown", ""),
        ("c1", "own"),  # a name the message gives is kept
    ]


def test_built_with_the_wrong_arguments_it_says_which_in_one_line(sync_store: Store, tmp_path: Path) -> None:
    from turnstore import InvalidArgument

    with pytest.raises(InvalidArgument, match="^session_id: must be a string, got Store"):
        TurnstoreChatMessageHistory(sync_store, "chat")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^store: must be a turnstore Store or AsyncStore, got str"):
        TurnstoreChatMessageHistory("chat", str(tmp_path / "a.db"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^url: give a store or a url, not both"):
        TurnstoreChatMessageHistory("chat", sync_store, url=str(tmp_path / "b.db"))


def test_an_async_store_serves_the_async_methods_and_refuses_the_sync_ones(tmp_path: Path) -> None:
    from turnstore import AsyncStore, InvalidArgument

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "a.db") as store:
            history = TurnstoreChatMessageHistory("a", store)
            await history.aadd_messages([HumanMessage("hi"), AIMessage("hello")])
            assert [m.content for m in await history.aget_messages()] == ["hi", "hello"]
            with pytest.raises(InvalidArgument, match="^store: .*AsyncStore, .*await history.aget_messages"):
                history.messages
            with pytest.raises(InvalidArgument, match="await history.aadd_messages"):
                history.add_user_message("sync")
            await history.aclear()
            assert await history.aget_messages() == []

    asyncio.run(scenario())


def test_a_loop_id_another_session_holds_is_never_written_to(sync_store: Store) -> None:
    history = TurnstoreChatMessageHistory("chat", sync_store)
    history.add_messages([HumanMessage("one"), AIMessage("1")])
    (first,) = sync_store.loops.list("chat")
    taken = first.loop_id.rsplit(".", 1)[0] + ".2"  # the id the next add would otherwise be given
    sync_store.sessions.create("other")
    sync_store.loops.start("other", loop_id=taken, continuation_kind="initial")
    history.add_messages([HumanMessage("two"), AIMessage("2")])
    assert [loop.loop_id for loop in sync_store.loops.list("chat")][-1] != taken
    assert list(sync_store.messages.records(loop_id=taken)) == []
    assert [m.content for m in history.messages] == ["one", "1", "two", "2"]


def test_a_lone_surrogate_in_tool_output_is_kept_for_langchain_and_replaced_in_the_row(sync_store: Store) -> None:
    name = b"report-\xff.txt".decode("utf-8", "surrogateescape")
    history = TurnstoreChatMessageHistory("s", sync_store)
    added = [
        HumanMessage("list files"),
        AIMessage("", tool_calls=[{"id": "c1", "name": "ls", "args": {"dir": name}}]),
        ToolMessage(name, tool_call_id="c1"),
    ]
    history.add_messages(added)
    assert [m.model_dump() for m in history.messages] == [m.model_dump() for m in added]
    stored = [r.message for r in sync_store.messages.records("s")]
    assert stored[-1].text() == "report-\ufffd.txt"
    assert stored[1].content[0].arguments == {"dir": "report-\ufffd.txt"}  # type: ignore[union-attr]


def test_image_blocks_are_media_blocks_not_text(sync_store: Store) -> None:
    import base64

    data = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 200).decode()
    history = TurnstoreChatMessageHistory("media", sync_store)
    added = [
        HumanMessage(
            content=[
                {"type": "text", "text": "what are these?"},
                {"type": "image", "source_type": "base64", "data": data, "mime_type": "image/png"},
                {"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{data}"}},
                {"type": "image", "url": "https://x.test/cat.png"},
            ]
        )
    ]
    history.add_messages(added)
    prompt = next(iter(sync_store.messages.records("media"))).message
    blocks = [block.model_dump(mode="json") for block in prompt.content]  # type: ignore[union-attr]
    assert blocks == [
        {"type": "text", "text": "what are these?"},
        {"type": "image", "data": data, "mimeType": "image/png"},
        {"type": "image", "data": data, "mimeType": "image/jpeg"},
        {"type": "file", "url": "https://x.test/cat.png"},
    ]
    assert sync_store.messages.search(data[:40]) == []
    assert [m.model_dump() for m in history.messages] == [m.model_dump() for m in added]


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"type": "image_url", "image_url": "data:image/png;base64,not base64!!"},
            {"type": "file", "mimeType": "image/png"},
        ),
        ({"type": "image", "base64": "", "mime_type": "image/png"}, {"type": "file", "mimeType": "image/png"}),
        (
            {"type": "image", "base64": "iVBORw0KGgoAAAA="},
            {"type": "image", "data": "iVBORw0KGgoAAAA=", "mimeType": "image/png"},
        ),
        (
            {"type": "image", "base64": "aGVsbG8=", "mime_type": "IMAGE/PNG"},
            {"type": "image", "data": "aGVsbG8=", "mimeType": "image/png"},
        ),
    ],
)
def test_an_image_a_provider_would_refuse_is_not_sent_as_one(
    sync_store: Store, block: dict[str, Any], expected: dict[str, Any]
) -> None:
    history = TurnstoreChatMessageHistory("odd", sync_store)
    added = [HumanMessage(content=[block])]
    history.add_messages(added)
    prompt = next(iter(sync_store.messages.records("odd"))).message
    assert [b.model_dump(mode="json") for b in prompt.content] == [expected]  # type: ignore[union-attr]
    assert [m.model_dump() for m in history.messages] == [m.model_dump() for m in added]  # kept as given
