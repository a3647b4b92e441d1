"""The four ways a test can reach a store, behind one sync interface.

* ``sqlite``: :class:`turnstore.Store` on a fresh SQLite file.
* ``sqlite-async``: :class:`turnstore.AsyncStore` on a fresh SQLite file.
* ``postgresql``: :class:`turnstore.Store` on this test run's PostgreSQL database.
* ``postgresql-async``: :class:`turnstore.AsyncStore` on it.

Behaviour tests are written once against the sync API; for the async
backends :class:`SyncFacade` drives the async store from sync code, awaiting
each call on its own event loop (transactions included), so every test
exercises the async store's real methods.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import sqlalchemy as sa

from turnstore import AsyncStore

BACKENDS = ("sqlite", "sqlite-async", "postgresql", "postgresql-async")
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
TABLES = ("imports", "messages", "loops", "sessions", "media", "session_media", "prices")


def selected_backends() -> list[str]:
    """Backends to run: ``$TURNSTORE_TEST_BACKENDS`` (comma-separated), else all four."""
    chosen = os.environ.get("TURNSTORE_TEST_BACKENDS")
    if not chosen:
        return list(BACKENDS)
    names = [name.strip() for name in chosen.split(",") if name.strip()]
    unknown = set(names) - set(BACKENDS)
    if unknown:
        raise ValueError(f"unknown test backends {sorted(unknown)}; choose from {BACKENDS}")
    return names


def postgres_server_url() -> str:
    """``$TURNSTORE_TEST_POSTGRES_URL`` (a database on the server the tests may use), with its default."""
    return os.environ.get("TURNSTORE_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)


class PostgresDatabase:
    """A database created for this test run on the test server, dropped at the end."""

    def __init__(self) -> None:
        server = sa.engine.make_url(postgres_server_url()).set(drivername="postgresql+psycopg")
        self.name = f"turnstore_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
        self._extra: list[str] = []
        self._admin = sa.create_engine(server, isolation_level="AUTOCOMMIT", poolclass=sa.pool.NullPool)
        with self._admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{self.name}"')
            # Tests need atomicity, not durability across a power cut: commits need not wait for fsync.
            connection.exec_driver_sql(f'ALTER DATABASE "{self.name}" SET synchronous_commit = off')
        self.url = server.set(database=self.name).render_as_string(hide_password=False)

    def new_database(self) -> str:
        """URL of one more fresh database (for tests that need an empty, unmigrated one)."""
        name = f"{self.name}_{uuid.uuid4().hex[:6]}"
        with self._admin.connect() as connection:
            connection.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self._extra.append(name)
        return sa.engine.make_url(self.url).set(database=name).render_as_string(hide_password=False)

    def empty(self) -> None:
        """Remove every row (the schema stays), so the next test starts clean."""
        engine = sa.create_engine(self.url, poolclass=sa.pool.NullPool)
        try:
            with engine.begin() as connection:
                present = set(sa.inspect(connection).get_table_names())
                tables = ", ".join(name for name in TABLES if name in present)
                if tables:
                    connection.exec_driver_sql(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
        finally:
            engine.dispose()

    def drop(self) -> None:
        with self._admin.connect() as connection:
            for name in [self.name, *self._extra]:
                connection.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self._admin.dispose()


def postgres_reachable() -> str | None:
    """None when the test server answers, else why not."""
    url = sa.engine.make_url(postgres_server_url()).set(drivername="postgresql+psycopg")
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool, connect_args={"connect_timeout": 3})
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1")
    except Exception as error:  # any failure to connect means: not reachable
        return f"PostgreSQL at {url.render_as_string(hide_password=True)} is not reachable: {error}"
    finally:
        engine.dispose()
    return None


class SyncFacade:
    """Drives an object of the async store from sync test code."""

    def __init__(self, target: Any, runner: Runner) -> None:
        self._target = target
        self._runner = runner

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if inspect.isasyncgenfunction(value):
            return lambda *args, **kwargs: iter(self._runner.run(_collect(value(*args, **kwargs))))
        if inspect.iscoroutinefunction(value):
            return lambda *args, **kwargs: self._runner.run(value(*args, **kwargs))
        if hasattr(value, "_sync_class"):  # an async repository
            return SyncFacade(value, self._runner)
        return value


async def _collect(iterator: Any) -> list[Any]:
    return [item async for item in iterator]


class Runner:
    """An event loop for one test; inside a transaction, calls run in the task that holds it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._inbox: asyncio.Queue[Any] | None = None

    def run(self, awaitable: Any) -> Any:
        if self._inbox is None:
            return self.loop.run_until_complete(awaitable)
        future = self.loop.create_future()
        self._inbox.put_nowait((awaitable, future))
        return self.loop.run_until_complete(future)

    @contextmanager
    def transaction(self, store: AsyncStore) -> Iterator[None]:
        if self._inbox is not None:  # nested: join the open transaction, as AsyncStore.transaction() does
            yield
            return
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        entered = self.loop.create_future()

        async def hold() -> None:
            async with store.transaction():
                entered.set_result(None)
                while (item := await inbox.get()) is not None:
                    if isinstance(item, BaseException):
                        raise item
                    awaitable, future = item
                    try:
                        future.set_result(await awaitable)
                    except Exception as error:
                        future.set_exception(error)

        holder = self.loop.create_task(hold())
        self.loop.run_until_complete(entered)
        self._inbox = inbox
        try:
            yield
        except BaseException as error:
            self._inbox = None
            inbox.put_nowait(error)
            try:
                self.loop.run_until_complete(holder)
            except BaseException:
                pass
            raise
        self._inbox = None
        inbox.put_nowait(None)
        self.loop.run_until_complete(holder)

    def close(self) -> None:
        self.loop.close()


class SyncAsyncStore(SyncFacade):
    """An :class:`AsyncStore` with the sync store's interface, for the shared behaviour tests."""

    def __init__(self, url: str, **options: Any) -> None:
        runner = Runner()
        store = runner.run(AsyncStore.open(url, **options))
        super().__init__(store, runner)
        self._async = store
        self._db = store.sync._db  # tests that look at the connection itself
        self.settings = store.sync.settings
        self.engine = store.sync.engine

    @contextmanager
    def transaction(self) -> Iterator[SyncAsyncStore]:
        with self._runner.transaction(self._async):
            yield self

    def close(self) -> None:
        self._runner.run(self._async.close())
        self._runner.close()

    def __enter__(self) -> SyncAsyncStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
