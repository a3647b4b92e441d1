"""TurnstoreSession: the OpenAI Agents SDK session protocol kept in turnstore.

The protocol tests run against ``TurnstoreSession`` and the SDK's own
``SQLiteSession`` side by side and expect the same results (the behaviours of
the SDK's ``tests/memory/test_session.py``).
"""

from __future__ import annotations

import asyncio
import json
import runpy
import sqlite3
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, RunConfig, Runner, SQLiteSession
from agents.memory import SessionABC, SessionSettings

from turnstore import Store
from turnstore.aio import AsyncStore
from turnstore.errors import InvalidArgument
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
        def __init__(self, session_id: str, settings: SessionSettings | None = None) -> None:
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
            result = await Runner.run(
                agent,
                "2 + 3?",
                session=session,
                run_config=RunConfig(tracing_disabled=True),
            )
            loop_id = await session.record_usage(result)
            kept = [message async for message in store.messages.records(loop_id=loop_id)]
            assert [message.message.kind for message in kept] == [REQUEST_USAGE] * 2  # type: ignore[union-attr]
            assert kept[0].message.data["input_tokens"] == 101  # type: ignore[union-attr]

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
