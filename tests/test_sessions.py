"""``store.sessions``: create, read, list, count, rename and delete conversations."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, user

import turnstore.queries as queries
from turnstore import (
    AlreadyExists,
    InvalidArgument,
    InvalidMessage,
    LimitExceeded,
    Limits,
    LoopNotFound,
    MessageNotFound,
    SessionNotFound,
    Store,
)

# --- create -------------------------------------------------------------------


def test_create_mints_a_uuid4_id(store: Store) -> None:
    session = store.sessions.create()
    assert uuid.UUID(session.session_id).version == 4
    assert store.sessions.get(session.session_id) == session


def test_create_mints_a_different_id_each_time(store: Store) -> None:
    ids = {store.sessions.create().session_id for _ in range(5)}
    assert len(ids) == 5


def test_create_with_explicit_id_title_agent_and_metadata(store: Store) -> None:
    metadata = {"user": "ada", "tags": ["a", "b"], "nested": {"n": 1, "none": None}}
    session = store.sessions.create("chat-1", title="Planning", agent_id="planner", metadata=metadata)
    assert session.session_id == "chat-1"
    assert session.title == "Planning"
    assert session.agent_id == "planner"
    assert session.metadata == metadata
    assert session.created_at.tzinfo is not None
    assert session.created_at.utcoffset() == timezone.utc.utcoffset(None)
    assert session.updated_at == session.created_at

    stored = store.sessions.get("chat-1")
    assert stored.session_id == "chat-1"
    assert stored.title == "Planning"
    assert stored.agent_id == "planner"
    assert stored.metadata == metadata
    assert stored.created_at == session.created_at
    assert stored.updated_at == session.updated_at


def test_create_without_optional_fields_stores_none(store: Store) -> None:
    session = store.sessions.create("bare")
    stored = store.sessions.get("bare")
    assert (stored.title, stored.agent_id, stored.metadata) == (None, None, None)
    assert stored == session


def test_create_duplicate_id_raises_already_exists(store: Store) -> None:
    store.sessions.create("dup", title="first")
    with pytest.raises(AlreadyExists):
        store.sessions.create("dup", title="second")
    assert store.sessions.get("dup").title == "first"
    assert store.sessions.count() == 1


def test_create_exist_ok_returns_the_existing_session_unchanged(store: Store) -> None:
    first = store.sessions.create("dup", title="first", agent_id="a", metadata={"k": 1})
    again = store.sessions.create("dup", title="second", agent_id="b", metadata={"k": 2}, exist_ok=True)
    assert again == first
    assert store.sessions.get("dup") == first
    assert store.sessions.count() == 1


@pytest.mark.parametrize("exist_ok", [True, False])
def test_a_session_created_by_another_connection_first_leaves_the_transaction_usable(
    sync_store: Store, monkeypatch: pytest.MonkeyPatch, exist_ok: bool
) -> None:
    """The race of two creators: the other one's row lands between this one's check and insert.

    On PostgreSQL a failed INSERT aborted the enclosing transaction, so the session
    could not even be read back in it (what the integrations do on first write).
    """
    sync_store.sessions.create("raced", title="other")
    real, checks = queries.session_exists, iter([sa.select(sa.literal(1)).where(sa.false())])
    monkeypatch.setattr(queries, "session_exists", lambda: next(checks, real()))  # create's own check misses it
    with sync_store.transaction():
        if exist_ok:
            assert sync_store.sessions.create("raced", title="mine", exist_ok=True).title == "other"
        else:
            with pytest.raises(AlreadyExists):
                sync_store.sessions.create("raced", title="mine")
        loop = sync_store.loops.start("raced")
        sync_store.messages.append(user("still in the transaction"), loop_id=loop.loop_id, turn_index=0)
    assert [m.message.text() for m in sync_store.messages.records("raced")] == ["still in the transaction"]


def test_create_exist_ok_creates_when_missing(store: Store) -> None:
    session = store.sessions.create("new", title="t", exist_ok=True)
    assert store.sessions.get("new") == session


@pytest.mark.parametrize("metadata", [["a", 1], "text", 42, [("key", "value")]])
def test_create_non_mapping_metadata_raises_invalid_argument(store: Store, metadata: object) -> None:
    with pytest.raises(InvalidArgument):
        store.sessions.create("s", metadata=metadata)  # type: ignore[arg-type]
    assert not store.sessions.exists("s")


def test_create_metadata_that_is_not_json_raises_invalid_argument(store: Store) -> None:
    with pytest.raises(InvalidArgument):
        store.sessions.create("s", metadata={"values": {1, 2}})
    assert not store.sessions.exists("s")


def test_create_empty_id_raises_invalid_message(store: Store) -> None:
    with pytest.raises(InvalidMessage):
        store.sessions.create("")
    assert store.sessions.count() == 0


def test_create_overlong_id_raises_limit_exceeded(store: Store) -> None:
    with pytest.raises(LimitExceeded):
        store.sessions.create("x" * (Limits().max_id_length + 1))
    assert store.sessions.count() == 0


def test_create_id_at_the_length_limit_is_accepted(store: Store) -> None:
    session_id = "x" * Limits().max_id_length
    assert store.sessions.create(session_id).session_id == session_id
    assert store.sessions.exists(session_id)


def test_limit_exceeded_is_an_invalid_message(store: Store) -> None:
    with pytest.raises(InvalidMessage):
        store.sessions.create("x" * 5000)


def test_create_accepts_any_string_id(store: Store) -> None:
    session_id = "user:42/chat #7 — ünïcode"
    store.sessions.create(session_id, title="odd id")
    assert store.sessions.get(session_id).title == "odd id"


# --- get / exists -------------------------------------------------------------


def test_get_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.sessions.get("missing")


def test_session_not_found_is_a_lookup_error(store: Store) -> None:
    with pytest.raises(LookupError):
        store.sessions.get("missing")


def test_exists(store: Store, session_id: str) -> None:
    assert store.sessions.exists(session_id) is True
    assert store.sessions.exists("missing") is False


# --- list ---------------------------------------------------------------------


def test_list_empty_store(store: Store) -> None:
    assert store.sessions.list() == []


def test_list_most_recently_created_first(store: Store) -> None:
    for name in ("a", "b", "c"):
        store.sessions.create(name)
    assert [s.session_id for s in store.sessions.list()] == ["c", "b", "a"]


def test_list_rename_moves_session_to_front(store: Store) -> None:
    for name in ("a", "b", "c"):
        store.sessions.create(name)
    store.sessions.rename("a", "renamed")
    assert [s.session_id for s in store.sessions.list()] == ["a", "c", "b"]


def test_list_starting_a_loop_moves_session_to_front(store: Store) -> None:
    for name in ("a", "b", "c"):
        store.sessions.create(name)
    store.loops.start("b")
    assert [s.session_id for s in store.sessions.list()] == ["b", "c", "a"]


def test_list_appending_a_message_moves_session_to_front(store: Store) -> None:
    store.sessions.create("a")
    loop = store.loops.start("a")
    store.sessions.create("b")
    store.messages.append(user(), loop_id=loop.loop_id, turn_index=0)
    assert [s.session_id for s in store.sessions.list()] == ["a", "b"]
    assert store.sessions.get("a").updated_at > store.sessions.get("b").updated_at


def test_list_counts_loops_and_messages(store: Store) -> None:
    store.sessions.create("busy", title="busy")
    store.sessions.create("empty")
    first = store.loops.start("busy").loop_id
    second = store.loops.start("busy", loop_id="busy-second").loop_id
    store.messages.append_turn(first, 0, [user(), assistant()])
    store.messages.append_turn(second, 0, [user(), assistant(), user("again")])

    summaries = {s.session_id: s for s in store.sessions.list()}
    assert (summaries["busy"].loops, summaries["busy"].messages) == (2, 5)
    assert (summaries["empty"].loops, summaries["empty"].messages) == (0, 0)
    assert summaries["busy"].title == "busy"


def test_list_counts_every_stored_row_of_branches_compactions_and_imports(store: Store) -> None:
    # The count comes from each loop's last seq; it must equal the rows actually stored
    # for a session with a branch, a compaction, an empty loop and an imported tree.
    store.sessions.create("tree")
    main = store.loops.start("tree").loop_id
    ids = store.messages.append_turn(main, 0, [user("q"), assistant("a")])
    store.messages.append_turn(main, 1, [user("q2"), assistant("a2")])
    branch = store.loops.start("tree", parent_loop_id=main, continuation_kind="branch", fork_after=ids[1]).loop_id
    store.messages.append_turn(branch, 0, [user("other"), assistant("b")])
    store.loops.compact(main, "a summary")
    store.loops.start("tree")  # no messages yet
    store.import_(
        "pi",
        Path(__file__).parent
        / "fixtures"
        / "pi"
        / "2026-03-02T09-15-00-000Z_0b8f5c1e-6a2d-4e9b-9f3a-2c7d1e5b8a40.jsonl",
    )

    for summary in store.sessions.list():
        rows = sum(1 for _ in store.messages.records(summary.session_id))
        assert summary.messages == rows > 0


def test_list_summary_carries_session_fields(store: Store) -> None:
    session = store.sessions.create("s", title="t", agent_id="ag", metadata={"k": "v"})
    (summary,) = store.sessions.list()
    assert summary.session_id == session.session_id
    assert summary.title == "t"
    assert summary.agent_id == "ag"
    assert summary.metadata == {"k": "v"}
    assert summary.created_at == session.created_at


def test_list_pages_with_limit_and_offset(store: Store) -> None:
    names = [f"s{i}" for i in range(7)]
    for name in names:
        store.sessions.create(name)
    newest_first = list(reversed(names))

    pages = [store.sessions.list(limit=3, offset=offset) for offset in (0, 3, 6)]
    assert [[s.session_id for s in page] for page in pages] == [newest_first[0:3], newest_first[3:6], newest_first[6:]]
    assert store.sessions.list(limit=3, offset=7) == []
    assert store.sessions.list(limit=0) == []
    assert [s.session_id for s in store.sessions.list(limit=100)] == newest_first


def test_list_default_limit_is_a_page(store: Store) -> None:
    for i in range(105):
        store.sessions.create(f"s{i:03}")
    assert len(store.sessions.list()) == 100
    assert len(store.sessions.list(offset=100)) == 5


def test_list_filters_by_agent(store: Store) -> None:
    store.sessions.create("a1", agent_id="alpha")
    store.sessions.create("b1", agent_id="beta")
    store.sessions.create("a2", agent_id="alpha")
    store.sessions.create("none")
    assert [s.session_id for s in store.sessions.list(agent_id="alpha")] == ["a2", "a1"]
    assert [s.session_id for s in store.sessions.list(agent_id="beta")] == ["b1"]
    assert store.sessions.list(agent_id="gamma") == []
    assert [s.session_id for s in store.sessions.list(agent_id="alpha", limit=1, offset=1)] == ["a1"]


@pytest.mark.parametrize(("limit", "offset"), [(-1, 0), (0, -1), (-5, -5)])
def test_list_negative_limit_or_offset_raises_invalid_argument(store: Store, limit: int, offset: int) -> None:
    with pytest.raises(InvalidArgument):
        store.sessions.list(limit=limit, offset=offset)


# --- count --------------------------------------------------------------------


def test_count(store: Store) -> None:
    assert store.sessions.count() == 0
    for name in ("a", "b", "c"):
        store.sessions.create(name)
    assert store.sessions.count() == 3
    store.sessions.delete("b")
    assert store.sessions.count() == 2


# --- rename -------------------------------------------------------------------


def test_rename_sets_title_and_bumps_updated_at(store: Store, session_id: str) -> None:
    before = store.sessions.get(session_id)
    renamed = store.sessions.rename(session_id, "new title")
    assert renamed.title == "new title"
    assert renamed.updated_at > before.updated_at
    assert renamed.created_at == before.created_at
    assert store.sessions.get(session_id) == renamed


def test_rename_to_none_clears_title(store: Store, session_id: str) -> None:
    assert store.sessions.rename(session_id, None).title is None
    assert store.sessions.get(session_id).title is None


def test_rename_keeps_other_fields(store: Store) -> None:
    store.sessions.create("s", title="old", agent_id="ag", metadata={"k": [1]})
    renamed = store.sessions.rename("s", "new")
    assert (renamed.agent_id, renamed.metadata) == ("ag", {"k": [1]})


def test_rename_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.sessions.rename("missing", "title")
    assert not store.sessions.exists("missing")


# --- delete -------------------------------------------------------------------


def test_delete_cascades_to_loops_and_messages(store: Store) -> None:
    store.sessions.create("doomed")
    store.sessions.create("kept")
    doomed_loop = store.loops.start("doomed").loop_id
    kept_loop = store.loops.start("kept").loop_id
    doomed_ids = store.messages.append_turn(doomed_loop, 0, [user("bye"), assistant("gone")])
    kept_ids = store.messages.append_turn(kept_loop, 0, [user("hi"), assistant("stays")])

    store.sessions.delete("doomed")

    assert not store.sessions.exists("doomed")
    with pytest.raises(SessionNotFound):
        store.sessions.get("doomed")
    with pytest.raises(LoopNotFound):
        store.loops.get(doomed_loop)
    for message_id in doomed_ids:
        with pytest.raises(MessageNotFound):
            store.messages.get(message_id)
    with pytest.raises(SessionNotFound):
        store.loops.list("doomed")

    # The other session is untouched.
    assert store.sessions.exists("kept")
    assert [loop.loop_id for loop in store.loops.list("kept")] == [kept_loop]
    assert [store.messages.get(i).message.text() for i in kept_ids] == ["hi", "stays"]
    (summary,) = store.sessions.list()
    assert (summary.session_id, summary.loops, summary.messages) == ("kept", 1, 2)
    assert store.usage.total().requests == 1


def test_delete_then_recreate_starts_empty(store: Store) -> None:
    store.sessions.create("s", title="old")
    loop = store.loops.start("s").loop_id
    store.messages.append(user(), loop_id=loop, turn_index=0)
    store.sessions.delete("s")

    store.sessions.create("s", title="new")
    assert store.sessions.get("s").title == "new"
    assert store.loops.list("s") == []
    assert store.messages.last("s", 10) == []


def test_delete_unknown_session_raises_session_not_found(store: Store, session_id: str) -> None:
    with pytest.raises(SessionNotFound):
        store.sessions.delete("missing")
    assert store.sessions.exists(session_id)


# --- times ----------------------------------------------------------------------


EARLY = "0005-01-02T03:04:05.000006Z"
"""A year under 1000, which ``strftime`` writes without leading zeros ("5-01-02")."""


def test_times_with_an_early_year_are_stored_read_and_exported(store: Any, tmp_path: Path) -> None:
    source = tmp_path / "early.jsonl"
    header = {"type": "session", "version": 3, "id": "early", "timestamp": EARLY, "cwd": "/x"}
    entry = {
        "type": "message",
        "id": "a",
        "parentId": None,
        "timestamp": EARLY,
        "message": {"role": "user", "content": [{"type": "text", "text": "hi"}], "timestamp": 1},
    }
    source.write_text(json.dumps(header) + "\n" + json.dumps(entry) + "\n", encoding="utf-8")
    store.sessions.create("late", title="2026")
    assert store.import_("pi", source).ok

    early = datetime(5, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    assert store.sessions.get("early").created_at == early
    assert [summary.session_id for summary in store.sessions.list()][-1] == "early"  # oldest last
    exported = json.loads(store.export("early").splitlines()[0])
    assert exported["created_at"] == "0005-01-02T03:04:05.000006Z"


def test_sqlite_times_sort_as_text_and_read_back(sqlite_store: Store) -> None:
    db = sqlite_store._db
    times = [datetime(year, 6, 7, 8, 9, 10, 11, tzinfo=timezone.utc) for year in (5, 999, 1000, 2026, 9999)]

    stored = [db.bind_time(value) for value in times]

    assert stored[0] == "0005-06-07 08:09:10.000011"
    assert sorted(stored) == stored
    assert [db.load_time(text) for text in stored] == times


def test_sqlite_times_stored_before_the_year_was_padded_still_read(sqlite_store: Store) -> None:
    db = sqlite_store._db

    assert db.load_time("5-01-02 03:04:05.000006") == datetime(5, 1, 2, 3, 4, 5, 6, tzinfo=timezone.utc)
    with pytest.raises(ValueError, match="not a stored time"):
        db.load_time("yesterday")


# --- update ---------------------------------------------------------------------------------------


def test_update_changes_only_the_given_fields(store: Store) -> None:
    created = store.sessions.create("s", title="old", agent_id="ag", metadata={"k": [1], "keep": True})
    titled = store.sessions.update("s", title="new")
    assert (titled.title, titled.metadata, titled.agent_id) == ("new", {"k": [1], "keep": True}, "ag")
    assert titled.updated_at > created.updated_at and titled.created_at == created.created_at
    replaced = store.sessions.update("s", metadata={"k": 2})
    assert (replaced.title, replaced.metadata) == ("new", {"k": 2})  # metadata is replaced, not merged
    both = store.sessions.update("s", title=None, metadata=None)
    assert (both.title, both.metadata) == (None, None)
    assert store.sessions.get("s") == both


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        pytest.param({}, "title", id="nothing-to-change"),
        pytest.param({"metadata": ["a"]}, "metadata", id="metadata-not-an-object"),
        pytest.param({"metadata": {"when": object()}}, "metadata", id="metadata-not-json"),
        pytest.param({"title": 5}, "title", id="title-not-a-string"),
    ],
)
def test_update_with_a_bad_argument_raises_invalid_argument_and_writes_nothing(
    store: Store, kwargs: dict[str, Any], argument: str
) -> None:
    created = store.sessions.create("s", title="old", metadata={"k": 1})
    with pytest.raises(InvalidArgument) as caught:
        store.sessions.update("s", **kwargs)
    assert caught.value.argument == argument and "\n" not in str(caught.value)
    assert store.sessions.get("s") == created


def test_update_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.sessions.update("missing", title="x")


def test_list_sorts_by_created_updated_or_title(store: Store) -> None:
    store.sessions.create("a", title="beta")
    store.sessions.create("b", title=None)
    store.sessions.create("c", title="alpha")
    store.sessions.rename("a", "gamma")  # now the most recently updated

    def order(key: str) -> list[str]:
        return [s.session_id for s in store.sessions.list(order=key)]

    assert order("-updated") == ["a", "c", "b"] == [s.session_id for s in store.sessions.list()]
    assert order("updated") == ["b", "c", "a"]
    assert order("created") == ["a", "b", "c"] and order("-created") == ["c", "b", "a"]
    assert order("title") == ["c", "a", "b"] and order("-title") == ["a", "c", "b"]  # untitled last both ways
    assert [s.session_id for s in store.sessions.list(order="title", limit=1, offset=1)] == ["a"]


def test_list_filters_by_a_loops_model(store: Store) -> None:
    for name in ("a", "b", "c"):
        store.sessions.create(name)
    store.loops.start("a", config={"model": "gpt-5", "provider": "openai"})
    store.loops.start("b", config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    store.loops.start("b", config={"model": "gpt-5", "provider": "openai"})

    assert [s.session_id for s in store.sessions.list(model="gpt-5")] == ["b", "a"]
    assert [s.session_id for s in store.sessions.list(model="claude-sonnet-4-5")] == ["b"]
    assert store.sessions.list(model="gpt-4") == []
    assert [s.session_id for s in store.sessions.list(model="gpt-5", agent_id=None, limit=1)] == ["b"]


def test_list_filters_by_last_activity(store: Store) -> None:
    for name in ("a", "b", "c"):
        store.sessions.create(name)
    times = {s.session_id: s.updated_at for s in store.sessions.list()}
    naive_b = times["b"].astimezone(timezone.utc).replace(tzinfo=None)

    def ids(**bounds: Any) -> list[str]:
        return [s.session_id for s in store.sessions.list(**bounds)]

    assert ids(since=times["b"]) == ["c", "b"]
    assert ids(until=times["b"]) == ["a"]
    assert ids(since=times["b"], until=times["c"]) == ["b"]
    assert ids(since=naive_b) == ["c", "b"]  # naive: UTC
    assert ids(since=times["b"].astimezone(timezone(timedelta(hours=-5)))) == ["c", "b"]


@pytest.mark.parametrize(
    ("bad", "argument"),
    [
        ({"order": "cost"}, "order"),
        ({"order": "--updated"}, "order"),
        ({"since": "2026-01-01"}, "since"),
        ({"until": 0}, "until"),
    ],
)
def test_list_refuses_bad_order_and_bounds(store: Store, bad: dict[str, Any], argument: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        store.sessions.list(**bad)
    assert raised.value.argument == argument
