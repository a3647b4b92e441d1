"""Reads never touch the cyclic garbage collector: it belongs to the host app.

A read neither turns the collector off nor on: the app's own setting holds
throughout (a collector the app turned off stays off; one it left on stays on,
and runs while turnstore builds models).
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from factories import assistant, tool_result, user

from turnstore import Store


@pytest.fixture
def collector_on() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as the test suite had it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def _session(store: Store, turns: int = 3) -> tuple[str, str]:
    session = store.sessions.create(title="gc")
    loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    for turn in range(turns):
        store.messages.append(user(f"q{turn}"), loop_id=loop.loop_id, turn_index=turn)
        store.messages.append(assistant(calls=(f"c{turn}",)), loop_id=loop.loop_id, turn_index=turn)
        store.messages.append(tool_result(f"c{turn}"), loop_id=loop.loop_id, turn_index=turn)
    return session.session_id, loop.loop_id


def _reads(store: Store, session_id: str, loop_id: str) -> dict[str, Callable[[], Any]]:
    """Every read of a session's messages, by name."""
    first = next(iter(store.messages.records(session_id))).message_id
    return {
        "last": lambda: store.messages.last(session_id, 50),
        "last(loop_id)": lambda: store.messages.last(session_id, 4, loop_id=loop_id),
        "loop": lambda: store.messages.loop(loop_id),
        "turn": lambda: store.messages.turn(loop_id, 1),
        "turns": lambda: store.messages.turns(loop_id),
        "context": lambda: store.messages.context(loop_id),
        "path": lambda: store.messages.path(loop_id),
        "records": lambda: list(store.messages.records(session_id)),
        "records(loop_id)": lambda: list(store.messages.records(loop_id=loop_id)),
        "get": lambda: store.messages.get(first),
        "sessions.get": lambda: store.sessions.get(session_id),
        "sessions.list": lambda: store.sessions.list(),
        "loops.list": lambda: store.loops.list(session_id),
        "usage.session": lambda: store.usage.session(session_id),
    }


def test_no_read_calls_gc_enable_or_disable(
    sqlite_store: Store, collector_on: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    session_id, loop_id = _session(sqlite_store)
    calls: list[str] = []
    monkeypatch.setattr(gc, "disable", lambda: calls.append("disable"))
    monkeypatch.setattr(gc, "enable", lambda: calls.append("enable"))
    for name, read in _reads(sqlite_store, session_id, loop_id).items():
        read()
        assert calls == [], f"{name} switched the collector: {calls}"


def test_a_collector_the_app_turned_off_stays_off_through_every_read(sqlite_store: Store, collector_on: None) -> None:
    session_id, loop_id = _session(sqlite_store)
    gc.disable()
    for name, read in _reads(sqlite_store, session_id, loop_id).items():
        read()
        assert not gc.isenabled(), f"{name} turned the app's collector back on"


def test_the_collector_is_on_at_every_call_a_read_makes(sqlite_store: Store, collector_on: None) -> None:
    session_id, loop_id = _session(sqlite_store)
    off: set[str] = set()
    for name, read in _reads(sqlite_store, session_id, loop_id).items():

        def watch(frame: Any, event: str, arg: Any, name: str = name) -> None:
            if not gc.isenabled():
                off.add(name)

        sys.setprofile(watch)
        try:
            read()
        finally:
            sys.setprofile(None)
    assert off == set(), f"the collector was off during {sorted(off)}"
    assert gc.isenabled()
