"""Cancelling AsyncStore calls: nothing acknowledged is lost, nothing is half-written, no worker is left dirty.

A call handed to a worker thread cannot be interrupted; the async store
waits for it on cancellation, rolls back the transaction it was in, stops an
import between sessions and gives every worker back clean. These tests cancel
at each await the store has — a transaction's start, body and commit, single
appends, whole turns, streamed reads, imports — first one at a time at a
chosen point (each bug found there has its own test), then at random, at
least ``CANCELLATIONS`` times per engine. Each runs on SQLite and, where the
server answers, PostgreSQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import random
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, user

from turnstore import AsyncStore, SessionNotFound, Store
from turnstore.aio import _PINNED

CANCELLATIONS = 1_000
"""Cancellations that must land (the call raised ``CancelledError``) in the random test, per engine."""

SETTLE = 10.0
"""Seconds a test waits at most for work it cannot await (a garbage-collected iterator's cleanup)."""


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'cancel.db'}"
    database = request.getfixturevalue("postgres")
    database.empty()
    return str(database.url)


class Outside:
    """A connection from outside the store, asking whether any transaction is left open.

    SQLite: can another connection take the write lock right now (no waiting)?
    PostgreSQL: is any other client backend of the database in a transaction?
    """

    def __init__(self, url: str) -> None:
        parsed = sa.engine.make_url(url)
        self.sqlite = parsed.get_backend_name() == "sqlite"
        if self.sqlite:
            self._connection: Any = sqlite3.connect(str(parsed.database), timeout=0, isolation_level=None)
        else:
            import psycopg

            plain = parsed.set(drivername="postgresql").render_as_string(hide_password=False)
            self._connection = psycopg.connect(plain, autocommit=True)

    def open_transactions(self) -> int:
        if self.sqlite:
            try:
                self._connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as error:
                assert "locked" in str(error)
                return 1
            self._connection.execute("ROLLBACK")
            return 0
        row = self._connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid() AND xact_start IS NOT NULL"
        ).fetchone()
        return int(row[0])

    def close(self) -> None:
        self._connection.close()


def workers_clean(store: AsyncStore) -> bool:
    """Every worker of the store is back in the pool, no call holds a slot, no connection is in a transaction."""
    workers = store._workers
    depths = [state.depth for state in store.sync._db._states]
    return len(workers._idle) == len(workers._all) and workers._busy == 0 and not any(depths)


async def settled(condition: Callable[[], bool]) -> bool:
    """Whether ``condition`` holds, once the event loop has had up to ``SETTLE`` seconds to get there."""
    for _ in range(int(SETTLE / 0.005)):
        if condition():
            return True
        await asyncio.sleep(0.005)
    return condition()


@contextlib.contextmanager
def loop_errors() -> Iterator[list[dict[str, Any]]]:
    """What the running event loop reports to its exception handler during the block (errors in cleanup)."""
    reported: list[dict[str, Any]] = []
    loop = asyncio.get_running_loop()
    before = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        yield reported
    finally:
        loop.set_exception_handler(before)


class Gate:
    """Holds the first call of a sync method (for which ``when()`` holds) on its worker thread until released."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, target: Any, name: str, when: Callable[[], bool] = lambda: True
    ) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        original = getattr(target, name)

        def gated(*args: Any, **kwargs: Any) -> Any:
            if not self.entered.is_set() and when():
                self.entered.set()
                self.release.wait(SETTLE)
            return original(*args, **kwargs)

        monkeypatch.setattr(target, name, gated)

    async def reached(self) -> None:
        assert await asyncio.to_thread(self.entered.wait, SETTLE)


async def cancelled_at(gate: Gate, work: Awaitable[Any]) -> None:
    """Run ``work``, cancel it once it is held at ``gate``, release the gate: the task must end cancelled."""
    task = asyncio.ensure_future(work)
    await gate.reached()
    task.cancel()
    gate.release.set()
    with pytest.raises(asyncio.CancelledError):
        await task


def write_session_file(path: Path, session_id: str, messages: int) -> None:
    """A one-session turnstore export: one loop, ``messages`` messages texted ``{session_id} {i}``."""
    loop_id = f"{session_id}.loop.1"
    stamp = "2026-01-01T00:00:00Z"
    lines = [
        {
            "type": "session",
            "format": "turnstore",
            "version": 1,
            "session_id": session_id,
            "agent_id": None,
            "title": None,
            "metadata": None,
            "created_at": stamp,
            "updated_at": stamp,
            "source": None,
            "source_format": None,
        },
        {
            "type": "loop",
            "loop_id": loop_id,
            "session_id": session_id,
            "parent_loop_id": None,
            "continuation_kind": "initial",
            "fork_after": None,
            "keep_from": None,
            "config": None,
            "config_id": None,
            "status": "running",
            "started_at": stamp,
            "ended_at": None,
            "spawn_loop_id": None,
            "spawn_tool_call_id": None,
            "reported_usage": None,
            "metadata": None,
            "source": None,
        },
    ]
    for index in range(messages):
        message = user(f"{session_id} {index}").model_dump(mode="json", by_alias=True, exclude_none=True)
        lines.append(
            {
                "type": "message",
                "id": index + 1,
                "loop_id": loop_id,
                "turn_index": index,
                "seq": index,
                "message": message,
            }
        )
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def stored_texts(store: Store, session_id: str) -> dict[str, int]:
    """Text -> message id of every message of a session (none when the session does not exist)."""
    try:
        return {stored.message.content[0].text: stored.message_id for stored in store.messages.records(session_id)}
    except SessionNotFound:
        return {}


# --- one cancellation at a chosen point ------------------------------------------------


def cancelled_once(
    url: str, gate: Callable[[AsyncStore], Gate], work: Callable[[AsyncStore, str], Awaitable[Any]]
) -> tuple[int, bool, dict[str, int]]:
    """``work(store, loop_id)`` on a one-worker store, cancelled while held at ``gate(store)``; then one append.

    Returns the transactions left open and whether the workers were clean right
    after the cancellation, and the texts stored, after close and reopen.
    """

    async def scenario() -> tuple[int, bool, dict[str, int]]:
        store = await AsyncStore.open(url, workers=1)
        outside = Outside(url)
        try:
            await store.sessions.create("s")
            loop_id = (await store.loops.start("s")).loop_id
            await cancelled_at(gate(store), work(store, loop_id))
            left_open, clean = outside.open_transactions(), workers_clean(store)
            await store.messages.append(user("after"), loop_id=loop_id, turn_index=1)
        finally:
            outside.close()
            await store.close()
        with Store(url) as reopened:
            return left_open, clean, stored_texts(reopened, "s")

    return asyncio.run(scenario())


@pytest.mark.parametrize("stage", ["begin", "body", "commit"])
def test_a_cancelled_transaction_leaves_nothing_open_and_later_writes_durable(
    url: str, stage: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A transaction cancelled while BEGIN ran on its worker used to return that worker to the pool inside
    # the transaction: later appends there were acknowledged, never committed, and lost on close.
    def gate(store: AsyncStore) -> Gate:
        database = store.sync._db
        # The commit that ends the transaction (on PostgreSQL each append commits a nested level too).
        outermost = (lambda: database._state().depth == 1) if stage == "commit" else (lambda: True)
        return Gate(monkeypatch, database, {"begin": "begin", "body": "insert", "commit": "commit"}[stage], outermost)

    async def transaction(store: AsyncStore, loop_id: str) -> None:
        async with store.transaction():
            await store.messages.append(user("in 1"), loop_id=loop_id, turn_index=0)
            await store.messages.append(user("in 2"), loop_id=loop_id, turn_index=0)

    left_open, clean, texts = cancelled_once(url, gate, transaction)
    assert (left_open, clean) == (0, True)
    expected = {"in 1", "in 2", "after"} if stage == "commit" else {"after"}  # a commit under way completes
    assert set(texts) == expected


def test_a_cancelled_append_is_whole_or_absent_and_its_worker_is_free(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def gate(store: AsyncStore) -> Gate:
        return Gate(monkeypatch, store.sync.messages, "append_turn")

    async def append_turn(store: AsyncStore, loop_id: str) -> None:
        await store.messages.append_turn(loop_id, 0, [user("u"), assistant("a")])

    left_open, clean, texts = cancelled_once(url, gate, append_turn)
    assert (left_open, clean) == (0, True)
    # The cancelled call had already started: it ran to its end before the cancellation was raised.
    assert set(texts) == {"u", "a", "after"}


def test_a_cancelled_import_stops_before_its_next_session(url: str, tmp_path: Path) -> None:
    # A cancelled import used to run on to its end on a worker that was already back in the pool, so the
    # next call queued behind the whole import.
    files = []
    for index in range(20):
        files.append(tmp_path / f"imported-{index:02}.jsonl")
        write_session_file(files[-1], f"imported-{index:02}", 5)
    reached, release = threading.Event(), threading.Event()

    def progress(file: str, done: int, total: int) -> None:
        if done == 2:  # two sessions written: hold the import here until the test has cancelled it
            reached.set()
            release.wait(SETTLE)

    async def scenario() -> tuple[int, bool]:
        store = await AsyncStore.open(url, workers=1)
        try:
            task = asyncio.ensure_future(store.import_("turnstore", *files, progress=progress))
            assert await asyncio.to_thread(reached.wait, SETTLE)
            task.cancel()
            await asyncio.sleep(0)  # the task takes its cancellation, which asks the import to stop
            release.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await store.sessions.count(), workers_clean(store)
        finally:
            await store.close()

    count, clean = asyncio.run(scenario())
    assert (count, clean) == (2, True)
    with Store(url) as reopened:
        assert sorted(s.session_id for s in reopened.sessions.list()) == ["imported-00", "imported-01"]
        assert all(len(stored_texts(reopened, f"imported-0{i}")) == 5 for i in range(2))


def test_a_cancelled_open_closes_the_store_it_opened(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    import turnstore.migrate

    closed: list[Store] = []
    original_close = Store.close

    def close(self: Store) -> None:
        closed.append(self)
        original_close(self)

    monkeypatch.setattr(Store, "close", close)
    gate = Gate(monkeypatch, turnstore.migrate, "ensure_schema")

    async def scenario() -> None:
        await cancelled_at(gate, AsyncStore.open(url))

    asyncio.run(scenario())
    assert len(closed) == 1 and closed[0]._db._closed


def test_a_cancelled_close_still_closes(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> AsyncStore:
        store = await AsyncStore.open(url)
        await store.sessions.create("s")
        gate = Gate(monkeypatch, store.sync, "close")
        await cancelled_at(gate, store.close())
        return store

    store = asyncio.run(scenario())
    assert store.sync._db._closed
    assert all(worker._shutdown for worker in store._workers._all)


# --- streamed reads ------------------------------------------------------------------------


async def _reading_store(url: str, messages: int = 1_200) -> tuple[AsyncStore, str]:
    store = await AsyncStore.open(url, workers=2)
    await store.sessions.create("read")
    loop_id = (await store.loops.start("read")).loop_id
    await store.messages.append_turn(loop_id, 0, [user(str(i)) for i in range(messages)])
    return store, loop_id


@pytest.mark.parametrize("ending", ["break", "aclose", "garbage collection", "cancellation"])
def test_a_stream_left_early_gives_its_worker_back(url: str, ending: str) -> None:
    # Breaking out of `async for` used to leave the task pinned to the stream's worker, and the cleanup,
    # run later in another context, failed with "Token ... was created in a different Context".
    async def scenario() -> tuple[list[dict[str, Any]], bool, bool, list[str]]:
        store, _ = await _reading_store(url)
        try:
            with loop_errors() as reported:
                if ending == "break":
                    async for _ in store.messages.records("read"):
                        break
                elif ending == "aclose":
                    stream = store.messages.records("read")
                    await stream.__anext__()
                    await stream.aclose()
                elif ending == "garbage collection":
                    stream = store.messages.records("read")
                    await stream.__anext__()
                    del stream
                    gc.collect()
                else:
                    started = asyncio.Event()

                    async def read() -> None:
                        async for _ in store.messages.records("read"):
                            started.set()
                            await asyncio.sleep(0)

                    task = asyncio.ensure_future(read())
                    await started.wait()
                    task.cancel()
                    with pytest.raises(asyncio.CancelledError):
                        await task
                unpinned = _PINNED.get() is None
                clean = await settled(lambda: workers_clean(store))
                # The worker is usable: a transaction in this task starts, writes and commits.
                async with store.transaction():
                    await store.sessions.create("after")
                names = [s.session_id for s in await store.sessions.list()]
            return reported, unpinned, clean, names
        finally:
            await store.close()

    reported, unpinned, clean, names = asyncio.run(scenario())
    assert reported == []
    assert unpinned and clean
    assert sorted(names) == ["after", "read"]


def test_a_stream_inside_a_transaction_reads_its_writes_and_leaves_it_open(url: str) -> None:
    async def scenario() -> tuple[list[str], dict[str, int]]:
        store, loop_id = await _reading_store(url, messages=3)
        try:
            async with store.transaction():
                await store.messages.append(user("uncommitted"), loop_id=loop_id, turn_index=1)
                async for _ in store.messages.records("read"):
                    break
                seen = [stored.message.content[0].text async for stored in store.messages.records("read")]
                await store.messages.append(user("later"), loop_id=loop_id, turn_index=1)
        finally:
            await store.close()
        with Store(url) as reopened:
            return seen, stored_texts(reopened, "read")

    seen, texts = asyncio.run(scenario())
    assert seen == ["0", "1", "2", "uncommitted"]
    assert set(texts) == {"0", "1", "2", "uncommitted", "later"}


# --- random cancellation at every await ------------------------------------------------------


@dataclass
class Ledger:
    """What the random test expects to find after reopening the store."""

    acknowledged: dict[str, int] = field(default_factory=dict)
    """text -> id, for every append whose await returned (in a committed transaction, if in one)."""
    undecided: list[list[str]] = field(default_factory=list)
    """Texts of each cancelled write (an append, a turn, a transaction): all stored, or none."""
    rolled_back: list[str] = field(default_factory=list)
    """Texts of transactions whose block raised: none may be stored."""
    imported: list[str] = field(default_factory=list)
    """Sessions whose import returned: each stored whole."""
    import_cancelled: list[str] = field(default_factory=list)
    """Sessions whose import was cancelled: each stored whole, or not at all."""
    landed: dict[str, int] = field(default_factory=dict)
    """Cancellations that ended their call with CancelledError, per operation and point."""


IMPORT_MESSAGES = 6

POINTS = {
    "append": ["call"],
    "append_turn": ["call"],
    "transaction": ["begin", "body", "statement", "commit"],
    "records": ["start", "batch"],
    "import": ["call"],
}
"""Where each operation can be cancelled: the awaits it makes (a transaction's ``body`` is a plain sleep)."""

OPERATIONS = ["append"] * 3 + ["append_turn"] * 3 + ["transaction"] * 4 + ["records", "import"]


class RandomCancellations:
    """Operations on one store, each cancelled at a random one of its awaits after a random delay."""

    def __init__(self, store: AsyncStore, loops: list[list[str]], files: Path, seed: int) -> None:
        self.store = store
        self.loops = loops
        self.files = files
        self.random = random.Random(seed)
        self.ledger = Ledger()
        self._count = 0

    async def one(self) -> None:
        """One random operation in a task of its own, cancelled at a random point of it."""
        operation = self.random.choice(OPERATIONS)
        # A third of the operations are left alone: acknowledged writes, amid the cancelled ones.
        point = self.random.choice(POINTS[operation]) if self.random.random() < 0.7 else "none"
        run = {
            "append": self.append,
            "append_turn": self.append_turn,
            "transaction": self.transaction,
            "records": self.records,
            "import": self.import_,
        }[operation]
        task = asyncio.ensure_future(run(point))
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
            key = f"{operation} at {point}"
            self.ledger.landed[key] = self.ledger.landed.get(key, 0) + 1

    def _name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    def _cancel_here(self, point: str, chosen: str) -> None:
        """At the chosen point: cancel this task at its very next await, or up to 2 or 20 ms later.

        A cancellation that comes after the operation has finished finds nothing to cancel: the
        operation is acknowledged (and counted as such), like any other that returned.
        """
        if point == chosen:
            task = asyncio.current_task()
            assert task is not None
            delay = self.random.choice([0.0, self.random.uniform(0, 0.002), self.random.uniform(0, 0.02)])
            asyncio.get_running_loop().call_later(delay, task.cancel)

    async def append(self, chosen: str) -> None:
        text = self._name("a")
        self.ledger.undecided.append([text])
        self._cancel_here("call", chosen)
        message_id = await self.store.messages.append(
            user(text), loop_id=self.random.choice(self.loops[0]), turn_index=0
        )
        self.ledger.undecided.remove([text])
        self.ledger.acknowledged[text] = message_id

    async def append_turn(self, chosen: str) -> None:
        texts = [self._name("tu"), self._name("ta")]
        self.ledger.undecided.append(texts)
        self._cancel_here("call", chosen)
        ids = await self.store.messages.append_turn(
            self.random.choice(self.loops[1]), 1, [user(texts[0]), assistant(texts[1])]
        )
        self.ledger.undecided.remove(texts)
        self.ledger.acknowledged.update(zip(texts, ids))

    async def transaction(self, chosen: str) -> None:
        texts = [self._name("x") for _ in range(self.random.choice([1, 2, 3]))]
        fails = self.random.random() < 0.1
        loop_id = self.random.choice(self.loops[2])
        self.ledger.undecided.append(texts)
        ids = []
        try:
            self._cancel_here("begin", chosen)
            async with self.store.transaction():
                for text in texts:
                    self._cancel_here("body", chosen)
                    await asyncio.sleep(self.random.choice([0, 0.0005]))
                    self._cancel_here("statement", chosen)
                    ids.append(await self.store.messages.append(user(text), loop_id=loop_id, turn_index=2))
                if fails:
                    raise LookupError("the block fails")
                self._cancel_here("commit", chosen)
        except LookupError:
            self.ledger.undecided.remove(texts)
            self.ledger.rolled_back.extend(texts)
            return
        self.ledger.undecided.remove(texts)
        self.ledger.acknowledged.update(zip(texts, ids))

    async def records(self, chosen: str) -> None:
        self._cancel_here("start", chosen)
        stream = self.store.messages.records("read")
        # Left early: half the time closed by aclosing(), half the time left to garbage collection.
        closing = contextlib.aclosing(stream) if self.random.random() < 0.5 else contextlib.nullcontext(stream)
        async with closing:
            async for stored in stream:
                if stored.seq == 0:
                    self._cancel_here("batch", chosen)
                elif stored.seq % 500 == 0:
                    await asyncio.sleep(0)

    async def import_(self, chosen: str) -> None:
        session_id = self._name("imp")
        path = self.files / f"{session_id}.jsonl"
        write_session_file(path, session_id, IMPORT_MESSAGES)
        self.ledger.import_cancelled.append(session_id)
        self._cancel_here("call", chosen)
        await self.store.import_("turnstore", path)
        self.ledger.import_cancelled.remove(session_id)
        self.ledger.imported.append(session_id)


def test_random_cancellation_loses_no_acknowledged_write(url: str, tmp_path: Path) -> None:
    files = tmp_path / "imports"
    files.mkdir()

    async def scenario() -> Ledger:
        store, _ = await _reading_store(url, messages=600)  # records() reads it in two batches
        outside = Outside(url)
        try:
            await store.sessions.create("s")
            # Each kind of write has loops of its own: a loop refuses a turn index below one it holds.
            loops = [[(await store.loops.start("s")).loop_id for _ in range(2)] for _kind in range(3)]
            run = RandomCancellations(store, loops, files, seed=20261125)
            for round in range(2_000):
                await asyncio.gather(*(run.one() for _ in range(8)))
                assert outside.open_transactions() == 0, f"a transaction is left open after round {round}"
                if sum(run.ledger.landed.values()) >= CANCELLATIONS:
                    break
            assert await settled(lambda: workers_clean(store))
        finally:
            outside.close()
            await store.close()
        return run.ledger

    ledger = asyncio.run(scenario())
    print(
        f"\ncancellations that landed: {ledger.landed} (total {sum(ledger.landed.values())}); "
        f"acknowledged appends: {len(ledger.acknowledged)}; imports done {len(ledger.imported)}, "
        f"cancelled {len(ledger.import_cancelled)}"
    )
    assert sum(ledger.landed.values()) >= CANCELLATIONS
    with Store(url) as reopened:
        stored = stored_texts(reopened, "s")
        lost = {text for text, message_id in ledger.acknowledged.items() if stored.get(text) != message_id}
        assert lost == set()
        halves = [texts for texts in ledger.undecided if 0 < sum(text in stored for text in texts) < len(texts)]
        assert halves == []
        assert not set(ledger.rolled_back) & set(stored)
        for session_id in ledger.imported:
            assert len(stored_texts(reopened, session_id)) == IMPORT_MESSAGES
        for session_id in ledger.import_cancelled:
            assert len(stored_texts(reopened, session_id)) in (0, IMPORT_MESSAGES)


@pytest.mark.parametrize("workers", [1, 4])
def test_a_task_that_outlives_its_transaction_writes_outside_it(url: str, workers: int) -> None:
    """A task created inside a transaction (fire-and-forget logging) appends after the transaction
    ended; meanwhile another task's transaction on the same worker rolls back. The late append was
    acknowledged, so it must be stored: it may not join the other task's transaction."""
    acknowledged: list[str] = []

    async def scenario() -> None:
        store = await AsyncStore.open(url, workers=workers)
        session = await store.sessions.create(session_id="outlives")
        loop_id = (await store.loops.start(session.session_id)).loop_id
        started: list[asyncio.Task[None]] = []

        async def log_later() -> None:
            await asyncio.sleep(0.05)
            await store.messages.append(user("late"), loop_id=loop_id, turn_index=2)
            acknowledged.append("late")

        async def first() -> None:
            async with store.transaction():
                await store.messages.append(user("a"), loop_id=loop_id, turn_index=0)
                started.append(asyncio.create_task(log_later()))

        async def second() -> None:
            await asyncio.sleep(0.01)
            with contextlib.suppress(ValueError):
                async with store.transaction():
                    await store.messages.append(user("b"), loop_id=loop_id, turn_index=1)
                    await asyncio.sleep(0.1)
                    raise ValueError("rolled back on purpose")

        await asyncio.gather(first(), second())
        await asyncio.gather(*started)
        await store.close()

    asyncio.run(scenario())
    with Store(url) as store:
        texts = [stored.message.content[0].text for stored in store.messages.records("outlives")]
    assert acknowledged == ["late"]
    assert texts == ["a", "late"]


# --- transactions left in another context -----------------------------------------------------------


def test_a_transaction_in_an_async_generator_dropped_unclosed_ends_and_close_returns(url: str) -> None:
    """An app's async generator yields inside ``transaction()`` and is dropped without ``aclose()``: the
    event loop finalizes it in another task and context. The transaction rolls back, its worker comes
    back, and ``close()`` returns (it waited forever for a transaction counted open)."""

    async def scenario() -> None:
        store = await AsyncStore.open(url, workers=2)
        outside = Outside(url)
        try:
            await store.sessions.create("s")
            loop_id = (await store.loops.start("s")).loop_id

            async def rows() -> Any:
                async with store.transaction():
                    await store.messages.append(user("inside"), loop_id=loop_id, turn_index=0)
                    yield 1
                    yield 2

            async for _ in rows():
                break  # dropped unclosed
            gc.collect()
            assert await settled(lambda: workers_clean(store) and store._workers._open_transactions == 0)
            assert outside.open_transactions() == 0
            await store.messages.append(user("after"), loop_id=loop_id, turn_index=0)
            assert [m.text() for m in await store.messages.loop(loop_id)] == ["after"]
        finally:
            outside.close()
            if store._workers._open_transactions == 0:  # else close() would wait for it forever (the bug)
                await asyncio.wait_for(store.close(), SETTLE)

    asyncio.run(scenario())


def test_a_task_destroyed_inside_a_transaction_leaves_no_lock_behind(url: str) -> None:
    """A task still inside ``transaction()`` when its event loop is closed is destroyed unfinished: its
    rollback is queued on the worker (nothing can be awaited any more), so the write lock is not held until
    the process exits, and the store works from another event loop."""
    loop = asyncio.new_event_loop()
    store = loop.run_until_complete(AsyncStore.open(url))
    loop.run_until_complete(store.sessions.create("s"))
    loop_id = loop.run_until_complete(store.loops.start("s")).loop_id
    entered = asyncio.Event()
    pending: list[asyncio.Future[None]] = []

    async def forever() -> None:
        async with store.transaction():
            await store.messages.append(user("inside"), loop_id=loop_id, turn_index=0)
            entered.set()
            await asyncio.sleep(3600)

    async def start() -> None:
        pending.append(asyncio.ensure_future(forever()))
        await entered.wait()

    loop.run_until_complete(start())
    loop.close()
    del loop
    pending.clear()
    gc.collect()  # the pending task is destroyed here ("Task was destroyed but it is pending!")
    outside = Outside(url)
    try:

        async def after() -> None:
            assert await settled(lambda: workers_clean(store) and store._workers._open_transactions == 0)
            assert outside.open_transactions() == 0
            await asyncio.wait_for(store.messages.append(user("after"), loop_id=loop_id, turn_index=0), SETTLE)
            assert [m.text() for m in await store.messages.loop(loop_id)] == ["after"]
            await asyncio.wait_for(store.close(), SETTLE)

        asyncio.run(after())
    finally:
        outside.close()
