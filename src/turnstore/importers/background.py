"""Work an import hands to a helper thread while its own thread waits on the GIL-free parts.

Two steps of an import hold no Python lock for most of their time: hashing a
session's records (:mod:`hashlib` releases the GIL on large buffers) and
SQLite's ``COMMIT`` (the driver releases it around every step). On a machine
with a second core, a helper thread can meanwhile do Python work that would
otherwise come before or after them: the hash runs while the messages are
checked and dumped, and the models of a written session are freed while its
commit is written out. Small sessions do it inline: a thread costs more than
it saves there.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["Background"]

_T = TypeVar("_T")

_HEAD_START = 0.0002
"""Seconds the helper waits before it starts: the starting thread takes the GIL back meanwhile."""


class Background(Generic[_T]):
    """``function(*args)`` running on a helper thread; :meth:`result` waits for it."""

    __slots__ = ("_thread", "_value", "_error")

    def __init__(self, function: Callable[..., _T], *args: Any) -> None:
        self._value: _T | None = None
        self._error: BaseException | None = None

        def run() -> None:
            # Thread.start() returns once this thread has begun; without a pause here it would go on
            # holding the GIL, and the starting thread would wait for the interpreter's switch interval
            # (5 ms) before it could go on to the GIL-free work this one is meant to overlap.
            time.sleep(_HEAD_START)
            try:
                self._value = function(*args)
            except BaseException as error:  # handed to whoever asks for the result
                self._error = error

        self._thread = threading.Thread(target=run, name="turnstore-import-helper", daemon=True)
        self._thread.start()

    def result(self) -> _T:
        """The function's return value (its exception, raised here), once it has finished."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]
