"""Writes racing on one session, each from its own store (as two app instances would), on SQLite and PostgreSQL.

A loop that forks after, keeps from or continues a message, started while
that message is deleted, must come out as one of the two orders would: the
loop is made and the delete is refused, or the message is deleted and the
loop is refused with :class:`InvalidArgument`. Two deletes of one message:
one deletes it, the other raises :class:`MessageNotFound`. SQLite takes one
writer at a time; PostgreSQL must hold the rows to come out the same.

Each race runs a few rounds by default; ``TURNSTORE_STRESS=1`` runs many.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, user

from turnstore import Store
from turnstore.aio import AsyncStore
from turnstore.errors import InvalidArgument, MessageNotFound

ROUNDS = 100 if os.environ.get("TURNSTORE_STRESS") == "1" else 12


@pytest.fixture
def stores(url: str) -> Iterator[tuple[Store, Store]]:
    """Two stores on one empty database."""
    with Store(url) as first, Store(url) as second:
        yield first, second


def _race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at once, each on its own thread; what each returned, or the exception it raised."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = calls[index]()
        except Exception as error:
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


def _loop_with_messages(store: Store) -> tuple[str, str, list[int]]:
    """A new session and loop holding a turn: (session id, loop id, message ids)."""
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    ids = store.messages.append_turn(loop_id, 0, [user("question"), assistant("answer")])
    return session_id, loop_id, ids


def _message_exists(store: Store, message_id: int) -> bool:
    try:
        store.messages.get(message_id)
    except MessageNotFound:
        return False
    return True


FORKS: dict[str, Callable[[Store, str, str, int], Any]] = {
    "rewind": lambda store, _session, loop_id, message_id: store.messages.rewind(loop_id, after=message_id),
    "compact": lambda store, _session, loop_id, message_id: store.loops.compact(
        loop_id, "summary", keep_from=message_id
    ),
    "branch": lambda store, session_id, loop_id, message_id: store.loops.start(
        session_id, parent_loop_id=loop_id, continuation_kind="branch", fork_after=message_id
    ),
    "continue": lambda store, session_id, loop_id, _message: store.loops.start(session_id, parent_loop_id=loop_id),
}


@pytest.mark.parametrize("fork", sorted(FORKS))
def test_a_loop_started_from_a_message_being_deleted_comes_out_as_one_order(
    stores: tuple[Store, Store], fork: str
) -> None:
    first, second = stores
    wrong = []
    for round_ in range(ROUNDS):
        session_id, loop_id, ids = _loop_with_messages(first)
        last = ids[-1]
        loops_before = len(first.loops.list(session_id))
        started, deleted = _race(
            lambda: FORKS[fork](first, session_id, loop_id, last),
            lambda: second.messages.delete(last),
        )
        made = len(first.loops.list(session_id)) > loops_before
        present = _message_exists(first, last)
        if fork == "continue" and isinstance(deleted, list):
            # Deleted first, then continued: the continuation's history is what is left.
            ok = deleted == [last] and made and not present
        elif isinstance(deleted, list):
            ok = deleted == [last] and isinstance(started, InvalidArgument) and not made and not present
        else:
            ok = isinstance(deleted, InvalidArgument) and not isinstance(started, Exception) and made and present
        if made:
            context = first.messages.context(first.loops.list(session_id)[-1].loop_id)
            ok = ok and len(context) == (len(ids) if present else len(ids) - 1)
        if not ok:
            wrong.append((round_, started, deleted, made, present))
    assert wrong == [], f"{len(wrong)} of {ROUNDS} races came out in no order: {wrong[:3]}"


def test_concurrent_deletes_of_one_message_delete_it_once(stores: tuple[Store, Store]) -> None:
    first, second = stores
    wrong = []
    for round_ in range(ROUNDS):
        _session, _loop, ids = _loop_with_messages(first)
        outcomes = _race(lambda: first.messages.delete(ids[-1]), lambda: second.messages.delete(ids[-1]))
        deleted = [outcome for outcome in outcomes if outcome == [ids[-1]]]
        missing = [outcome for outcome in outcomes if isinstance(outcome, MessageNotFound)]
        if (
            (len(deleted), len(missing)) != (1, 1)
            or _message_exists(first, ids[-1])
            or not _message_exists(first, ids[0])
        ):
            wrong.append((round_, outcomes))
    assert wrong == [], f"{len(wrong)} of {ROUNDS} races came out in no order: {wrong[:3]}"


def _items_session_racing(url: str, work: Callable[[list[Any]], Any]) -> Any:
    """Run ``work(sessions)`` on three ``TurnstoreSession`` objects of one session, each on its own store."""
    from turnstore.integrations.openai_agents import TurnstoreSession

    async def scenario() -> Any:
        stores = [await AsyncStore.open(url) for _ in range(3)]
        try:
            return await work([TurnstoreSession("items", store) for store in stores])
        finally:
            for store in stores:
                await store.close()

    return asyncio.run(scenario())


def _item(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_concurrent_pops_return_distinct_items(url: str) -> None:
    pytest.importorskip("agents")
    rounds = ROUNDS // 2

    async def work(sessions: list[Any]) -> list[Any]:
        results = []
        for round_ in range(rounds):
            await sessions[0].add_items([_item(f"{round_}-{n}") for n in range(4)])
            popped = await asyncio.gather(*(session.pop_item() for session in sessions), return_exceptions=True)
            left = await sessions[0].get_items()
            results.append((popped, left))
            await sessions[0].clear_session()
        return results

    wrong = []
    for round_, (popped, left) in enumerate(_items_session_racing(url, work)):
        expected = [_item(f"{round_}-{n}") for n in range(4)]
        if sorted(map(str, popped)) != sorted(map(str, expected[1:])) or left != expected[:1]:
            wrong.append((round_, popped, left))
    assert wrong == [], f"{len(wrong)} of {rounds} rounds: {wrong[:3]}"


def test_a_pop_racing_an_add_takes_one_of_the_two_latest(url: str) -> None:
    pytest.importorskip("agents")
    rounds = ROUNDS // 2

    async def work(sessions: list[Any]) -> list[Any]:
        results = []
        for round_ in range(rounds):
            await sessions[0].add_items([_item(f"{round_}-old")])
            popped, _added = await asyncio.gather(
                sessions[1].pop_item(), sessions[2].add_items([_item(f"{round_}-new")]), return_exceptions=True
            )
            results.append((popped, await sessions[0].get_items()))
            await sessions[0].clear_session()
        return results

    wrong = []
    for round_, (popped, left) in enumerate(_items_session_racing(url, work)):
        old, new = _item(f"{round_}-old"), _item(f"{round_}-new")
        if (popped, left) not in ((old, [new]), (new, [old])):
            wrong.append((round_, popped, left))
    assert wrong == [], f"{len(wrong)} of {rounds} rounds: {wrong[:3]}"


def test_concurrent_pops_of_an_imported_session_return_its_items(url: str) -> None:
    """Pops of an imported OpenAI Agents session go back through its loops and delete the ones they empty:
    a pop that read the path before another pop deleted such a loop failed with LoopNotFound. Each pop
    reads the path again; together they return every item once."""
    pytest.importorskip("agents")
    from turnstore.integrations.openai_agents import TurnstoreSession

    fixture = Path(__file__).parent / "fixtures" / "openai_agents" / "sqlite_session.db"
    rounds = ROUNDS // 4
    stores = [Store(url) for _ in range(4)]
    wrong = []
    try:
        for round_ in range(rounds):
            stores[0].import_("openai-agents", fixture, replace=True)
            sessions = [TurnstoreSession("chat-weather", store) for store in stores]
            expected = asyncio.run(sessions[0].get_items())

            def pops(session: Any, count: int = len(expected)) -> list[Any]:
                async def run() -> list[Any]:
                    return [await session.pop_item() for _ in range(count)]

                return asyncio.run(run())

            outcomes = _race(*(partial(pops, session) for session in sessions))
            failed = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
            items = [item for outcome in outcomes if isinstance(outcome, list) for item in outcome if item is not None]
            left = asyncio.run(sessions[0].get_items())
            if failed or sorted(map(str, items)) != sorted(map(str, expected)) or left:
                wrong.append((round_, failed[:2], len(items), left))
            asyncio.run(sessions[0].clear_session())
    finally:
        for store in stores:
            store.close()
    assert wrong == [], f"{len(wrong)} of {rounds} rounds: {wrong[:3]}"
