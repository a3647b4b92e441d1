"""``store.loops``: starting, compacting, ending and walking agent runs; ``store.transaction()``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, tool_result, usage, user
from helpers import GPT5, SONNET

from turnstore import (
    AlreadyExists,
    ContinuationKind,
    ExtensionMessage,
    InvalidArgument,
    InvalidMessage,
    LimitExceeded,
    Limits,
    LoopConfig,
    LoopNotFound,
    LoopStatus,
    SessionNotFound,
    Store,
)

# --- start: the loop tree -----------------------------------------------------


def test_first_loop_is_initial(store: Store, session_id: str) -> None:
    loop = store.loops.start(session_id, config=SONNET)
    assert loop.session_id == session_id
    assert loop.parent_loop_id is None
    assert loop.continuation_kind == ContinuationKind.INITIAL
    assert loop.status == LoopStatus.RUNNING
    assert loop.config == SONNET
    assert (loop.model, loop.provider) == ("claude-sonnet-4-5", "anthropic")
    assert loop.fork_after is None and loop.keep_from is None
    assert loop.ended_at is None
    assert loop.reported_usage is None
    assert loop.started_at.tzinfo is not None
    assert store.loops.get(loop.loop_id) == loop


def test_next_loop_defaults_to_continuing_the_latest(store: Store, session_id: str) -> None:
    first = store.loops.start(session_id, config=SONNET)
    second = store.loops.start(session_id, config=SONNET)
    third = store.loops.start(session_id, config=GPT5)
    assert (second.parent_loop_id, second.continuation_kind) == (first.loop_id, ContinuationKind.DEFAULT)
    assert (third.parent_loop_id, third.continuation_kind) == (second.loop_id, ContinuationKind.DEFAULT)


def test_explicit_parent_defaults_to_default_continuation(store: Store, session_id: str) -> None:
    first = store.loops.start(session_id, config=SONNET)
    store.loops.start(session_id, config=SONNET)
    again = store.loops.start(session_id, config=SONNET, parent_loop_id=first.loop_id)
    assert (again.parent_loop_id, again.continuation_kind) == (first.loop_id, ContinuationKind.DEFAULT)


def test_initial_continuation_starts_a_fresh_root(store: Store, session_id: str) -> None:
    store.loops.start(session_id, config=SONNET)
    fresh = store.loops.start(session_id, config=SONNET, continuation_kind="initial")
    assert fresh.parent_loop_id is None
    assert fresh.continuation_kind == ContinuationKind.INITIAL


def test_parent_none_starts_a_fresh_root(store: Store, session_id: str) -> None:
    store.loops.start(session_id, config=SONNET)
    fresh = store.loops.start(session_id, config=SONNET, parent_loop_id=None)
    assert fresh.parent_loop_id is None
    assert fresh.continuation_kind == ContinuationKind.INITIAL


@pytest.mark.parametrize("kind", ["default", "rerun", "branch", "compaction"])
def test_non_initial_continuation_needs_a_parent(store: Store, session_id: str, kind: str) -> None:
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, continuation_kind=kind)
    store.loops.start(session_id, config=SONNET, loop_id="root")
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, continuation_kind=kind, parent_loop_id=None)
    assert [loop.loop_id for loop in store.loops.list(session_id)] == ["root"]


@pytest.mark.parametrize("kind", ["rerun", "branch"])
def test_continuation_kinds_are_stored(store: Store, loop_id: str, session_id: str, kind: str) -> None:
    fork = store.messages.append(user(), loop_id=loop_id, turn_index=0) if kind == "branch" else None
    child = store.loops.start(
        session_id, config=SONNET, parent_loop_id=loop_id, continuation_kind=kind, fork_after=fork
    )
    assert child.continuation_kind == ContinuationKind(kind)
    assert child.parent_loop_id == loop_id
    assert store.loops.get(child.loop_id).continuation_kind == ContinuationKind(kind)


def test_continuation_accepts_the_enum(store: Store, loop_id: str, session_id: str) -> None:
    child = store.loops.start(session_id, config=SONNET, continuation_kind=ContinuationKind.RERUN)
    assert (child.parent_loop_id, child.continuation_kind) == (loop_id, ContinuationKind.RERUN)


def test_initial_continuation_with_a_parent_raises_invalid_argument(
    store: Store, loop_id: str, session_id: str
) -> None:
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, parent_loop_id=loop_id, continuation_kind="initial")
    assert len(store.loops.list(session_id)) == 1


# --- start: ids ---------------------------------------------------------------


def test_minted_id_counts_per_config(store: Store, session_id: str) -> None:
    ids = [
        store.loops.start(session_id, config=SONNET).loop_id,
        store.loops.start(session_id, config=SONNET).loop_id,
        store.loops.start(session_id, config=GPT5).loop_id,
        store.loops.start(session_id, config=SONNET).loop_id,
        store.loops.start(session_id, config=GPT5).loop_id,
    ]
    assert ids == [
        f"{session_id}.anthropic.claude-sonnet-4-5.1",
        f"{session_id}.anthropic.claude-sonnet-4-5.2",
        f"{session_id}.openai.gpt-5.1",
        f"{session_id}.anthropic.claude-sonnet-4-5.3",
        f"{session_id}.openai.gpt-5.2",
    ]


def test_minted_id_counts_per_session(store: Store) -> None:
    store.sessions.create("a")
    store.sessions.create("b")
    assert store.loops.start("a", config=SONNET).loop_id == "a.anthropic.claude-sonnet-4-5.1"
    assert store.loops.start("b", config=SONNET).loop_id == "b.anthropic.claude-sonnet-4-5.1"
    assert store.loops.start("a", config=SONNET).loop_id == "a.anthropic.claude-sonnet-4-5.2"


@pytest.mark.parametrize(
    ("config", "segment"),
    [
        ({"model": "claude-sonnet-4.5", "provider": "anthropic"}, "anthropic.claude-sonnet-4-5"),
        ({"model": "meta/llama 3:70b", "provider": "groq"}, "groq.meta-llama-3-70b"),
        ({"model": "gpt-5"}, "gpt-5"),
        ({**SONNET, "thinking_level": "high"}, "anthropic.claude-sonnet-4-5.thinking"),
        ({**SONNET, "thinking_level": "off"}, "anthropic.claude-sonnet-4-5"),
        ({**SONNET, "config_id": "fast"}, "fast"),
    ],
)
def test_minted_id_config_segment(store: Store, session_id: str, config: dict, segment: str) -> None:
    loop = store.loops.start(session_id, config=config)
    assert loop.loop_id == f"{session_id}.{segment}.1"
    assert loop.config_id == segment


def test_thinking_loops_count_separately(store: Store, session_id: str) -> None:
    thinking = {**SONNET, "thinking_level": "medium"}
    ids = [store.loops.start(session_id, config=c).loop_id for c in (SONNET, thinking, thinking, SONNET)]
    assert ids == [
        f"{session_id}.anthropic.claude-sonnet-4-5.1",
        f"{session_id}.anthropic.claude-sonnet-4-5.thinking.1",
        f"{session_id}.anthropic.claude-sonnet-4-5.thinking.2",
        f"{session_id}.anthropic.claude-sonnet-4-5.2",
    ]


def test_minted_id_without_config(store: Store, session_id: str) -> None:
    loop = store.loops.start(session_id)
    assert loop.loop_id.startswith(f"{session_id}.")
    assert loop.loop_id.endswith(".1")
    assert loop.config is None


def test_two_loops_without_config_get_distinct_ids(store: Store, session_id: str) -> None:
    first = store.loops.start(session_id)
    second = store.loops.start(session_id)
    assert first.loop_id != second.loop_id
    assert second.parent_loop_id == first.loop_id


def test_minted_id_skips_an_id_taken_by_an_explicit_loop(store: Store, session_id: str) -> None:
    taken = f"{session_id}.openai.gpt-5.1"
    store.loops.start(session_id, config=SONNET, loop_id=taken)
    minted = store.loops.start(session_id, config=GPT5)
    assert minted.loop_id != taken
    assert len(store.loops.list(session_id)) == 2


def test_explicit_loop_id(store: Store, session_id: str) -> None:
    loop = store.loops.start(session_id, config=SONNET, loop_id="my-run")
    assert loop.loop_id == "my-run"
    assert store.loops.get("my-run") == loop
    assert loop.config_id == "anthropic.claude-sonnet-4-5"


def test_explicit_loop_id_does_not_consume_a_number(store: Store, session_id: str) -> None:
    store.loops.start(session_id, config=SONNET, loop_id="named")
    assert store.loops.start(session_id, config=SONNET).loop_id == f"{session_id}.anthropic.claude-sonnet-4-5.1"


def test_duplicate_loop_id_raises_already_exists(store: Store, session_id: str) -> None:
    store.loops.start(session_id, config=SONNET, loop_id="dup")
    with pytest.raises(AlreadyExists):
        store.loops.start(session_id, config=GPT5, loop_id="dup")
    assert store.loops.get("dup").config == SONNET


def test_loop_id_is_unique_across_sessions(store: Store, session_id: str) -> None:
    store.loops.start(session_id, loop_id="dup")
    store.sessions.create("other")
    with pytest.raises(AlreadyExists):
        store.loops.start("other", loop_id="dup")
    assert store.loops.list("other") == []


def test_empty_loop_id_raises_invalid_message(store: Store, session_id: str) -> None:
    with pytest.raises(InvalidMessage):
        store.loops.start(session_id, loop_id="")
    assert store.loops.list(session_id) == []


def test_overlong_loop_id_raises_limit_exceeded(store: Store, session_id: str) -> None:
    with pytest.raises(LimitExceeded):
        store.loops.start(session_id, loop_id="l" * 1025)
    assert store.loops.list(session_id) == []


def test_start_in_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.loops.start("missing", config=SONNET)


def test_unknown_parent_raises_loop_not_found(store: Store, session_id: str) -> None:
    with pytest.raises(LoopNotFound):
        store.loops.start(session_id, config=SONNET, parent_loop_id="missing")
    assert store.loops.list(session_id) == []


def test_parent_from_another_session_raises_invalid_argument(store: Store, loop_id: str) -> None:
    store.sessions.create("other")
    with pytest.raises(InvalidArgument):
        store.loops.start("other", config=SONNET, parent_loop_id=loop_id)
    assert store.loops.list("other") == []


# --- start: fork points ---------------------------------------------------------


def test_branch_with_fork_after(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(), assistant()])
    branch = store.loops.start(
        session_id, config=SONNET, parent_loop_id=loop_id, continuation_kind="branch", fork_after=ids[0]
    )
    assert branch.continuation_kind == ContinuationKind.BRANCH
    assert (branch.parent_loop_id, branch.fork_after) == (loop_id, ids[0])
    assert store.loops.get(branch.loop_id).fork_after == ids[0]


def test_fork_after_a_message_of_another_loop_raises_invalid_argument(
    store: Store, session_id: str, loop_id: str
) -> None:
    own = store.messages.append(user(), loop_id=loop_id, turn_index=0)
    other = store.loops.start(session_id, config=SONNET, loop_id="other", continuation_kind="initial").loop_id
    store.messages.append(user(), loop_id=other, turn_index=0)
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, parent_loop_id=other, continuation_kind="branch", fork_after=own)
    assert len(store.loops.list(session_id)) == 2


def test_fork_after_unknown_message_raises_invalid_argument(store: Store, session_id: str, loop_id: str) -> None:
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, parent_loop_id=loop_id, continuation_kind="branch", fork_after=999)


def test_fork_after_without_parent_raises_invalid_argument(store: Store, session_id: str, loop_id: str) -> None:
    message = store.messages.append(user(), loop_id=loop_id, turn_index=0)
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, continuation_kind="initial", fork_after=message)


@pytest.mark.parametrize("kind", ["default", "rerun", "compaction"])
def test_fork_after_on_a_loop_that_is_not_a_branch_is_refused(
    store: Store, session_id: str, loop_id: str, kind: str
) -> None:
    message = store.messages.append(user(), loop_id=loop_id, turn_index=0)
    with pytest.raises(InvalidArgument, match="^fork_after: only a branch forks after a message") as raised:
        store.loops.start(session_id, config=SONNET, parent_loop_id=loop_id, continuation_kind=kind, fork_after=message)
    assert raised.value.argument == "fork_after"
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [loop_id]


def test_keep_from_on_a_compaction_loop(store: Store, session_id: str, loop_id: str) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(), assistant()])
    loop = store.loops.start(session_id, config=SONNET, continuation_kind="compaction", keep_from=ids[1])
    assert loop.continuation_kind == ContinuationKind.COMPACTION
    assert (loop.parent_loop_id, loop.keep_from) == (loop_id, ids[1])


@pytest.mark.parametrize("kind", [None, "default", "branch", "rerun"])
def test_keep_from_on_a_non_compaction_loop_raises_invalid_argument(
    store: Store, session_id: str, loop_id: str, kind: str | None
) -> None:
    message = store.messages.append(user(), loop_id=loop_id, turn_index=0)
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, continuation_kind=kind, keep_from=message)
    assert len(store.loops.list(session_id)) == 1


def test_keep_from_outside_the_session_raises_invalid_argument(store: Store, loop_id: str) -> None:
    foreign = store.messages.append(user(), loop_id=loop_id, turn_index=0)
    store.sessions.create("other")
    other_loop = store.loops.start("other", config=SONNET).loop_id
    store.messages.append(user(), loop_id=other_loop, turn_index=0)
    with pytest.raises(InvalidArgument):
        store.loops.start("other", config=SONNET, continuation_kind="compaction", keep_from=foreign)
    with pytest.raises(InvalidArgument):
        store.loops.start("other", config=SONNET, continuation_kind="compaction", keep_from=12345)
    assert len(store.loops.list("other")) == 1


# --- start: config and other fields ----------------------------------------------


def test_config_as_loop_config_keeps_extra_keys(store: Store, session_id: str) -> None:
    config = LoopConfig(model="gpt-5", provider="openai", thinking_level="low", temperature=0.5)
    loop = store.loops.start(session_id, config=config)
    assert loop.config == {"model": "gpt-5", "provider": "openai", "thinking_level": "low", "temperature": 0.5}
    assert loop.loop_id == f"{session_id}.openai.gpt-5.thinking.1"


def test_config_mapping_keeps_extra_keys(store: Store, session_id: str) -> None:
    config = {**SONNET, "max_tokens": 4096, "tools": ["bash", "edit"]}
    assert store.loops.start(session_id, config=config).config == config


@pytest.mark.parametrize(
    "config",
    [
        {"provider": "anthropic"},
        {"model": 42},
        {"model": "m", "thinking_level": 3},
        ["model", "gpt-5"],
        "gpt-5",
    ],
)
def test_invalid_config_raises_invalid_argument(store: Store, session_id: str, config: object) -> None:
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=config)  # type: ignore[arg-type]
    assert store.loops.list(session_id) == []


@pytest.mark.parametrize("field", ["continuation_kind", "status"])
def test_unknown_continuation_or_status_raises_invalid_argument(store: Store, session_id: str, field: str) -> None:
    with pytest.raises(InvalidArgument):
        store.loops.start(session_id, config=SONNET, **{field: "sideways"})


def test_status_metadata_started_at_and_spawn_fields(store: Store, session_id: str, loop_id: str) -> None:
    when = datetime(2025, 3, 4, 5, 6, 7, tzinfo=timezone.utc)
    loop = store.loops.start(
        session_id,
        config=SONNET,
        continuation_kind="initial",
        loop_id="sub",
        status="pending",
        metadata={"purpose": "search", "depth": 2},
        started_at=when,
        spawn_loop_id=loop_id,
        spawn_tool_call_id="call-7",
    )
    assert loop.status == LoopStatus.PENDING
    assert loop.metadata == {"purpose": "search", "depth": 2}
    assert loop.started_at == when
    assert (loop.spawn_loop_id, loop.spawn_tool_call_id) == (loop_id, "call-7")
    assert store.loops.get("sub") == loop


# --- compact ------------------------------------------------------------------


def test_compact_creates_a_compaction_loop_opening_with_the_summary(
    store: Store, session_id: str, loop_id: str
) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(), assistant()])
    compaction = store.loops.compact(loop_id, "we talked", keep_from=ids[1], tokens_before=12345)
    assert compaction.session_id == session_id
    assert compaction.parent_loop_id == loop_id
    assert compaction.continuation_kind == ContinuationKind.COMPACTION
    assert compaction.keep_from == ids[1]
    assert compaction.config == SONNET
    assert compaction.loop_id == f"{session_id}.anthropic.claude-sonnet-4-5.2"

    (first, *rest) = store.messages.loop(compaction.loop_id)
    assert rest == []
    assert isinstance(first, ExtensionMessage)
    assert first.kind == "compaction_summary"
    assert first.data == {"summary": "we talked", "tokens_before": 12345}


def test_compact_without_tokens_before_or_keep_from(store: Store, loop_id: str) -> None:
    compaction = store.loops.compact(loop_id, "short")
    assert compaction.keep_from is None
    (summary,) = store.messages.loop(compaction.loop_id)
    assert summary.data == {"summary": "short"}


def test_compact_usage_is_counted_and_priced_at_the_loop_model(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), assistant(u=usage(input=100, output=10))])
    compaction = store.loops.compact(loop_id, "summary", usage=usage(input=100_000, output=10_000))

    totals = store.usage.loop(compaction.loop_id)
    assert (totals.input, totals.output, totals.requests) == (100_000, 10_000, 1)
    # claude-sonnet-4-5 under its 200k tier: $3 in, $15 out per million.
    assert totals.cost == pytest.approx(0.3 + 0.15)
    (row,) = store.usage.by_model(loop_id=compaction.loop_id)
    assert (row.model, row.provider) == ("claude-sonnet-4-5", "anthropic")
    session = store.usage.session(session_id)
    assert (session.input, session.requests) == (100_100, 2)


def test_compact_with_another_config_is_priced_at_that_model(store: Store, loop_id: str) -> None:
    compaction = store.loops.compact(loop_id, "summary", usage=usage(input=1_000_000, output=0), config=GPT5)
    assert compaction.config == GPT5
    assert store.usage.loop(compaction.loop_id).cost == pytest.approx(1.25)


def test_compact_with_keep_from_outside_the_session_creates_nothing(
    store: Store, session_id: str, loop_id: str
) -> None:
    store.sessions.create("other")
    other_loop = store.loops.start("other", config=SONNET).loop_id
    foreign = store.messages.append(user(), loop_id=other_loop, turn_index=0)
    with pytest.raises(InvalidArgument):
        store.loops.compact(loop_id, "summary", keep_from=foreign)
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [loop_id]


def test_compact_is_atomic_when_the_summary_is_refused(tmp_path: Path) -> None:
    with Store(tmp_path / "small.db", limits=Limits(max_message_bytes=1000)) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        with pytest.raises(LimitExceeded):
            store.loops.compact(loop_id, "x" * 5000)
        assert [loop.loop_id for loop in store.loops.list("s")] == [loop_id]


def test_compact_unknown_loop_raises_loop_not_found(store: Store, session_id: str) -> None:
    with pytest.raises(LoopNotFound):
        store.loops.compact("missing", "summary")


# --- end ----------------------------------------------------------------------


def test_end_marks_completed(store: Store, loop_id: str) -> None:
    started = store.loops.get(loop_id)
    ended = store.loops.end(loop_id)
    assert ended.status == LoopStatus.COMPLETED
    assert ended.ended_at is not None and ended.ended_at >= started.started_at
    assert ended.reported_usage is None
    assert store.loops.get(loop_id) == ended


@pytest.mark.parametrize("status", ["aborted", LoopStatus.REJECTED, "completed"])
def test_end_with_status_and_time(store: Store, loop_id: str, status: str | LoopStatus) -> None:
    when = datetime.now(timezone.utc) + timedelta(minutes=5)
    ended = store.loops.end(loop_id, status, ended_at=when)
    assert ended.status == LoopStatus(status)
    assert ended.ended_at == when


def test_end_with_reported_usage(store: Store, loop_id: str) -> None:
    reported = usage(input=500, output=50, cache_read=20, cache_write=10, reasoning=5)
    ended = store.loops.end(loop_id, usage=reported)
    assert ended.reported_usage == reported
    assert store.loops.get(loop_id).reported_usage == reported


def test_end_bumps_session_updated_at(store: Store, session_id: str, loop_id: str) -> None:
    before = store.sessions.get(session_id).updated_at
    store.loops.end(loop_id)
    assert store.sessions.get(session_id).updated_at > before


def test_end_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.loops.end("missing")


# --- get / list / children ----------------------------------------------------------


def test_get_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.loops.get("missing")


def test_list_in_start_order_and_only_that_session(store: Store, session_id: str) -> None:
    ids = [store.loops.start(session_id, config=c).loop_id for c in (SONNET, GPT5, SONNET)]
    store.sessions.create("other")
    store.loops.start("other", config=SONNET)
    assert [loop.loop_id for loop in store.loops.list(session_id)] == ids
    assert all(loop.session_id == session_id for loop in store.loops.list(session_id))


def test_list_empty_session(store: Store, session_id: str) -> None:
    assert store.loops.list(session_id) == []


def test_list_unknown_session_raises_session_not_found(store: Store) -> None:
    with pytest.raises(SessionNotFound):
        store.loops.list("missing")


def test_children_include_continuations_branches_compactions_and_spawned_loops(
    store: Store, session_id: str, loop_id: str
) -> None:
    ids = store.messages.append_turn(loop_id, 0, [user(), assistant(calls=("c1",)), tool_result("c1")])
    cont = store.loops.start(session_id, config=SONNET, parent_loop_id=loop_id, loop_id="cont")
    branch = store.loops.start(
        session_id,
        config=SONNET,
        parent_loop_id=loop_id,
        continuation_kind="branch",
        fork_after=ids[0],
        loop_id="branch",
    )
    compaction = store.loops.compact(loop_id, "summary")
    spawned = store.loops.start(
        session_id,
        config=GPT5,
        continuation_kind="initial",
        spawn_loop_id=loop_id,
        spawn_tool_call_id="c1",
        loop_id="sub",
    )
    store.loops.start(session_id, config=SONNET, parent_loop_id="cont", loop_id="grandchild")
    store.loops.start(session_id, config=SONNET, continuation_kind="initial", loop_id="unrelated")

    children = store.loops.children(loop_id)
    assert [loop.loop_id for loop in children] == [cont.loop_id, branch.loop_id, compaction.loop_id, spawned.loop_id]
    assert [loop.loop_id for loop in store.loops.children("cont")] == ["grandchild"]


def test_children_of_a_leaf_is_empty(store: Store, loop_id: str) -> None:
    assert store.loops.children(loop_id) == []


def test_children_unknown_loop_raises_loop_not_found(store: Store) -> None:
    with pytest.raises(LoopNotFound):
        store.loops.children("missing")


# --- store.transaction() ------------------------------------------------------


def test_transaction_commits_all_writes(store: Store, session_id: str) -> None:
    with store.transaction() as tx:
        assert tx is store
        loop = store.loops.start(session_id, config=SONNET)
        store.messages.append_turn(loop.loop_id, 0, [user(), assistant()])
        store.messages.append(user("more"), loop_id=loop.loop_id, turn_index=1)
    assert len(store.messages.loop(loop.loop_id)) == 3


def test_transaction_rolls_back_everything_on_error(store: Store, session_id: str, loop_id: str) -> None:
    before = store.messages.append(user("kept"), loop_id=loop_id, turn_index=0)
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction():
            new_loop = store.loops.start(session_id, config=SONNET, loop_id="tx-loop")
            store.messages.append_turn(new_loop.loop_id, 0, [user(), assistant()])
            store.messages.append(user("also gone"), loop_id=loop_id, turn_index=1)
            store.sessions.create("tx-session")
            raise RuntimeError("boom")

    with pytest.raises(LoopNotFound):
        store.loops.get("tx-loop")
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [loop_id]
    assert [m.text() for m in store.messages.loop(loop_id)] == ["kept"]
    assert store.messages.get(before).message.text() == "kept"
    assert not store.sessions.exists("tx-session")
    assert store.sessions.list()[0].messages == 1


def test_transaction_rolls_back_on_a_store_error(store: Store, session_id: str) -> None:
    with pytest.raises(LoopNotFound):
        with store.transaction():
            store.loops.start(session_id, config=SONNET, loop_id="tx-loop")
            store.messages.append(user(), loop_id="no-such-loop")
    assert store.loops.list(session_id) == []


def test_nested_transactions_join_the_outer_one(store: Store, session_id: str) -> None:
    with pytest.raises(RuntimeError):
        with store.transaction():
            with store.transaction():
                store.loops.start(session_id, config=SONNET, loop_id="inner")
            raise RuntimeError("outer fails")
    with pytest.raises(LoopNotFound):
        store.loops.get("inner")


def test_store_usable_after_a_rolled_back_transaction(store: Store, session_id: str) -> None:
    with pytest.raises(RuntimeError):
        with store.transaction():
            store.loops.start(session_id, config=SONNET)
            raise RuntimeError
    loop = store.loops.start(session_id, config=SONNET)
    assert loop.loop_id == f"{session_id}.anthropic.claude-sonnet-4-5.1"
    assert loop.continuation_kind == ContinuationKind.INITIAL


# --- refused arguments name themselves ------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        pytest.param({"continuation_kind": "branch"}, "fork_after", id="branch-without-fork-after"),
        pytest.param({"continuation_kind": "fork"}, "continuation_kind", id="unknown-continuation"),
        pytest.param({"status": "done"}, "status", id="unknown-status"),
        pytest.param({"continuation_kind": "branch", "fork_after": "1"}, "fork_after", id="fork-after-not-an-id"),
        pytest.param({"continuation_kind": "branch", "fork_after": 10**30}, "fork_after", id="fork-after-over-64-bits"),
        pytest.param({"continuation_kind": "branch", "fork_after": 10**9}, "fork_after", id="fork-after-unknown"),
        pytest.param({"keep_from": "x", "continuation_kind": "compaction"}, "keep_from", id="keep-from-not-an-id"),
        pytest.param({"config": ["model"]}, "config", id="config-not-an-object"),
        pytest.param({"config": {"model": 5}}, "config", id="config-bad-model"),
    ],
)
def test_start_refuses_a_bad_argument_naming_it(
    store: Store, session_id: str, loop_id: str, kwargs: dict[str, Any], argument: str
) -> None:
    store.messages.append(user(), loop_id=loop_id, turn_index=0)
    with pytest.raises(InvalidArgument) as caught:
        store.loops.start(session_id, parent_loop_id=loop_id, **kwargs)
    assert caught.value.argument == argument
    assert str(caught.value).startswith(f"{argument}: ") and "\n" not in str(caught.value)
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [loop_id]


def test_fork_after_a_message_of_the_parents_parent_is_refused(store: Store, session_id: str, loop_id: str) -> None:
    first = store.messages.append(user("q"), loop_id=loop_id, turn_index=0)
    child = store.loops.start(session_id, config=SONNET, loop_id="child").loop_id
    with pytest.raises(InvalidArgument, match="^fork_after: .* not a message of the parent loop 'child'"):
        store.loops.start(session_id, parent_loop_id=child, continuation_kind="branch", fork_after=first)
    branch = store.messages.rewind(child, after=first)  # rewind finds the loop that holds it
    assert (branch.parent_loop_id, branch.fork_after) == (loop_id, first)


def test_end_with_usage_and_requests_is_read_back(store: Store, loop_id: str) -> None:
    ended = store.loops.end(loop_id, usage=usage(10, 2), requests=4)
    assert (ended.reported_usage, ended.reported_requests) == (usage(10, 2), 4)
    assert store.loops.get(loop_id) == ended


def test_delete_removes_an_empty_loop_nothing_depends_on_and_refuses_any_other(store: Any, session_id: str) -> None:
    parent = store.loops.start(session_id, loop_id="parent", continuation_kind="initial").loop_id
    store.messages.append(user("hi"), loop_id=parent, turn_index=0)
    child = store.loops.start(session_id, loop_id="child", parent_loop_id=parent).loop_id
    with pytest.raises(InvalidArgument, match="^loop_id: loop 'parent' holds messages"):
        store.loops.delete(parent)
    grandchild = store.loops.start(session_id, loop_id="grandchild", parent_loop_id=child).loop_id
    with pytest.raises(InvalidArgument, match="^loop_id: loop 'grandchild' continues or was started by loop 'child'"):
        store.loops.delete(child)
    store.loops.delete(grandchild)
    store.loops.delete(child)
    assert [loop.loop_id for loop in store.loops.list(session_id)] == [parent]
    (message_id,) = [row.message_id for row in store.messages.records(loop_id=parent)]
    store.messages.delete(message_id)  # nothing continues from the parent's end any more
    with pytest.raises(LoopNotFound):
        store.loops.delete("child")


def test_continuation_is_the_deprecated_name_of_continuation_kind(store: Store, session_id: str) -> None:
    first = store.loops.start(session_id, config=SONNET)
    with pytest.warns(DeprecationWarning, match=r"continuation=\.\.\.\) is deprecated; use continuation_kind"):
        fresh = store.loops.start(session_id, config=SONNET, continuation="initial")
    assert (fresh.parent_loop_id, fresh.continuation_kind) == (None, ContinuationKind.INITIAL)
    with pytest.warns(DeprecationWarning):
        branch = store.loops.start(
            session_id, config=SONNET, parent_loop_id=first.loop_id, continuation=ContinuationKind.RERUN
        )
    assert branch.continuation_kind == ContinuationKind.RERUN
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument) as raised:
        store.loops.start(session_id, config=SONNET, continuation="initial", continuation_kind="initial")
    assert raised.value.argument == "continuation"
    assert len(store.loops.list(session_id)) == 3


def test_the_new_name_does_not_warn(store: Store, session_id: str) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loop = store.loops.start(session_id, config=SONNET, continuation_kind="initial")
    assert loop.continuation_kind == ContinuationKind.INITIAL
