"""TurnstoreSession: the OpenAI Agents SDK session protocol kept in turnstore.

The tests taking ``make`` run against ``TurnstoreSession`` (on SQLite and on
PostgreSQL) and the SDK's own ``SQLiteSession`` side by side and expect the
same results. They port the behaviours of the SDK's session tests
(``tests/memory/test_session.py`` in openai/openai-agents-python), test by test:

* ``test_session_memory_basic_functionality_parametrized`` and
  ``..._with_explicit_instance_parametrized`` (``run``, ``run_sync``,
  ``run_streamed``): ``test_a_runner_gets_the_history_of_earlier_runs``.
* ``test_session_memory_disabled_parametrized``: not ported; it runs without
  a session, so there is nothing of a session to compare.
* ``test_session_memory_different_sessions_parametrized``:
  ``test_a_runner_keeps_sessions_apart``.
* ``test_sqlite_session_memory_direct``: ``test_items_come_back_in_order``,
  ``test_clear_empties_the_session_which_takes_items_again``.
* ``test_sqlite_session_close_closes_worker_thread_connections``: about
  ``SQLiteSession``'s per-thread sqlite3 connections; turnstore's counterpart
  is the store a session opened itself, closed by ``close()``:
  ``test_a_session_opens_and_closes_its_own_store_from_a_url``.
* ``test_sqlite_session_memory_pop_item``: ``test_pop_removes_and_returns_the_latest``.
* ``test_session_memory_pop_different_sessions``: ``test_pop_takes_from_its_own_session_only``.
* ``test_sqlite_session_get_items_with_limit``: ``test_limit_returns_the_latest_in_order``.
* ``test_session_memory_appends_list_input_by_default``:
  ``test_a_runner_appends_list_input_to_the_history``.
* ``test_session_callback_prepared_input``:
  ``test_a_session_input_callback_prepares_the_model_input``.
* ``test_sqlite_session_unicode_content``: ``test_unicode_and_special_characters_survive``.
* ``test_sqlite_session_special_characters_and_sql_injection``:
  ``test_special_characters_and_sql_are_stored_as_text``.
* ``test_sqlite_session_concurrent_access`` (threads, each with its own event
  loop): ``test_adds_from_threads_with_their_own_event_loops_keep_every_item``;
  concurrent tasks on one loop: ``test_concurrent_adds_keep_every_item``.
* ``test_sqlite_session_file_lock_is_shared_across_instances``: the lock is
  ``SQLiteSession``'s own; its behaviour (two sessions on one database
  writing at once, each keeping its own items) is
  ``test_two_sessions_on_one_database_write_at_once_each_to_its_own``.
* ``test_session_add_items_exception_propagates_in_streamed``: the SDK
  replaces ``add_items`` by a failing function; here the session fails for a
  real reason (what it writes to is closed):
  ``test_a_failing_session_ends_a_streamed_run_with_its_error``.
* ``test_session_settings_default``: ``test_settings_default_to_no_limit``.
* ``test_session_settings_constructor``:
  ``test_settings_are_taken_from_the_constructor_as_object_or_dict``.
* ``test_get_items_uses_session_settings_limit`` and
  ``test_get_items_explicit_limit_overrides_session_settings``:
  ``test_settings_limit_is_the_default_and_an_explicit_limit_wins``.
* ``test_session_settings_resolve``: not ported; it tests ``SessionSettings``
  itself, not a session.
* ``test_runner_with_session_settings_override``:
  ``test_run_config_session_settings_override_the_sessions``.

Large items (``test_large_items_survive``) and an empty add are tested here
beyond the SDK's file.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import json
import runpy
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, ModelResponse, RunConfig, Runner, SQLiteSession, Usage
from agents.memory import SessionABC, SessionSettings
from agents.models.interface import Model
from helpers import run_doc_example
from openai.types.responses import Response, ResponseCompletedEvent, ResponseOutputMessage, ResponseOutputText

from turnstore import Store
from turnstore.aio import AsyncStore
from turnstore.errors import AlreadyExists, InvalidArgument, StoreClosed
from turnstore.integrations.openai_agents import REQUEST_USAGE, TurnstoreSession

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures" / "openai_agents"
EXAMPLE = ROOT / "examples" / "openai_agents_app.py"

Factory = Callable[..., Any]


def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(coroutine)


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {
        "id": f"msg_{abs(hash(text)) % 10_000}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


@pytest.fixture(params=["turnstore", "turnstore-postgresql", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """``make(session_id, settings=None)`` -> an async context yielding a session of the parametrized kind
    (``turnstore-postgresql``: on the test PostgreSQL server, skipped when it is not up)."""
    kind = request.param
    url = str(tmp_path / "turnstore.db")
    if kind == "turnstore-postgresql":
        database = request.getfixturevalue("postgres")
        database.empty()
        url = database.url

    class Opened:
        def __init__(self, session_id: str, settings: Any = None) -> None:
            self.session_id, self.settings = session_id, settings

        async def __aenter__(self) -> Any:
            if kind == "sqlite":
                self.session = SQLiteSession(self.session_id, tmp_path / "sdk.db", session_settings=self.settings)
            else:
                self.store = await AsyncStore.open(url)
                self.session = TurnstoreSession(self.session_id, self.store, session_settings=self.settings)
            return self.session

        async def __aexit__(self, *exc: object) -> None:
            if kind == "sqlite":
                self.session.close()
            else:
                await self.store.close()

    return Opened


# --- the session protocol, side by side ------------------------------------------------------


def test_is_an_sdk_session(tmp_path: Path) -> None:
    assert isinstance(TurnstoreSession("s", url=str(tmp_path / "t.db")), SessionABC)


def test_items_come_back_in_order(make: Factory) -> None:
    async def scenario() -> None:
        async with make("order") as session:
            items = [user("Hello"), assistant("Hi there!"), user("How are you?")]
            await session.add_items(items[:2])
            await session.add_items(items[2:])
            assert await session.get_items() == items
            await session.add_items([assistant("Fine.")])
            assert [item["role"] for item in await session.get_items()] == [
                "user",
                "assistant",
                "user",
                "assistant",
            ]

    run(scenario())


def test_limit_returns_the_latest_in_order(make: Factory) -> None:
    async def scenario() -> None:
        async with make("limit") as session:
            items = [user(f"message {n}") for n in range(5)]
            await session.add_items(items)
            assert await session.get_items(limit=2) == items[-2:]
            assert await session.get_items(limit=10) == items
            assert await session.get_items(limit=0) == []
            assert await session.get_items(limit=5) == items
            assert await session.get_items(limit=-1) == items

    run(scenario())


def test_settings_limit_is_the_default_and_an_explicit_limit_wins(
    make: Factory,
) -> None:
    async def scenario() -> None:
        async with make("settings", SessionSettings(limit=3)) as session:
            items = [user(f"message {n}") for n in range(6)]
            await session.add_items(items)
            assert await session.get_items() == items[-3:]
            assert await session.get_items(limit=5) == items[-5:]

    run(scenario())


def test_pop_removes_and_returns_the_latest(make: Factory) -> None:
    async def scenario() -> None:
        async with make("pop") as session:
            assert await session.pop_item() is None
            items = [user("one"), assistant("two"), user("three")]
            await session.add_items(items)
            assert await session.pop_item() == items[2]
            assert await session.get_items() == items[:2]
            assert await session.pop_item() == items[1]
            assert await session.pop_item() == items[0]
            assert await session.pop_item() is None
            await session.add_items([user("again")])
            assert await session.get_items() == [user("again")]

    run(scenario())


def test_clear_empties_the_session_which_takes_items_again(make: Factory) -> None:
    async def scenario() -> None:
        async with make("clear") as session:
            await session.clear_session()  # nothing to clear
            await session.add_items([user("one"), assistant("two")])
            await session.clear_session()
            assert await session.get_items() == []
            await session.add_items([user("three")])
            assert await session.get_items() == [user("three")]

    run(scenario())


def test_sessions_are_isolated(make: Factory) -> None:
    async def scenario() -> None:
        async with make("first") as first, make("second") as second:
            await first.add_items([user("for the first")])
            await second.add_items([user("for the second"), assistant("reply")])
            assert await first.get_items() == [user("for the first")]
            assert len(await second.get_items()) == 2
            await first.clear_session()
            assert len(await second.get_items()) == 2

    run(scenario())


def test_unicode_and_special_characters_survive(make: Factory) -> None:
    async def scenario() -> None:
        async with make("unicode") as session:
            items = [
                user("こんにちは 😊👍 Привет"),
                assistant("quotes ' \" \\ and <html> & \n\t; DROP TABLE x; --"),
            ]
            await session.add_items(items)
            assert await session.get_items() == items

    run(scenario())


def test_large_items_survive(make: Factory) -> None:
    async def scenario() -> None:
        async with make("large") as session:
            items = [user("x" * 200_000), assistant("y" * 100_000)]
            await session.add_items(items)
            assert await session.get_items() == items

    run(scenario())


def test_concurrent_adds_keep_every_item(make: Factory) -> None:
    async def scenario() -> None:
        async with make("concurrent") as session:
            await asyncio.gather(*(session.add_items([user(f"m{n}"), assistant(f"r{n}")]) for n in range(10)))
            got = await session.get_items()
            assert len(got) == 20
            for n in range(10):  # each call's items stay together, in order
                position = got.index(user(f"m{n}"))
                assert got[position + 1] == assistant(f"r{n}")

    run(scenario())


def test_empty_add_changes_nothing(make: Factory) -> None:
    async def scenario() -> None:
        async with make("empty") as session:
            await session.add_items([])
            assert await session.get_items() == []

    run(scenario())


def test_pop_takes_from_its_own_session_only(make: Factory) -> None:
    async def scenario() -> None:
        async with make("session_1") as first, make("session_2") as second:
            await first.add_items([user("Session 1 message")])
            await second.add_items([user("Session 2 message 1"), user("Session 2 message 2")])
            assert await second.pop_item() == user("Session 2 message 2")
            assert await first.get_items() == [user("Session 1 message")]
            assert await second.get_items() == [user("Session 2 message 1")]

    run(scenario())


def test_special_characters_and_sql_are_stored_as_text(make: Factory) -> None:
    texts = [
        "O'Reilly",
        "DROP TABLE sessions;",
        '"SELECT * FROM users WHERE name = "admin";"',
        "Robert'); DROP TABLE students;--",
        "Normal message",
    ]

    async def scenario() -> None:
        async with make("special") as session:
            items = [
                user(text) if n % 2 == 0 else {"role": "assistant", "content": text} for n, text in enumerate(texts)
            ]
            await session.add_items(items)
            assert await session.get_items() == items

    run(scenario())


def test_adds_from_threads_with_their_own_event_loops_keep_every_item(make: Factory) -> None:
    items = [user(f"Message {n}") for n in range(10)]

    async def scenario() -> None:
        async with make("threads") as session:
            with concurrent.futures.ThreadPoolExecutor(max_workers=5) as executor:
                list(executor.map(lambda item: asyncio.run(session.add_items([item])), items))
            got = await session.get_items()
            assert sorted(item["content"] for item in got) == sorted(item["content"] for item in items)

    run(scenario())


def test_two_sessions_on_one_database_write_at_once_each_to_its_own(make: Factory) -> None:
    async def scenario() -> None:
        async with make("session_1") as first, make("session_2") as second:
            await asyncio.gather(first.add_items([user("session_1")]), second.add_items([user("session_2")]))
            assert await first.get_items() == [user("session_1")]
            assert await second.get_items() == [user("session_2")]

    run(scenario())


def test_settings_default_to_no_limit(make: Factory) -> None:
    async def scenario() -> None:
        async with make("default-settings") as session:
            assert isinstance(session.session_settings, SessionSettings)
            assert session.session_settings.limit is None

    run(scenario())


@pytest.mark.parametrize("settings", [SessionSettings(limit=5), {"limit": 5}])
def test_settings_are_taken_from_the_constructor_as_object_or_dict(make: Factory, settings: Any) -> None:
    async def scenario() -> None:
        async with make("constructor-settings", settings) as session:
            assert session.session_settings == SessionSettings(limit=5)
            await session.add_items([user(f"Message {n}") for n in range(7)])
            assert [item["content"] for item in await session.get_items()] == [f"Message {n}" for n in range(2, 7)]

    run(scenario())


# --- under the Runner, side by side (the SDK test file's runner tests) -------------------------


class RecordingModel(Model):
    """A model that answers with queued texts and records the input of its latest call; streams too."""

    def __init__(self) -> None:
        self.replies: list[str] = []
        self.last_input: list[Any] = []

    def reply(self, text: str) -> None:
        self.replies.append(text)

    def _answer(self, input: str | list[Any]) -> list[Any]:
        self.last_input = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        text = ResponseOutputText(type="output_text", text=self.replies.pop(0), annotations=[])
        return [ResponseOutputMessage(type="message", id="msg", role="assistant", status="completed", content=[text])]

    async def get_response(self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any) -> ModelResponse:
        return ModelResponse(output=self._answer(input), usage=Usage(), response_id=None)

    async def stream_response(  # type: ignore[override]
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        response = Response(
            id="resp",
            created_at=0,
            model="recording",
            object="response",
            output=self._answer(input),
            tool_choice="auto",
            tools=[],
            parallel_tool_calls=False,
        )
        yield ResponseCompletedEvent(type="response.completed", response=response, sequence_number=0)


def run_sync_in_thread(agent: Agent[Any], given: Any, **kwargs: Any) -> Any:
    """``Runner.run_sync`` needs a thread without a running event loop."""
    return Runner.run_sync(agent, given, **kwargs)


async def run_agent(method: str, agent: Agent[Any], given: Any, **kwargs: Any) -> Any:
    """One run by ``method``: ``run``, ``run_sync`` (on a thread) or ``run_streamed`` (consumed to its end)."""
    kwargs.setdefault("run_config", RunConfig(tracing_disabled=True))
    if method == "run":
        return await Runner.run(agent, given, **kwargs)
    if method == "run_sync":
        return await asyncio.to_thread(run_sync_in_thread, agent, given, **kwargs)
    result = Runner.run_streamed(agent, given, **kwargs)
    async for _event in result.stream_events():
        pass
    return result


async def ask(method: str, model: RecordingModel, given: Any, answer: str, session: Any, **kwargs: Any) -> Any:
    """One run of an agent on ``model``, which answers ``answer``."""
    model.reply(answer)
    return await run_agent(method, Agent(name="test", model=model), given, session=session, **kwargs)


RUNNER_METHODS = pytest.mark.parametrize("method", ["run", "run_sync", "run_streamed"])


@RUNNER_METHODS
def test_a_runner_gets_the_history_of_earlier_runs(make: Factory, method: str) -> None:
    async def scenario() -> None:
        model = RecordingModel()
        async with make("runner") as session:
            first = await ask(method, model, "What city is the Golden Gate Bridge in?", "San Francisco", session)
            assert first.final_output == "San Francisco"
            second = await ask(method, model, "What state is it in?", "California", session)
            assert second.final_output == "California"
            assert [item.get("content") for item in model.last_input if item.get("role") == "user"] == [
                "What city is the Golden Gate Bridge in?",
                "What state is it in?",
            ]
            assert len(model.last_input) == 3  # question, answer, question
            assert len(await session.get_items()) == 4

    run(scenario())


@RUNNER_METHODS
def test_a_runner_keeps_sessions_apart(make: Factory, method: str) -> None:
    async def scenario() -> None:
        model = RecordingModel()
        async with make("session_1") as first, make("session_2") as second:
            await ask(method, model, "I like cats", "I like cats", first)
            await ask(method, model, "I like dogs", "I like dogs", second)
            third = await ask(method, model, "What did I say I like?", "Yes, you mentioned cats", first)
            assert third.final_output == "Yes, you mentioned cats"
            said = [item.get("content") for item in model.last_input if item.get("role") == "user"]
            assert said == ["I like cats", "What did I say I like?"]

    run(scenario())


@RUNNER_METHODS
def test_a_runner_appends_list_input_to_the_history(make: Factory, method: str) -> None:
    async def scenario() -> None:
        model = RecordingModel()
        async with make("list-input") as session:
            history = [user("Earlier message"), {"role": "assistant", "content": "Saved reply"}]
            await session.add_items(history)
            given = [user("Test message")]
            await ask(method, model, given, "This should run", session)
            assert model.last_input == history + given
            assert (await session.get_items())[:3] == history + given

    run(scenario())


@RUNNER_METHODS
def test_a_session_input_callback_prepares_the_model_input(make: Factory, method: str) -> None:
    def users_only(history: list[Any], new_input: list[Any]) -> list[Any]:
        return [item for item in history if item["role"] == "user"] + new_input

    async def scenario() -> None:
        model = RecordingModel()
        async with make("callback") as session:
            history = [user("Hello there."), {"role": "assistant", "content": "Hi, I'm here to assist you."}]
            await session.add_items(history)
            given = [user("What your name?")]
            config = RunConfig(tracing_disabled=True, session_input_callback=users_only)
            await ask(method, model, given, "I'm gpt-4o", session, run_config=config)
            assert model.last_input == [history[0], given[0]]

    run(scenario())


def test_run_config_session_settings_override_the_sessions(make: Factory) -> None:
    async def scenario() -> None:
        model = RecordingModel()
        async with make("override", SessionSettings(limit=100)) as session:
            await session.add_items([user(f"Turn {n}") for n in range(10)])
            config = RunConfig(tracing_disabled=True, session_settings=SessionSettings(limit=2))
            await ask("run", model, "New question", "Got it", session, run_config=config)
            assert model.last_input == [user("Turn 8"), user("Turn 9"), user("New question")]

    run(scenario())


def test_a_failing_session_ends_a_streamed_run_with_its_error(make: Factory) -> None:
    async def scenario() -> None:
        model = RecordingModel()
        model.reply("never reached")
        agent = Agent(name="test", model=model)
        async with make("failing") as session:
            await session.add_items([user("before")])
            await close_underneath(session)
            result = Runner.run_streamed(agent, "Hello", session=session, run_config=RunConfig(tracing_disabled=True))

            async def consume() -> None:
                async for _event in result.stream_events():
                    pass

            with pytest.raises((StoreClosed, RuntimeError), match="closed"):
                await asyncio.wait_for(consume(), timeout=30)

    run(scenario())


async def close_underneath(session: Any) -> None:
    """Close what a session writes to, the session object left in use: turnstore's store, the SDK's connections."""
    if isinstance(session, TurnstoreSession):
        await (await session.store()).close()
    else:
        session.close()


# --- turnstore's side ------------------------------------------------------------------------


def test_items_become_canonical_messages_in_turns(tmp_path: Path) -> None:
    items = [
        user("Weather in Paris?"),
        {
            "type": "function_call",
            "call_id": "c1",
            "name": "weather",
            "arguments": '{"city": "Paris"}',
            "id": "fc1",
        },
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        assistant("Sunny."),
    ]

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("trip", store)
            await session.add_items(items[:1])
            await session.add_items(items[1:])
            await session.add_items([user("And tomorrow?")])

    run(scenario())
    with Store(tmp_path / "t.db") as store:
        rows = list(store.messages.records("trip"))
    assert [row.message.role for row in rows] == [
        "user",
        "assistant",
        "toolResult",
        "assistant",
        "user",
    ]
    assert [row.turn_index for row in rows] == [0, 0, 0, 0, 1]
    assert rows[1].message.model_dump(mode="json")["content"][0]["arguments"] == {"city": "Paris"}
    assert rows[2].message.model_dump(mode="json")["toolName"] == "weather"
    assert [json.loads(row.source or "") for row in rows[:4]] == items


def test_a_tool_output_added_after_its_call_is_named_after_it(url: str) -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}", "id": "fc1"}
    other = {"type": "function_call", "call_id": "c2", "name": "clock", "arguments": "{}", "id": "fc2"}

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            session = TurnstoreSession("later", store)
            await session.add_items([user("Weather and time?"), call, other])
            await session.add_items([{"type": "function_call_output", "call_id": "c1", "output": "sunny"}])
            await session.add_items(
                [
                    {"type": "function_call_output", "call_id": "c2", "output": "noon"},
                    {"type": "function_call_output", "call_id": "unknown", "output": "?"},
                ]
            )
            results = [row.message async for row in store.messages.records("later")][3:]
            assert [(m.tool_call_id, m.tool_name) for m in results] == [  # type: ignore[union-attr]
                ("c1", "weather"),
                ("c2", "clock"),
                ("unknown", ""),
            ]

    run(scenario())


def test_items_that_are_not_messages_are_kept_as_extensions_in_order(
    tmp_path: Path,
) -> None:
    items = [
        user("search"),
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "think"}],
        },
        {
            "type": "web_search_call",
            "id": "ws_1",
            "status": "completed",
            "action": {"type": "search", "query": "q"},
        },
        {"type": "item_reference", "id": "msg_0"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "opaque"},
        assistant("found"),
    ]

    async def scenario() -> list[Any]:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("hosted", store)
            await session.add_items(items)
            return await session.get_items()

    assert run(scenario()) == items
    with Store(tmp_path / "t.db") as store:
        rows = list(store.messages.records("hosted"))
    described = [(row.message.role, getattr(row.message, "kind", None)) for row in rows]
    assert described == [
        ("user", None),
        ("assistant", None),
        ("extension", "web_search_call"),
        ("extension", "item_reference"),
        ("extension", "compaction"),
        ("assistant", None),
    ]


def test_a_malformed_item_is_kept_as_an_extension(tmp_path: Path) -> None:
    items = [
        {"type": "function_call", "name": "no call id"},
        {"type": "message", "role": "robot", "content": "?"},
    ]

    async def scenario() -> list[Any]:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("odd", store)
            await session.add_items(items)  # type: ignore[arg-type]
            return await session.get_items()

    assert run(scenario()) == items


def test_an_item_that_is_not_an_object_is_refused_and_nothing_written(
    tmp_path: Path,
) -> None:
    async def scenario() -> list[Any]:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("bad", store)
            with pytest.raises(InvalidArgument, match="item 1 is not a JSON object"):
                await session.add_items([user("fine"), "not an item"])  # type: ignore[list-item]
            return await session.get_items()

    assert run(scenario()) == []


def test_store_and_url_together_are_refused(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            with pytest.raises(InvalidArgument, match="not both"):
                TurnstoreSession("s", store, url=str(tmp_path / "other.db"))

    run(scenario())


def test_a_session_opens_and_closes_its_own_store_from_a_url(tmp_path: Path) -> None:
    async def scenario() -> None:
        session = TurnstoreSession("own", url=str(tmp_path / "own.db"))
        await asyncio.gather(session.add_items([user("hi")]), session.get_items())  # one store opened
        assert session._store is not None
        await session.close()
        again = TurnstoreSession("own", url=str(tmp_path / "own.db"))
        assert await again.get_items() == [user("hi")]
        await again.close()

    run(scenario())


def fixture_sessions() -> list[tuple[str, list[str]]]:
    """Every session of the SDK-written fixture databases: its items' ``message_data``, as the SDK stored them."""
    found = []
    for path in sorted(FIXTURES.glob("*.db")):
        with sqlite3.connect(path) as connection:
            ids = [row[0] for row in connection.execute("SELECT DISTINCT session_id FROM agent_messages")]
            for session_id in ids:
                texts = [
                    row[0]
                    for row in connection.execute(
                        "SELECT message_data FROM agent_messages WHERE session_id = ? ORDER BY id",
                        (session_id,),
                    )
                ]
                found.append((f"{path.stem}/{session_id}", texts))
    return found


def test_every_item_type_the_sdk_wrote_round_trips_byte_for_byte(
    tmp_path: Path,
) -> None:
    sessions = fixture_sessions()
    kinds = {json.loads(text).get("type", "message") for _, texts in sessions for text in texts}
    assert {"message", "reasoning", "function_call", "function_call_output"} <= kinds

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            for number, (_name, texts) in enumerate(sessions):
                session = TurnstoreSession(f"fixture-{number}", store)
                await session.add_items([json.loads(text) for text in texts])
                assert [json.dumps(item) for item in await session.get_items()] == texts

    run(scenario())
    with Store(tmp_path / "t.db") as store:
        for number, (_name, texts) in enumerate(sessions):
            assert [row.source for row in store.messages.records(f"fixture-{number}")] == texts


# --- under Runner.run, with usage ----------------------------------------------------------


def example() -> dict[str, Any]:
    return runpy.run_path(str(EXAMPLE))


def test_a_run_stores_its_history_and_its_usage_equals_the_sdks(tmp_path: Path) -> None:
    app = example()

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("run", store)
            agent = Agent(
                name="calc",
                model=app["ScriptedModel"](app["script"]()),
                tools=[app["add"]],
            )
            config = RunConfig(tracing_disabled=True)
            first = await Runner.run(agent, "What is 2 + 3?", session=session, run_config=config)
            await session.record_usage(first)
            second = await Runner.run(agent, "Again?", session=session, run_config=config)
            await session.record_usage(second)
            items = await session.get_items()
            assert [item.get("type", "message") for item in items] == [
                "message",
                "function_call",
                "function_call_output",
                "message",
            ] * 2
            assert items[0] == {"content": "What is 2 + 3?", "role": "user"}
            totals = await store.usage.session("run")
            sdk = [first.context_wrapper.usage, second.context_wrapper.usage]
            cached = sum(u.input_tokens_details.cached_tokens for u in sdk)
            written = sum(u.input_tokens_details.cache_write_tokens for u in sdk)
            assert totals.input + totals.cache_read + totals.cache_write == sum(u.input_tokens for u in sdk)
            assert (totals.cache_read, totals.cache_write) == (cached, written)
            assert totals.output == sum(u.output_tokens for u in sdk)
            assert totals.reasoning == sum(u.output_tokens_details.reasoning_tokens for u in sdk)
            assert totals.total_tokens == sum(u.total_tokens for u in sdk)
            assert totals.requests == sum(u.requests for u in sdk) == 4
            turns = sorted({row.turn_index async for row in store.messages.records(loop_id=session.loop_id)})
            assert turns == [0, 1]

    run(scenario())


def test_usage_without_request_entries_goes_on_the_run_loop(tmp_path: Path) -> None:
    from agents import Usage

    class Wrapper:
        usage = Usage(requests=3, input_tokens=30, output_tokens=9, total_tokens=39)

    class Result:
        context_wrapper = Wrapper()

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("runs", store)
            loop_id = await session.record_usage(Result())
            loop = await store.loops.get(loop_id)
            assert (loop.reported_usage.input, loop.reported_requests) == (30, 3)  # type: ignore[union-attr]
            totals = await store.usage.session("runs")
            assert (
                totals.input,
                totals.output,
                totals.total_tokens,
                totals.requests,
            ) == (30, 9, 39, 3)
            assert await session.get_items() == []

    run(scenario())


@pytest.mark.parametrize("how", ["argument", "agent's model name", "agent's model object"])
def test_recorded_usage_is_priced_as_the_runs_model(tmp_path: Path, how: str) -> None:
    from agents import Usage

    class Named:
        model = "gpt-4o"

    class Wrapper:
        usage = Usage(requests=2, input_tokens=1_000_000, output_tokens=0, total_tokens=1_000_000)

    class Agentish:
        model: Any = {"argument": None, "agent's model name": "gpt-4o", "agent's model object": Named()}[how]

    class Result:
        context_wrapper = Wrapper()
        last_agent = Agentish()

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("priced", store)
            await session.record_usage(Result(), **({"model": "gpt-4o"} if how == "argument" else {}))
            totals = await store.usage.session("priced")
            assert totals.input == 1_000_000 and totals.cost == pytest.approx(2.5)  # gpt-4o: $2.50 per M input
            assert [row.model for row in await store.usage.by_model()] == ["gpt-4o"]

    run(scenario())


def test_recorded_usage_of_an_unnamed_model_has_no_cost_and_model_must_be_a_string(tmp_path: Path) -> None:
    from agents import Usage

    class Wrapper:
        usage = Usage(requests=1, input_tokens=10, output_tokens=1, total_tokens=11)

    class Result:
        context_wrapper = Wrapper()

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("unpriced", store)
            await session.record_usage(Result())
            assert (await store.usage.session("unpriced")).cost is None
            with pytest.raises(InvalidArgument, match="^model: must be a model name"):
                await session.record_usage(Result(), model=4)  # type: ignore[arg-type]

    run(scenario())


def test_request_usage_is_kept_as_extension_messages(tmp_path: Path) -> None:
    app = example()

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("kinds", store)
            agent = Agent(
                name="calc",
                model=app["ScriptedModel"](app["script"]()),
                tools=[app["add"]],
            )
            # A run that kept its items elsewhere: its responses have no messages here to carry their usage.
            result = await Runner.run(agent, "2 + 3?", run_config=RunConfig(tracing_disabled=True))
            loop_id = await session.record_usage(result)
            assert loop_id != session.loop_id
            kept = [message async for message in store.messages.records(loop_id=loop_id)]
            assert [message.message.kind for message in kept] == [REQUEST_USAGE] * 2  # type: ignore[union-attr]
            assert kept[0].message.data["input_tokens"] == 101  # type: ignore[union-attr]

    run(scenario())


class NamedModel(Model):
    """A model that plays back canned responses with their usage, and names itself as
    ``OpenAIResponsesModel`` does (``model``); no network."""

    def __init__(self, name: str, responses: list[list[Any]], base: int) -> None:
        self.model = name
        self.responses = list(responses)
        self.base = base
        self.calls = 0
        self.usages: list[Usage] = []

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        from agents.usage import InputTokensDetails, OutputTokensDetails

        output = self.responses[self.calls % len(self.responses)]
        self.calls += 1
        n = self.base + self.calls
        usage = Usage(
            requests=1,
            input_tokens=1_000 * n,
            input_tokens_details=InputTokensDetails(cached_tokens=100 * n, cache_write_tokens=10 * n),
            output_tokens=50 * n,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=5 * n),
            total_tokens=1_050 * n,
        )
        self.usages.append(usage)
        return ModelResponse(output=output, usage=usage, response_id=f"resp_{n}")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("not streamed")


def sdk_tokens(usages: list[Any]) -> tuple[int, ...]:
    """What turnstore's totals of these SDK usages must read: input, cache read, cache write, output,
    reasoning, total tokens and requests."""
    cached = sum(u.input_tokens_details.cached_tokens for u in usages)
    written = sum(u.input_tokens_details.cache_write_tokens for u in usages)
    return (
        sum(u.input_tokens for u in usages) - cached - written,
        cached,
        written,
        sum(u.output_tokens for u in usages),
        sum(u.output_tokens_details.reasoning_tokens for u in usages),
        sum(u.total_tokens for u in usages),
        sum(u.requests for u in usages),
    )


def our_tokens(totals: Any) -> tuple[int, ...]:
    return (
        totals.input,
        totals.cache_read,
        totals.cache_write,
        totals.output,
        totals.reasoning,
        totals.total_tokens,
        totals.requests,
    )


def test_each_model_response_s_usage_is_recorded_on_its_turn_with_its_model(url: str) -> None:
    """Two model calls per turn (a tool call, then the answer, from different agents after a handoff),
    two turns: each response's usage lands on an assistant message of its turn with the model of the
    agent that ran it, and the session's usage is the SDK's, requests included."""
    app = example()
    call = app["script"]()[0][0]
    answer = ResponseOutputMessage(
        type="message",
        id="msg_answer",
        role="assistant",
        status="completed",
        content=[ResponseOutputText(type="output_text", text="5", annotations=[])],
    )
    from openai.types.responses import ResponseFunctionToolCall

    handoff = ResponseFunctionToolCall(
        type="function_call", call_id="call_h", name="transfer_to_finisher", arguments="{}"
    )
    from openai.types.responses import ResponseReasoningItem

    thought = ResponseReasoningItem(type="reasoning", id="rs_1", summary=[])
    finisher_model = NamedModel("o3", [[thought, answer]], base=100)
    finisher = Agent(name="finisher", model=finisher_model)
    first_model = NamedModel("gpt-4o", [[call], [handoff]], base=0)
    starter = Agent(name="starter", model=first_model, tools=[app["add"]], handoffs=[finisher])

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            session = TurnstoreSession("per-turn", store)
            config = RunConfig(tracing_disabled=True)
            results, recorded = [], []
            for prompt in ("What is 2 + 3?", "And again?"):
                result = await Runner.run(starter, prompt, session=session, run_config=config)
                assert len(result.raw_responses) == 3
                recorded.append(await session.record_usage(result))
                results.append(result)
            sdk = [result.context_wrapper.usage for result in results]

            for k, usage in enumerate(sdk):
                turn = await store.usage.turn(session.loop_id, k)
                assert turn.requests == 3 and our_tokens(turn) == sdk_tokens([usage])
            assert our_tokens(await store.usage.session("per-turn")) == sdk_tokens(sdk)
            assert recorded == [session.loop_id] * 2
            by_model = {row.model: row for row in await store.usage.by_model("per-turn")}
            assert sorted(by_model) == ["gpt-4o", "o3"]
            assert our_tokens(by_model["gpt-4o"]) == sdk_tokens(first_model.usages)
            assert our_tokens(by_model["o3"]) == sdk_tokens(finisher_model.usages)
            totals = await store.usage.session("per-turn")
            assert totals.cost is not None and totals.cost > 0
            assert [loop.loop_id for loop in await store.loops.list("per-turn")] == [session.loop_id]
            records = [record async for record in store.messages.records(loop_id=session.loop_id)]
            answers = [r.message_id for r in records if r.message.role == "assistant" and r.message.text() == "5"]  # type: ignore[union-attr]
            assert await store.usage.unknown(session.loop_id) == answers  # the call's usage is on its reasoning

            replies = [
                record.message
                async for record in store.messages.records(loop_id=session.loop_id)
                if record.message.role == "assistant"
            ]
            assert [reply.model for reply in replies] == ["gpt-4o", "gpt-4o", "o3", "o3"] * 2  # type: ignore[union-attr]
            first_usage = replies[0].usage  # type: ignore[union-attr]
            assert (first_usage.input, first_usage.total_tokens) == (1_000 - 110, 1_050)
            items = await session.get_items()
            assert [item.get("type", "message") for item in items][:5] == [
                "message",
                "function_call",
                "function_call_output",
                "function_call",
                "function_call_output",
            ]

    run(scenario())


def test_usage_beyond_the_responses_placed_goes_on_a_loop_of_its_own(url: str) -> None:
    """Usage the run counted beyond its responses' (a request whose response listed no output here)
    still counts, so the session's usage stays the SDK's."""
    app = example()

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            session = TurnstoreSession("beyond", store)
            agent = Agent(name="calc", model=NamedModel("gpt-4o", app["script"](), base=0), tools=[app["add"]])
            result = await Runner.run(agent, "2 + 3?", session=session, run_config=RunConfig(tracing_disabled=True))
            usage = result.context_wrapper.usage
            extra = Usage(requests=1, input_tokens=7, output_tokens=3, total_tokens=10)
            usage.add(extra)
            loop_id = await session.record_usage(result)
            assert loop_id != session.loop_id
            assert our_tokens(await store.usage.session("beyond")) == sdk_tokens([usage])
            assert our_tokens(await store.usage.loop(loop_id)) == sdk_tokens([extra])
            assert (await store.usage.turn(session.loop_id, 0)).requests == 2

    run(scenario())


def test_the_example_app_runs_offline_and_prints_usage(tmp_path: Path) -> None:
    import subprocess

    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path / "app.db")],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "answer: 2 + 3 = 5" in done.stdout
    assert (
        "usage from turnstore: input=175 cache_read=20 cache_write=8 output=43 total_tokens=246 requests=2"
        in done.stdout
    )


def test_a_session_cleared_through_another_object_takes_items_again(make: Factory) -> None:
    async def scenario() -> None:
        async with make("shared") as first, make("shared") as second:
            await first.add_items([user("one")])
            await second.clear_session()
            await first.add_items([user("two")])
            assert await second.get_items() == [user("two")]
            await session_usage_if_turnstore(first)

    async def session_usage_if_turnstore(session: Any) -> None:
        if isinstance(session, TurnstoreSession):
            await session.clear_session()
            await session.add_items([assistant("after a clear")])
            assert await session.get_items() == [assistant("after a clear")]

    run(scenario())


def test_a_cancelled_add_writes_all_its_items_or_none(tmp_path: Path) -> None:
    items = [user("q"), assistant("a"), {"type": "web_search_call", "id": "ws", "status": "completed"}]

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("cancel", store)
            written = 0
            for delay in range(40):
                task = asyncio.ensure_future(session.add_items(items))
                for _ in range(delay % 8):
                    await asyncio.sleep(0)
                task.cancel()
                try:
                    await task
                    written += 1
                except asyncio.CancelledError:
                    pass
                stored = await session.get_items()
                assert len(stored) % len(items) == 0  # whole calls only
                assert stored == items * (len(stored) // len(items))
            assert len(await session.get_items()) >= written * len(items)

    run(scenario())


def test_the_docs_offline_example_runs_twice_as_written(tmp_path: Path) -> None:
    for _ in range(2):
        done = run_doc_example("integrations/openai-agents.md", tmp_path)
        assert done.returncode == 0, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == str([user("Remember: blue."), {"role": "assistant", "content": "Noted: blue."}])
        assert lines[1:] == [str({"role": "assistant", "content": "Noted: blue."}), "1"]


def test_built_with_the_wrong_arguments_it_says_which_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="^store: must be a turnstore Store or AsyncStore, got str; "):
        TurnstoreSession("s", str(tmp_path / "t.db"))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="^session_id: must be a string, got int"):
        TurnstoreSession(42, url=str(tmp_path / "t.db"))  # type: ignore[arg-type]


def test_a_sync_store_serves_the_session_as_an_async_store_does(url: str) -> None:
    """A ``Store``'s calls run in the event loop's executor: the same items, cancellation safe."""

    async def scenario() -> None:
        with Store(url) as store:
            session = TurnstoreSession("sync", store)
            await session.add_items([user("q"), assistant("a")])
            task = asyncio.ensure_future(session.add_items([user("q2")]))
            await asyncio.sleep(0)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            items = await session.get_items()
            assert items[:2] == [user("q"), assistant("a")] and items[2:] in ([], [user("q2")])
            assert await session.pop_item() == items[-1]
            await session.close()  # the app's store stays open
            assert store.sessions.exists("sync")

    run(scenario())


def test_a_lone_surrogate_in_tool_output_is_kept_for_the_sdk_and_replaced_in_the_row(tmp_path: Path) -> None:
    """A file name read with surrogateescape: SQLiteSession stores it, so must turnstore (not fail the run)."""
    name = b"report-\xff.txt".decode("utf-8", "surrogateescape")
    items: list[Any] = [
        {"role": "user", "content": "list files"},
        {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": name},
    ]

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            session = TurnstoreSession("s", store)
            await session.add_items(items)
            assert await session.get_items() == items  # the surrogate itself, as the SDK gave it
            context = await store.messages.context(session.loop_id)
            assert context[-1].text() == "report-\ufffd.txt"

    run(scenario())


def test_a_session_id_too_long_for_its_items_loop_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    from turnstore import LimitExceeded

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            with pytest.raises(LimitExceeded, match="^session_id is 146 characters; .* at most 144"):
                await TurnstoreSession("x" * 146, store).add_items([{"role": "user", "content": "hi"}])
            assert await store.sessions.count() == 0
            fits = TurnstoreSession("y" * 144, store)
            await fits.add_items([{"role": "user", "content": "hi"}])
            assert await fits.get_items() == [{"role": "user", "content": "hi"}]

    run(scenario())


def test_requests_the_sdk_counted_without_usage_entries_still_count(tmp_path: Path) -> None:
    from agents import Usage
    from agents.usage import RequestUsage

    class Wrapper:
        usage = Usage(requests=2, input_tokens=10, output_tokens=1, total_tokens=11)
        usage.request_usage_entries = [
            RequestUsage(
                input_tokens=10,
                output_tokens=1,
                total_tokens=11,
                input_tokens_details=usage.input_tokens_details,
                output_tokens_details=usage.output_tokens_details,
            )
        ]

    totals = recorded_totals(tmp_path, Wrapper.usage)
    assert (totals.requests, totals.input, totals.output) == (2, 10, 1)


def recorded_totals(path: Path, usage: Any) -> Any:
    """``store.usage.session`` of a session that ``record_usage`` stored one run of ``usage`` in."""
    result = SimpleNamespace(context_wrapper=SimpleNamespace(usage=usage))

    async def scenario() -> Any:
        async with await AsyncStore.open(path / "t.db") as store:
            await TurnstoreSession("run", store).record_usage(result)
            return await store.usage.session("run")

    return run(scenario())


# --- a session uses only what belongs to it ------------------------------------------------------


def test_an_items_loop_id_another_session_holds_is_refused_and_nothing_leaks(url: str) -> None:
    """Another session holds ``victim.items`` (importing a file that names it is enough): no item goes there."""
    planted = {"role": "user", "content": "injected"}

    with Store(url) as sync:
        sync.sessions.create("other")
        sync.loops.start("other", loop_id="victim.items", continuation_kind="initial")
        sync.messages.append(
            {"role": "user", "content": "injected", "timestamp": 1},
            loop_id="victim.items",
            turn_index=0,
            source=json.dumps(planted),
        )

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            victim = TurnstoreSession("victim", store)
            with pytest.raises(
                AlreadyExists,
                match="^loop 'victim.items', where session 'victim' keeps its items, belongs to session 'other'",
            ):
                await victim.add_items([user("secret")])
            with pytest.raises(AlreadyExists, match="belongs to session 'other'"):
                await victim.get_items()
            with pytest.raises(AlreadyExists, match="belongs to session 'other'"):
                await victim.pop_item()
            await victim.clear_session()
            assert not await store.sessions.exists("victim")

    run(scenario())
    with Store(url) as sync:
        assert [row.source for row in sync.messages.records("other")] == [json.dumps(planted)]
        assert not any("secret" in (row.source or "") for row in sync.messages.records("other"))


def test_record_usage_with_more_cached_than_input_tokens_is_clamped_not_a_validation_error(tmp_path: Path) -> None:
    from agents.usage import InputTokensDetails, OutputTokensDetails

    class Wrapper:
        usage = Usage(
            requests=1,
            input_tokens=5,
            output_tokens=2,
            total_tokens=7,
            input_tokens_details=InputTokensDetails(cached_tokens=9, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=4),
        )

    totals = recorded_totals(tmp_path, Wrapper.usage)
    assert (totals.input, totals.cache_read, totals.output, totals.reasoning) == (0, 9, 2, 2)


def sdk_database(path: Path, session_id: str, items: list[Any]) -> None:
    """An OpenAI Agents SDK database, written by the SDK's own ``SQLiteSession``."""

    async def write() -> None:
        session = SQLiteSession(session_id, path)
        await session.add_items(items)
        session.close()

    run(write())


IMPORTED_ITEMS: list[Any] = [
    {"role": "system", "content": "Be brief."},
    user("Weather in Paris?"),
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "use the tool"}]},
    {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": '{"city": "Paris"}', "id": "fc_1"},
    {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
    assistant("Sunny."),
    user("Thanks!"),
    assistant("You're welcome."),
]


@pytest.mark.parametrize("kind", ["AsyncStore", "Store"])
def test_a_session_imported_from_the_sdks_database_continues_where_it_left_off(
    url: str, tmp_path: Path, kind: str
) -> None:
    """``turnstore import openai-agents`` then ``TurnstoreSession``: the same items, in order, and every call
    of the protocol goes on from them, step for step as ``SQLiteSession`` on the same database does."""
    sdk_path = tmp_path / "app.db"
    sdk_database(sdk_path, "chat", IMPORTED_ITEMS)
    with Store(url) as sync:
        report = sync.import_("openai-agents", sdk_path)
        assert report.ok and len(sync.loops.list("chat")) == 2  # a loop per exchange, a response's items grouped

    async def scenario() -> None:
        store: Any = await AsyncStore.open(url) if kind == "AsyncStore" else Store(url)
        sdk = SQLiteSession("chat", sdk_path)
        session = TurnstoreSession("chat", store)
        try:
            assert await session.get_items() == IMPORTED_ITEMS == await sdk.get_items()
            assert await session.get_items(limit=3) == IMPORTED_ITEMS[-3:]
            more = [user("And tomorrow?"), assistant("Rain.")]
            await session.add_items(more)
            await sdk.add_items(more)
            assert await session.get_items() == IMPORTED_ITEMS + more
            sync = store if kind == "Store" else Store(url)
            context = sync.messages.context(session.loop_id)  # the new loop continues the imported history
            assert [m.text() for m in context][-3:] == ["You're welcome.", "And tomorrow?", "Rain."]
            assert sync.loops.get(session.loop_id).parent_loop_id == "chat.openai-agents.2"
            # pop to the very first item, through the imported loops and inside the grouped response
            await same_pops(session, sdk)
            again = [user("Hello again"), assistant("Hi.")]
            await session.add_items(again)
            assert await session.get_items() == again
            await session.clear_session()
            assert await session.get_items() == []
            assert not sync.sessions.exists("chat")
            if sync is not store:
                sync.close()
        finally:
            sdk.close()
            await store.close() if kind == "AsyncStore" else store.close()

    run(scenario())


def test_pops_that_stop_inside_an_imported_response_keep_its_other_items(url: str, tmp_path: Path) -> None:
    sdk_path = tmp_path / "app.db"
    sdk_database(sdk_path, "chat", IMPORTED_ITEMS[:4])  # ends in the middle of a response: reasoning, call

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            await store.import_("openai-agents", sdk_path)
            session = TurnstoreSession("chat", store)
            assert await session.pop_item() == IMPORTED_ITEMS[3]
            assert await session.get_items() == IMPORTED_ITEMS[:3]
            await session.add_items(IMPORTED_ITEMS[3:5])
            assert await session.get_items() == IMPORTED_ITEMS[:5]
            results = [r.message async for r in store.messages.records("chat") if r.message.role == "toolResult"]
            assert [m.tool_name for m in results] == ["weather"]  # type: ignore[union-attr]

    run(scenario())


def reasoning(item_id: str, text: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [{"type": "summary_text", "text": text}]}


def function_call(call_id: str, name: str) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": "{}", "id": f"fc_{call_id}"}


HOSTED_ITEMS: list[Any] = [
    user("Find the report and chart it."),
    # one response: hosted tool items between its reasoning, text and function calls
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "report"}},
    reasoning("rs_1", "search first"),
    {"type": "file_search_call", "id": "fs_1", "queries": ["report"], "status": "completed", "results": None},
    reasoning("rs_2", "now fetch it"),
    assistant("Fetching the report."),
    {
        "type": "code_interpreter_call",
        "id": "ci_1",
        "code": "print(1)",
        "container_id": "cntr_1",
        "outputs": [{"type": "logs", "logs": "1"}],
        "status": "completed",
    },
    function_call("c1", "fetch"),
    {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []},
    function_call("c2", "chart"),
    {"type": "function_call_output", "call_id": "c1", "output": "report"},
    {"type": "function_call_output", "call_id": "c2", "output": "chart"},
    # the next response: reasoning, an image, text, an MCP call after it
    reasoning("rs_3", "show it"),
    {"type": "image_generation_call", "id": "ig_1", "result": "aGk=", "status": "completed"},
    assistant("Here is the chart."),
    {"type": "mcp_call", "id": "mcp_1", "server_label": "docs", "name": "lookup", "arguments": "{}", "output": "ok"},
    user("Click it."),
    # a computer call (run by the app) between reasoning and text
    reasoning("rs_4", "click"),
    {
        "type": "computer_call",
        "id": "cu_1",
        "call_id": "cc1",
        "action": {"type": "click", "x": 1, "y": 2, "button": "left"},
        "pending_safety_checks": [],
        "status": "completed",
    },
    assistant("Clicking."),
    {"type": "computer_call_output", "call_id": "cc1", "output": {"type": "computer_screenshot", "image_url": "x"}},
    assistant("Done."),
]


def sdk_advanced_database(path: Path, session_id: str, items: list[Any]) -> None:
    """An OpenAI Agents SDK database written by its ``AdvancedSQLiteSession``, a call per user turn."""
    from agents.extensions.memory import AdvancedSQLiteSession

    starts = [index for index, item in enumerate(items) if item.get("role") == "user"] + [len(items)]

    async def write() -> None:
        session = AdvancedSQLiteSession(session_id=session_id, db_path=path, create_tables=True)
        for start, end in itertools.pairwise(starts):
            await session.add_items(items[start:end])
        session.close()

    run(write())


@pytest.mark.parametrize("writer", ["SQLiteSession", "AdvancedSQLiteSession"])
def test_hosted_tool_items_of_an_imported_response_come_back_in_their_place(
    url: str, tmp_path: Path, writer: str
) -> None:
    """A response's hosted tool items (web search, file search, code interpreter, MCP, image generation,
    computer calls) between its reasoning, text and function calls: the imported session gives back the
    SDK's items in the SDK's order, pops them in the SDK's order, and a model's context holds none of them."""
    from agents.extensions.memory import AdvancedSQLiteSession

    sdk_path = tmp_path / "app.db"
    if writer == "SQLiteSession":
        sdk_database(sdk_path, "hosted", HOSTED_ITEMS)
    else:
        sdk_advanced_database(sdk_path, "hosted", HOSTED_ITEMS)
    with Store(url) as sync:
        report = sync.import_("openai-agents", sdk_path)
        assert report.ok and report.sessions_written == ["hosted"]
        assert sync.import_("openai-agents", sdk_path).sessions_unchanged == ["hosted"]
        rows = list(sync.messages.records("hosted"))
        # each hosted item an extension message of its response's turn, right after its assistant message,
        # whose source holds the response's items in the SDK's order
        first = next(row for row in rows if row.message.role == "assistant")
        assert [json.loads(line) for line in (first.source or "").split("\n")] == HOSTED_ITEMS[1:10]
        hosted_rows = [row for row in rows if row.message.role == "extension"]
        assert [getattr(row.message, "kind", None) for row in hosted_rows] == [
            "web_search_call",
            "file_search_call",
            "code_interpreter_call",
            "mcp_list_tools",
            "image_generation_call",
            "mcp_call",
            "computer_call",
            "computer_call_output",
        ]
        assert [row.source is None for row in hosted_rows] == [True] * 7 + [False]  # an input item stands alone
        assert rows[1:6] == [first, *hosted_rows[:4]] and {row.turn_index for row in rows[1:6]} == {first.turn_index}
        context = sync.messages.context(sync.loops.list("hosted")[-1].loop_id)
        assert [m.role for m in context] == [
            *("user", "assistant", "toolResult", "toolResult", "assistant"),
            *("user", "assistant", "assistant"),
        ]
        assert [block.type for block in context[1].content] == ["thinking", "thinking", "text", "toolCall", "toolCall"]
        assert context[6].stop_reason == "toolUse"  # type: ignore[union-attr]

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            sdk: Any = (
                SQLiteSession("hosted", sdk_path)
                if writer == "SQLiteSession"
                else AdvancedSQLiteSession(session_id="hosted", db_path=sdk_path)
            )
            session = TurnstoreSession("hosted", store)
            try:
                assert await session.get_items() == await sdk.get_items() == HOSTED_ITEMS
                for limit in (1, 4, 9, 15):
                    assert await session.get_items(limit=limit) == await sdk.get_items(limit=limit)
                await same_pops(session, sdk)
            finally:
                sdk.close()

    run(scenario())


@pytest.mark.parametrize("name", ["sqlite_session", "advanced_session", "advanced_edited"])
def test_every_imported_fixture_session_gives_back_the_sdks_items(tmp_path: Path, name: str) -> None:
    """SDK-written databases, plain and advanced (a branch, per-turn usage, a fork inside a response): the
    items the SDK's own session class reads from them (an ``AdvancedSQLiteSession``: its main branch), in
    its order, and for a plain session the same items popped one by one.

    ``advanced_edited`` also holds rows a plain ``SQLiteSession`` wrote into the file, which no
    ``message_structure`` row names: ``AdvancedSQLiteSession`` reads main as the rows its structure rows
    name, in ``sequence_number`` order, and never those; the importer places them on main at their id's
    position. So its items are the SDK's main items with those rows merged in by id, and without them
    exactly the SDK's. Pops are compared for plain sessions only: an ``AdvancedSQLiteSession``'s pop also
    deletes rows no branch names, and popping main into history a branch shares is refused here.
    """
    from agents.extensions.memory import AdvancedSQLiteSession

    sessions = [found.split("/", 1)[1] for found, _ in fixture_sessions() if found.startswith(name + "/")]
    assert sessions
    copy = tmp_path / f"{name}.db"
    copy.write_bytes((FIXTURES / f"{name}.db").read_bytes())
    plain = name == "sqlite_session"
    expected = {session_id: main_items(copy, session_id) for session_id in sessions}

    async def scenario() -> None:
        async with await AsyncStore.open(tmp_path / "t.db") as store:
            assert (await store.import_("openai-agents", copy)).ok
            for session_id in sessions:
                sdk: Any = (
                    SQLiteSession(session_id, copy)
                    if plain
                    else AdvancedSQLiteSession(session_id=session_id, db_path=copy)
                )
                try:
                    ours, theirs = await TurnstoreSession(session_id, store).get_items(), await sdk.get_items()
                    main, orphans = expected[session_id]
                    assert theirs == [item for _, item in main]
                    assert ours == merged(main, orphans)
                    assert [item for item in ours if item not in [o for _, o in orphans]] == theirs
                    if plain:
                        await same_pops(TurnstoreSession(session_id, store), sdk)
                finally:
                    sdk.close()

    run(scenario())
    assert any(expected[session_id][1] for session_id in sessions) == (name == "advanced_edited")


def main_items(path: Path, session_id: str) -> tuple[list[tuple[int, Any]], list[tuple[int, Any]]]:
    """A session's main items with their row ids, as the SDK reads them (every row in id order without
    ``message_structure``; else the rows main's structure rows name, in ``sequence_number`` order), and
    the rows no structure row names."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "SELECT id, message_data FROM agent_messages WHERE session_id = ? ORDER BY id", (session_id,)
        ).fetchall()
        tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "message_structure" not in tables:
            return [(row_id, json.loads(text)) for row_id, text in rows], []
        structure = connection.execute(
            "SELECT message_id, branch_id FROM message_structure WHERE session_id = ? ORDER BY sequence_number",
            (session_id,),
        ).fetchall()
    by_id = dict(rows)
    named = {message_id for message_id, _ in structure}
    main = [(message_id, json.loads(by_id[message_id])) for message_id, branch in structure if branch == "main"]
    return main, [(row_id, json.loads(text)) for row_id, text in rows if row_id not in named]


def merged(main: list[tuple[int, Any]], orphans: list[tuple[int, Any]]) -> list[Any]:
    """Main's items with each row no structure row names placed before the first main row of a later id."""
    items, rest = [], list(orphans)
    for row_id, item in main:
        while rest and rest[0][0] < row_id:
            items.append(rest.pop(0)[1])
        items.append(item)
    return items + [item for _, item in rest]


async def same_pops(ours: TurnstoreSession, theirs: Any) -> None:
    """Pop both sessions to empty: each pop returns the same item, and the items left are the same."""
    while True:
        popped, expected = await ours.pop_item(), await theirs.pop_item()
        assert popped == expected
        assert await ours.get_items() == await theirs.get_items()
        if popped is None:
            return


def test_an_imported_session_of_many_exchanges_goes_on_from_its_last_one(url: str, tmp_path: Path) -> None:
    """Twelve exchanges written in one second: twelve imported loops, listed by id (".10" before ".2")."""
    items: list[Any] = [entry for i in range(12) for entry in (user(f"q{i}"), assistant(f"a{i}"))]
    sdk_path = tmp_path / "app.db"
    sdk_database(sdk_path, "many", items)

    async def scenario() -> None:
        async with await AsyncStore.open(url) as store:
            await store.import_("openai-agents", sdk_path)
            assert len(await store.loops.list("many")) == 12
            session = TurnstoreSession("many", store)
            assert await session.get_items() == items
            await session.add_items([user("q12")])
            assert await session.get_items() == [*items, user("q12")]
            assert (await store.loops.get(session.loop_id)).parent_loop_id == "many.openai-agents.12"

    run(scenario())
