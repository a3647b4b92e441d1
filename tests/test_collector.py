"""``collector_paused`` pauses the cyclic garbage collector for a block and restores its state (reads never use it: see test_reads_leave_gc_alone)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from turnstore.collector import collector_paused


@pytest.fixture
def collector_on() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as the test suite had it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_pauses_inside_and_restores_after(collector_on: None) -> None:
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restores_after_an_exception(collector_on: None) -> None:
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_program_that_runs_without_the_collector_keeps_it_off(collector_on: None) -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_nested_blocks_turn_it_on_only_at_the_outermost_end(collector_on: None) -> None:
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()  # the inner block found it off and leaves it off
    assert gc.isenabled()
