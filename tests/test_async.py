"""AsyncStore's own behaviour: opening and closing, the worker pool, transactions, streaming, cancellation.

The repository methods themselves run through the whole behaviour suite on
the ``sqlite-async`` and ``postgresql-async`` backends (see ``backends.py``);
this module checks what only the async store has. Each test runs on SQLite
and, where the server answers, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, user

import turnstore.aio as aio
import turnstore.repositories.message_reads as message_reads
from turnstore import AsyncStore, SessionNotFound, StorageError, Store


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'async.db'}"
    return request.getfixturevalue("postgres").url


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


async def _fresh(url: str, **options: Any) -> AsyncStore:
    store = await AsyncStore.open(url, **options)
    for summary in await store.sessions.list(limit=1000):
        await store.sessions.delete(summary.session_id)
    return store


def test_open_close_and_properties(url: str) -> None:
    async def scenario() -> None:
        async with await _fresh(url) as store:
            assert store.dialect == ("sqlite" if url.startswith("sqlite") else "postgresql")
            assert isinstance(store.sync, Store)
            assert store.url == store.sync.url
            assert await store.schema_version() == store.sync.schema_version()
            await store.upgrade()  # already at head: nothing to do, no error
            session = await store.sessions.create("s")
            assert (await store.sessions.get("s")) == session

    run(scenario())


def test_typed_errors_cross_the_thread_hop(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            with pytest.raises(SessionNotFound):
                await store.sessions.get("nobody")
        finally:
            await store.close()

    run(scenario())


def test_calls_awaited_in_turn_run_on_one_worker(url: str) -> None:
    # Most recently used worker first: a sequential agent loop keeps one thread and one connection.
    async def scenario() -> set[int]:
        store = await _fresh(url, workers=4)
        try:
            return {await store._workers.run(threading.get_ident) for _ in range(20)}
        finally:
            await store.close()

    assert len(run(scenario())) == 1


def test_concurrent_calls_spread_over_at_most_workers_threads(url: str) -> None:
    in_flight, peak, threads = 0, 0, set()
    lock = threading.Lock()

    def slow() -> None:
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            threads.add(threading.get_ident())
        time.sleep(0.05)
        with lock:
            in_flight -= 1

    async def scenario() -> None:
        store = await _fresh(url, workers=3)
        try:
            await asyncio.gather(*(store._workers.run(slow) for _ in range(12)))
        finally:
            await store.close()

    run(scenario())
    assert peak == 3
    assert len(threads) == 3


def test_gathered_appends_are_all_stored_in_order(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            loops = [(await store.loops.start("s")).loop_id for _ in range(4)]

            async def writer(loop_id: str) -> None:
                for turn in range(10):
                    await store.messages.append_turn(loop_id, turn, [user(f"{loop_id} {turn}"), assistant("ok")])

            await asyncio.gather(*(writer(loop_id) for loop_id in loops))
            for loop_id in loops:
                stored = await store.messages.loop(loop_id)
                assert len(stored) == 20
                assert [m.content[0].text for m in stored[::2]] == [f"{loop_id} {t}" for t in range(10)]
        finally:
            await store.close()

    run(scenario())


def test_a_cancelled_waiter_does_not_lose_a_worker(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url, workers=1)
        try:
            blocker = asyncio.ensure_future(store._workers.run(time.sleep, 0.2))
            await asyncio.sleep(0.02)
            waiting = [asyncio.ensure_future(store._workers.run(threading.get_ident)) for _ in range(3)]
            await asyncio.sleep(0.02)
            for task in waiting[:2]:
                task.cancel()
            await blocker
            assert isinstance(await waiting[2], int)
            # The pool still has its one slot: further calls run, one at a time.
            assert len({await store._workers.run(threading.get_ident) for _ in range(5)}) == 1
            assert store._workers._busy == 0
        finally:
            await store.close()

    run(scenario())


def test_transaction_commits_as_one(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            async with store.transaction():
                loop = await store.loops.start("s")
                await store.messages.append(user("hi"), loop_id=loop.loop_id, turn_index=0)
                async with store.transaction():  # nested: joins the outer one
                    await store.messages.append(assistant("hello"), loop_id=loop.loop_id, turn_index=0)
            assert len(await store.messages.loop(loop.loop_id)) == 2
        finally:
            await store.close()

    run(scenario())


def test_transaction_rolls_back_when_the_block_raises(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            with pytest.raises(RuntimeError, match="boom"):
                async with store.transaction():
                    loop = await store.loops.start("s")
                    await store.messages.append(user("hi"), loop_id=loop.loop_id, turn_index=0)
                    raise RuntimeError("boom")
            assert await store.loops.list("s") == []
        finally:
            await store.close()

    run(scenario())


def test_transaction_pins_only_its_own_task(url: str) -> None:
    # While one task holds a transaction open, another task's calls run elsewhere and do not join it.
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            inside = asyncio.Event()
            release = asyncio.Event()

            async def in_transaction() -> int:
                async with store.transaction():
                    ident = await store._workers.run(threading.get_ident)
                    await store.sessions.create("t")
                    inside.set()
                    await release.wait()
                    return ident

            task = asyncio.ensure_future(in_transaction())
            await inside.wait()
            other = await store._workers.run(threading.get_ident)
            if store.dialect == "postgresql":
                assert not await store.sessions.exists("t")  # not committed yet, and not joined
            release.set()
            pinned = await task
            assert other != pinned
            assert await store.sessions.exists("t")
        finally:
            await store.close()

    run(scenario())


def test_records_stream_as_an_async_iterator(url: str) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            loop = await store.loops.start("s")
            for turn in range(600):
                await store.messages.append(user(str(turn)), loop_id=loop.loop_id, turn_index=turn)
            texts = [stored.message.content[0].text async for stored in store.messages.records("s")]
            assert texts == [str(turn) for turn in range(600)]
        finally:
            await store.close()

    run(scenario())


def test_records_read_a_small_batch_per_thread_hop(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first item costs one batch of STREAM_BATCH models, not hundreds: a live batch outlives the collector's young passes."""
    built: list[int] = []
    build = message_reads.stored_message
    monkeypatch.setattr(message_reads, "stored_message", lambda row: built.append(row[0]) or build(row))

    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            loop = await store.loops.start("s")
            await store.messages.append_turn(loop.loop_id, 0, [user(str(i)) for i in range(300)])
            stream = store.messages.records("s")
            first = await anext(stream)
            assert len(built) == aio.STREAM_BATCH < 300
            assert built[0] == first.message_id
            await stream.aclose()
        finally:
            await store.close()

    run(scenario())


def test_a_corrupt_stored_row_fails_after_the_rows_before_it_sync_and_async(url: str) -> None:
    """Changed outside turnstore: both iterations yield the 100 good records first, then one typed error."""

    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            loop = await store.loops.start("s")
            ids = await store.messages.append_turn(loop.loop_id, 0, [user(str(i)) for i in range(150)])
            with Store(url) as opened:
                engine = sa.create_engine(opened.engine.url, poolclass=sa.pool.NullPool)
            with engine.begin() as connection:
                connection.execute(
                    sa.text("UPDATE messages SET message = :text WHERE id = :id"),
                    {"text": '{"role":"user","content":5,"timestamp":1}', "id": ids[100]},
                )
            engine.dispose()
            seen: list[int] = []
            with pytest.raises(StorageError, match=f"stored message {ids[100]} cannot be read: .*content"):
                async for stored in store.messages.records("s"):
                    seen.append(stored.message_id)
            assert seen == ids[:100]
            with Store(url) as sync:
                seen = []
                with pytest.raises(StorageError, match=f"stored message {ids[100]} cannot be read"):
                    for record in sync.messages.records("s"):
                        seen.append(record.message_id)
                assert seen == ids[:100]
                with pytest.raises(StorageError, match=f"stored message {ids[100]} cannot be read: user.content"):
                    sync.messages.last("s", 60)
                with pytest.raises(StorageError, match=f"stored message {ids[100]} cannot be read"):
                    sync.messages.context(loop.loop_id)
            if engine.dialect.name != "sqlite":  # PostgreSQL's json column holds JSON only
                return
            with engine.begin() as connection:  # not JSON at all
                connection.execute(sa.text("UPDATE messages SET message = 'not json' WHERE id = :id"), {"id": ids[100]})
            engine.dispose()
            with Store(url) as sync:
                for fmt in ("turnstore", "phi-core"):
                    with pytest.raises(StorageError, match=f"stored message {ids[100]} cannot be read"):
                        sync.export("s", fmt)
            assert len(await store.messages.last("s", 49)) == 49  # the store is still usable
        finally:
            await store.close()

    run(scenario())


def test_import_and_export_are_awaited(url: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        store = await _fresh(url)
        try:
            await store.sessions.create("s")
            loop = await store.loops.start("s")
            await store.messages.append_turn(loop.loop_id, 0, [user("hi"), assistant("hello")])
            target = tmp_path / "s.jsonl"
            with target.open("w", encoding="utf-8") as out:
                await store.export("s", "turnstore", out)
            await store.sessions.delete("s")
            report = await store.import_("turnstore", target)
            assert report.sessions_written == ["s"]
            assert len(await store.messages.loop(loop.loop_id)) == 2
        finally:
            await store.close()

    run(scenario())


def test_the_constructor_works_outside_a_running_loop(tmp_path: Path) -> None:
    store = AsyncStore(tmp_path / "plain.db")

    async def scenario() -> None:
        await store.sessions.create("s")
        await store.close()

    run(scenario())
    assert Store(tmp_path / "plain.db").sessions.exists("s")
