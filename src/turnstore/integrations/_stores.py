"""Running an adapter's sync store work from its async methods, on a ``Store`` or an ``AsyncStore``.

An adapter's reads and writes are sync functions of a :class:`~turnstore.store.Store`
(``function(store, *args)``), each one transaction. From async code they run
on an ``AsyncStore``'s worker threads (:meth:`~turnstore.aio.AsyncStore.run`), or,
given a ``Store``, in the event loop's default executor, as a framework runs
a sync history's methods from its async ones (LangChain's ``run_in_executor``).
Either way the call is awaited to its end: a cancelled task still sees its
call finish (or never start) as a whole before ``CancelledError`` is raised.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from ..aio import AsyncStore
from ..store import Store

T = TypeVar("T")


async def run_on(store: Store | AsyncStore, function: Callable[..., T], *args: Any) -> T:
    """``function(sync store, *args)``, off the event loop, awaited to its end even when cancelled."""
    if isinstance(store, AsyncStore):
        return await store.run(function, *args)
    future = asyncio.get_running_loop().run_in_executor(None, functools.partial(function, store, *args))
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        while not future.done():  # the call runs on: its transaction commits or rolls back first
            try:
                await asyncio.wait([future])
            except asyncio.CancelledError:
                pass
        if not future.cancelled():
            future.exception()  # its outcome is seen; the cancellation is what the caller gets
        raise
