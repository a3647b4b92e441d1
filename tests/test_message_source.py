"""``messages.append(source=...)`` / ``append_turn(sources=...)``: a verbatim record kept with the row."""

from __future__ import annotations

import pytest

from turnstore import Message, Store
from turnstore.errors import InvalidArgument, LimitExceeded


def test_append_keeps_the_source_verbatim(store: Store) -> None:
    loop = store.loops.start(store.sessions.create().session_id)
    record = '{"b": 1,  "a": "é\\u0000"}'
    message_id = store.messages.append(Message.user("hi"), loop_id=loop.loop_id, turn_index=0, source=record)
    assert store.messages.get(message_id).source == record
    plain = store.messages.append(Message.user("no source"), loop_id=loop.loop_id, turn_index=0)
    assert store.messages.get(plain).source is None


def test_append_turn_keeps_one_source_per_message(store: Store) -> None:
    loop = store.loops.start(store.sessions.create().session_id)
    ids = store.messages.append_turn(loop.loop_id, 0, [Message.user("a"), Message.user("b")], sources=["x", None])
    assert [store.messages.get(i).source for i in ids] == ["x", None]


def test_bad_sources_are_refused_and_nothing_written(store: Store) -> None:
    session = store.sessions.create().session_id
    loop = store.loops.start(session)
    with pytest.raises(InvalidArgument, match="sources"):
        store.messages.append_turn(loop.loop_id, 0, [Message.user("a"), Message.user("b")], sources=["x"])
    with pytest.raises(InvalidArgument, match="source"):
        store.messages.append(Message.user("a"), loop_id=loop.loop_id, source=b"x")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="NUL"):
        store.messages.append(Message.user("a"), loop_id=loop.loop_id, source="a\x00b")
    with pytest.raises(LimitExceeded, match="source"):
        store.messages.append(
            Message.user("a"), loop_id=loop.loop_id, source="x" * (store.settings.limits.max_message_bytes + 1)
        )
    assert list(store.messages.records(session)) == []
