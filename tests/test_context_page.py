"""``store.messages.context_page``: a loop's context a page at a time, each page what ``context`` has there,
on every backend (sync and async)."""

from __future__ import annotations

from typing import Any

import pytest
from factories import assistant, extension, tool_result, user

from turnstore import InvalidArgument, LoopNotFound
from turnstore.models import StopReason


def fill(store: Any) -> tuple[str, str]:
    """A loop whose context has every shape a page may be cut in, and a compaction after it."""
    store.sessions.create(session_id="paged")
    loop = store.loops.start("paged", config={"model": "m", "provider": "p"})
    turns = [
        [user("u0"), assistant("a0", calls=("c1", "c2", "c3")), tool_result("c1"), tool_result("c3")],  # c2 unanswered
        [user("u1"), extension("note"), assistant("a1", calls=("c4",)), extension("note"), tool_result("c4")],
        [user("u2"), assistant("bad", calls=("c5",), stop=StopReason.ERROR), tool_result("c5")],  # dropped with result
        [user("u3"), tool_result("orphan"), assistant("a3", calls=("c6", "c7"))],  # both unanswered, at the end
        [user("u4"), assistant("a4", calls=("c8",)), tool_result("c8"), tool_result("c8")],  # a second result dropped
        [user("u5"), assistant("a5")],
    ]
    for k, messages in enumerate(turns):
        store.messages.append_turn(loop.loop_id, k, messages)
    compacted = store.loops.compact(loop.loop_id, "the story so far")
    store.messages.append_turn(compacted.loop_id, 0, [user("u6"), assistant("a6", calls=("c9",))])
    return loop.loop_id, compacted.loop_id


def pages(store: Any, loop_id: str, limit: int, **options: Any) -> list[Any]:
    found, offset = [], 0
    while True:
        page = store.messages.context_page(loop_id, offset, limit, **options)
        assert page.offset == offset and len(page.messages) == len(page.message_ids)
        found.append(page)
        if page.next_offset is None:
            return found
        assert page.next_offset > offset
        offset = page.next_offset


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 7, 500])
def test_pages_put_together_are_the_context(store: Any, limit: int) -> None:
    for loop_id in fill(store):
        whole = store.messages.context(loop_id)
        paged = [message for page in pages(store, loop_id, limit) for message in page.messages]
        assert [m.model_dump() for m in paged] == [m.model_dump() for m in whole]


def test_a_page_names_each_message_by_its_stored_id(store: Any) -> None:
    loop_id, _compacted = fill(store)
    (page,) = pages(store, loop_id, 500)
    stored = {m.message_id: m.message for m in store.messages.path(loop_id)}
    for message, message_id in zip(page.messages, page.message_ids):
        if message_id is None:  # a synthetic result: a call without one
            assert message.role == "toolResult" and message.is_error
        else:
            assert stored[message_id].model_dump() == message.model_dump()
    assert page.message_ids.count(None) == 3  # c2, c6, c7
    assert page.rows == len(store.messages.path(loop_id))


def test_a_page_keeps_a_call_with_its_results(store: Any) -> None:
    loop_id, _compacted = fill(store)
    first = store.messages.context_page(loop_id, 0, 2)  # u0, a0: the results of a0 come with it
    assert [m.role for m in first.messages] == ["user", "assistant", "toolResult", "toolResult", "toolResult"]
    assert first.next_offset == 4


def test_media_omitted_and_bad_arguments(store: Any) -> None:
    loop_id, _compacted = fill(store)
    with pytest.raises(LoopNotFound):
        store.messages.context_page("nope")
    for bad in ({"offset": -1}, {"limit": 0}, {"offset": "1"}, {"media": "all"}, {"provider": "p"}):
        with pytest.raises(InvalidArgument):
            store.messages.context_page(loop_id, **bad)
    past = store.messages.context_page(loop_id, 10_000)
    assert past.messages == [] and past.next_offset is None
