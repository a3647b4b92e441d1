"""The systems the interleaved sections compare, behind one awaited interface.

Each system opens on a database that already has turnstore's schema and the
workload's sessions and loops, and runs one *block* of work per call: a list
of turns to append (one message per commit, or one turn per transaction), or
a number of read calls. The driver (``interleave.py``) awaits every block,
sync systems included: a sync system's block is a plain loop of blocking calls
inside one coroutine, so it pays one coroutine call per block (≈1 µs against
the milliseconds a block takes) and nothing per message.

* ``raw``: the floor — ``sqlite3`` (``raw.py``) or ``psycopg`` (``rawpg.py``).
* ``sync``: :class:`turnstore.Store`.
* ``async``: :class:`turnstore.AsyncStore`, every call awaited in turn, as an
  agent loop awaits its store between model calls.
* ``async1``: the same with ``workers=1`` (a diagnostic: one thread, one connection).
* ``aiosqlite``: the SQLite floor's statements through aiosqlite, one
  ``await`` per statement (``BEGIN IMMEDIATE``, ``INSERT``…, ``UPDATE``,
  ``COMMIT``), as a hand-written async app would; appends only.
"""

from __future__ import annotations

import asyncio
from typing import Any

import raw
import workload

from turnstore import AsyncStore, Store

try:
    import aiosqlite
except ImportError:  # a benchmark-only requirement (benchmarks/requirements.txt)
    aiosqlite = None

try:
    import rawpg
except ImportError:  # psycopg missing: no PostgreSQL section
    rawpg = None  # type: ignore[assignment]


def _usage_tuple(totals: Any) -> tuple[Any, ...]:
    return (
        totals.input,
        totals.output,
        totals.reasoning,
        totals.cache_read,
        totals.cache_write,
        totals.total_tokens,
        totals.requests,
    )


class System:
    """One way of storing the workload; subclasses fill in the blocks."""

    name = ""
    label = ""
    reads = True  # whether the system takes part in the read operations

    @classmethod
    async def open(cls, url: str) -> System:
        raise NotImplementedError

    async def write(self, op: str, turns: list[workload.Turn]) -> None:
        await (self.append(turns) if op == "append" else self.append_turn(turns))

    async def append(self, turns: list[workload.Turn]) -> None:
        raise NotImplementedError

    async def append_turn(self, turns: list[workload.Turn]) -> None:
        raise NotImplementedError

    async def last(self, session_id: str, n: int, calls: int) -> None:
        raise NotImplementedError

    async def usage(self, session_id: str, calls: int) -> None:
        raise NotImplementedError

    async def check_last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        """The window as JSON dicts, to compare systems."""
        raise NotImplementedError

    async def check_usage(self, session_id: str) -> tuple[Any, ...]:
        """(input, output, reasoning, cache_read, cache_write, total_tokens, requests)."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class RawSqlite(System):
    name, label = "raw", "raw sqlite3"

    def __init__(self, rs: raw.RawStore) -> None:
        self.rs = rs

    @classmethod
    async def open(cls, url: str) -> RawSqlite:
        return cls(raw.RawStore(raw.connect(url)))

    async def append(self, turns: list[workload.Turn]) -> None:
        append = self.rs.append
        for turn in turns:
            for message in turn.dicts:
                append(message, turn.session_id, turn.loop_id, turn.turn_index)

    async def append_turn(self, turns: list[workload.Turn]) -> None:
        append_turn = self.rs.append_turn
        for turn in turns:
            append_turn(turn.dicts, turn.session_id, turn.loop_id, turn.turn_index)

    async def last(self, session_id: str, n: int, calls: int) -> None:
        for _ in range(calls):
            self.rs.last(session_id, n)

    async def usage(self, session_id: str, calls: int) -> None:
        for _ in range(calls):
            self.rs.usage(session_id)

    async def check_last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        return self.rs.last(session_id, n)

    async def check_usage(self, session_id: str) -> tuple[Any, ...]:
        return tuple(self.rs.usage(session_id))

    async def close(self) -> None:
        self.rs.connection.close()


class RawPostgres(RawSqlite):
    name, label = "raw", "raw psycopg"

    @classmethod
    async def open(cls, url: str) -> RawPostgres:
        return cls(rawpg.RawPgStore(rawpg.connect(url)))


class TurnstoreSync(System):
    name, label = "sync", "turnstore sync"

    def __init__(self, store: Store) -> None:
        self.store = store

    @classmethod
    async def open(cls, url: str) -> TurnstoreSync:
        return cls(Store(url))

    async def append(self, turns: list[workload.Turn]) -> None:
        append = self.store.messages.append
        for turn in turns:
            for message in turn.models:
                append(message, loop_id=turn.loop_id, turn_index=turn.turn_index)

    async def append_turn(self, turns: list[workload.Turn]) -> None:
        append_turn = self.store.messages.append_turn
        for turn in turns:
            append_turn(turn.loop_id, turn.turn_index, turn.models)

    async def last(self, session_id: str, n: int, calls: int) -> None:
        for _ in range(calls):
            self.store.messages.last(session_id, n)

    async def usage(self, session_id: str, calls: int) -> None:
        for _ in range(calls):
            self.store.usage.session(session_id)

    async def check_last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        return [m.model_dump(mode="json") for m in self.store.messages.last(session_id, n)]

    async def check_usage(self, session_id: str) -> tuple[Any, ...]:
        return _usage_tuple(self.store.usage.session(session_id))

    async def close(self) -> None:
        self.store.close()


class TurnstoreAsync(System):
    name, label = "async", "turnstore async"

    def __init__(self, store: AsyncStore) -> None:
        self.store = store

    @classmethod
    async def open(cls, url: str) -> TurnstoreAsync:
        store = await AsyncStore.open(url)
        # Start every worker thread and its connection now (8 concurrent calls; at most
        # 4 threads on SQLite, 8 on PostgreSQL), as they are in an app that has run a while.
        await asyncio.gather(*(store.sessions.exists("warm-up") for _ in range(8)))
        return cls(store)

    async def append(self, turns: list[workload.Turn]) -> None:
        append = self.store.messages.append
        for turn in turns:
            for message in turn.models:
                await append(message, loop_id=turn.loop_id, turn_index=turn.turn_index)

    async def append_turn(self, turns: list[workload.Turn]) -> None:
        append_turn = self.store.messages.append_turn
        for turn in turns:
            await append_turn(turn.loop_id, turn.turn_index, turn.models)

    async def last(self, session_id: str, n: int, calls: int) -> None:
        for _ in range(calls):
            await self.store.messages.last(session_id, n)

    async def usage(self, session_id: str, calls: int) -> None:
        for _ in range(calls):
            await self.store.usage.session(session_id)

    async def check_last(self, session_id: str, n: int) -> list[dict[str, Any]]:
        return [m.model_dump(mode="json") for m in await self.store.messages.last(session_id, n)]

    async def check_usage(self, session_id: str) -> tuple[Any, ...]:
        return _usage_tuple(await self.store.usage.session(session_id))

    async def close(self) -> None:
        await self.store.close()


class TurnstoreAsyncOneWorker(TurnstoreAsync):
    """A diagnostic: ``AsyncStore(url, workers=1)``, so every call runs on the same thread and connection.

    With the default pool, calls awaited one after another land on whichever
    idle worker wakes first, so they rotate over the pool's connections; on
    SQLite a connection drops its page cache whenever another connection has
    written since its last transaction. This column shows what that costs.
    """

    name, label = "async1", "turnstore async, 1 worker"

    @classmethod
    async def open(cls, url: str) -> TurnstoreAsyncOneWorker:
        store = await AsyncStore.open(url, workers=1)
        await store.sessions.exists("warm-up")
        return cls(store)


class AioSqlite(System):
    """The SQLite floor's rows and statements, one ``await`` per statement on an aiosqlite connection."""

    name, label = "aiosqlite", "aiosqlite"
    reads = False

    def __init__(self, connection: Any) -> None:
        self.connection = connection
        self.rows = raw.RawStore(None)  # type: ignore[arg-type]  # only its row building and seq counters

    @classmethod
    async def open(cls, url: str) -> AioSqlite:
        connection = await aiosqlite.connect(url, isolation_level=None)
        for name, value in raw.PRAGMAS.items():
            await connection.execute(f"PRAGMA {name}={value}")
        return cls(connection)

    async def pragmas(self) -> dict[str, Any]:
        got = {}
        for name in raw.PRAGMAS:
            cursor = await self.connection.execute(f"PRAGMA {name}")
            got[name] = (await cursor.fetchone())[0]
        return got

    async def append(self, turns: list[workload.Turn]) -> None:
        db, row_of = self.connection, self.rows._row
        for turn in turns:
            for message in turn.dicts:
                row = row_of(message, turn.session_id, turn.loop_id, turn.turn_index)
                await db.execute("BEGIN IMMEDIATE")
                try:
                    _ = (await db.execute(raw.INSERT, row)).lastrowid  # the new id, as the floor reads it
                    await db.execute(raw.TOUCH, (raw._now(), turn.session_id))
                except BaseException:
                    await db.execute("ROLLBACK")
                    raise
                await db.execute("COMMIT")

    async def append_turn(self, turns: list[workload.Turn]) -> None:
        db, row_of = self.connection, self.rows._row
        for turn in turns:
            rows = [row_of(message, turn.session_id, turn.loop_id, turn.turn_index) for message in turn.dicts]
            ids = []
            await db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    ids.append((await db.execute(raw.INSERT, row)).lastrowid)
                await db.execute(raw.TOUCH, (raw._now(), turn.session_id))
            except BaseException:
                await db.execute("ROLLBACK")
                raise
            await db.execute("COMMIT")

    async def close(self) -> None:
        await self.connection.close()
