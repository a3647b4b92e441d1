"""The cyclic garbage collector is paused while turnstore builds many models, and only then."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest

import turnstore.context as context_module
import turnstore.repositories.messages as messages_module
from turnstore import Store
from turnstore.collector import collector_paused

from factories import assistant, tool_result, user


@pytest.fixture
def collector_on() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as the test suite had it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


class _Spy:
    """Wraps a validator and notes whether the collector was on at each call."""

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped
        self.seen: list[bool] = []

    def validate_json(self, *args: Any, **kwargs: Any) -> Any:
        self.seen.append(gc.isenabled())
        return self.wrapped.validate_json(*args, **kwargs)


def _session(store: Store, turns: int = 3) -> tuple[str, str]:
    session = store.sessions.create(title="gc")
    loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    for turn in range(turns):
        store.messages.append(user(f"q{turn}"), loop_id=loop.loop_id, turn_index=turn)
        store.messages.append(assistant(calls=(f"c{turn}",)), loop_id=loop.loop_id, turn_index=turn)
        store.messages.append(tool_result(f"c{turn}"), loop_id=loop.loop_id, turn_index=turn)
    return session.session_id, loop.loop_id


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


def test_list_reads_validate_with_the_collector_paused(
    sqlite_store: Store, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, loop_id = _session(sqlite_store)
    spy = _Spy(messages_module.AGENT_MESSAGES)
    monkeypatch.setattr(messages_module, "AGENT_MESSAGES", spy)
    assert len(sqlite_store.messages.last(session_id, 50)) == 9
    assert len(sqlite_store.messages.loop(loop_id)) == 9
    assert len(sqlite_store.messages.turn(loop_id, 1).messages) == 3
    assert len(sqlite_store.messages.turns(loop_id)) == 3
    assert spy.seen == [False, False, False, False]
    assert gc.isenabled()


def test_context_validates_with_the_collector_paused(
    sqlite_store: Store, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, loop_id = _session(sqlite_store)
    spy = _Spy(context_module.AGENT_MESSAGE)
    monkeypatch.setattr(context_module, "AGENT_MESSAGE", spy)
    assert len(sqlite_store.messages.context(loop_id)) == 9
    assert spy.seen == [False] * 9
    assert gc.isenabled()


def test_records_pause_per_batch_never_across_the_callers_code(
    sqlite_store: Store, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, _ = _session(sqlite_store, turns=700)  # 2,100 messages: two batches
    built: list[bool] = []
    original = messages_module.stored_message

    def spy(row: Any) -> Any:
        built.append(gc.isenabled())
        return original(row)

    monkeypatch.setattr(messages_module, "stored_message", spy)
    consumed = 0
    for stored in sqlite_store.messages.records(session_id):
        assert gc.isenabled(), "the caller's code runs with the collector on"
        consumed += 1
        assert stored.seq >= 0
    assert consumed == len(built) == 2_100
    assert messages_module.STREAM_BATCH < 2_100
    assert not any(built)
    assert gc.isenabled()


def test_an_abandoned_records_iterator_leaves_the_collector_on(sqlite_store: Store, collector_on: None) -> None:
    session_id, _ = _session(sqlite_store, turns=200)
    iterator = sqlite_store.messages.records(session_id)
    next(iterator)
    assert gc.isenabled()
    del iterator
    assert gc.isenabled()
