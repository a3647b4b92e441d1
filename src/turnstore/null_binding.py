"""Binding NULL parameters to SQLite without the driver's slow adapter search, during bulk writes.

For every parameter that is not an int, float, str or bytearray, the sqlite3
driver first looks for an adapter: in its registry, then as ``__adapt__`` on
its protocol class, which raises an AttributeError it then clears, then as
``__conform__`` on the value. A ``None`` goes through all of it before it is
bound as NULL: about 0.3 µs each here, and an imported pi session of 10,000
messages binds ≈90,000 of them (its messages' usage, model and kind columns
are NULL for every prompt and tool result), 5–8% of the import's time.

With an adapter registered for ``NoneType`` the driver finds it at the
first step; the one registered here returns its argument (``None``), so
what is bound does not change: NULL, as before. The registry is the
``sqlite3`` module's, shared by the whole process, so it is held only while
an import writes, and only when the application has not registered a
``NoneType`` adapter of its own (which is then left alone and used).
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["fast_null_binding"]

_KEY = (type(None), sqlite3.PrepareProtocol)

_NONE_TO_NONE = {}.get
"""A C function that returns None for None (``{}.get(None)``): the cheapest adapter that changes nothing."""

_lock = threading.Lock()
_users = 0


@contextmanager
def fast_null_binding(when: bool = True) -> Iterator[None]:
    """Within this block, ``None`` parameters bind to SQLite as NULL without the adapter search.

    Blocks may nest and run on several threads at once; the adapter is
    removed when the last one ends (unless something else replaced it meanwhile).
    """
    global _users
    if not when:
        yield
        return
    with _lock:
        if _users == 0 and _KEY in sqlite3.adapters:
            mine = False  # the application's own NoneType adapter: leave it alone
        else:
            mine = True
            _users += 1
            if _users == 1:
                sqlite3.register_adapter(type(None), _NONE_TO_NONE)
    try:
        yield
    finally:
        if mine:
            with _lock:
                _users -= 1
                if _users == 0 and sqlite3.adapters.get(_KEY) is _NONE_TO_NONE:
                    del sqlite3.adapters[_KEY]
