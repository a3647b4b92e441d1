"""Pausing Python's cyclic garbage collector while an import reads and writes one file.

Importing a file allocates tens of thousands of long-lived objects (models,
their content blocks and strings) and makes no reference cycles. Left on,
the collector runs every 700 allocations and, as those objects survive,
walks them again in its older generations, and in an app with a large heap
its full passes also walk everything the app holds.

This is the library's only use of :mod:`gc`, and only ``Store.import_``
(:mod:`turnstore.importing`) makes it, when the app asks with
``tune_process=True`` (``turnstore import`` does), around each file it reads and writes:
:func:`collector_paused` turns the collector off for that block and back on
(if it was on) as soon as the block ends, so anything it would have
collected still is; reference counting frees memory meanwhile. The
``progress`` callback and everything else of the caller run with the
collector as the caller left it. Reads never touch it.
"""

from __future__ import annotations

import gc

__all__ = ["collector_paused"]


class collector_paused:
    """Pause the cyclic garbage collector for a ``with`` block; restore its state after.

    Each block restores what it found: a thread that enters while another has
    the collector paused leaves it to that one to turn back on, and a program
    that runs with the collector off keeps it off. (A class rather than a
    generator-based context manager: it is entered on every read, and costs a
    third as much.)

    Nothing else is done on leaving: moving the block's survivors to the
    oldest generation (``gc.freeze()``/``gc.unfreeze()``) saved nothing
    measurable on a 10,000-message pi import (550 vs 558 ms), and the check
    that the program keeps no frozen objects of its own (``gc.get_freeze_count()``)
    walks them all: 40 ms per import in a process that froze 1M objects, as
    pre-forking servers do.
    """

    __slots__ = ("_enabled",)

    def __enter__(self) -> None:
        self._enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc_info: object) -> None:
        if self._enabled:
            gc.enable()
