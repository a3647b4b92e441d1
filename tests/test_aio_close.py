"""``AsyncStore.close()``: what happens to transactions and calls under way, and to calls after it.

Closing refuses new calls and transactions (``StoreClosed``), lets the
transactions open in other tasks end (their own calls still run), waits for
the calls under way, then closes every connection. Each test runs on SQLite
and, where the server answers, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import threading
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, user

from turnstore import AsyncStore, Store, StoreClosed, TransactionOpen


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'close.db'}"
    return request.getfixturevalue("postgres").url


async def _fresh(url: str, **options: Any) -> AsyncStore:
    store = await AsyncStore.open(url, **options)
    for summary in await store.sessions.list(limit=1000):
        await store.sessions.delete(summary.session_id)
    return store


def test_close_waits_for_a_transaction_of_another_task_while_a_writer_waits_for_it(url: str) -> None:
    """Regression: close() shut the transaction's worker down under it, so the transaction could neither go on
    nor roll back, and a call waiting for its lock kept close() waiting for the whole busy budget (SQLite) or
    forever (PostgreSQL)."""

    async def scenario() -> None:
        store = await _fresh(url, busy_budget=60.0)
        session = await store.sessions.create("s")
        loop_id = (await store.loops.start(session.session_id)).loop_id
        holding, release = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with store.transaction():
                await store.messages.append_turn(loop_id, 0, [user("first")])
                holding.set()
                await release.wait()
                await store.messages.append_turn(loop_id, 1, [user("second")])

        async def writer() -> None:  # waits for the holder's lock (SQLite's write lock, PostgreSQL's loop row)
            await store.messages.append_turn(loop_id, 2, [user("third"), assistant("done")])

        holding_task = asyncio.create_task(holder())
        await holding.wait()
        writing_task = asyncio.create_task(writer())
        await asyncio.sleep(0.3)  # the writer's call is on its worker, waiting for the lock
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0.3)
        assert not closing.done()  # waiting for the transaction

        with pytest.raises(StoreClosed):
            await store.sessions.get("s")
        with pytest.raises(StoreClosed):
            async with store.transaction():
                pass
        with pytest.raises(StoreClosed):
            async for _ in store.messages.records("s"):
                pass

        release.set()
        await asyncio.wait_for(asyncio.gather(holding_task, writing_task, closing), 30)

        async with await AsyncStore.open(url) as reopened:
            turns = await reopened.messages.turns(loop_id)
            assert [turn.turn_index for turn in turns] == [0, 1, 2]
            assert [len(turn.messages) for turn in turns] == [1, 1, 2]

    asyncio.run(scenario())


def test_close_inside_its_own_transaction_raises_and_leaves_the_store_open(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        async with store.transaction():
            await store.sessions.create("inside")
            with pytest.raises(TransactionOpen, match="inside a transaction"):
                await store.close()
            await store.sessions.create("after the refused close")
        assert {s.session_id for s in await store.sessions.list()} == {"inside", "after the refused close"}
        await store.close()

    asyncio.run(scenario())


def test_every_entry_point_after_close_raises_store_closed(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        await store.sessions.create("s")
        await store.close()
        await store.close()  # a second close is a no-op
        with pytest.raises(StoreClosed, match="closed"):
            await store.sessions.get("s")
        with pytest.raises(StoreClosed):
            await store.usage.total()
        with pytest.raises(StoreClosed):
            async with store.transaction():
                pass
        with pytest.raises(StoreClosed):
            async with contextlib.aclosing(store.messages.records("s")) as records:
                async for _ in records:
                    pass
        assert isinstance(StoreClosed("x"), RuntimeError)  # what the sync store raises once closed

    asyncio.run(scenario())


def test_a_cancelled_close_still_waits_for_the_open_transaction_and_closes(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        holding, release = asyncio.Event(), asyncio.Event()

        async def holder() -> None:
            async with store.transaction():
                await store.sessions.create("held")
                holding.set()
                await release.wait()

        holding_task = asyncio.create_task(holder())
        await holding.wait()
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0.2)
        closing.cancel()
        await asyncio.sleep(0.2)
        assert not closing.done()  # cancelled, it still waits for the transaction before it raises
        release.set()
        await asyncio.wait_for(holding_task, 30)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(closing, 30)
        with pytest.raises(StoreClosed):
            await store.sessions.get("held")
        async with await AsyncStore.open(url) as reopened:
            assert await reopened.sessions.exists("held")

    asyncio.run(scenario())


def test_a_call_waiting_for_a_free_worker_when_close_begins_is_refused(tmp_path: Path) -> None:
    """The call under way finishes; the one queued behind it never starts (SQLite: a writer lock held elsewhere)."""
    path = tmp_path / "queued.db"
    blocker = Store(path)
    locked, unlock = threading.Event(), threading.Event()

    def hold_the_write_lock() -> None:
        with blocker.transaction():
            blocker.sessions.create("held elsewhere")
            locked.set()
            unlock.wait(30)

    holder = threading.Thread(target=hold_the_write_lock)

    async def scenario() -> None:
        store = await AsyncStore.open(f"sqlite:///{path}", workers=1)
        holder.start()
        await asyncio.to_thread(locked.wait, 30)
        running = asyncio.create_task(store.sessions.create("running"))  # waits for the lock on the one worker
        await asyncio.sleep(0.2)
        queued = asyncio.create_task(store.sessions.create("queued"))  # waits for the worker
        await asyncio.sleep(0.2)
        closing = asyncio.create_task(store.close())
        await asyncio.sleep(0.2)
        unlock.set()
        await asyncio.wait_for(closing, 30)
        assert (await running).session_id == "running"
        with pytest.raises(StoreClosed):
            await queued

    try:
        asyncio.run(scenario())
    finally:
        unlock.set()
        holder.join(30)
        assert {s.session_id for s in blocker.sessions.list()} == {"held elsewhere", "running"}
        blocker.close()


def test_a_stream_read_while_the_store_closes_raises_store_closed(url: str) -> None:
    """A reader task still walking ``records()`` when the app closes the store gets the typed error, not
    the executor's ``RuntimeError``."""

    async def scenario() -> None:
        store = await _fresh(url)
        await store.sessions.create("s")
        loop = await store.loops.start("s")
        await store.messages.append_turn(loop.loop_id, 0, [user(f"m{i}") for i in range(200)])
        read = 0
        with pytest.raises(StoreClosed, match="closed while this stream was read"):
            async for _ in store.messages.records("s"):
                read += 1
                if read == 1:
                    await store.close()
        assert read == 64  # the batch already fetched, then the error

    asyncio.run(scenario())


def _append_in_child(store: AsyncStore, loop_id: str) -> None:
    """A forked child's work: append through the store it inherited, on an event loop of its own."""
    asyncio.run(asyncio.wait_for(store.messages.append(user("child"), loop_id=loop_id, turn_index=0), 10))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_uses_the_async_store_it_inherited(url: str) -> None:
    """The parent's worker threads do not exist in a forked child: its calls start workers of its own (they
    waited forever for the parent's), as the sync store opens connections of its own there."""
    store = asyncio.run(_fresh(url))
    try:
        asyncio.run(store.sessions.create("s"))
        loop_id = asyncio.run(store.loops.start("s")).loop_id
        asyncio.run(store.messages.append(user("parent"), loop_id=loop_id, turn_index=0))
        child = multiprocessing.get_context("fork").Process(target=_append_in_child, args=(store, loop_id))
        child.start()
        child.join(30)
        assert child.exitcode == 0
        assert [m.text() for m in asyncio.run(store.messages.loop(loop_id))] == ["parent", "child"]
    finally:
        asyncio.run(store.close())
