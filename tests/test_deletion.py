"""Deleting a session removes exactly that session: every row of it, and nothing else.

On every backend: after ``store.sessions.delete(sid)`` the session's loops,
messages (with their usage), loop-level reported usage and ``imports`` row
are gone; every other session keeps every row and the same usage totals;
the store's total drops by exactly the deleted session's totals; and no table
holds a row whose parent is missing (checked with plain SQL). Sub-agent loops
refer across sessions by plain values, so deleting either side leaves the
other session whole.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from factories import assistant, extension, tool_result, usage, user
from helpers import TABLES, session_data

from turnstore import SessionNotFound, Store, Usage

FIXTURES = Path(__file__).parent / "fixtures"
PI_SMALL = FIXTURES / "pi" / "2025-11-20T14-02-11-512Z_7d3e9a10-2b4c-4f6d-8e1a-5c9b0d2f4a67.jsonl"
PI_RICH = FIXTURES / "pi" / "2026-03-02T09-15-00-000Z_0b8f5c1e-6a2d-4e9b-9f3a-2c7d1e5b8a40.jsonl"
PI_SMALL_ID = "7d3e9a10-2b4c-4f6d-8e1a-5c9b0d2f4a67"
PI_RICH_ID = "0b8f5c1e-6a2d-4e9b-9f3a-2c7d1e5b8a40"


ORPHANS = {
    "messages without their loop": "SELECT count(*) FROM messages m WHERE NOT EXISTS "
    "(SELECT 1 FROM loops l WHERE l.loop_id = m.loop_id)",
    "messages without their session": "SELECT count(*) FROM messages m WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.session_id = m.session_id)",
    "messages in another session than their loop": "SELECT count(*) FROM messages m "
    "JOIN loops l ON l.loop_id = m.loop_id WHERE l.session_id <> m.session_id",
    "loops without their session": "SELECT count(*) FROM loops l WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.session_id = l.session_id)",
    "loops whose parent loop is missing": "SELECT count(*) FROM loops l WHERE l.parent_loop_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM loops p WHERE p.loop_id = l.parent_loop_id)",
    "loops whose fork point is missing": "SELECT count(*) FROM loops l WHERE l.fork_after IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = l.fork_after)",
    "loops whose kept message is missing": "SELECT count(*) FROM loops l WHERE l.keep_from IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = l.keep_from)",
    "imports without their session": "SELECT count(*) FROM imports i WHERE NOT EXISTS "
    "(SELECT 1 FROM sessions s WHERE s.session_id = i.session_id)",
}
DANGLING_SPAWNS = (
    "SELECT count(*) FROM loops l WHERE l.spawn_loop_id IS NOT NULL "
    "AND NOT EXISTS (SELECT 1 FROM loops p WHERE p.loop_id = l.spawn_loop_id)"
)


# --- helpers ------------------------------------------------------------------------


def scalar(store: Any, sql: str, **params: Any) -> int:
    return int(store._db.scalar(sa.text(sql), params) or 0)


def orphans(store: Any) -> dict[str, int]:
    return {name: scalar(store, sql) for name, sql in ORPHANS.items()}


def no_orphans() -> dict[str, int]:
    return dict.fromkeys(ORPHANS, 0)


def counts(store: Any, session_id: str | None = None) -> dict[str, int]:
    """Rows per table, of one session or of the whole store."""
    if session_id is None:
        return {table: scalar(store, f"SELECT count(*) FROM {table}") for table in TABLES}
    return {
        table: scalar(store, f"SELECT count(*) FROM {table} WHERE session_id = :sid", sid=session_id)
        for table in TABLES
    }


def usage_rows(store: Any, session_id: str) -> dict[str, int]:
    """Rows that carry usage: messages with usage columns, loops with reported usage."""
    return {
        "messages": scalar(
            store, "SELECT count(*) FROM messages WHERE session_id = :sid AND input_tokens IS NOT NULL", sid=session_id
        ),
        "loops": scalar(
            store, "SELECT count(*) FROM loops WHERE session_id = :sid AND input_tokens IS NOT NULL", sid=session_id
        ),
    }


def build_api_session(store: Any, session_id: str, model: str = "claude-sonnet-4-5") -> None:
    """A session with every kind of row: turns with usage, a branch, a compaction, an extension, loop-level usage."""
    store.sessions.create(session_id, title=f"{session_id} title", metadata={"k": session_id})
    first = store.loops.start(session_id, config={"model": model, "provider": "anthropic"})
    ids = store.messages.append_turn(
        first.loop_id,
        0,
        [
            user("list files"),
            assistant("looking", calls=("c1",), u=usage(1_000, 100, cache_read=2_000, cache_write=50), model=model),
            tool_result("c1", "a.py"),
        ],
    )
    store.messages.append_turn(first.loop_id, 1, [assistant("a.py", u=usage(500, 50, reasoning=20), model=model)])
    store.messages.append(extension("note", {"text": "hi"}), loop_id=first.loop_id)
    store.loops.end(first.loop_id)
    store.loops.start(
        session_id,
        parent_loop_id=first.loop_id,
        continuation_kind="branch",
        fork_after=ids[1],
        loop_id=f"{session_id}.branch",
    )
    store.messages.append_turn(
        f"{session_id}.branch", 0, [user("other"), assistant("other", u=usage(300, 30), model="gpt-5")]
    )
    compacted = store.loops.compact(first.loop_id, "summary", keep_from=ids[0], usage=usage(40, 4))
    store.messages.append_turn(compacted.loop_id, 0, [user("next"), assistant("done", u=usage(200, 20), model=model)])
    # A loop whose usage is only reported at loop level (no message carries usage).
    reported = store.loops.start(session_id, continuation_kind="initial", loop_id=f"{session_id}.reported")
    store.messages.append(user("hello"), loop_id=reported.loop_id, turn_index=0)
    store.loops.end(reported.loop_id, usage=Usage(input=70, output=7, total_tokens=77, cost=0.25))


@pytest.fixture
def world(store: Any, tmp_path: Path) -> dict[str, Any]:
    """Four sessions: two built through the API (one exported and imported back), two imported from pi."""
    build_api_session(store, "doomed-api")
    exported = tmp_path / "doomed-api.jsonl"
    store.export("doomed-api", "turnstore", exported)
    store.sessions.delete("doomed-api")
    assert store.import_("turnstore", exported).sessions_written == ["doomed-api"]  # now with an imports row
    build_api_session(store, "kept-api", model="claude-haiku-4-5")
    report = store.import_("pi", PI_SMALL, PI_RICH)
    assert sorted(report.sessions_written) == sorted([PI_SMALL_ID, PI_RICH_ID])
    sessions = ["doomed-api", "kept-api", PI_SMALL_ID, PI_RICH_ID]
    assert orphans(store) == no_orphans()
    return {"sessions": sessions, "exported": exported}


# --- deleting a session ------------------------------------------------------------------


@pytest.mark.parametrize("doomed", ["doomed-api", PI_RICH_ID], ids=["api-reimported", "pi-imported"])
def test_delete_removes_the_session_and_nothing_else(store: Any, world: dict[str, Any], doomed: str) -> None:
    sessions = world["sessions"]
    kept = [sid for sid in sessions if sid != doomed]
    before_counts = counts(store)
    doomed_counts = counts(store, doomed)
    assert doomed_counts["loops"] >= 3 and doomed_counts["messages"] >= 8 and doomed_counts["imports"] == 1
    assert usage_rows(store, doomed)["messages"] >= 3
    doomed_usage = store.usage.session(doomed)
    total_before = store.usage.total()
    kept_before = {sid: session_data(store, sid) for sid in kept}
    doomed_loops = [loop.loop_id for loop in store.loops.list(doomed)]

    store.sessions.delete(doomed)

    # Exactly the session's rows are gone.
    assert counts(store) == {table: before_counts[table] - doomed_counts[table] for table in TABLES}
    assert counts(store, doomed) == dict.fromkeys(TABLES, 0)
    assert usage_rows(store, doomed) == {"messages": 0, "loops": 0}
    for loop_id in doomed_loops:
        assert scalar(store, "SELECT count(*) FROM loops WHERE loop_id = :l", l=loop_id) == 0
        assert scalar(store, "SELECT count(*) FROM messages WHERE loop_id = :l", l=loop_id) == 0
    assert not store.sessions.exists(doomed)
    with pytest.raises(SessionNotFound):
        store.usage.session(doomed)
    with pytest.raises(SessionNotFound):
        store.loops.list(doomed)

    # Every other session is untouched: rows, tree, messages, usage, imports row.
    assert {sid: session_data(store, sid) for sid in kept} == kept_before
    assert [row.session_id for row in store.usage.by_session()] == sorted(kept)

    # The store's total drops by exactly the session's totals.
    total_after = store.usage.total()
    for field in ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens", "requests"):
        assert getattr(total_after, field) == getattr(total_before, field) - getattr(doomed_usage, field), field
    assert (total_after.reported_cost or 0.0) == pytest.approx(
        (total_before.reported_cost or 0.0) - (doomed_usage.reported_cost or 0.0)
    )
    # (The total *cost* is not additive today: see test_store_cost_drops_by_exactly_the_deleted_sessions_cost.)
    assert orphans(store) == no_orphans()


PRICES = {"claude-sonnet-4-5": {"input": 300, "output": 1500, "cache_read": 30, "cache_write": 375}}
"""100x the list price: makes a priced cost and a source-reported cost of the same tokens easy to tell apart."""


def test_store_cost_drops_by_exactly_the_deleted_sessions_cost(store: Any) -> None:
    # A pi session (costs reported by the source) and an API session on the same model (priced from the table).
    store.import_("pi", PI_SMALL)
    store.sessions.create("api")
    loop = store.loops.start("api", config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    store.messages.append_turn(loop.loop_id, 0, [user("x"), assistant("y", u=usage(1_000, 100))])
    pi_cost = store.usage.session(PI_SMALL_ID, prices=PRICES).cost
    api_cost = store.usage.session("api", prices=PRICES).cost
    assert pi_cost == pytest.approx(0.022853)  # what the pi file says the session cost
    assert api_cost == pytest.approx(0.45)
    total = store.usage.total(prices=PRICES).cost
    assert sum(row.cost or 0.0 for row in store.usage.by_session(prices=PRICES)) == pytest.approx(pi_cost + api_cost)
    assert total == pytest.approx(pi_cost + api_cost)  # today: 1.886157, the pi tokens priced from the table
    store.sessions.delete("api")
    assert store.usage.total(prices=PRICES).cost == pytest.approx(total - api_cost)


def test_delete_every_session_leaves_every_table_empty(store: Any, world: dict[str, Any]) -> None:
    for session_id in world["sessions"]:
        store.sessions.delete(session_id)
        assert orphans(store) == no_orphans()
    assert counts(store) == dict.fromkeys(TABLES, 0)
    assert store.usage.total().requests == 0


def test_delete_of_an_unknown_session_changes_nothing(store: Any, world: dict[str, Any]) -> None:
    before = counts(store)
    with pytest.raises(SessionNotFound):
        store.sessions.delete("no-such-session")
    assert counts(store) == before


def test_deleted_session_does_not_come_back(store: Any, world: dict[str, Any]) -> None:
    # A new session with the same id starts empty; importing the source again writes it again
    # (the imports row went with the session, so it is not "unchanged").
    before = session_data(store, PI_SMALL_ID)
    store.sessions.delete(PI_SMALL_ID)
    store.sessions.create(PI_SMALL_ID)
    assert counts(store, PI_SMALL_ID) == {"sessions": 1, "loops": 0, "messages": 0, "imports": 0}
    assert store.usage.session(PI_SMALL_ID).requests == 0
    store.sessions.delete(PI_SMALL_ID)
    report = store.import_("pi", PI_SMALL)
    assert report.sessions_written == [PI_SMALL_ID]
    after = session_data(store, PI_SMALL_ID)
    assert [m["message"] for m in after["messages"]] == [m["message"] for m in before["messages"]]
    assert after["usage"] == before["usage"]


def test_delete_in_a_rolled_back_transaction_deletes_nothing(store: Any, world: dict[str, Any]) -> None:
    before = counts(store)
    snapshots = {sid: session_data(store, sid) for sid in world["sessions"]}
    with pytest.raises(RuntimeError, match="changed my mind"):
        with store.transaction():
            store.sessions.delete("doomed-api")
            store.sessions.delete(PI_RICH_ID)
            raise RuntimeError("changed my mind")
    assert counts(store) == before
    assert {sid: session_data(store, sid) for sid in world["sessions"]} == snapshots


# --- sub-agents across sessions ----------------------------------------------------------


def parent_and_sub_agent(store: Any) -> tuple[str, str]:
    """Session "parent" whose tool call spawned a loop of session "sub"; returns both loop ids."""
    store.sessions.create("parent")
    parent = store.loops.start("parent", config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    store.messages.append_turn(
        parent.loop_id,
        0,
        [
            user("research this"),
            assistant("delegating", calls=("spawn-1",), u=usage(100, 10)),
            tool_result("spawn-1", "the sub-agent's answer"),
        ],
    )
    store.sessions.create("sub")
    sub = store.loops.start(
        "sub",
        config={"model": "claude-haiku-4-5", "provider": "anthropic"},
        spawn_loop_id=parent.loop_id,
        spawn_tool_call_id="spawn-1",
    )
    store.messages.append_turn(
        sub.loop_id, 0, [user("research this"), assistant("found it", u=usage(50, 5), model="claude-haiku-4-5")]
    )
    assert [loop.loop_id for loop in store.loops.children(parent.loop_id)] == [sub.loop_id]
    return parent.loop_id, sub.loop_id


def test_deleting_a_sub_agent_session_leaves_the_spawning_session_intact(store: Any) -> None:
    parent_loop, _ = parent_and_sub_agent(store)
    parent_before = session_data(store, "parent")
    store.sessions.delete("sub")
    assert session_data(store, "parent") == parent_before
    assert store.loops.children(parent_loop) == []
    assert counts(store) == {"sessions": 1, "loops": 1, "messages": 3, "imports": 0}
    assert orphans(store) == no_orphans()
    assert scalar(store, DANGLING_SPAWNS) == 0


def test_deleting_the_spawning_session_leaves_the_sub_agent_session_intact(store: Any) -> None:
    parent_loop, sub_loop = parent_and_sub_agent(store)
    sub_before = session_data(store, "sub")
    store.sessions.delete("parent")
    # The sub-agent session keeps everything, its spawn reference included: cross-session
    # references are plain values (docs/design.md §7), so it now names a loop that is gone.
    assert session_data(store, "sub") == sub_before
    assert store.loops.get(sub_loop).spawn_loop_id == parent_loop
    assert store.usage.session("sub").input == 50
    assert counts(store) == {"sessions": 1, "loops": 1, "messages": 2, "imports": 0}
    assert orphans(store) == no_orphans()
    assert scalar(store, DANGLING_SPAWNS) == 1


# --- SQLite with foreign keys switched off ----------------------------------------------


def test_delete_leaves_no_orphans_with_foreign_keys_off(tmp_path: Path) -> None:
    path = tmp_path / "fk-off.db"
    with Store(path) as store:
        build_api_session(store, "doomed")
        build_api_session(store, "kept")
    with Store(path, pragmas={"foreign_keys": "off"}) as store:
        store.sessions.delete("doomed")
        assert counts(store, "doomed") == dict.fromkeys(TABLES, 0)
        assert orphans(store) == no_orphans()


def test_foreign_keys_are_on_for_the_default_sqlite_store(sqlite_store: Store) -> None:
    # What the cascade depends on, checked on the store's own connection.
    assert sqlite_store._db.scalar(sa.text("PRAGMA foreign_keys")) == 1
    names = {row[2] for row in sqlite_store._db.fetchall(sa.text("PRAGMA foreign_key_list(messages)"))}
    assert names == {"loops", "sessions"}
    actions = {
        row[6]
        for table in ("loops", "messages", "imports")
        for row in sqlite_store._db.fetchall(sa.text(f"PRAGMA foreign_key_list({table})"))
    }
    assert actions == {"CASCADE"}
    assert json.dumps(orphans(sqlite_store)) == json.dumps(no_orphans())
