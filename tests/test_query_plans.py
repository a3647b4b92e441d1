"""The hot queries use indexes on both engines: never a scan of other sessions' rows.

SQLite: ``EXPLAIN QUERY PLAN`` must show only index searches (or an ordered walk
of an index) for messages and loops. PostgreSQL: with sequential scans
disabled, ``EXPLAIN`` must still find a plan without a ``Seq Scan`` on them —
which proves an index serves the query (on tiny test tables the planner would
otherwise pick a scan on cost alone).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from turnstore import Store
from turnstore import queries as q
from turnstore import search_queries as sq
from turnstore import usage_queries as uq

SESSION = {"session_id": "s"}
LOOP = {"loop_id": "s.loop.1"}

HOT = [
    (
        "append: insert with seq and session subqueries",
        q.insert_message(False),
        {**dict.fromkeys(q.MESSAGE_VALUES), **LOOP},
    ),
    ("append: lock the loop (PostgreSQL)", q.lock_loop(), LOOP),
    ("turn(loop, k)", q.turn_messages(), {**LOOP, "turn_index": 3}),
    ("turns(loop, a, b)", q.turn_range_messages(True), {**LOOP, "start": 1, "stop": 4}),
    (
        "turns(loop, a, b, skip=, limit=)",
        q.turn_range_messages(True, True),
        {**LOOP, "start": 1, "stop": 4, "skip": 3, "limit": 500},
    ),
    ("turn_lengths(loop, a, b)", q.turn_range_lengths(True), {**LOOP, "start": 1, "stop": 4}),
    ("loop(loop)", q.loop_messages(), LOOP),
    ("last: the newest loop of a session", q.newest_loop(), SESSION),
    ("last: a session's newest rows", q.session_tail(), {**SESSION, "limit": 50}),
    (
        "last: a loop's rows backwards",
        q.loop_messages_backwards(False),
        {**SESSION, **LOOP, "upper": 10**9, "lower": 0, "limit": 54},
    ),
    (
        "last: a compaction loop's rows backwards",
        q.loop_messages_backwards(True),
        {**SESSION, **LOOP, "upper": 10**9, "lower": 0, "limit": 54},
    ),
    ("last: a compaction loop's summaries", q.compaction_summaries(), LOOP),
    ("context: loop tree", q.loop_tree(), SESSION),
    ("context: messages from an id", q.context_messages(), {**SESSION, "min_id": 10}),
    ("context: first message of a loop", q.first_message_of_loop(), LOOP),
    ("path: messages from an id", q.path_messages(), {**SESSION, "min_id": 10}),
    ("usage of a session", uq.message_usage("session", "none"), SESSION),
    ("usage of a loop", uq.message_usage("loop", "none"), LOOP),
    ("usage of a turn", uq.message_usage("turn", "none"), {**LOOP, "turn_index": 2}),
    ("usage by loop in a session", uq.message_usage("session", "loop"), SESSION),
    ("usage by model, all sessions", uq.message_usage("all", "none"), {}),
    ("reported loop usage of a session", uq.loop_reported_usage("session", "none"), SESSION),
    ("usage rows of a session (one statement)", uq.usage_rows("session", "none"), SESSION),
    ("usage rows of a loop (one statement)", uq.usage_rows("loop", "none"), LOOP),
    ("usage rows of a turn", uq.usage_rows("turn", "none"), {**LOOP, "turn_index": 2}),
    ("sessions list", q.list_sessions(False), {"limit": 100, "offset": 0}),
    ("records of a session (a page)", q.stored_messages(False), {**SESSION, "after": 10, "limit": 2000}),
    ("records of a loop (a page)", q.stored_messages(True), {**LOOP, "after": 10, "limit": 2000}),
    ("rows of a session, for exports (a page)", q.export_messages(), {**SESSION, "after": 10, "limit": 2000}),
    ("message by id", q.get_message(), {"id": 5}),
    ("tool names: a session's assistant messages, newest first", q.assistant_messages_newest_first(), SESSION),
    ("sources of a loop", q.loop_message_sources(False), LOOP),
    ("source texts of a loop", q.loop_source_texts(False), LOOP),
    ("source texts of a loop, the last n", q.loop_source_texts(True), {**LOOP, "limit": 20}),
    ("session of a loop", q.loop_session(), LOOP),
    ("loops of a session", q.list_loops(), SESSION),
]

INDEXED_TABLES = ("messages", "loops", "m")


def _sqlite_plan(store: Store, statement: Any, params: dict[str, Any]) -> list[str]:
    compiled = store._db.compile(statement)
    cursor = store._db._state().dbapi.execute("EXPLAIN QUERY PLAN " + compiled.sql, compiled.params(params))
    return [row[3] for row in cursor.fetchall()]


def _postgres_plan(store: Store, statement: Any, params: dict[str, Any]) -> list[dict[str, Any]]:
    compiled = store._db.compile(statement)
    connection = store._db._state().dbapi
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute("EXPLAIN (FORMAT JSON) " + compiled.sql, compiled.params(params))
            plan = cursor.fetchone()[0]
        finally:
            cursor.execute("RESET enable_seqscan")
    plan = json.loads(plan) if isinstance(plan, str) else plan
    nodes: list[dict[str, Any]] = []
    stack = [plan[0]["Plan"]]
    while stack:
        node = stack.pop()
        nodes.append(node)
        stack.extend(node.get("Plans", []))
    return nodes


@pytest.mark.parametrize(("name", "statement", "params"), HOT, ids=[name for name, _, _ in HOT])
def test_hot_query_uses_indexes(sync_store: Store, name: str, statement: Any, params: dict[str, Any]) -> None:
    if sync_store.dialect == "sqlite":
        lines = _sqlite_plan(sync_store, statement, params)
        for line in lines:
            words = line.split()
            if len(words) > 1 and words[0] in ("SCAN", "SEARCH") and words[1] in INDEXED_TABLES:
                # A SEARCH uses an index by definition; a SCAN is fine only when it walks an index in order.
                assert words[0] == "SEARCH" or "INDEX" in line, f"{name}: {line}"
        assert any("INDEX" in line or "PRIMARY KEY" in line for line in lines) or not lines, f"{name}: {lines}"
    else:
        nodes = _postgres_plan(sync_store, statement, params)
        scans = [
            node
            for node in nodes
            if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in ("messages", "loops")
        ]
        assert scans == [], f"{name}: sequential scan in {[node.get('Relation Name') for node in scans]}"


def test_turn_lookup_searches_by_turn_on_sqlite(tmp_path: Any) -> None:
    # Not a walk of the whole loop filtered by turn: a 10,000-message loop must not slow turn(k) down.
    with Store(tmp_path / "p.db") as store:
        lines = _sqlite_plan(store, q.turn_messages(), {**LOOP, "turn_index": 3})
    assert any("ix_messages_loop_id_turn_index_seq (loop_id=? AND turn_index=?)" in line for line in lines), lines
    assert not any("TEMP B-TREE" in line for line in lines), lines


def test_session_usage_needs_no_sort_on_sqlite(tmp_path: Any) -> None:
    # The covering index delivers rows in GROUP BY (model, provider) order.
    with Store(tmp_path / "p.db") as store:
        lines = _sqlite_plan(store, uq.message_usage("session", "none"), SESSION)
    assert not any("TEMP B-TREE" in line for line in lines), lines
    assert any("COVERING INDEX ix_messages_usage_session" in line for line in lines), lines


def test_loop_usage_needs_no_sort_on_sqlite(tmp_path: Any) -> None:
    # Migration 0002: the loop usage index is in GROUP BY (model, provider) order too.
    with Store(tmp_path / "p.db") as store:
        lines = _sqlite_plan(store, uq.message_usage("loop", "none"), LOOP)
    assert not any("TEMP B-TREE" in line for line in lines), lines
    assert any("COVERING INDEX ix_messages_usage_loop (loop_id=?)" in line for line in lines), lines


def test_turn_usage_searches_by_turn_on_sqlite(tmp_path: Any) -> None:
    # One turn's usage is a few rows found by turn, not a walk of the loop's usage rows.
    with Store(tmp_path / "p.db") as store:
        lines = _sqlite_plan(store, uq.usage_rows("turn", "none"), {**LOOP, "turn_index": 2})
    assert any("ix_messages_loop_id_turn_index_seq (loop_id=? AND turn_index=?" in line for line in lines), lines


def test_usage_by_model_needs_no_sort_on_sqlite(tmp_path: Any) -> None:
    # Migration 0010: cost_source follows provider in the usage indexes, so the (model, provider,
    # cost_source) groups come in index order, and priced_cost is covered.
    with Store(tmp_path / "p.db") as store:
        lines = _sqlite_plan(store, uq.message_usage("all", "none"), {})
    assert not any("TEMP B-TREE" in line for line in lines), lines
    assert any("COVERING INDEX ix_messages_usage_model" in line for line in lines), lines


def test_last_reads_a_loop_backwards_without_a_sort_on_sqlite(tmp_path: Any) -> None:
    # last(n) stops after n rows: the (session_id, id) index hands them over newest first, no sort of the loop.
    params = {**SESSION, **LOOP, "upper": 10**9, "lower": 0, "limit": 54}
    with Store(tmp_path / "p.db") as store:
        for without_summaries in (False, True):
            lines = _sqlite_plan(store, q.loop_messages_backwards(without_summaries), params)
            assert not any("TEMP B-TREE" in line for line in lines), lines


@pytest.mark.parametrize("filters", [(), ("session_id", "role", "tool_name", "since")])
def test_search_reads_the_full_text_index(sync_store: Store, filters: tuple[str, ...]) -> None:
    """SQLite: FTS5 gives the rowids, each message is found by its primary key; PostgreSQL: the GIN index."""
    params: dict[str, Any] = {"limit": 20, "offset": 0, "session_id": "s", "role": "user", "tool_name": "bash"}
    params["since"] = 0
    if sync_store.dialect == "sqlite":
        params["query"] = '("deploy" AND "fail" *)'
        lines = _sqlite_plan(sync_store, sq.search_messages(False, filters), params)
        assert any(line.startswith("SCAN message_search VIRTUAL TABLE") for line in lines), lines
        assert any(line.startswith("SEARCH messages USING INTEGER PRIMARY KEY") for line in lines), lines
        assert not any(line.startswith("SCAN messages") for line in lines), lines
    else:
        params["query"] = "('deploy' & 'fail':*)"
        nodes = _postgres_plan(sync_store, sq.search_messages(True, filters), params)
        if not filters:  # with a session to look in, the planner may read that session's rows instead
            assert any(node.get("Index Name") == "ix_messages_search" for node in nodes), nodes
        scans = [node for node in nodes if node.get("Node Type") == "Seq Scan"]
        assert not [node.get("Relation Name") for node in scans if node.get("Relation Name") == "messages"]
