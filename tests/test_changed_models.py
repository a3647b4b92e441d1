"""A model changed after it was built is checked on writing as strictly as a record is on reading.

pydantic validates a model when it is built, not when a field is assigned or
``model_copy(update=...)`` replaces one. Whatever such a model holds (negative
counts and costs, integers past 64 bits, values of the wrong type, an unknown
role or stop reason) is refused with a typed one-line error naming the field,
before anything is written, on every backend; the session reads back after.
The same holds for what ``loops.end``, ``loops.start``, ``loops.compact`` and
``sessions.create`` / ``update`` take.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from factories import assistant, extension, tool_result, usage, user

from turnstore import AssistantMessage, InvalidArgument, InvalidMessage, LoopConfig, Usage
from turnstore.records import LoopStatus


def _with_usage(field: str, value: Any) -> AssistantMessage:
    message = assistant()
    assert message.usage is not None
    setattr(message.usage, field, value)
    return message


def _copied(update: dict[str, Any]) -> AssistantMessage:
    return assistant().model_copy(update=update)


def _copied_usage(update: dict[str, Any]) -> AssistantMessage:
    return assistant().model_copy(update={"usage": usage().model_copy(update=update)})


def _assigned(message: Any, field: str, value: Any) -> Any:
    setattr(message, field, value)
    return message


CHANGED: dict[str, tuple[Callable[[], Any], str]] = {
    "negative tokens, assigned": (lambda: _with_usage("input", -5), "usage.input"),
    "negative tokens, copied": (lambda: _copied_usage({"output": -1}), "usage.output"),
    "negative cost, assigned": (lambda: _with_usage("cost", -2999.99), "usage.cost"),
    "negative cost, copied": (lambda: _copied_usage({"cost": -2999.99}), "usage.cost"),
    "tokens past 64 bits, assigned": (lambda: _with_usage("output", 2**64), "usage.output"),
    "tokens past 64 bits, copied": (lambda: _copied_usage({"cache_read": 2**63}), "usage.cache_read"),
    "tokens of the wrong type": (lambda: _with_usage("output", "many"), "usage.output"),
    "a float token count": (lambda: _copied_usage({"input": 1.5}), "usage.input"),
    "a timestamp of the wrong type": (lambda: _assigned(user(), "timestamp", "yesterday"), "timestamp"),
    "a timestamp past 64 bits": (lambda: _copied({"timestamp": 2**64}), "timestamp"),
    "an unknown role, assigned": (lambda: _assigned(user(), "role", "bogus"), "role"),
    "an unknown role, copied": (lambda: tool_result("c1").model_copy(update={"role": "robot"}), "role"),
    "an unknown stop reason, copied": (lambda: _copied({"stop_reason": "nope"}), "stopReason"),
    "an unknown stop reason, assigned": (lambda: _assigned(assistant(), "stop_reason", 7), "stopReason"),
    "a model name of the wrong type": (lambda: _copied({"model": 42}), "model"),
    "is_error not a bool": (lambda: _assigned(tool_result("c1"), "is_error", "yes"), "isError"),
    "content not a list": (lambda: _assigned(user(), "content", "hello"), "content"),
    "an extension kind of the wrong type": (lambda: _assigned(extension(), "kind", None), "kind"),
}


def _append(store: Any, loop_id: str, message: Any) -> None:
    store.messages.append(message, loop_id=loop_id, turn_index=0)


def _append_turn(store: Any, loop_id: str, message: Any) -> None:
    store.messages.append_turn(loop_id, 0, [user(), message])


def _append_to_turn(store: Any, loop_id: str, message: Any) -> None:
    store.messages.append_to_turn(loop_id, [user(), message], new_turn=True)


WRITES = {"append": _append, "append_turn": _append_turn, "append_to_turn": _append_to_turn}


def _reads_back(store: Any, session_id: str, loop_id: str, messages: int) -> None:
    """The session reads as it did: its loops, its context, its totals (no negative or foreign counts)."""
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [loop_id]
    assert store.loops.get(loop_id).loop_id == loop_id
    assert len(store.messages.context(loop_id)) == messages
    totals = store.usage.session(session_id)
    assert totals.input == 100 * (messages // 2) and totals.output == 10 * (messages // 2)
    assert (totals.cost or 0) >= 0


@pytest.mark.parametrize("write", WRITES)
@pytest.mark.parametrize("case", CHANGED)
def test_a_changed_message_is_refused_naming_the_field(store: Any, write: str, case: str) -> None:
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id, config={"model": "claude-sonnet-4-5"}).loop_id
    store.messages.append_turn(loop_id, 0, [user(), assistant()])
    build, field = CHANGED[case]
    with pytest.raises(InvalidMessage) as raised:
        WRITES[write](store, loop_id, build())
    text = str(raised.value)
    assert "\n" not in text
    assert f"{field}:" in text, text
    _reads_back(store, session_id, loop_id, 2)


def test_a_valid_change_is_stored_as_changed(store: Any, session_id: str, loop_id: str) -> None:
    message = assistant()
    assert message.usage is not None
    message.usage.input = 7
    changed = assistant(text="again").model_copy(update={"usage": usage(input=9)})
    store.messages.append_turn(loop_id, 0, [user(), message, changed])
    assert store.usage.loop(loop_id).input == 16
    assert [m.usage.input for m in store.messages.context(loop_id) if isinstance(m, AssistantMessage)] == [7, 9]


BAD_USAGE: dict[str, tuple[Callable[[], Usage], str]] = {
    "negative tokens": (lambda: _assigned(usage(), "input", -1), "input"),
    "negative cost": (lambda: usage().model_copy(update={"cost": -2999.99}), "cost"),
    "tokens past 64 bits": (lambda: _assigned(usage(), "output", 2**64), "output"),
    "tokens of the wrong type": (lambda: _assigned(usage(), "output", "x"), "output"),
    "a cost of the wrong type": (lambda: usage().model_copy(update={"cost": "free"}), "cost"),
}


@pytest.mark.parametrize("case", BAD_USAGE)
def test_loops_end_refuses_a_changed_usage_and_leaves_the_loop_running(store: Any, case: str) -> None:
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    build, field = BAD_USAGE[case]
    with pytest.raises(InvalidArgument, match=rf"^usage: {field}: ") as raised:
        store.loops.end(loop_id, usage=build())
    assert "\n" not in str(raised.value)
    loop = store.loops.get(loop_id)
    assert loop.status == LoopStatus.RUNNING and loop.ended_at is None and loop.reported_usage is None
    assert [each.loop_id for each in store.loops.list(session_id)] == [loop_id]
    assert store.usage.session(session_id).input == 0


@pytest.mark.parametrize("case", BAD_USAGE)
def test_a_changed_usage_argument_is_refused_on_append_and_compact(store: Any, case: str) -> None:
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id, config={"model": "claude-sonnet-4-5"}).loop_id
    build, field = BAD_USAGE[case]
    with pytest.raises(InvalidArgument, match=rf"^usage: {field}: "):
        store.messages.append(extension(), loop_id=loop_id, usage=build(), model="claude-sonnet-4-5")
    with pytest.raises(InvalidArgument, match=rf"^usage: {field}: "):
        store.loops.compact(loop_id, "summary", usage=build())
    assert [each.loop_id for each in store.loops.list(session_id)] == [loop_id]
    assert store.messages.context(loop_id) == []


def _config(**update: Any) -> LoopConfig:
    return LoopConfig(model="claude-sonnet-4-5", provider="anthropic").model_copy(update=update)


def _assigned_config(field: str, value: Any) -> LoopConfig:
    return _assigned(LoopConfig(model="claude-sonnet-4-5"), field, value)


BAD_CONFIG: dict[str, tuple[Callable[[], LoopConfig], str]] = {
    "a model of the wrong type": (lambda: _assigned_config("model", 5), "model"),
    "a provider of the wrong type": (lambda: _config(provider=7), "provider"),
    "a value that is not JSON": (lambda: _config(seed=object()), "seed"),
}


@pytest.mark.parametrize("case", BAD_CONFIG)
def test_a_changed_loop_config_is_refused(store: Any, case: str) -> None:
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append(user(), loop_id=loop_id, turn_index=0)
    message_id = store.messages.loop(loop_id) and store.messages.path(loop_id)[-1].message_id
    build, field = BAD_CONFIG[case]
    with pytest.raises(InvalidArgument, match=rf"^config: .*{field}") as raised:
        store.loops.start(session_id, config=build())
    assert "\n" not in str(raised.value)
    with pytest.raises(InvalidArgument, match=r"^config: "):
        store.messages.rewind(loop_id, after=message_id, config=build())
    with pytest.raises(InvalidArgument, match=r"^config: "):
        store.loops.compact(loop_id, "summary", config=build())
    assert [each.loop_id for each in store.loops.list(session_id)] == [loop_id]


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


BAD_METADATA: dict[str, tuple[Callable[[], dict[Any, Any]], str, type[Exception]]] = {
    "a value that is not JSON": (lambda: {"when": object()}, "when: not JSON", InvalidArgument),
    "NaN": (lambda: {"score": float("nan")}, "score: not JSON", InvalidArgument),
    "nested deeper than a read takes": (lambda: {"tree": _nested(400)}, "nested more than", InvalidArgument),
    "nested past the recursion limit": (lambda: {"tree": _nested(5_000)}, "nested more than", InvalidArgument),
    "a lone surrogate": (lambda: {"name": "\ud800"}, "name: holds a lone surrogate", InvalidMessage),
}


@pytest.mark.parametrize("case", BAD_METADATA)
def test_metadata_that_would_not_read_back_is_refused(store: Any, case: str) -> None:
    kept = store.sessions.create("kept", metadata={"a": 1})
    build, problem, error = BAD_METADATA[case]
    with pytest.raises(error, match=rf"^metadata: .*{problem}") as raised:
        store.sessions.create("new", metadata=build())
    assert "\n" not in str(raised.value)
    with pytest.raises(error, match=rf"^metadata: .*{problem}"):
        store.sessions.update("kept", metadata=build())
    with pytest.raises(error, match=rf"^metadata: .*{problem}"):
        store.loops.start("kept", metadata=build())
    assert not store.sessions.exists("new")
    assert store.sessions.get("kept") == kept
    assert [summary.session_id for summary in store.sessions.list()] == ["kept"]
    assert store.loops.list("kept") == []


def test_created_session_is_what_reads_back(store: Any) -> None:
    """A tuple is stored as a JSON array: the session ``create`` returns holds that, as ``get`` does."""
    created = store.sessions.create("s", metadata={"pair": (1, 2), "nested": {"t": ("x",)}})
    assert created.metadata == {"pair": [1, 2], "nested": {"t": ["x"]}}
    assert store.sessions.get("s") == created
