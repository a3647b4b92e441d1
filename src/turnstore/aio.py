"""``AsyncStore``: the same store for asyncio programs, every method awaited.

The async store runs the sync store's own methods — the same repositories,
the same statements, the same transactions — in a small pool of worker
threads, each with its own database connection: one thread hop per call,
where aiosqlite hops once per statement. The figures are in ``docs/async.md``.

A transaction that spans several awaits is pinned to one worker thread (and
so to one connection) for its duration::

    async with store.transaction():
        loop = await store.loops.start(session_id)
        await store.messages.append_turn(loop.loop_id, 0, [prompt, reply])

Every entry point is cancellation-safe. A call handed to a worker thread
cannot be interrupted, so a cancelled await waits for its thread work to end
(work that had not started yet never runs) and only then raises
``CancelledError``: when it returns, nothing of the call is still running, a
transaction it was in has been rolled back (or committed, when the
cancellation came during the commit), and its worker goes back to the pool
clean. A cancelled :meth:`AsyncStore.import_` stops before its next session.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import os
import threading
import weakref
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager, suppress
from typing import IO, TYPE_CHECKING, Any, Concatenate, Generic, TypeVar

from typing_extensions import ParamSpec, Self

from .aio_repositories import (
    AsyncLoopRepository,
    AsyncMessageRepository,
    AsyncPriceRepository,
    AsyncSessionRepository,
    AsyncUsageRepository,
)
from .errors import StoreClosed, TransactionOpen
from .store import Store

if TYPE_CHECKING:
    from .importers import ImportReport
    from .limits import Limits
    from .media import MediaMode
    from .usage import PriceTable

__all__ = [
    "AsyncLoopRepository",
    "AsyncMessageRepository",
    "AsyncPriceRepository",
    "AsyncSessionRepository",
    "AsyncStore",
    "AsyncUsageRepository",
]

T = TypeVar("T")
P = ParamSpec("P")


class _Pin:
    """A worker lent to one transaction, while the transaction is open.

    Tasks created inside a transaction copy the context, and so the pin: while
    the transaction is open their calls join it (same worker, same
    connection); once it has ended the pin is closed, and a call from such a
    task that outlived it goes to the pool — never into whatever transaction
    the worker serves next.
    """

    __slots__ = ("open", "worker")

    def __init__(self, worker: ThreadPoolExecutor) -> None:
        self.worker = worker
        self.open = True


_PINNED: contextvars.ContextVar[_Pin | None] = contextvars.ContextVar("turnstore_pinned_worker", default=None)


def _pinned_worker() -> ThreadPoolExecutor | None:
    """The worker of the open transaction this task is in, if any."""
    pin = _PINNED.get()
    return pin.worker if pin is not None and pin.open else None


STREAM_BATCH = 64
"""Items a streamed read (``records()``) fetches per thread hop.

Small on purpose: a batch is alive until the caller has iterated it, and a
few hundred models at a time (about ten tracked objects each) outlive the
cyclic collector's young passes, so it promotes them and its full passes walk
the app's whole heap again. With 64 a batch stays below the first threshold;
the extra thread hops cost less than those passes."""


class _Workers:
    """Runs blocking store calls off the event loop, on single-thread workers.

    Each worker is one thread with its own database connection. Idle workers
    are kept on a stack and the most recently used one takes the next call,
    so calls awaited one after another all run on the same thread and
    connection: its caches stay warm (on SQLite a connection drops its page
    cache whenever another connection wrote; on PostgreSQL each connection is
    a server process). Concurrent calls spread over up to ``limit`` workers
    and wait in line beyond that. A transaction or a streamed read borrows a
    worker for its whole duration, so all its statements run on one
    connection; it is not counted against ``limit``.

    A worker goes back to the stack only once the thread work of its call is
    over, cancelled or not (:func:`_complete`), so the next call never queues
    behind a call whose caller has gone.

    Closing (:meth:`shutdown`) refuses new calls and transactions
    (:class:`~turnstore.errors.StoreClosed`), waits for the transactions
    already open to end — their own calls still run — then for the calls
    under way.
    """

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._closing = False
        self._start_empty()
        _WORKER_POOLS.add(self)

    def _start_empty(self) -> None:
        """No worker, no call under way, no transaction open: a new pool, or the pool in a forked child."""
        self._busy = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._idle: list[ThreadPoolExecutor] = []
        self._all: list[ThreadPoolExecutor] = []
        self._lock = threading.Lock()
        self._open_transactions = 0
        self._transaction_ended = threading.Condition(self._lock)

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` on a worker thread: the task's pinned one, else one from the pool."""
        return await self.call(functools.partial(function, *args, **kwargs))

    async def call(
        self, call: Callable[[], T], on_cancel: Callable[[], None] | None = None, *, droppable: bool = True
    ) -> T:
        """``call()`` on a worker thread, awaited to its end even when the awaiting task is cancelled.

        ``on_cancel`` runs (on the event loop) as soon as a cancellation arrives,
        before the wait for the thread: a long call can be asked to stop early.
        ``droppable=False`` for a call that must run even when cancelled before
        it has started (the commit or rollback that ends a transaction). A pool
        worker goes back to the pool only once the thread work is over.
        """
        pinned = _pinned_worker()
        if pinned is not None:
            return await _complete(pinned.submit(call), on_cancel, droppable)
        await self._acquire_slot(asyncio.get_running_loop())
        if self._closing:  # waited in line while the store began closing: refused like a new call
            self._release_slot()
            raise StoreClosed("the store is closed; open it again to use it")
        worker = self._take()
        try:
            return await _complete(worker.submit(call), on_cancel, droppable)
        finally:
            self._give(worker)
            self._release_slot()

    async def _acquire_slot(self, loop: asyncio.AbstractEventLoop) -> None:
        with self._lock:
            if self._closing:
                raise StoreClosed("the store is closed; open it again to use it")
            if self._busy < self._limit and not self._waiters:
                self._busy += 1
                return
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
        try:
            await waiter  # the releasing call hands its slot over
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self._release_slot()  # handed over just as we were cancelled: pass it on
            raise

    def _release_slot(self) -> None:
        with self._lock:
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.get_loop().call_soon_threadsafe(_hand_over, waiter, self)
                    return
            self._busy -= 1

    def _take(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._idle:
                return self._idle.pop()
            worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="turnstore")
            self._all.append(worker)
            return worker

    def _give(self, worker: ThreadPoolExecutor) -> None:
        with self._lock:
            self._idle.append(worker)

    @contextmanager
    def pinned(self) -> Iterator[ThreadPoolExecutor]:
        """Pin this task's calls to one worker thread, which it yields (the one already pinned, inside another).

        The pin ends (and the worker goes back) even when the block is left in
        another context than the one it was entered in: an async generator
        the event loop finalizes, a task destroyed while pending.
        """
        pinned = _pinned_worker()
        if pinned is not None:
            yield pinned
            return
        with self._lock:
            if self._closing:
                raise StoreClosed("the store is closed; open it again to use it")
            self._open_transactions += 1
        pin = _Pin(self._take())
        token = _PINNED.set(pin)
        try:
            yield pin.worker
        finally:
            pin.open = False  # tasks that copied the context while it was open no longer use it
            with suppress(ValueError):  # left in another context, which never held the pin
                _PINNED.reset(token)
            with self._lock:
                self._idle.append(pin.worker)
                self._open_transactions -= 1
                self._transaction_ended.notify_all()

    def for_stream(self) -> tuple[ThreadPoolExecutor, bool]:
        """The worker a streamed read runs on, and whether it was borrowed from the pool for it.

        Inside a transaction that is the task's pinned worker (the read sees the
        transaction's writes); otherwise a worker taken off the stack, which
        :meth:`end_stream` gives back. A stream never pins the task itself: an
        async generator's cleanup may run in another task and context (when it
        is garbage collected), where a context variable cannot be reset.
        """
        pinned = _pinned_worker()
        if pinned is not None:
            return pinned, False
        if self._closing:
            raise StoreClosed("the store is closed; open it again to use it")
        return self._take(), True

    def stream(self, open: Callable[[], Iterator[T]]) -> _Stream[T]:
        """A streamed read of the iterator ``open()`` returns, fetched in batches on one worker."""
        return _Stream(self, open)

    async def end_stream(self, worker: ThreadPoolExecutor, borrowed: bool, iterator: Iterator[Any] | None) -> None:
        """Close a streamed read's iterator on its worker, then give a borrowed worker back.

        The worker is given back by the close itself, on its thread, so it
        returns to the pool clean even when this await is cancelled or never
        resumes (a generator finalized as its event loop stops).
        """
        try:
            closing = worker.submit(_close, iterator)
        except RuntimeError:  # the store was closed first: its connections are gone already
            return
        if borrowed:
            closing.add_done_callback(lambda _: self._give(worker))
        if await _finish(asyncio.wrap_future(closing)):
            raise asyncio.CancelledError

    def check_not_in_transaction(self) -> None:
        """Raise :class:`~turnstore.errors.TransactionOpen` when this task is inside a transaction of this pool."""
        if _pinned_worker() is not None:
            raise TransactionOpen("close() inside a transaction would wait for that transaction: leave it first")

    def begin_closing(self) -> None:
        """Refuse new calls and transactions from now on (:class:`~turnstore.errors.StoreClosed`)."""
        with self._lock:
            self._closing = True

    def shutdown(self) -> None:
        """Refuse new work, wait for open transactions to end, then for the calls under way (blocks)."""
        with self._lock:
            self._closing = True
            while self._open_transactions:
                self._transaction_ended.wait()
            workers = list(self._all)
        for worker in workers:
            worker.shutdown(wait=True)


_WORKER_POOLS: weakref.WeakSet[_Workers] = weakref.WeakSet()
"""Every live pool, so a forked child can drop its parent's workers (their threads do not exist there)."""


def _empty_pools_after_fork() -> None:
    """In a forked child, each pool starts empty: its next call starts a worker (with its own connection,
    as the sync store's are dropped after a fork too) instead of waiting forever for a parent's thread."""
    for pool in list(_WORKER_POOLS):
        pool._start_empty()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_empty_pools_after_fork)


class _Stream(Generic[T]):
    """One streamed read: its iterator opened and read in batches on one worker, closed there.

    The async repositories' streaming methods (``records()``) are async
    generators around it. Breaking out of ``async for``, ``aclose()``,
    cancellation and garbage collection all end it the same way (:meth:`close`):
    the sync iterator is closed on its worker, and the worker goes back to the pool.
    """

    __slots__ = ("_borrowed", "_failed", "_iterator", "_open", "_worker", "_workers")

    def __init__(self, workers: _Workers, open: Callable[[], Iterator[T]]) -> None:
        self._workers = workers
        self._open = open
        self._worker: ThreadPoolExecutor | None = None
        self._borrowed = False
        self._iterator: Iterator[T] | None = None
        self._failed: Exception | None = None
        """What the sync iterator raised after the items of the last batch: raised at the next one."""

    async def batch(self) -> list[T]:
        """The next items (at most :data:`STREAM_BATCH`, one thread hop); empty at the end.

        An error of the sync iterator comes after the items it yielded first, as in a sync loop.
        """
        if self._failed is not None:
            pending, self._failed = self._failed, None
            raise pending
        if self._worker is None:
            self._worker, self._borrowed = self._workers.for_stream()
            self._iterator = await _complete(self._submit(self._open))
        if self._iterator is None:
            return []
        taken: tuple[list[T], Exception | None] = await _complete(self._submit(_take, self._iterator, STREAM_BATCH))
        batch, failed = taken
        if failed is not None and not batch:
            raise failed
        self._failed = failed
        return batch

    def _submit(self, call: Callable[..., Any], *args: Any) -> Future[Any]:
        assert self._worker is not None
        try:
            return self._worker.submit(call, *args)
        except RuntimeError:  # the worker was shut down: the store was closed under this stream
            raise StoreClosed("the store was closed while this stream was read; open it again to read on") from None

    async def close(self) -> None:
        """Close the iterator on its worker and give a borrowed worker back."""
        if self._worker is not None:
            await self._workers.end_stream(self._worker, self._borrowed, self._iterator)


async def _complete(future: Future[T], on_cancel: Callable[[], None] | None = None, droppable: bool = True) -> T:
    """The result of work handed to a worker thread; when cancelled, the work's end, then ``CancelledError``.

    Cancelling the await drops work that has not started, if ``droppable`` (it
    then never runs). Work already running on the thread cannot be stopped:
    this waits for it to finish, through any further cancellation, before
    raising, so the caller can hand the worker on or roll back on it with
    nothing of the call still running there. ``on_cancel`` is called when the
    cancellation arrives.
    """
    waiting = asyncio.wrap_future(future)
    try:
        return await (waiting if droppable else asyncio.shield(waiting))
    except asyncio.CancelledError:
        if on_cancel is not None:
            on_cancel()
        # Cancelling ``waiting`` tried to drop the work; a new one waits for the work that could not be dropped.
        await _finish(asyncio.wrap_future(future) if waiting.cancelled() else waiting)
        raise


def _on_own_thread(work: Callable[[], T]) -> asyncio.Future[T]:
    """Run ``work`` on a thread of its own, joined once it is done: its outcome, as a future of the running loop.

    For opening and closing the store, which block. Not the event loop's default
    executor: that is the app's, and its threads would outlive the store.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = context.run(work)
        except BaseException as error:
            done = functools.partial(settle, functools.partial(future.set_exception, error))
        else:
            done = functools.partial(settle, functools.partial(future.set_result, result))
        try:
            loop.call_soon_threadsafe(done)
        except RuntimeError:  # the loop closed meanwhile: nobody is waiting any more
            pass

    thread = threading.Thread(target=run, name="turnstore-open-close")
    thread.start()
    future.add_done_callback(lambda _: thread.join())  # first callback: joined before any awaiter resumes
    return future


async def _shielded(future: asyncio.Future[T]) -> T:
    """``future``'s result; when the awaiting task is cancelled, ``future`` runs on, is waited for, then ``CancelledError``.

    For work outside the worker pool (opening and closing the store), which must not be dropped.
    """
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        await _finish(future)
        raise


async def _finish(future: asyncio.Future[Any]) -> bool:
    """Wait until ``future`` is done, whatever its outcome, through cancellation; whether any arrived meanwhile."""
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait([future])
        except asyncio.CancelledError:
            cancelled = True
    if not future.cancelled():
        future.exception()  # retrieved: an error of abandoned work is not logged as never retrieved
    return cancelled


def _close(iterator: Iterator[Any] | None) -> None:
    """Close a streamed read's iterator (its cursor with it), on the worker that owns its connection."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _hand_over(waiter: asyncio.Future[None], workers: _Workers) -> None:
    """Wake a waiting call with the slot just freed (on the waiter's own event loop)."""
    if waiter.done():  # cancelled meanwhile: the slot goes to the next in line
        workers._release_slot()
    else:
        waiter.set_result(None)


def _take(iterator: Iterator[T], count: int) -> tuple[list[T], Exception | None]:
    """Up to ``count`` items, and what the iterator raised after them, if it did."""
    batch: list[T] = []
    try:
        for item in iterator:
            batch.append(item)
            if len(batch) == count:
                break
    except Exception as error:
        return batch, error
    return batch, None


class AsyncStore:
    """A session and transcript store for asyncio programs: :class:`~turnstore.Store`, awaited.

    Takes the same arguments as :class:`~turnstore.Store`, plus ``workers``:
    how many threads (each with its own connection) run database calls
    (default 4 on SQLite, where writes queue on one lock anyway, and 8 on
    PostgreSQL).

    Opening upgrades the schema, which blocks; inside a running event loop
    prefer ``store = await AsyncStore.open(url)``.
    """

    def __init__(
        self,
        url: str | os.PathLike[str] | None = None,
        *,
        workers: int | None = None,
        auto_upgrade: bool = True,
        prices: PriceTable | Mapping[str, Any] | None = None,
        limits: Limits | None = None,
        pragmas: Mapping[str, Any] | None = None,
        busy_budget: float = 60.0,
        echo: bool = False,
        read_only: bool = False,
    ) -> None:
        self._store = Store(
            url,
            auto_upgrade=auto_upgrade,
            prices=prices,
            limits=limits,
            pragmas=pragmas,
            busy_budget=busy_budget,
            echo=echo,
            read_only=read_only,
        )
        self._workers = _Workers(workers or (4 if self._store.dialect == "sqlite" else 8))
        self.sessions = AsyncSessionRepository(self._store.sessions, self._workers)
        self.loops = AsyncLoopRepository(self._store.loops, self._workers)
        self.messages = AsyncMessageRepository(self._store.messages, self._workers)
        self.usage = AsyncUsageRepository(self._store.usage, self._workers)
        self.prices = AsyncPriceRepository(self._store.prices, self._workers)

    @classmethod
    async def open(
        cls,
        url: str | os.PathLike[str] | None = None,
        *,
        workers: int | None = None,
        auto_upgrade: bool = True,
        prices: PriceTable | Mapping[str, Any] | None = None,
        limits: Limits | None = None,
        pragmas: Mapping[str, Any] | None = None,
        busy_budget: float = 60.0,
        echo: bool = False,
        read_only: bool = False,
    ) -> AsyncStore:
        """Open a store without blocking the event loop (schema upgrade included); arguments as :class:`AsyncStore`.

        Cancelled, it waits for the opening under way and closes the store it opened.
        """
        build = functools.partial(
            cls,
            url,
            workers=workers,
            auto_upgrade=auto_upgrade,
            prices=prices,
            limits=limits,
            pragmas=pragmas,
            busy_budget=busy_budget,
            echo=echo,
            read_only=read_only,
        )
        opening = _on_own_thread(build)
        try:
            return await _shielded(opening)
        except asyncio.CancelledError:
            if not opening.cancelled() and opening.exception() is None:
                await _shielded(asyncio.ensure_future(opening.result().close()))
            raise

    @property
    def url(self) -> str:
        """The database URL."""
        return self._store.url

    @property
    def dialect(self) -> str:
        """``"sqlite"`` or ``"postgresql"``."""
        return self._store.dialect

    @property
    def sync(self) -> Store:
        """The sync store underneath (for code that is not async)."""
        return self._store

    async def upgrade(self, revision: str = "head") -> None:
        """Upgrade the schema to ``revision`` (default: the newest)."""
        await self._workers.run(self._store.upgrade, revision)

    async def schema_version(self) -> str | None:
        """The schema revision the database is at."""
        return await self._workers.run(self._store.schema_version)

    async def import_(
        self,
        format: str,
        *paths: str | os.PathLike[str],
        dry_run: bool = False,
        skip_invalid: bool = False,
        replace: bool = False,
        session_id: str | None = None,
        progress: Any = None,
        tune_process: bool = False,
    ) -> ImportReport:
        """Import histories; see :meth:`turnstore.Store.import_`.

        Cancelled, the import stops before its next session (each session is
        written whole or not at all) and the cancellation is raised once it has.
        """
        stop = threading.Event()
        steps = self._store.steps

        def run() -> ImportReport:
            with steps.stopping(stop):
                return self._store.import_(
                    format,
                    *paths,
                    dry_run=dry_run,
                    skip_invalid=skip_invalid,
                    replace=replace,
                    session_id=session_id,
                    progress=progress,
                    tune_process=tune_process,
                )

        return await self._workers.call(run, on_cancel=stop.set)

    async def export(
        self,
        session_id: str,
        format: str = "turnstore",
        file: str | os.PathLike[str] | IO[str] | None = None,
        *,
        media: MediaMode = "inline",
    ) -> str | None:
        """Export one session; see :meth:`turnstore.Store.export`."""
        return await self._workers.run(self._store.export, session_id, format, file, media=media)

    async def run(self, function: Callable[Concatenate[Store, P], T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """``function(store.sync, *args, **kwargs)`` on a worker thread, like every call of this store.

        For several sync calls that belong together (an adapter's read-then-write
        in one ``store.transaction()``): cancelled, the function still runs to its
        end before the cancellation is raised, so a transaction it opens always
        commits or rolls back. Inside :meth:`transaction` it runs on that
        transaction's worker.
        """
        return await self._workers.call(functools.partial(function, self._store, *args, **kwargs))

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncStore]:
        """Group several awaited writes into one transaction: all of them happen, or none.

        Every call inside runs on one worker thread, and so on one connection.
        Cancelled at any await (the start and the commit included), the
        transaction is rolled back on that worker before ``CancelledError`` is
        raised, unless its commit had begun: then it commits first.
        """
        steps = self._store.steps
        began = False

        def begin() -> None:
            nonlocal began
            steps.begin()  # inside another transaction of this task, begin/commit just join it
            began = True

        with self._workers.pinned() as worker:
            try:
                await self._workers.call(begin)
                yield self
            except GeneratorExit:
                # The task was destroyed with the transaction open (its event loop closed under it): nothing can
                # be awaited any more, so the rollback is queued on the worker, ahead of whatever it runs next.
                if began:
                    with suppress(RuntimeError):  # the store was closed first: its connections are gone already
                        worker.submit(steps.rollback)
                raise
            except BaseException:
                # Cancelled or failed at any await, the begin included: each awaited call has finished
                # on the worker by now, so this rollback is the worker's next statement.
                if began:
                    await self._workers.call(steps.rollback, droppable=False)
                raise
            # Cancelled meanwhile, the commit still runs (or rolls back, if it fails) before CancelledError.
            await self._workers.call(steps.commit, droppable=False)

    async def close(self) -> None:
        """Refuse new calls, let open transactions end, finish running calls, close every connection.

        From the moment it is called, a new call or transaction, and a call
        still waiting for a free worker, raises
        :class:`~turnstore.errors.StoreClosed`; transactions already open in
        other tasks go on (their calls still run) and close waits until each
        has committed or rolled back, then for the calls under way and for a
        WAL checkpoint a large import left running. The waiting happens on a
        thread: the event loop goes on meanwhile. A cancelled close still
        closes the store before it raises.

        Raises:
            TransactionOpen: called inside a transaction of this task, which
                close would wait for forever; nothing is closed.
        """
        self._workers.check_not_in_transaction()
        self._workers.begin_closing()
        await _shielded(_on_own_thread(self._close))

    def _close(self) -> None:
        self._workers.shutdown()
        self._store.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"Async{self._store!r}"
