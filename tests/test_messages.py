"""``store.messages``: appending, reading by turn / loop / window, context assembly, records, round trips."""

from __future__ import annotations

import base64
import concurrent.futures
import json
import random
import re
import threading
import time
from collections import UserList, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, extension, tool_result, user
from helpers import SONNET

import turnstore.repositories.message_reads as message_reads
import turnstore.repositories.message_tail as message_tail
import turnstore.repositories.rows as rows_module
from turnstore import (
    AssistantMessage,
    ExtensionMessage,
    ImageContent,
    InvalidArgument,
    InvalidMessage,
    LimitExceeded,
    Limits,
    LoopNotFound,
    Message,
    MessageNotFound,
    NotFound,
    SessionNotFound,
    StopReason,
    StorageError,
    Store,
    StoredMessage,
    TextContent,
    ToolResultMessage,
    TurnId,
    TurnIdMismatch,
    TurnNotFound,
    Usage,
    UserMessage,
    parse_message,
)
from turnstore.models import now_ms


def texts(messages: list[Any]) -> list[tuple[str, str]]:
    """(role, text) of each message; extension messages show their kind."""
    return [(str(m.role), m.kind if isinstance(m, ExtensionMessage) else m.text()) for m in messages]


def new_loop(store: Store, session_id: str, loop_id: str, **kwargs: Any) -> str:
    return store.loops.start(session_id, config=SONNET, loop_id=loop_id, **kwargs).loop_id


# --- append -------------------------------------------------------------------


def test_append_returns_increasing_ids_and_per_loop_seq(store: Store, session_id: str, loop_id: str) -> None:
    other = new_loop(store, session_id, "other")
    ids = [
        store.messages.append(user("a0"), loop_id=loop_id, turn_index=0),
        store.messages.append(user("b0"), loop_id=other, turn_index=0),
        store.messages.append(assistant("a1"), loop_id=loop_id, turn_index=0),
        store.messages.append(assistant("b1"), loop_id=other, turn_index=0),
        store.messages.append(user("a2"), loop_id=loop_id, turn_index=1),
    ]
    assert ids == sorted(ids) and len(set(ids)) == 5
    assert [store.messages.get(i).seq for i in ids] == [0, 0, 1, 1, 2]
    assert [(r.seq, r.message.text()) for r in store.messages.records(loop_id=loop_id)] == [
        (0, "a0"),
        (1, "a1"),
        (2, "a2"),
    ]


def test_append_stores_row_fields(store: Store, session_id: str, loop_id: str) -> None:
    message_id = store.messages.append(assistant("hi"), loop_id=loop_id, turn_index=3)
    stored = store.messages.get(message_id)
    assert isinstance(stored, StoredMessage)
    assert (stored.message_id, stored.session_id, stored.loop_id, stored.turn_index, stored.seq, stored.source) == (
        message_id,
        session_id,
        loop_id,
        3,
        0,
        None,
    )
    assert isinstance(stored.message, AssistantMessage)


def test_append_dict_is_validated_and_stored(store: Store, loop_id: str) -> None:
    raw = {"role": "user", "content": [{"type": "text", "text": "from json"}], "timestamp": 1234}
    message_id = store.messages.append(raw, loop_id=loop_id, turn_index=0)
    stored = store.messages.get(message_id).message
    assert isinstance(stored, UserMessage)
    assert stored == parse_message(raw).with_turn_id(TurnId(loop_id=loop_id, turn_index=0))


@pytest.mark.parametrize(
    "raw",
    [
        {"role": "user", "content": 5, "timestamp": 1},
        {"role": "toolResult", "content": [], "toolCallId": "c1", "isError": False},  # no tool name
        {"role": "robot", "content": [], "timestamp": 1},
        {"role": "assistant", "content": [], "model": "m", "provider": "p", "timestamp": 1},
        {"role": "user", "content": [{"type": "video", "url": "x"}], "timestamp": 1},
        {"role": "user", "content": [], "timestamp": -5},
    ],
)
def test_append_invalid_dict_raises_invalid_message_and_writes_nothing(store: Store, loop_id: str, raw: dict) -> None:
    with pytest.raises(InvalidMessage) as caught:
        store.messages.append(raw, loop_id=loop_id, turn_index=0)
    assert caught.value.errors, "the error names the failing fields"
    assert store.messages.loop(loop_id) == []


def test_append_invalid_dict_names_the_failing_field(store: Store, loop_id: str) -> None:
    with pytest.raises(InvalidMessage) as caught:
        store.messages.append({"role": "user", "content": [{"type": "txt", "text": "x"}]}, loop_id=loop_id)
    assert [path for path, _ in caught.value.errors] == ["content[0].type"]


def test_a_hand_written_dict_without_a_time_is_dated_as_it_is_appended(store: Store, loop_id: str) -> None:
    before = now_ms()
    first = store.messages.append({"role": "user", "content": "hi"}, loop_id=loop_id, turn_index=0)
    after = now_ms()
    dated = store.messages.append({"role": "user", "content": "again"}, loop_id=loop_id, turn_index=0, timestamp=7)
    own = store.messages.append({"role": "user", "content": "mine", "timestamp": 3}, loop_id=loop_id, turn_index=0)
    times = [store.messages.get(i).message.timestamp for i in (first, dated, own)]  # type: ignore[union-attr]
    assert before <= times[0] <= after and times[1:] == [7, 3]


@pytest.mark.parametrize("value", ["just text", 42, None, ["role", "user"]])
def test_append_non_message_raises_invalid_message(store: Store, loop_id: str, value: object) -> None:
    with pytest.raises(InvalidMessage):
        store.messages.append(value, loop_id=loop_id)  # type: ignore[arg-type]
    assert store.messages.loop(loop_id) == []


def test_append_takes_loop_and_turn_from_turn_id(store: Store, loop_id: str) -> None:
    message = user().with_turn_id(TurnId(loop_id=loop_id, turn_index=4))
    stored = store.messages.get(store.messages.append(message))
    assert (stored.loop_id, stored.turn_index) == (loop_id, 4)
    assert stored.message == message


def test_append_turn_id_agreeing_with_arguments_is_accepted(store: Store, loop_id: str) -> None:
    message = user().with_turn_id(TurnId(loop_id=loop_id, turn_index=2))
    stored = store.messages.get(store.messages.append(message, loop_id=loop_id, turn_index=2))
    assert stored.turn_index == 2
    assert stored.message == message


def test_append_turn_id_fills_in_missing_turn_index(store: Store, loop_id: str) -> None:
    message = user().with_turn_id(TurnId(loop_id=loop_id, turn_index=6))
    assert store.messages.get(store.messages.append(message, loop_id=loop_id)).turn_index == 6


def test_append_stamps_turn_id_into_stored_json(store: Store, loop_id: str) -> None:
    original = assistant("stamped")
    assert original.turn is None
    stored = store.messages.get(store.messages.append(original, loop_id=loop_id, turn_index=1))
    assert stored.message.turn == TurnId(loop_id=loop_id, turn_index=1)
    assert json.loads(stored.message.model_dump_json())["turnId"] == {"loopId": loop_id, "turnIndex": 1}
    assert stored.message.with_turn_id(None) == original


def test_append_without_turn_index_stores_no_turn(store: Store, loop_id: str) -> None:
    stored = store.messages.get(store.messages.append(user(), loop_id=loop_id))
    assert stored.turn_index is None
    assert stored.message.turn is None
    assert "turnId" not in json.loads(stored.message.model_dump_json())


@pytest.mark.parametrize(
    ("turn_id", "kwargs"),
    [
        (("{loop}", 1), {"turn_index": 2}),
        (("elsewhere", 1), {"loop_id": "{loop}"}),
        (("elsewhere", 1), {"loop_id": "{loop}", "turn_index": 1}),
    ],
)
def test_append_turn_id_mismatch(store: Store, loop_id: str, turn_id: tuple, kwargs: dict) -> None:
    message = user().with_turn_id(TurnId(loop_id=turn_id[0].format(loop=loop_id), turn_index=turn_id[1]))
    kwargs = {key: value.format(loop=loop_id) if isinstance(value, str) else value for key, value in kwargs.items()}
    kwargs.setdefault("loop_id", loop_id)
    with pytest.raises(TurnIdMismatch):
        store.messages.append(message, **kwargs)
    assert store.messages.loop(loop_id) == []


def test_turn_id_mismatch_is_an_invalid_message() -> None:
    assert issubclass(TurnIdMismatch, InvalidMessage)


def test_append_without_loop_raises_invalid_argument(store: Store, loop_id: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        store.messages.append(user(), turn_index=0)
    assert caught.value.argument == "loop_id"
    assert store.messages.loop(loop_id) == []


def test_append_to_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.messages.append(user(), loop_id="missing", turn_index=0)
    with pytest.raises(LoopNotFound):
        store.messages.append(user().with_turn_id(TurnId(loop_id="missing", turn_index=0)))


def test_append_extension_gets_no_turn_id(store: Store, loop_id: str) -> None:
    note = extension("ui_notice", {"text": "compiling…"})
    stored = store.messages.get(store.messages.append(note, loop_id=loop_id, turn_index=2))
    assert stored.turn_index == 2
    assert stored.message == note
    assert "turnId" not in json.loads(stored.message.model_dump_json())


@pytest.mark.parametrize("turn_index", [-1, -100])
def test_append_negative_turn_index_raises_invalid_argument(store: Store, loop_id: str, turn_index: int) -> None:
    with pytest.raises(InvalidArgument, match="^turn_index: "):
        store.messages.append(user(), loop_id=loop_id, turn_index=turn_index)
    with pytest.raises(InvalidArgument, match="^turn_index: "):
        store.messages.append_turn(loop_id, turn_index, [user()])
    assert store.messages.loop(loop_id) == []


def test_append_bool_turn_index_never_writes_unreadable_json(store: Store, loop_id: str) -> None:
    try:
        store.messages.append(user(), loop_id=loop_id, turn_index=True)
    except InvalidArgument:
        assert list(store.messages.records(loop_id=loop_id)) == []
    else:
        (stored,) = store.messages.records(loop_id=loop_id)
        assert stored.turn_index == 1
        assert stored.message.turn == TurnId(loop_id=loop_id, turn_index=1)


def test_append_over_the_message_size_limit_raises_limit_exceeded(tmp_path: Path) -> None:
    with Store(tmp_path / "limits.db", limits=Limits(max_message_bytes=500)) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        store.messages.append(user("small"), loop_id=loop_id, turn_index=0)
        with pytest.raises(LimitExceeded):
            store.messages.append(user("x" * 600), loop_id=loop_id, turn_index=0)
        with pytest.raises(LimitExceeded):
            store.messages.append_turn(loop_id, 1, [user("fits"), assistant("y" * 600)])
        assert texts(store.messages.loop(loop_id)) == [("user", "small")]


def test_message_size_limit_counts_utf8_bytes_of_the_stored_json(tmp_path: Path) -> None:
    message = user("é" * 100 + "日本" * 50)
    with Store(tmp_path / "measure.db") as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        stored = store.messages.get(store.messages.append(message, loop_id=loop_id, turn_index=0))
        size = len(stored.message.model_dump_json().encode("utf-8"))
    assert size > len(stored.message.model_dump_json())  # multi-byte characters

    with Store(tmp_path / "exact.db", limits=Limits(max_message_bytes=size)) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        store.messages.append(message, loop_id=loop_id, turn_index=0)
    with Store(tmp_path / "under.db", limits=Limits(max_message_bytes=size - 1)) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        with pytest.raises(LimitExceeded):
            store.messages.append(message, loop_id=loop_id, turn_index=0)


def test_append_message_json_cannot_carry_raises_invalid_message(store: Store, loop_id: str) -> None:
    with pytest.raises(InvalidMessage):
        store.messages.append(user("lone surrogate \ud800"), loop_id=loop_id, turn_index=0)
    assert store.messages.loop(loop_id) == []


# --- append_turn --------------------------------------------------------------


def test_append_turn_returns_ids_in_order(store: Store, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(), assistant(calls=("c1",)), tool_result("c1")])
    assert len(ids) == 3 and ids == sorted(ids)
    records = list(store.messages.records(loop_id=loop_id))
    assert [r.message_id for r in records] == ids
    assert [(r.seq, r.turn_index) for r in records] == [(0, 0), (1, 0), (2, 0)]
    assert all(r.message.turn == TurnId(loop_id=loop_id, turn_index=0) for r in records)


def test_append_turn_continues_seq(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), assistant()])
    ids = store.messages.append_turn(loop_id, 1, [user(), assistant()])
    assert [store.messages.get(i).seq for i in ids] == [2, 3]


def test_append_turn_is_all_or_nothing_on_an_invalid_message(store: Store, loop_id: str) -> None:
    bad = {"role": "assistant", "content": [], "timestamp": 1}
    with pytest.raises(InvalidMessage):
        store.messages.append_turn(loop_id, 0, [user(), assistant(), bad, tool_result("c1")])
    assert store.messages.loop(loop_id) == []


def test_append_turn_is_all_or_nothing_on_a_turn_id_mismatch(store: Store, loop_id: str) -> None:
    wrong = assistant().with_turn_id(TurnId(loop_id=loop_id, turn_index=9))
    with pytest.raises(TurnIdMismatch):
        store.messages.append_turn(loop_id, 0, [user(), wrong])
    assert store.messages.loop(loop_id) == []


def test_append_turn_is_all_or_nothing_over_the_size_limit(tmp_path: Path) -> None:
    with Store(tmp_path / "limits.db", limits=Limits(max_message_bytes=400)) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        with pytest.raises(LimitExceeded):
            store.messages.append_turn(loop_id, 0, [user(), assistant("z" * 1000)])
        assert store.messages.loop(loop_id) == []


def test_append_turn_to_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.messages.append_turn("missing", 0, [user(), assistant()])


def test_append_turn_empty_list_returns_empty(store: Store, loop_id: str) -> None:
    assert store.messages.append_turn(loop_id, 0, []) == []
    assert store.messages.loop(loop_id) == []


def test_append_turn_accepts_dicts(store: Store, loop_id: str) -> None:
    raw = {"role": "user", "content": [{"type": "text", "text": "dict"}], "timestamp": 5}
    ids = store.messages.append_turn(loop_id, 0, [raw, assistant()])
    assert store.messages.get(ids[0]).message.text() == "dict"


# --- turn / turns / loop ---------------------------------------------------------


def test_turn_returns_the_turn_in_order(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("r0")])
    store.messages.append_turn(loop_id, 1, [user("q1"), assistant("call", calls=("c",)), tool_result("c", "out")])
    turn = store.messages.turn(loop_id, 1)
    assert (turn.loop_id, turn.turn_index) == (loop_id, 1)
    assert texts(turn.messages) == [("user", "q1"), ("assistant", "call"), ("toolResult", "out")]


def test_turn_missing_raises_turn_not_found(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user()])
    with pytest.raises(TurnNotFound):
        store.messages.turn(loop_id, 1)


def test_turn_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.messages.turn("missing", 0)


def test_not_found_errors_share_a_base() -> None:
    assert all(issubclass(error, NotFound) for error in (TurnNotFound, LoopNotFound, MessageNotFound, SessionNotFound))


@pytest.fixture
def four_turns(store: Store, loop_id: str) -> str:
    for k in range(4):
        store.messages.append_turn(loop_id, k, [user(f"q{k}"), assistant(f"r{k}")])
    store.messages.append(extension(), loop_id=loop_id)  # outside any turn
    return loop_id


@pytest.mark.parametrize(
    ("start", "stop", "expected"),
    [
        (0, None, [0, 1, 2, 3]),
        (1, 3, [1, 2]),
        (2, None, [2, 3]),
        (0, 1, [0]),
        (3, 100, [3]),
        (2, 2, []),
        (4, None, []),
        (3, 1, []),
    ],
)
def test_turns_ranges(store: Store, four_turns: str, start: int, stop: int | None, expected: list[int]) -> None:
    turns = store.messages.turns(four_turns, start, stop)
    assert [t.turn_index for t in turns] == expected
    for turn in turns:
        assert turn.loop_id == four_turns
        assert texts(turn.messages) == [("user", f"q{turn.turn_index}"), ("assistant", f"r{turn.turn_index}")]


def test_turns_default_is_every_turn(store: Store, four_turns: str) -> None:
    assert [t.turn_index for t in store.messages.turns(four_turns)] == [0, 1, 2, 3]


def test_turns_skips_missing_turn_numbers(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user()])
    store.messages.append_turn(loop_id, 5, [user(), assistant()])
    assert [(t.turn_index, len(t.messages)) for t in store.messages.turns(loop_id)] == [(0, 1), (5, 2)]


def test_turns_skip_and_limit_bound_the_messages_read(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(f"a{i}") for i in range(5)])
    store.messages.append_turn(loop_id, 2, [user(f"b{i}") for i in range(3)])

    def page(**bounds: Any) -> list[tuple[int, list[str]]]:
        return [
            (t.turn_index, [m.content[0].text for m in t.messages]) for t in store.messages.turns(loop_id, **bounds)
        ]

    assert page(limit=2) == [(0, ["a0", "a1"])]
    assert page(skip=3, limit=3) == [(0, ["a3", "a4"]), (2, ["b0"])]
    assert page(skip=4) == [(0, ["a4"]), (2, ["b0", "b1", "b2"])]
    assert page(start=1, skip=1, limit=9) == [(2, ["b1", "b2"])]
    assert page(skip=8) == []
    assert store.messages.turn_lengths(loop_id) == {0: 5, 2: 3}
    assert store.messages.turn_lengths(loop_id, 1, 2) == {}
    for bad in ({"skip": -1}, {"limit": 0}, {"limit": True}, {"skip": "1"}):
        with pytest.raises(InvalidArgument):
            store.messages.turns(loop_id, **bad)
    with pytest.raises(LoopNotFound):
        store.messages.turn_lengths("missing")


def test_turns_of_an_empty_loop_is_empty(store: Store, loop_id: str) -> None:
    assert store.messages.turns(loop_id) == []


def test_turns_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.messages.turns("missing")
    with pytest.raises(LoopNotFound):
        store.messages.turns("missing", 0, 5)


def test_loop_returns_every_message_in_order(store: Store, four_turns: str) -> None:
    messages = store.messages.loop(four_turns)
    assert len(messages) == 9
    assert texts(messages)[:2] == [("user", "q0"), ("assistant", "r0")]
    assert texts(messages)[-1] == ("extension", "status")


def test_loop_empty_and_unknown(store: Store, loop_id: str) -> None:
    assert store.messages.loop(loop_id) == []
    with pytest.raises(LoopNotFound):
        store.messages.loop("missing")


# --- last -----------------------------------------------------------------------


def test_last_window_oldest_first(store: Store, session_id: str, loop_id: str) -> None:
    for k in range(3):
        store.messages.append_turn(loop_id, k, [user(f"q{k}"), assistant(f"r{k}")])
    assert texts(store.messages.last(session_id, 3)) == [("assistant", "r1"), ("user", "q2"), ("assistant", "r2")]
    assert texts(store.messages.last(session_id, 1)) == [("assistant", "r2")]
    assert len(store.messages.last(session_id, 100)) == 6


def test_last_spans_the_loops_of_the_session_only(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("first loop")])
    second = new_loop(store, session_id, "second")
    store.messages.append_turn(second, 0, [user("second loop")])
    store.sessions.create("other")
    other = store.loops.start("other", config=SONNET).loop_id
    store.messages.append_turn(other, 0, [user("other session")])
    assert texts(store.messages.last(session_id, 10)) == [("user", "first loop"), ("user", "second loop")]


def test_last_never_starts_with_a_tool_result_without_its_call(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("call", calls=("c1",)), tool_result("c1", "out")])
    store.messages.append_turn(loop_id, 1, [assistant("done")])
    assert texts(store.messages.last(session_id, 2)) == [("assistant", "done")]
    assert texts(store.messages.last(session_id, 3)) == [
        ("assistant", "call"),
        ("toolResult", "out"),
        ("assistant", "done"),
    ]


def test_last_answers_a_call_without_results(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("call", calls=("c1", "c2")), tool_result("c1", "one")])
    # c2 has no result yet: a synthetic error result stands in for it.
    assert texts(store.messages.last(session_id, 10)) == [
        ("user", "q"),
        ("assistant", "call"),
        ("toolResult", "one"),
        ("toolResult", "No result provided"),
    ]
    store.messages.append(tool_result("c2", "two"), loop_id=loop_id, turn_index=0)
    assert texts(store.messages.last(session_id, 10)) == [
        ("user", "q"),
        ("assistant", "call"),
        ("toolResult", "one"),
        ("toolResult", "two"),
    ]


def test_last_drops_the_other_results_of_a_split_parallel_call(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(
        loop_id,
        0,
        [user("q"), assistant("call", calls=("c1", "c2")), tool_result("c1", "one"), tool_result("c2", "two")],
    )
    store.messages.append_turn(loop_id, 1, [assistant("final")])
    window = store.messages.last(session_id, 2)
    assert texts(window) == [("assistant", "final")]
    assert all(m.role != "toolResult" for m in store.messages.last(session_id, 3))


def test_last_may_hold_fewer_than_n_but_never_more(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), assistant(calls=("a",)), tool_result("a"), assistant("end")])
    for n in range(1, 6):
        window = store.messages.last(session_id, n)
        assert len(window) <= n
        calls = {c.id for m in window if m.role == "assistant" for c in m.tool_calls()}
        results = {m.tool_call_id for m in window if m.role == "toolResult"}
        assert calls == results


def test_last_follows_the_newest_loops_path_not_the_sessions_rows(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    store.messages.append_turn(loop_id, 1, [user("q1"), assistant("a1")])
    branch = new_loop(
        store, session_id, "branch", parent_loop_id=loop_id, continuation_kind="branch", fork_after=ids[1]
    )
    store.messages.append_turn(branch, 0, [user("b"), extension("ui"), assistant("b answer")])
    assert texts(store.messages.last(session_id, 10)) == [
        ("user", "q0"),
        ("assistant", "a0"),
        ("user", "b"),
        ("assistant", "b answer"),
    ]
    assert store.messages.last(session_id, 10) == store.messages.context(branch)
    # Writing to the first loop again makes its path the current one.
    store.messages.append_turn(loop_id, 2, [user("q2")])
    assert texts(store.messages.last(session_id, 3)) == [("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    assert texts(store.messages.last(session_id, 2, loop_id=branch)) == [("user", "b"), ("assistant", "b answer")]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 9, 100])
def test_last_is_the_tail_of_the_context(store: Store, session_id: str, loop_id: str, n: int) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("call", calls=("c1", "c2")), tool_result("c2", "two")])
    store.messages.append_turn(loop_id, 1, [user("again"), assistant("", stop=StopReason.ABORTED)])
    store.messages.append(extension("ui"), loop_id=loop_id)
    store.messages.append_turn(loop_id, 2, [user("once more"), assistant("done")])
    context = store.messages.context(loop_id)
    window = store.messages.last(session_id, n)
    assert window == context[len(context) - len(window) :]
    assert not window or window[0].role != "toolResult"
    assert len(window) == min(n, len(context)) or context[len(context) - n].role == "toolResult"


def test_last_reads_across_a_compaction(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0"), user("q1"), assistant("a1")])
    compacted = store.loops.compact(loop_id, "what happened", keep_from=ids[2]).loop_id
    store.messages.append_turn(compacted, 0, [user("q2"), assistant("a2")])
    context = store.messages.context(compacted)
    assert texts(context)[1:] == [("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")]
    for n in range(1, 8):
        assert store.messages.last(session_id, n) == context[-n:]


def test_last_renders_a_summary_message_of_a_plain_loop_where_it_stands(
    store: Store, session_id: str, loop_id: str
) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    store.messages.append(extension("compaction_summary", {"summary": "earlier"}), loop_id=loop_id)
    store.messages.append_turn(loop_id, 1, [user("q1"), assistant("a1")])
    context = store.messages.context(loop_id)
    assert [m.role for m in context] == ["user", "assistant", "user", "user", "assistant"]
    assert "earlier" in context[2].text()
    for n in range(1, 7):
        assert store.messages.last(session_id, n) == context[-n:]


def test_last_with_a_model_is_the_tail_of_that_models_context(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("a", thinking="hmm", signature="sig==")])
    window = store.messages.last(session_id, 5, model="gpt-5", provider="openai")
    assert window == store.messages.context(loop_id, model="gpt-5", provider="openai")
    assert [block.type for block in window[1].content] == ["text", "text"]
    assert store.messages.last(session_id, 5, model="claude-sonnet-4-5") == store.messages.context(loop_id)


def test_last_of_a_loop_of_another_session_raises_loop_not_found(store: Store, session_id: str, loop_id: str) -> None:
    store.sessions.create("other")
    other = store.loops.start("other", config=SONNET).loop_id
    with pytest.raises(LoopNotFound, match="not found in session"):
        store.messages.last(session_id, 5, loop_id=other)
    with pytest.raises(LoopNotFound):
        store.messages.last(session_id, 5, loop_id="missing")
    with pytest.raises(SessionNotFound):
        store.messages.last("missing", 5, loop_id=loop_id)


def test_last_zero_is_empty(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), assistant()])
    assert store.messages.last(session_id, 0) == []


@pytest.mark.parametrize("n", [-1, -10, 2.0, True, "5", None])
def test_last_n_must_be_a_non_negative_integer(store: Store, session_id: str, loop_id: str, n: Any) -> None:
    store.messages.append_turn(loop_id, 0, [user(), assistant()])
    with pytest.raises(InvalidArgument, match="n must be a non-negative integer") as raised:
        store.messages.last(session_id, n)
    assert "\n" not in str(raised.value)


def test_last_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.messages.last("missing", 5)


def test_last_of_an_empty_session_is_empty(store: Store, session_id: str) -> None:
    assert store.messages.last(session_id, 5) == []
    store.loops.start(session_id, config=SONNET)
    assert store.messages.last(session_id, 5) == []


# --- context ----------------------------------------------------------------------


def test_context_leaves_out_failed_turns_and_answers_unanswered_calls(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("", stop=StopReason.ERROR, error="overloaded")])
    store.messages.append_turn(loop_id, 1, [assistant("call", calls=("c1",))])
    store.messages.append_turn(loop_id, 2, [user("go on"), assistant("half", calls=("c2",), stop=StopReason.ABORTED)])
    store.messages.append(tool_result("c2", "late"), loop_id=loop_id, turn_index=2)
    context = store.messages.context(loop_id)
    assert texts(context) == [
        ("user", "q"),
        ("assistant", "call"),
        ("toolResult", "No result provided"),
        ("user", "go on"),
    ]
    assert context[2].is_error and context[2].tool_call_id == "c1"
    # The synthetic result is not stored.
    assert len(list(store.messages.records(loop_id=loop_id))) == 6


def test_context_for_another_model(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("a", thinking="hmm", signature="sig==")])
    same = store.messages.context(loop_id, model="claude-sonnet-4-5", provider="anthropic")
    assert [m.model_dump_json() for m in same] == [m.model_dump_json() for m in store.messages.context(loop_id)]
    moved = store.messages.context(loop_id, model="gpt-5", provider="openai")
    assert moved[1].model_dump(mode="json")["content"] == [
        {"type": "text", "text": "hmm"},
        {"type": "text", "text": "a"},
    ]


@pytest.mark.parametrize(
    ("model", "provider", "message"),
    [
        (None, "openai", "provider is given without model"),
        (5, None, "model must be a string"),
        ("gpt-5", b"openai", "provider must be a string"),
    ],
)
def test_context_and_last_refuse_a_bad_model(
    store: Store, session_id: str, loop_id: str, model: Any, provider: Any, message: str
) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("a")])
    with pytest.raises(InvalidArgument, match=message):
        store.messages.context(loop_id, model=model, provider=provider)
    with pytest.raises(InvalidArgument, match=message):
        store.messages.last(session_id, 5, model=model, provider=provider)


# --- path -------------------------------------------------------------------------


def test_path_is_the_rows_the_context_is_built_from(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), extension("ui"), assistant("a0"), user("q1")])
    compacted = store.loops.compact(loop_id, "summary", keep_from=ids[2]).loop_id
    store.messages.append_turn(compacted, 0, [user("q2"), assistant("", stop=StopReason.ERROR)])
    path = store.messages.path(compacted)
    assert all(isinstance(row, StoredMessage) for row in path)
    kinds = [(row.loop_id, row.message.role, getattr(row.message, "kind", None)) for row in path]
    assert kinds == [
        (compacted, "extension", "compaction_summary"),
        (loop_id, "assistant", None),
        (loop_id, "user", None),
        (compacted, "user", None),
        (compacted, "assistant", None),
    ]
    assert [row.message_id for row in path][1:3] == ids[2:]
    assert {row.session_id for row in path} == {session_id}
    assert [row.seq for row in path if row.loop_id == loop_id] == [store.messages.get(i).seq for i in ids[2:]]
    context = store.messages.context(compacted)
    assert context[1:] == [row.message for row in path[1:4]]  # the errored turn is in the path only


def test_path_includes_extension_messages_and_sources(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), extension("ui"), assistant("a")])
    path = store.messages.path(loop_id)
    assert [row.message.role for row in path] == ["user", "extension", "assistant"]
    assert [row.turn_index for row in path] == [0, 0, 0]
    assert all(row.source is None for row in path)


def test_path_of_an_empty_and_an_unknown_loop(store: Store, loop_id: str) -> None:
    assert store.messages.path(loop_id) == []
    with pytest.raises(LoopNotFound):
        store.messages.path("missing")


def test_context_of_an_initial_loop_is_its_own_messages_without_extensions(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), extension("ui"), assistant("a")])
    store.messages.append(extension("marker"), loop_id=loop_id)
    context = store.messages.context(loop_id)
    assert texts(context) == [("user", "q"), ("assistant", "a")]
    assert all(not isinstance(m, ExtensionMessage) for m in context)


def test_context_of_an_empty_loop_is_empty(store: Store, loop_id: str) -> None:
    assert store.messages.context(loop_id) == []


def test_context_default_continuation_includes_the_whole_parent(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("call", calls=("c",)), tool_result("c", "out")])
    store.messages.append_turn(loop_id, 1, [assistant("a0")])
    child = new_loop(store, session_id, "child")
    store.messages.append_turn(child, 0, [user("q1"), assistant("a1")])
    grandchild = new_loop(store, session_id, "grandchild")
    store.messages.append_turn(grandchild, 0, [user("q2")])
    assert texts(store.messages.context(grandchild)) == [
        ("user", "q0"),
        ("assistant", "call"),
        ("toolResult", "out"),
        ("assistant", "a0"),
        ("user", "q1"),
        ("assistant", "a1"),
        ("user", "q2"),
    ]


def test_context_of_a_fresh_initial_loop_ignores_earlier_loops(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("old"), assistant("old answer")])
    fresh = new_loop(store, session_id, "fresh", continuation_kind="initial")
    store.messages.append_turn(fresh, 0, [user("new")])
    assert texts(store.messages.context(fresh)) == [("user", "new")]


def test_context_branch_forks_after_the_given_message(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    store.messages.append_turn(loop_id, 1, [user("q1"), assistant("a1")])
    branch = new_loop(
        store, session_id, "branch", parent_loop_id=loop_id, continuation_kind="branch", fork_after=ids[1]
    )
    store.messages.append_turn(branch, 0, [user("alt"), assistant("alt answer")])
    assert texts(store.messages.context(branch)) == [
        ("user", "q0"),
        ("assistant", "a0"),
        ("user", "alt"),
        ("assistant", "alt answer"),
    ]
    # The parent's own context is unchanged.
    assert texts(store.messages.context(loop_id))[-1] == ("assistant", "a1")


def test_context_branch_at_the_parents_last_message_takes_the_parent_to_its_end(
    store: Store, session_id: str, loop_id: str
) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    branch = new_loop(
        store, session_id, "branch", parent_loop_id=loop_id, continuation_kind="branch", fork_after=ids[-1]
    )
    store.messages.append_turn(branch, 0, [user("b")])
    assert texts(store.messages.context(branch)) == [("user", "q0"), ("assistant", "a0"), ("user", "b")]


def test_context_branch_forking_between_a_call_and_its_result_answers_the_call(
    store: Store, session_id: str, loop_id: str
) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q"), assistant("call", calls=("c",)), tool_result("c")])
    branch = new_loop(
        store, session_id, "branch", parent_loop_id=loop_id, continuation_kind="branch", fork_after=ids[1]
    )
    store.messages.append_turn(branch, 0, [user("instead")])
    assert texts(store.messages.context(branch)) == [
        ("user", "q"),
        ("assistant", "call"),
        ("toolResult", "No result provided"),
        ("user", "instead"),
    ]


def test_context_rerun_replaces_the_parent(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    second = new_loop(store, session_id, "second")
    store.messages.append_turn(second, 0, [user("q1"), assistant("bad answer")])
    rerun = new_loop(store, session_id, "rerun", parent_loop_id=second, continuation_kind="rerun")
    store.messages.append_turn(rerun, 0, [user("q1"), assistant("better answer")])
    assert texts(store.messages.context(rerun)) == [
        ("user", "q0"),
        ("assistant", "a0"),
        ("user", "q1"),
        ("assistant", "better answer"),
    ]


def test_context_rerun_of_an_initial_loop_starts_fresh(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("a")])
    rerun = new_loop(store, session_id, "rerun", parent_loop_id=loop_id, continuation_kind="rerun")
    store.messages.append_turn(rerun, 0, [user("q"), assistant("again")])
    assert texts(store.messages.context(rerun)) == [("user", "q"), ("assistant", "again")]


def _summary_text(message: Any) -> str:
    assert isinstance(message, UserMessage)
    return message.text()


def test_context_compaction_honours_keep_from(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    kept = store.messages.append_turn(loop_id, 1, [user("q1"), assistant("a1")])
    store.messages.append(extension("marker"), loop_id=loop_id)
    compaction = store.loops.compact(loop_id, "THE SUMMARY", keep_from=kept[0])
    store.messages.append_turn(compaction.loop_id, 0, [user("q2"), assistant("a2")])

    context = store.messages.context(compaction.loop_id)
    assert "THE SUMMARY" in _summary_text(context[0])
    assert texts(context[1:]) == [("user", "q1"), ("assistant", "a1"), ("user", "q2"), ("assistant", "a2")]


def test_context_compaction_without_keep_from_keeps_only_the_summary(
    store: Store, session_id: str, loop_id: str
) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    compaction = store.loops.compact(loop_id, "EVERYTHING SO FAR")
    context = store.messages.context(compaction.loop_id)
    assert len(context) == 1
    assert "EVERYTHING SO FAR" in _summary_text(context[0])


def test_context_after_a_compaction_builds_on_it(store: Store, session_id: str, loop_id: str) -> None:
    first = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    second = new_loop(store, session_id, "second")
    store.messages.append_turn(second, 0, [user("q1"), assistant("a1")])
    compaction = store.loops.compact(second, "SUMMARY", keep_from=first[1])
    after = new_loop(store, session_id, "after")
    store.messages.append_turn(after, 0, [user("q2")])

    context = store.messages.context(after)
    assert "SUMMARY" in _summary_text(context[0])
    assert texts(context[1:]) == [("assistant", "a0"), ("user", "q1"), ("assistant", "a1"), ("user", "q2")]
    assert store.loops.get(after).parent_loop_id == compaction.loop_id


def test_context_renders_a_branch_summary_and_drops_other_extensions(
    store: Store, session_id: str, loop_id: str
) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    child = new_loop(store, session_id, "child")
    store.messages.append(ExtensionMessage(kind="branch_summary", data={"summary": "TRIED X"}), loop_id=child)
    store.messages.append(ExtensionMessage(kind="model_change", data={"model": "gpt-5"}), loop_id=child)
    store.messages.append_turn(child, 0, [user("q1")])
    context = store.messages.context(child)
    assert texts(context[:2]) == [("user", "q0"), ("assistant", "a0")]
    assert "TRIED X" in _summary_text(context[2])
    assert texts(context[3:]) == [("user", "q1")]


def test_context_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.messages.context("missing")


# --- get / records ------------------------------------------------------------------


def test_get_unknown_message_raises_message_not_found(store: Store, loop_id: str) -> None:
    store.messages.append(user(), loop_id=loop_id)
    with pytest.raises(MessageNotFound):
        store.messages.get(987654)


def test_records_by_session_and_by_loop(store: Store, session_id: str, loop_id: str) -> None:
    a = store.messages.append_turn(loop_id, 0, [user("a0"), assistant("a1")])
    other = new_loop(store, session_id, "other")
    b = store.messages.append_turn(other, 3, [user("b0")])
    c = store.messages.append(extension(), loop_id=loop_id)

    by_session = list(store.messages.records(session_id))
    assert [r.message_id for r in by_session] == [*a, *b, c]
    assert all(isinstance(r, StoredMessage) and r.session_id == session_id and r.source is None for r in by_session)
    assert [(r.loop_id, r.turn_index, r.seq) for r in by_session] == [
        (loop_id, 0, 0),
        (loop_id, 0, 1),
        (other, 3, 0),
        (loop_id, None, 2),
    ]
    assert [r.message.text() for r in by_session[:3]] == ["a0", "a1", "b0"]

    by_loop = list(store.messages.records(loop_id=loop_id))
    assert [(r.message_id, r.seq) for r in by_loop] == [(a[0], 0), (a[1], 1), (c, 2)]
    assert by_loop[0] == store.messages.get(a[0])


def test_records_streams_many_messages(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(f"m{i}") for i in range(1203)])
    assert [r.message_id for r in store.messages.records(session_id)] == ids


def test_records_builds_each_model_only_as_it_is_reached(sync_store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A model is built when the iteration reaches it, never a batch ahead (a batch of live models costs the collector).

    The async store's batches are tested in test_async.py.
    """
    store = sync_store
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(loop_id, 0, [user(f"m{i}") for i in range(50)])
    built: list[int] = []
    build = message_reads.stored_message
    monkeypatch.setattr(message_reads, "stored_message", lambda row: built.append(row[0]) or build(row))
    records = store.messages.records(session_id)
    first = next(records)
    assert built == [first.message_id]
    second = next(records)
    assert built == [first.message_id, second.message_id]
    assert len(list(records)) == 48 and len(built) == 50


def _id(item: Any) -> int:
    """A walked item's message id: a stored message's ``message_id``, a row's ``id``."""
    return item.message_id if isinstance(item, StoredMessage) else int(item.id)


@pytest.mark.parametrize("walk", ["records", "records(loop_id)", "rows"])
def test_a_walk_left_half_read_does_not_keep_the_store_from_writing(tmp_path: Path, walk: str) -> None:
    """Nothing stays open between pages: an old SQLite snapshot would keep this connection from writing."""
    with Store(tmp_path / "s.db", busy_budget=1) as store, Store(tmp_path / "s.db") as other:
        session_id = store.sessions.create().session_id
        loop_id = store.loops.start(session_id).loop_id
        ids = store.messages.append_turn(loop_id, 0, [user(str(i)) for i in range(message_reads.STREAM_BATCH + 5)])
        started = {
            "records": lambda: store.messages.records(session_id),
            "records(loop_id)": lambda: store.messages.records(loop_id=loop_id),
            "rows": lambda: store.messages.rows(session_id),
        }[walk]()
        first = next(started)  # type: ignore[call-overload]
        other.sessions.create("meanwhile")  # a commit by another connection
        added = store.messages.append(user("written while the walk is open"), loop_id=loop_id, turn_index=1)
        rest = [_id(item) for item in started]
        assert [_id(first), *rest] == [*ids, added]  # pages read after the write see it


def test_records_of_an_empty_session_or_loop(store: Store, session_id: str, loop_id: str) -> None:
    assert list(store.messages.records(session_id)) == []
    assert list(store.messages.records(loop_id=loop_id)) == []


@pytest.mark.parametrize("args", ["neither", "both"])
def test_records_needs_exactly_one_scope(store: Store, session_id: str, loop_id: str, args: str) -> None:
    kwargs = {} if args == "neither" else {"session_id": session_id, "loop_id": loop_id}
    with pytest.raises(InvalidMessage):
        list(store.messages.records(**kwargs))


def test_records_unknown_scope_raises_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        list(store.messages.records("missing"))
    with pytest.raises(LoopNotFound):
        list(store.messages.records(loop_id="missing"))


# --- round trip ----------------------------------------------------------------------

SIGNATURE = 'EqQBCkYIBxgCKkDk+/9Zx==\u2028\\n"quoted" ünï'
ARGUMENTS = {
    "path": "/tmp/日本語/😀.txt",
    "nested": {"list": [1, 2.5, -3, None, True, {"deep": {"deeper": ["x", {}]}}], "empty": []},
    "big": 123456789012345678901234567890,
    "negative_big": -(2**70),
    "int64_edge": 2**63,
    "float": 0.30000000000000004,
    "tiny": 1e-7,
    "escapes": 'tab\tnewline\nquote"backslash\\ nul\u0000',
}


def _round_trip_messages() -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is in this picture? ✨"},
                {
                    "type": "image",
                    "data": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk",
                    "mimeType": "image/png",
                },
            ],
            "timestamp": 1_700_000_000_000,
            "nodeId": "n-1",
            "tags": ["important", {"k": 1}],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Let me think… about 🐍", "signature": SIGNATURE},
                {"type": "text", "text": "Reading the file."},
                {"type": "toolCall", "id": "toolu_01", "name": "read", "arguments": ARGUMENTS, "partialJson": "{}"},
            ],
            "stopReason": "toolUse",
            "model": "claude-sonnet-4-5-20250929",
            "provider": "anthropic",
            "usage": {
                "input": 12,
                "output": 34,
                "reasoning": 5,
                "cache_read": 100,
                "cache_write": 7,
                "total_tokens": 153,
            },
            "timestamp": 1_700_000_000_500,
            "parentId": "n-1",
            "provenanceHint": {"via": "proxy", "retries": 2},
        },
        {
            "role": "toolResult",
            "toolCallId": "toolu_01",
            "toolName": "read",
            "content": [
                {"type": "text", "text": "contents"},
                {"type": "image", "data": "AAAA", "mimeType": "image/jpeg"},
            ],
            "isError": False,
            "timestamp": 1_700_000_001_000,
            "details": {"bytes": 8, "elapsed_ms": 3.25},
        },
        {
            "role": "extension",
            "kind": "ui_state",
            "data": {"panel": "files", "big": 2**80, "unicode": "ß"},
            "futureField": [1, 2, 3],
        },
    ]


def test_round_trip_is_equal_and_byte_exact(store: Store, session_id: str, loop_id: str) -> None:
    appended = [parse_message(raw) for raw in _round_trip_messages()]
    ids = store.messages.append_turn(loop_id, 0, appended)
    stamp = TurnId(loop_id=loop_id, turn_index=0)
    expected = [m if isinstance(m, ExtensionMessage) else m.with_turn_id(stamp) for m in appended]

    reads = {
        "get": [store.messages.get(i).message for i in ids],
        "turn": store.messages.turn(loop_id, 0).messages,
        "turns": store.messages.turns(loop_id)[0].messages,
        "loop": store.messages.loop(loop_id),
        "records": [r.message for r in store.messages.records(session_id)],
    }
    for how, got in reads.items():
        assert got == expected, how
        assert [m.model_dump_json() for m in got] == [m.model_dump_json() for m in expected], how
    sent = [m for m in expected if not isinstance(m, ExtensionMessage)]
    for how, got in {"last": store.messages.last(session_id, 10), "context": store.messages.context(loop_id)}.items():
        assert [m.model_dump_json() for m in got] == [m.model_dump_json() for m in sent], how


def test_round_trip_keeps_signature_arguments_and_unknown_keys(store: Store, loop_id: str) -> None:
    raws = _round_trip_messages()
    ids = store.messages.append_turn(loop_id, 0, raws)
    dumped = [json.loads(store.messages.get(i).message.model_dump_json()) for i in ids]

    thinking, _, call = dumped[1]["content"]
    assert thinking["signature"] == SIGNATURE
    assert call["arguments"] == ARGUMENTS
    assert json.dumps(call["arguments"], ensure_ascii=False) == json.dumps(ARGUMENTS, ensure_ascii=False)
    assert call["partialJson"] == "{}"
    assert dumped[0]["nodeId"] == "n-1" and dumped[0]["tags"] == ["important", {"k": 1}]
    assert dumped[0]["content"][1] == raws[0]["content"][1]
    assert dumped[1]["parentId"] == "n-1" and dumped[1]["provenanceHint"] == {"via": "proxy", "retries": 2}
    assert dumped[2]["details"] == {"bytes": 8, "elapsed_ms": 3.25}
    assert dumped[3] == raws[3]
    for raw, back in zip(raws[:3], dumped[:3]):
        assert back.pop("turnId") == {"loopId": loop_id, "turnIndex": 0}
        assert back == raw


def test_round_trip_through_context(store: Store, loop_id: str) -> None:
    raws = _round_trip_messages()
    store.messages.append_turn(loop_id, 0, raws)
    context = store.messages.context(loop_id)
    assert len(context) == 3
    expected = [parse_message(raw).with_turn_id(TurnId(loop_id=loop_id, turn_index=0)) for raw in raws[:3]]
    assert [m.model_dump_json() for m in context] == [m.model_dump_json() for m in expected]


@pytest.mark.parametrize("depth", [202, 5_000])
def test_a_dict_nested_too_deeply_is_refused_before_validation(store: Any, loop_id: str, depth: int) -> None:
    # Refused with InvalidMessage naming where, nothing written, and no noise through
    # sys.unraisablehook (pytest fails a test on any) from validating input this deep.
    nested: list[Any] = []
    inner = nested
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    record = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1, "extra": nested}
    with pytest.raises(InvalidMessage, match=r"^extra\[0\]\[0\]\[0\]…: nested more than 200 levels deep"):
        store.messages.append(record, loop_id=loop_id, turn_index=0)
    assert store.messages.loop(loop_id) == []


def test_a_dict_nested_200_levels_is_stored(store: Any, loop_id: str) -> None:
    nested: list[Any] = []
    inner = nested
    for _ in range(197):  # the message object, "extra" and 198 lists: 199 levels
        inner.append([])
        inner = inner[0]
    record = {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1, "extra": nested}
    store.messages.append(record, loop_id=loop_id, turn_index=0)
    [stored] = store.messages.loop(loop_id)
    assert stored.model_dump(mode="json", by_alias=True)["extra"] == nested


# --- append: refused mistakes ---------------------------------------------------------------------


def test_append_to_an_ended_loop_raises_invalid_argument_and_writes_nothing(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q"), assistant("a")])
    store.loops.end(loop_id)
    with pytest.raises(InvalidArgument) as caught:
        store.messages.append(user("late"), loop_id=loop_id, turn_index=1)
    assert caught.value.argument == "loop_id" and "has ended" in str(caught.value)
    with pytest.raises(InvalidArgument, match="^loop_id: "):
        store.messages.append_turn(loop_id, 1, [user("late"), assistant("late")])
    assert texts(store.messages.loop(loop_id)) == [("user", "q"), ("assistant", "a")]


def test_append_turn_index_going_backwards_raises_invalid_argument(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    store.messages.append_turn(loop_id, 2, [user("q2")])
    with pytest.raises(InvalidArgument) as caught:
        store.messages.append(assistant("back"), loop_id=loop_id, turn_index=1)
    assert caught.value.argument == "turn_index" and "already holds turn 2" in str(caught.value)
    with pytest.raises(InvalidArgument, match="^turn_index: "):
        store.messages.append_turn(loop_id, 0, [user("again")])
    assert texts(store.messages.loop(loop_id)) == [("user", "q0"), ("assistant", "a0"), ("user", "q2")]
    store.messages.append(assistant("a2"), loop_id=loop_id, turn_index=2)  # the same turn goes on
    store.messages.append(extension(), loop_id=loop_id)  # no turn: never backwards
    assert len(store.messages.loop(loop_id)) == 5


def test_append_dict_with_python_names_and_string_content_is_stored_in_wire_form(store: Store, loop_id: str) -> None:
    raw = {"role": "assistant", "content": "hi", "stop_reason": "stop", "model": "m", "provider": "p", "timestamp": 1}
    message_id = store.messages.append(raw, loop_id=loop_id, turn_index=0)
    (record,) = store.messages.records(loop_id=loop_id)
    assert record.message_id == message_id
    assert record.message.model_dump(mode="json") == {
        "role": "assistant",
        "content": [{"type": "text", "text": "hi"}],
        "stopReason": "stop",
        "model": "m",
        "provider": "p",
        "timestamp": 1,
        "turnId": {"loopId": loop_id, "turnIndex": 0},
    }


def test_assistant_without_usage_is_stored_with_unknown_usage(store: Store, loop_id: str) -> None:
    reply = Message.assistant("no usage known", model="claude-sonnet-4-5", provider="anthropic", timestamp=5)
    message_id = store.messages.append(reply, loop_id=loop_id, turn_index=0)
    stored = store.messages.get(message_id).message
    assert isinstance(stored, AssistantMessage) and stored.usage is None
    assert "usage" not in stored.model_dump(mode="json")
    totals = store.usage.loop(loop_id)
    assert (totals.total_tokens, totals.requests, totals.cost) == (0, 0, None)


# --- rewind ---------------------------------------------------------------------------------------


def test_rewind_starts_a_branch_whose_context_ends_at_the_message(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    store.messages.append_turn(loop_id, 1, [user("bad prompt"), assistant("bad answer")])
    branch = store.messages.rewind(loop_id, after=ids[1])
    assert (branch.parent_loop_id, branch.fork_after, branch.continuation_kind.value) == (loop_id, ids[1], "branch")
    assert branch.session_id == session_id and branch.config == store.loops.get(loop_id).config
    store.messages.append_turn(branch.loop_id, 1, [user("better prompt"), assistant("better answer")])
    assert texts(store.messages.context(branch.loop_id)) == [
        ("user", "q0"),
        ("assistant", "a0"),
        ("user", "better prompt"),
        ("assistant", "better answer"),
    ]
    assert len(store.messages.loop(loop_id)) == 4  # nothing deleted


def test_rewind_to_a_message_of_an_earlier_loop_forks_from_that_loop(
    store: Store, session_id: str, loop_id: str
) -> None:
    first = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0"), user("q0b"), assistant("a0b")])
    second = new_loop(store, session_id, "second")
    store.messages.append_turn(second, 0, [user("q1"), assistant("a1")])
    branch = store.messages.rewind(second, after=first[1], new_loop_id="edit")
    assert (branch.loop_id, branch.parent_loop_id, branch.fork_after) == ("edit", loop_id, first[1])
    assert texts(store.messages.context("edit")) == [("user", "q0"), ("assistant", "a0")]


def test_rewind_to_a_message_outside_the_history_raises_invalid_argument(
    store: Store, session_id: str, loop_id: str
) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    fresh = new_loop(store, session_id, "fresh", continuation_kind="initial")
    foreign = store.messages.append(user("other root"), loop_id=fresh, turn_index=0)
    for after in (foreign, 10**9, "x", True):
        with pytest.raises(InvalidArgument) as caught:
            store.messages.rewind(loop_id, after=after)  # type: ignore[arg-type]
        assert caught.value.argument == "after"
    with pytest.raises(InvalidArgument, match="^after: "):
        store.messages.rewind(fresh, after=ids[0])  # an initial loop's history holds nothing before it
    with pytest.raises(LoopNotFound):
        store.messages.rewind("missing", after=ids[0])
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [loop_id, "fresh"]


# --- delete ---------------------------------------------------------------------------------------


def test_delete_the_last_message_pops_it(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q"), assistant("a")])
    before = store.sessions.get(session_id).updated_at
    assert store.messages.delete(ids[1]) == [ids[1]]
    assert texts(store.messages.loop(loop_id)) == [("user", "q")]
    assert store.sessions.get(session_id).updated_at >= before
    with pytest.raises(MessageNotFound):
        store.messages.get(ids[1])
    again = store.messages.append(assistant("again"), loop_id=loop_id, turn_index=0)
    assert store.messages.get(again).seq == 1  # seq stays gap-free


def test_delete_with_later_removes_the_tail_and_its_usage(store: Store, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q0"), assistant("a0")])
    tail = store.messages.append_turn(loop_id, 1, [user("q1"), assistant("a1")])
    assert store.usage.loop(loop_id).requests == 2
    assert store.messages.delete(tail[0], with_later=True) == tail
    assert [m.message_id for m in store.messages.records(loop_id=loop_id)] == ids
    assert store.usage.loop(loop_id).requests == 1
    store.messages.append(user("q1 again"), loop_id=loop_id, turn_index=1)  # the turn is free again


def test_delete_from_the_middle_raises_invalid_argument_and_deletes_nothing(store: Store, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q"), assistant("a"), user("more")])
    with pytest.raises(InvalidArgument) as caught:
        store.messages.delete(ids[0])
    assert caught.value.argument == "message_id" and "2 later" in str(caught.value)
    assert [m.message_id for m in store.messages.records(loop_id=loop_id)] == ids


@pytest.mark.parametrize("kind", ["branch", "default", "compaction"])
def test_delete_a_message_another_loop_continues_from_is_refused(
    store: Store, session_id: str, loop_id: str, kind: str
) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("q"), assistant("a")])
    if kind == "branch":
        store.messages.rewind(loop_id, after=ids[1])
    elif kind == "default":
        new_loop(store, session_id, "next")
    else:
        store.loops.compact(loop_id, "summary", keep_from=ids[1])
    with pytest.raises(InvalidArgument, match="^message_id: loop .* continues from message"):
        store.messages.delete(ids[1])
    assert [m.message_id for m in store.messages.records(loop_id=loop_id)] == ids


def test_delete_unknown_or_bad_message_id(store: Store) -> None:
    with pytest.raises(MessageNotFound):
        store.messages.delete(10**9)
    with pytest.raises(InvalidArgument, match="^message_id: "):
        store.messages.delete("1")  # type: ignore[arg-type]


def test_a_turn_index_out_of_range_in_the_messages_turn_id_is_an_invalid_message(store: Store, loop_id: str) -> None:
    message = user().with_turn_id(TurnId(loop_id=loop_id, turn_index=2**31))
    with pytest.raises(InvalidMessage) as caught:
        store.messages.append(message)
    assert not isinstance(caught.value, InvalidArgument)
    assert [path for path, _ in caught.value.errors] == ["turnId.turnIndex"]
    assert store.messages.loop(loop_id) == []


def test_last_in_one_loop_reads_one_statement_when_its_window_starts_at_a_tool_result(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Turns of user, call, result, reply: a window of n rows often starts at a result whose call
    is further back. That result is left out of the tail, so the window must hold a few rows more
    than n, not send last() the long way (a walk of the loop's path: several times slower)."""
    store = Store(tmp_path / "store.db")
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    for k in range(40):
        store.messages.append_turn(
            loop_id,
            k,
            [user(f"u{k}"), assistant(f"a{k}", calls=(f"c{k}",)), tool_result(f"c{k}", "r"), assistant(f"b{k}")],
        )
    expected = store.messages.context(loop_id)
    monkeypatch.setattr(message_reads, "path_tail", lambda *args: pytest.fail("walked the path"))
    for n in (2, 50, 51, 53):
        tail = expected[-n:]
        while tail and tail[0].role == "toolResult":  # last() never starts with a result cut from its call
            tail = tail[1:]
        assert [m.model_dump() for m in store.messages.last(session_id, n)] == [m.model_dump() for m in tail]
    store.close()


def _asks(*calls: tuple[str, str]) -> Message:
    blocks = [{"type": "toolCall", "id": i, "name": n, "arguments": {}} for i, n in calls]
    return Message.assistant(blocks, model="claude-sonnet-4-5", provider="anthropic", usage=None)


def test_tool_names_finds_calls_of_earlier_writes_newest_first(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append(_asks(("c1", "old"), ("c2", "clock")), loop_id=loop_id, turn_index=0)
    store.messages.append(tool_result("c1"), loop_id=loop_id, turn_index=0)
    other = store.loops.start(session_id, config=SONNET).loop_id
    store.messages.append(_asks(("c1", "weather")), loop_id=other, turn_index=0)
    names = store.messages.tool_names(session_id, ["c1", "c2", "missing"])
    assert names == {"c1": "weather", "c2": "clock"}  # the newest call of an id; an unknown id left out
    assert store.messages.tool_names(session_id, []) == {}


def test_tool_names_of_an_unknown_session_or_another_sessions_calls_is_empty(store: Store, loop_id: str) -> None:
    store.messages.append(_asks(("c1", "weather")), loop_id=loop_id, turn_index=0)
    elsewhere = store.sessions.create().session_id
    assert store.messages.tool_names(elsewhere, ["c1"]) == {}
    assert store.messages.tool_names("no such session", ["c1"]) == {}


def test_tool_names_reads_past_a_batch_of_newer_messages(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append(_asks(("first", "early")), loop_id=loop_id, turn_index=0)
    for n in range(message_reads.NAMES_BATCH * 2 + 1):
        store.messages.append(_asks((f"c{n}", "later")), loop_id=loop_id, turn_index=n + 1)
    assert store.messages.tool_names(session_id, ["first", "c0"]) == {"first": "early", "c0": "later"}


def test_append_to_turn_continues_the_latest_turn_or_opens_the_next(store: Store, loop_id: str) -> None:
    first = store.messages.append_to_turn(loop_id, [user("q")], new_turn=False)
    assert (first.loop_id, first.turn_index) == (loop_id, 0)  # a loop with no turn starts at 0
    assert store.messages.append_to_turn(loop_id, [assistant("a")], new_turn=False).turn_index == 0
    assert store.messages.append_to_turn(loop_id, [user("q2")], new_turn=True).turn_index == 1
    second = store.messages.append_to_turn(loop_id, [assistant("a2"), extension()], new_turn=False, sources=["s", None])
    assert second.turn_index == 1
    rows = list(store.messages.records(loop_id=loop_id))
    assert [(row.turn_index, row.seq) for row in rows] == [(0, 0), (0, 1), (1, 2), (1, 3), (1, 4)]
    assert [row.source for row in rows] == [None, None, None, "s", None]
    assert store.messages.turn(loop_id, 1).messages[0].turn == TurnId(loop_id=loop_id, turn_index=1)


def test_append_to_turn_refuses_whole_and_writes_nothing(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_to_turn(loop_id, [user("kept")], new_turn=True)
    with pytest.raises(InvalidArgument, match="one source"):
        store.messages.append_to_turn(loop_id, [user("a"), user("b")], new_turn=True, sources=["only one"])
    with pytest.raises(InvalidMessage):
        store.messages.append_to_turn(loop_id, [user("fine"), {"role": "user"}], new_turn=True)
    with pytest.raises(LoopNotFound):
        store.messages.append_to_turn("no such loop", [user("x")], new_turn=True)
    ended = store.loops.start(session_id, config=SONNET).loop_id
    store.loops.end(ended)
    with pytest.raises(InvalidArgument, match="has ended"):
        store.messages.append_to_turn(ended, [user("x")], new_turn=False)
    assert texts(store.messages.loop(loop_id)) == [("user", "kept")]
    assert store.messages.loop(ended) == []


def test_append_to_turn_from_threads_lands_every_call_whole_in_its_own_turn(
    store: Store, loop_id: str, backend: str
) -> None:
    if backend.endswith("async"):
        pytest.skip("one thread drives the async store's facade; concurrent async adds: test_integration_openai_agents")

    def write(worker: int) -> None:
        for n in range(5):
            store.messages.append_to_turn(loop_id, [user(f"{worker}-{n}"), assistant(f"{worker}-{n}")], new_turn=True)

    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(write, range(4)))
    rows = list(store.messages.records(loop_id=loop_id))
    assert sorted({row.turn_index for row in rows}) == list(range(20))
    for turn in range(20):
        prompt, reply = (row.message.text() for row in rows if row.turn_index == turn)  # type: ignore[union-attr]
        assert prompt == reply


def test_append_turn_behind_a_later_turn_committed_while_it_waited_is_refused_in_one_line(postgres: Any) -> None:
    """PostgreSQL: the loop's check reads a snapshot older than its lock; the insert's guard catches the rest."""
    postgres.empty()
    with Store(postgres.url) as first, Store(postgres.url) as second:
        session_id = first.sessions.create().session_id
        loop_id = first.loops.start(session_id, config=SONNET).loop_id
        first.messages.append_turn(loop_id, 0, [user("start")])
        holding = threading.Event()

        def later_turn() -> None:
            with first.transaction():
                first.messages.append_turn(loop_id, 5, [user("later")])
                holding.set()
                time.sleep(0.5)  # the other append waits on the loop's row meanwhile

        writer = threading.Thread(target=later_turn)
        writer.start()
        holding.wait()
        try:
            with pytest.raises(InvalidArgument, match="turn 3 goes backwards"):
                second.messages.append_turn(loop_id, 3, [user("behind")])
        finally:
            writer.join()
        assert texts(second.messages.loop(loop_id)) == [("user", "start"), ("user", "later")]


def test_sources_and_source_texts_give_a_loops_verbatim_sources_in_order(store: Store, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user("a"), assistant("b")], sources=['{"a": 1}', None])
    ids += store.messages.append_turn(loop_id, 1, [user("c"), assistant("d")], sources=['{"c": 3}', '{"d": 4}'])
    rows = store.messages.sources(loop_id)
    assert [(row.id, row.turn_index, row.source) for row in rows] == [
        (ids[0], 0, '{"a": 1}'),
        (ids[1], 0, None),
        (ids[2], 1, '{"c": 3}'),
        (ids[3], 1, '{"d": 4}'),
    ]
    assert store.messages.sources(loop_id, last=2) == rows[2:]
    assert store.messages.sources(loop_id, last=0) == []
    assert store.messages.source_texts(loop_id) == ['{"a": 1}', '{"c": 3}', '{"d": 4}']  # rows without one left out
    assert store.messages.source_texts(loop_id, last=2) == ['{"c": 3}', '{"d": 4}']
    assert store.messages.source_texts(loop_id, last=10) == ['{"a": 1}', '{"c": 3}', '{"d": 4}']
    assert store.messages.source_texts(loop_id, last=0) == []


@pytest.mark.parametrize("last", [-1, 1.5, True])
def test_sources_refuse_a_bad_count_and_an_unknown_loop(store: Store, loop_id: str, last: Any) -> None:
    for read in (store.messages.sources, store.messages.source_texts):
        with pytest.raises(InvalidArgument):
            read(loop_id, last=last)
        with pytest.raises(LoopNotFound):
            read("no such loop")


@pytest.mark.parametrize("seed", range(6))
def test_last_is_the_tail_of_the_context_of_a_random_loop(
    store: Store, session_id: str, loop_id: str, seed: int
) -> None:
    """Turns with parallel calls, results missing or out of place, failed turns and extension
    messages: for every n, last() is the context's tail (the newest rows alone, or with the few
    older ones read beside them, or the path walked: each must give the same)."""
    rng = random.Random(seed)
    count = 0
    for k in range(14):
        messages: list[Any] = [user(f"u{k}")]
        calls = tuple(f"c{k}.{j}" for j in range(rng.choice((0, 1, 1, 2, 3))))
        stop = rng.choice((StopReason.STOP,) * 5 + (StopReason.ERROR, StopReason.ABORTED))
        messages.append(assistant(f"a{k}", calls=calls, stop=stop))
        answered = [call for call in calls if rng.random() < 0.8]
        rng.shuffle(answered)
        messages += [tool_result(call, f"r{call}") for call in answered]
        if rng.random() < 0.2:
            messages.append(tool_result(f"stray{k}", "orphan"))
        if rng.random() < 0.2:
            messages.append(extension("ui"))
        if rng.random() < 0.3:
            messages.append(assistant(f"b{k}"))
        store.messages.append_turn(loop_id, k, messages)
        count += len(messages)
    context = store.messages.context(loop_id)
    for n in range(1, count + 2):
        window = store.messages.last(session_id, n)
        tail = context[max(len(context) - n, 0) :]
        while tail and tail[0].role == "toolResult":
            tail = tail[1:]
        assert window == tail, n


def test_last_validates_only_the_newest_n_rows_when_they_decide_the_tail(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chat without tools: the newest n rows are the tail, so the few rows read beyond them are never validated."""
    store = Store(tmp_path / "store.db")
    session_id = store.sessions.create().session_id
    loop_id = store.loops.start(session_id).loop_id
    for k in range(30):
        store.messages.append_turn(loop_id, k, [user(f"u{k}"), assistant(f"a{k}")])
    validated: list[int] = []
    parse = message_tail.parse_texts_of

    def counting(db: Any, rows: Any, mode: Any = "inline") -> list[Any]:
        parsed = parse(db, rows, mode)
        validated.append(len(parsed))
        return parsed

    monkeypatch.setattr(message_tail, "parse_texts_of", counting)
    assert texts(store.messages.last(session_id, 20)) == texts(store.messages.context(loop_id)[-20:])
    assert validated == [20]
    store.close()


@pytest.mark.parametrize("join_limit", [0, 10**9])
def test_reads_give_the_same_messages_whether_validated_one_by_one_or_as_one_array(
    store: Store, session_id: str, loop_id: str, monkeypatch: pytest.MonkeyPatch, join_limit: int
) -> None:
    """Stored texts longer in all than rows.JOIN_LIMIT are validated one by one (never joined into one
    large string); shorter ones as one JSON array. Either way a read gives back what was written."""
    screenshot = ImageContent(data="iVBORw0KGgo" + "A" * 200_000, mime_type="image/png")
    written = [
        user("look"),
        assistant("reading", calls=("c1",)),
        ToolResultMessage(
            tool_call_id="c1",
            tool_name="screen",
            content=[TextContent(text="shot"), screenshot],
            is_error=False,
            timestamp=3_000,
        ),
        assistant("done"),
    ]
    store.messages.append_turn(loop_id, 0, written)
    monkeypatch.setattr(rows_module, "JOIN_LIMIT", join_limit)
    dumped = [m.model_dump() for m in store.messages.loop(loop_id)]
    assert dumped == [
        m.model_copy(update={"turn": TurnId(loop_id=loop_id, turn_index=0)}).model_dump() for m in written
    ]
    assert [m.model_dump() for m in store.messages.last(session_id, 4)] == dumped
    assert [m.model_dump() for m in store.messages.turn(loop_id, 0).messages] == dumped


# --- arguments that are not messages ------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"timestamp": 1.5}, "timestamp: must be unix milliseconds"),
        ({"timestamp": True}, "timestamp: must be unix milliseconds"),
        ({"timestamp": "x"}, "timestamp: must be unix milliseconds"),
        ({"timestamp": 2**63}, "timestamp: must be unix milliseconds"),
        ({"usage": Usage(input=1, output=1), "model": 5}, "model: must be a string"),
        ({"usage": Usage(input=1, output=1), "provider": {"a": 1}}, "provider: must be a string"),
        ({"usage": Usage(input=1, output=1), "model": "m" * 4000}, "over the limit of 150"),
        ({"usage": Usage(input=1, output=1), "model": "a\x00b"}, "NUL"),
        ({"usage": {"input": -1, "output": 1}}, "usage: input"),
        ({"usage": [1, 2]}, "usage: must be a Usage or a dict"),
        ({"usage": {"input": 1, "output": 0, "cache_read_tokens": 60}}, "'cache_read_tokens' is not a usage field"),
        ({"loop_id": 5}, "loop_id: must be a string"),
        ({"loop_id": ["x"]}, "loop_id: must be a string"),
        ({"usage_known": "no"}, "usage_known: must be True or False"),
    ],
)
def test_append_refuses_arguments_of_the_wrong_kind_and_writes_nothing(
    store: Store, loop_id: str, kwargs: dict[str, Any], needle: str
) -> None:
    note = {"role": "extension", "kind": "note", "data": "hello"}
    arguments = {"loop_id": loop_id, **kwargs}
    call = store.messages.append_turn if "usage_known" in kwargs else None
    with pytest.raises((InvalidArgument, InvalidMessage)) as raised:
        if call is not None:
            call(loop_id, 0, [note], usage_known=kwargs["usage_known"])
        else:
            store.messages.append(note, **arguments)
    assert needle in str(raised.value) and "\n" not in str(raised.value)
    assert store.messages.loop(loop_id) == []


def test_a_usage_dict_counts_as_its_usage(store: Store, loop_id: str) -> None:
    note = {"role": "extension", "kind": "compaction_summary", "data": "summary"}
    store.messages.append(note, loop_id=loop_id, usage={"input": 10, "output": 2}, model="gpt-5", provider="openai")
    totals = store.usage.loop(loop_id)
    assert (totals.input, totals.output, totals.requests) == (10, 2, 1)


def test_a_turn_may_be_any_sequence_of_messages(store: Store, loop_id: str) -> None:
    assert len(store.messages.append_turn(loop_id, 0, UserList([user("a")]))) == 1
    store.messages.append_to_turn(loop_id, deque([user("b")]), new_turn=False)
    assert [m.text() for m in store.messages.loop(loop_id)] == ["a", "b"]  # type: ignore[union-attr]


@pytest.mark.parametrize("messages", [None, "hi", {"role": "user", "content": "hi"}, (m for m in [])])
def test_a_turn_must_be_a_list_of_messages(store: Store, loop_id: str, messages: Any) -> None:
    with pytest.raises(InvalidArgument, match="messages: must be a list of messages"):
        store.messages.append_turn(loop_id, 0, messages)
    with pytest.raises(InvalidArgument, match="messages: must be a list of messages"):
        store.messages.append_to_turn(loop_id, messages, new_turn=True)


@pytest.mark.parametrize("loop", [5, ["x"], None])
def test_turn_writes_name_a_loop_id_that_is_not_a_string(store: Store, loop: Any) -> None:
    with pytest.raises(InvalidArgument, match="loop_id: must be a string"):
        store.messages.append_turn(loop, 0, [user("q")])
    with pytest.raises(InvalidArgument, match="loop_id: must be a string"):
        store.messages.append_to_turn(loop, [user("q")], new_turn=False)


def test_append_to_turn_takes_only_a_bool_new_turn(store: Store, loop_id: str) -> None:
    with pytest.raises(InvalidArgument, match="new_turn: must be True or False"):
        store.messages.append_to_turn(loop_id, [user("q")], new_turn="yes")  # type: ignore[arg-type]
    assert store.messages.loop(loop_id) == []


def test_reads_by_id_and_turn_refuse_what_is_not_one(store: Store, loop_id: str) -> None:
    (message_id,) = store.messages.append_turn(loop_id, 1, [user("q")])
    for bad in (True, "1", 1.0):
        with pytest.raises(InvalidArgument, match="message_id"):
            store.messages.get(bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument, match="turn_index"):
            store.messages.turn(loop_id, bad)  # type: ignore[arg-type]
    with pytest.raises(MessageNotFound):
        store.messages.get(2**70)
    with pytest.raises(TurnNotFound):
        store.messages.turn(loop_id, 2**70)
    assert store.messages.get(message_id).turn_index == 1


def test_loop_ids_holding_nul_are_not_found_on_every_backend(store: Store, loop_id: str) -> None:
    for call in (
        lambda: store.messages.append_to_turn("a\x00", [user("q")], new_turn=True),
        lambda: store.messages.append_turn("a\x00", 0, [user("q")]),
        lambda: store.messages.turn("a\x00", 0),
    ):
        with pytest.raises(LoopNotFound):
            call()


def test_an_empty_turn_of_an_unknown_loop_is_not_found(store: Store, loop_id: str) -> None:
    assert store.messages.append_turn(loop_id, 0, []) == []
    with pytest.raises(LoopNotFound):
        store.messages.append_turn("nope", 0, [])


def test_a_negative_time_for_a_dict_without_one_blames_the_argument(store: Store, loop_id: str) -> None:
    with pytest.raises(InvalidArgument, match="timestamp: dates a message without a time of its own"):
        store.messages.append({"role": "user", "content": "hi"}, loop_id=loop_id, turn_index=0, timestamp=-5)
    note = {"role": "extension", "kind": "note", "data": "before 1970"}
    assert store.messages.get(store.messages.append(note, loop_id=loop_id, timestamp=-5)).message.role == "extension"


def _rewrite_stored(store: Store, message_id: int, text: str) -> None:
    """Change a stored message's text behind turnstore's back (as a hand edit or another tool would)."""
    engine = sa.create_engine(store.engine.url, poolclass=sa.pool.NullPool)
    with engine.begin() as connection:
        connection.execute(
            sa.text("UPDATE messages SET message = :text WHERE id = :id"), {"text": text, "id": message_id}
        )
    engine.dispose()


@pytest.mark.parametrize("how", ["as one array", "with media", "one by one"])
def test_every_batch_read_names_the_stored_message_it_cannot_read(
    sync_store: Store, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row changed outside turnstore: turn(), turns(), loop(), last() and search() name it by id, not by place."""
    store = sync_store
    if how == "one by one":
        monkeypatch.setattr(rows_module, "JOIN_LIMIT", 0)
    store.sessions.create("s")
    loop = store.loops.start("s")
    texts = [f"word{i}" for i in range(12)]
    ids = store.messages.append_turn(loop.loop_id, 0, [user(text) for text in texts[:6]])
    ids += store.messages.append_turn(loop.loop_id, 1, [user(text) for text in texts[6:]])
    if how == "with media":  # an image kept out of line in the same turn: the reads put its data back as they validate
        image = base64.b64encode(bytes(range(256)) * 100).decode()
        shot = UserMessage(content=[ImageContent(data=image, mime_type="image/png")], timestamp=5)
        ids.append(store.messages.append(shot, loop_id=loop.loop_id, turn_index=1))
    bad = ids[8]
    _rewrite_stored(store, bad, '{"role":"user","content":5,"timestamp":1}')
    named = f"stored message {bad} cannot be read: user.content: "
    reads: list[Callable[[], object]] = [
        lambda: store.messages.turns(loop.loop_id),
        lambda: store.messages.turn(loop.loop_id, 1),
        lambda: store.messages.loop(loop.loop_id),
        lambda: store.messages.last("s", 12),  # the session's newest rows
        lambda: store.messages.last("s", 12, loop_id=loop.loop_id),  # the path read backwards
        lambda: store.messages.search("word8"),  # its words were indexed before the change
    ]
    for read in reads:
        with pytest.raises(StorageError, match=re.escape(named)):
            read()
    assert [message.content[0].text for message in store.messages.turn(loop.loop_id, 0).messages] == texts[:6]
    if store.engine.url.get_backend_name() != "sqlite":
        return  # PostgreSQL's json column refuses text that is not JSON
    _rewrite_stored(store, bad, user("word8 changed").model_dump_json(by_alias=True)[:-3])  # no longer JSON
    for read in reads:
        with pytest.raises(StorageError, match=re.escape(f"stored message {bad} cannot be read: ")):
            read()


def test_a_stored_message_s_id_is_message_id_as_in_a_search_hit(store: Store, session_id: str, loop_id: str) -> None:
    import warnings

    message_id = store.messages.append(user("the deploy failed"), loop_id=loop_id, turn_index=0)
    stored = store.messages.get(message_id)
    (hit,) = store.messages.search("deploy")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stored.message_id == hit.message_id == message_id
    assert "message_id" in stored.model_dump() and "id" not in stored.model_dump()
    with pytest.warns(DeprecationWarning, match=r"StoredMessage\.id is deprecated; use StoredMessage\.message_id"):
        assert stored.id == message_id
    with pytest.warns(DeprecationWarning, match=r"StoredMessage\(id=\.\.\.\) is deprecated"):
        rebuilt = StoredMessage(**{**stored.model_dump(exclude={"message_id"}), "id": message_id})
    assert rebuilt == stored
