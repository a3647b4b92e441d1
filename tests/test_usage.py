"""``store.usage``: token and dollar totals per turn, loop, session, model and day; price tables."""

from __future__ import annotations

import json
import math
import tempfile
from collections import defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from functools import reduce
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from factories import assistant, extension, tool_result, usage, user
from helpers import GPT5, SONNET
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from turnstore import (
    DEFAULT_PRICES,
    AssistantMessage,
    CostConfig,
    InvalidArgument,
    InvalidPrices,
    LoopNotFound,
    Message,
    MessageNotFound,
    PriceTable,
    SessionNotFound,
    Store,
    Usage,
    UsageRow,
    UsageTotals,
)
from turnstore.pricing import Pricing


def rates(input: float, output: float, cache_read: float = 0.0, cache_write: float = 0.0) -> CostConfig:
    return CostConfig(
        input_per_million=input,
        output_per_million=output,
        cache_read_per_million=cache_read,
        cache_write_per_million=cache_write,
    )


# Published list prices the default table holds (USD per million tokens).
SONNET_RATES = rates(3, 15, 0.30, 3.75)
GPT5_RATES = rates(1.25, 10, 0.125, 0)


def dollars(u: Usage, price: CostConfig) -> float:
    return (
        u.input * price.input_per_million
        + u.output * price.output_per_million
        + u.cache_read * price.cache_read_per_million
        + u.cache_write * price.cache_write_per_million
    ) / 1_000_000


def tokens(totals: UsageTotals) -> tuple[int, int, int, int, int, int]:
    return (totals.input, totals.output, totals.reasoning, totals.cache_read, totals.cache_write, totals.total_tokens)


def as_tuple(u: Usage) -> tuple[int, int, int, int, int, int]:
    return (u.input, u.output, u.reasoning, u.cache_read, u.cache_write, u.total_tokens)


# --- totals at each level -----------------------------------------------------------


def test_turn_usage_sums_the_turns_assistant_messages(store: Store, loop_id: str) -> None:
    first = usage(input=1000, output=200, cache_read=3000, cache_write=400, reasoning=50)
    second = usage(input=500, output=100)
    store.messages.append_turn(
        loop_id, 0, [user(), assistant(calls=("c",), u=first), tool_result("c"), assistant(u=second)]
    )
    store.messages.append_turn(loop_id, 1, [user(), assistant(u=usage(input=7, output=7))])

    totals = store.usage.turn(loop_id, 0)
    assert isinstance(totals, UsageTotals)
    assert tokens(totals) == (1500, 300, 50, 3000, 400, 5200)
    assert totals.requests == 2
    assert totals.cost == pytest.approx((1500 * 3 + 300 * 15 + 3000 * 0.30 + 400 * 3.75) / 1e6)
    assert totals.cache_hit_rate == pytest.approx(3000 / (1500 + 3000 + 400))
    assert totals.reported_cost is None
    assert totals.usage == first + second


def test_turn_without_usage_is_zero(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user()])
    for turn_index in (0, 5):
        totals = store.usage.turn(loop_id, turn_index)
        assert tokens(totals) == (0, 0, 0, 0, 0, 0)
        assert (totals.requests, totals.cost, totals.cache_hit_rate) == (0, None, 0.0)


def test_loop_session_and_total(store: Store, session_id: str, loop_id: str) -> None:
    a, b, c = usage(100, 10), usage(200, 20, cache_read=1000), usage(1_000_000, 1_000_000)
    store.messages.append_turn(loop_id, 0, [user(), assistant(u=a)])
    store.messages.append_turn(loop_id, 1, [user(), assistant(u=b)])
    second = store.loops.start(session_id, config=GPT5).loop_id
    store.messages.append_turn(second, 0, [user(), assistant(model="gpt-5", provider="openai", u=c)])
    store.sessions.create("other")
    other = store.loops.start("other", config=SONNET).loop_id
    store.messages.append_turn(other, 0, [assistant(u=usage(1, 1))])

    loop_totals = store.usage.loop(loop_id)
    assert loop_totals.usage == a + b
    assert loop_totals.requests == 2
    assert loop_totals.cost == pytest.approx(dollars(a, SONNET_RATES) + dollars(b, SONNET_RATES))

    session = store.usage.session(session_id)
    assert session.usage == a + b + c
    assert session.requests == 3
    assert session.cost == pytest.approx(dollars(a + b, SONNET_RATES) + dollars(c, GPT5_RATES))

    total = store.usage.total()
    assert total.usage == a + b + c + usage(1, 1)
    assert total.requests == 4
    assert total.cost == pytest.approx(session.cost + dollars(usage(1, 1), SONNET_RATES))


def test_empty_session_and_store(store: Store, session_id: str) -> None:
    for totals in (store.usage.session(session_id), store.usage.total()):
        assert tokens(totals) == (0, 0, 0, 0, 0, 0)
        assert (totals.cost, totals.requests, totals.cache_hit_rate) == (None, 0, 0.0)
    assert store.usage.by_model() == []
    assert store.usage.by_loop(session_id) == []
    assert store.usage.by_session() == []
    assert store.usage.by_day() == []


def test_messages_without_usage_are_not_requests(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), extension(), tool_result("x"), assistant(u=usage(10, 1))])
    assert store.usage.loop(loop_id).requests == 1


def test_unknown_lists_the_replies_stored_without_usage(store: Store, session_id: str, loop_id: str) -> None:
    unknown = store.messages.append_turn(loop_id, 0, [user(), assistant(u=usage(0, 0))], usage_known=False)
    store.messages.append_turn(loop_id, 1, [user(), assistant(u=usage(0, 0)), tool_result("x")])
    later = store.messages.append_turn(loop_id, 2, [assistant(u=usage(5, 1))], usage_known=False)
    assert store.usage.unknown(loop_id) == [unknown[1], later[0]]  # not the prompt, not the known zeros
    other = store.loops.start(session_id).loop_id
    assert store.usage.unknown(other) == []
    with pytest.raises(LoopNotFound):
        store.usage.unknown("no-such-loop")


def test_usage_learnt_later_is_set_on_a_reply_stored_without_it(store: Store, loop_id: str) -> None:
    """``messages.set_usage`` gives a reply stored with unknown usage its usage and model: its JSON and
    the totals agree; its text, turn and place are unchanged; nothing else can be given usage twice."""
    ids = store.messages.append_turn(
        loop_id, 0, [user(), assistant("answer", model="unknown", u=usage(0, 0)), tool_result("x")], usage_known=False
    )
    learnt = Usage(input=900, output=40, cache_read=100, total_tokens=1_040)
    store.messages.set_usage(ids[1], learnt, model="gpt-5", provider="openai")

    stored = store.messages.get(ids[1])
    assert isinstance(stored.message, AssistantMessage)
    assert (stored.message.usage, stored.message.model, stored.message.provider) == (learnt, "gpt-5", "openai")
    assert (stored.message.text(), stored.turn_index, stored.seq) == ("answer", 0, 1)
    [row] = [row for row in store.messages.rows(store.loops.get(loop_id).session_id) if row.id == ids[1]]
    assert json.loads(row.message)["usage"]["total_tokens"] == 1_040
    turn = store.usage.turn(loop_id, 0)
    assert (turn.input, turn.cache_read, turn.total_tokens, turn.requests) == (900, 100, 1_040, 1)
    assert [(r.model, r.provider) for r in store.usage.by_model(loop_id=loop_id)] == [("gpt-5", "openai")]
    assert store.usage.unknown(loop_id) == []

    with pytest.raises(InvalidArgument, match="already has its usage"):
        store.messages.set_usage(ids[1], learnt)
    with pytest.raises(InvalidArgument, match="is a toolResult message, not an assistant message"):
        store.messages.set_usage(ids[2], learnt)
    with pytest.raises(InvalidArgument, match="^usage: "):
        store.messages.set_usage(ids[1], {"input_tokens": 1})
    with pytest.raises(MessageNotFound):
        store.messages.set_usage(10**9, learnt)
    with pytest.raises(InvalidArgument, match="give a usage, or a model or provider"):
        store.messages.set_usage(ids[1], None)
    assert store.usage.turn(loop_id, 0).requests == 1

    # Another reply of the same model call: its model, its usage still unknown.
    [sibling] = store.messages.append_turn(loop_id, 1, [assistant("more", model="unknown")], usage_known=False)
    store.messages.set_usage(sibling, None, model="gpt-5")
    assert getattr(store.messages.get(sibling).message, "model", None) == "gpt-5"
    assert store.usage.unknown(loop_id) == [sibling]
    assert store.usage.turn(loop_id, 1).requests == 0


def test_reasoning_is_not_charged_twice(store: Store, loop_id: str) -> None:
    with_reasoning = usage(input=0, output=1_000_000, reasoning=800_000)
    store.messages.append_turn(loop_id, 0, [assistant(u=with_reasoning)])
    totals = store.usage.loop(loop_id)
    assert totals.reasoning == 800_000
    assert totals.cost == pytest.approx(15.0)


def test_usage_on_a_non_assistant_message_counts_at_its_model(store: Store, loop_id: str) -> None:
    store.messages.append(
        extension("summary"), loop_id=loop_id, usage=usage(1_000_000, 0), model="gpt-5", provider="openai"
    )
    totals = store.usage.loop(loop_id)
    assert (totals.input, totals.requests) == (1_000_000, 1)
    assert totals.cost == pytest.approx(1.25)
    (row,) = store.usage.by_model()
    assert (row.model, row.provider) == ("gpt-5", "openai")


# --- breakdowns ------------------------------------------------------------------------


@pytest.fixture
def two_sessions(store: Store) -> dict[str, Any]:
    """Two sessions, three loops, three models, spread over two UTC days."""
    day1 = int(datetime(2025, 1, 1, 23, 59, 59, 999_000, tzinfo=timezone.utc).timestamp() * 1000)
    day2 = int(datetime(2025, 1, 2, 0, 0, 0, tzinfo=timezone.utc).timestamp() * 1000)
    store.sessions.create("s1")
    store.sessions.create("s2")
    l1 = store.loops.start("s1", config=SONNET).loop_id
    l2 = store.loops.start("s1", config=GPT5).loop_id
    l3 = store.loops.start("s2", config=SONNET).loop_id
    u = {
        "a": usage(100, 10),
        "b": usage(200, 20, cache_read=50),
        "c": usage(300, 30),
        "d": usage(400, 40, cache_write=5),
        "e": usage(1000, 100),
    }
    store.messages.append_turn(l1, 0, [user(), assistant(u=u["a"], timestamp=day1)])
    store.messages.append_turn(l1, 1, [assistant(model="claude-haiku-4-5", u=u["b"], timestamp=day2)])
    store.messages.append_turn(l2, 0, [assistant(model="gpt-5", provider="openai", u=u["c"], timestamp=day1)])
    store.messages.append_turn(l3, 0, [assistant(u=u["d"], timestamp=day2)])
    store.messages.append_turn(l3, 1, [assistant(model="gpt-5", provider="azure", u=u["e"], timestamp=day2)])
    return {"loops": (l1, l2, l3), "u": u}


def test_by_model_across_the_store(store: Store, two_sessions: dict[str, Any]) -> None:
    u = two_sessions["u"]
    rows = store.usage.by_model()
    assert all(isinstance(row, UsageRow) for row in rows)
    by_key = {(row.model, row.provider): row for row in rows}
    assert set(by_key) == {
        ("claude-sonnet-4-5", "anthropic"),
        ("claude-haiku-4-5", "anthropic"),
        ("gpt-5", "openai"),
        ("gpt-5", "azure"),
    }
    assert by_key["claude-sonnet-4-5", "anthropic"].usage == u["a"] + u["d"]
    assert by_key["claude-sonnet-4-5", "anthropic"].requests == 2
    assert by_key["claude-sonnet-4-5", "anthropic"].cost == pytest.approx(dollars(u["a"] + u["d"], SONNET_RATES))
    assert by_key["claude-haiku-4-5", "anthropic"].cost == pytest.approx(dollars(u["b"], rates(1, 5, 0.10, 1.25)))
    assert by_key["gpt-5", "azure"].usage == u["e"]
    assert by_key["gpt-5", "azure"].cost == pytest.approx(dollars(u["e"], GPT5_RATES))
    assert rows == sorted(rows, key=lambda row: (row.model, row.provider))


def test_by_model_within_a_session_or_loop(store: Store, two_sessions: dict[str, Any]) -> None:
    l1, _, l3 = two_sessions["loops"]
    assert {(row.model, row.provider) for row in store.usage.by_model("s1")} == {
        ("claude-sonnet-4-5", "anthropic"),
        ("claude-haiku-4-5", "anthropic"),
        ("gpt-5", "openai"),
    }
    assert [(row.model, row.requests) for row in store.usage.by_model(loop_id=l1)] == [
        ("claude-haiku-4-5", 1),
        ("claude-sonnet-4-5", 1),
    ]
    assert {(row.model, row.provider) for row in store.usage.by_model(loop_id=l3)} == {
        ("claude-sonnet-4-5", "anthropic"),
        ("gpt-5", "azure"),
    }


def test_by_loop(store: Store, two_sessions: dict[str, Any]) -> None:
    l1, l2, l3 = two_sessions["loops"]
    u = two_sessions["u"]
    rows = store.usage.by_loop("s1")
    assert [row.loop_id for row in rows] == sorted([l1, l2])
    by_loop = {row.loop_id: row for row in rows}
    assert by_loop[l1].usage == u["a"] + u["b"]
    assert by_loop[l2].usage == u["c"]
    assert by_loop[l2].cost == pytest.approx(dollars(u["c"], GPT5_RATES))
    assert [row.loop_id for row in store.usage.by_loop("s2")] == [l3]


def test_by_session(store: Store, two_sessions: dict[str, Any]) -> None:
    u = two_sessions["u"]
    rows = store.usage.by_session()
    assert [row.session_id for row in rows] == ["s1", "s2"]
    assert rows[0].usage == u["a"] + u["b"] + u["c"]
    assert rows[1].usage == u["d"] + u["e"]
    assert rows[0].requests == 3 and rows[1].requests == 2
    assert rows[0].cost == pytest.approx(store.usage.session("s1").cost)
    assert rows[1].cost == pytest.approx(store.usage.session("s2").cost)


def test_by_day_uses_the_utc_day_of_message_timestamps(store: Store, two_sessions: dict[str, Any]) -> None:
    l1, _, _ = two_sessions["loops"]
    u = two_sessions["u"]
    rows = store.usage.by_day()
    assert [row.day for row in rows] == ["2025-01-01", "2025-01-02"]
    assert rows[0].usage == u["a"] + u["c"]
    assert rows[1].usage == u["b"] + u["d"] + u["e"]
    assert rows[0].cost == pytest.approx(dollars(u["a"], SONNET_RATES) + dollars(u["c"], GPT5_RATES))

    assert [(row.day, row.usage) for row in store.usage.by_day("s2")] == [("2025-01-02", u["d"] + u["e"])]
    assert [(row.day, row.usage) for row in store.usage.by_day(loop_id=l1)] == [
        ("2025-01-01", u["a"]),
        ("2025-01-02", u["b"]),
    ]


def test_breakdowns_add_up_to_the_total(store: Store, two_sessions: dict[str, Any]) -> None:
    total = store.usage.total()
    for rows in (store.usage.by_model(), store.usage.by_session(), store.usage.by_day()):
        summed = reduce(Usage.combine, (row.usage for row in rows))
        assert summed == total.usage
        assert sum(row.requests for row in rows) == total.requests
        assert sum(row.cost or 0 for row in rows) == pytest.approx(total.cost)


def _exact(costs: Any) -> Decimal:
    """The exact sum of costs, each as the decimal its float stands for (what it prints as)."""
    return sum((Decimal(repr(cost or 0.0)) for cost in costs), Decimal(0))


def test_costs_add_up_exactly_to_every_total(store: Store) -> None:
    """A total's cost is exactly the sum of its groups': a session's of its loops' and its models', the store's
    of its sessions' and its models', a loop's of its models'.

    Priced and reported costs with many decimals, over loops and models: each group
    rounded on its own (to 10 decimals, as before) made a session's cost differ from
    the sum of its loops' or models' by up to 1e-10.
    """
    models = [("claude-sonnet-4-5", "anthropic"), ("gpt-5", "openai"), ("claude-haiku-4-5", "anthropic")]
    for number in range(2):
        session_id = store.sessions.create(f"s{number}").session_id
        for loop_number in range(3):
            loop_id = store.loops.start(session_id, continuation_kind="initial").loop_id
            turn: list[Any] = []
            for index, (model, provider) in enumerate(models):
                seed = 7 * number + 3 * loop_number + index
                spent = usage(
                    1_234_567 + 7_919 * seed, 89_123 + 31 * seed, cache_read=3_331 * seed, cache_write=77 * seed
                )
                if index == 0:  # a cost the source reported, 4e-11 past 10 decimals: three of them pass 1e-10
                    spent = spent.model_copy(update={"cost": 0.12345678904 + seed / 10})
                turn += [user(), assistant(model=model, provider=provider, u=spent)]
            store.messages.append_turn(loop_id, 0, turn)
            store.loops.end(loop_id, usage=usage(11, 13).model_copy(update={"cost": 0.3 / (loop_number + 7)}))
            by_model = store.usage.by_model(loop_id=loop_id)
            assert _exact([store.usage.loop(loop_id).cost]) == _exact(row.cost for row in by_model)
        session = store.usage.session(session_id)
        for rows in (store.usage.by_loop(session_id), store.usage.by_model(session_id)):
            assert _exact([session.cost]) == _exact(row.cost for row in rows)
            assert _exact([session.reported_cost]) == _exact(row.reported_cost for row in rows)
        by_loop = {row.loop_id: row.cost for row in store.usage.by_loop(session_id)}
        assert by_loop == {loop.loop_id: store.usage.loop(loop.loop_id).cost for loop in store.loops.list(session_id)}
    total = store.usage.total()
    for rows in (store.usage.by_session(), store.usage.by_model(), store.usage.by_day()):
        assert _exact([total.cost]) == _exact(row.cost for row in rows)
        assert _exact([total.reported_cost]) == _exact(row.reported_cost for row in rows)
    assert [row.cost for row in store.usage.by_session()] == [store.usage.session(f"s{n}").cost for n in range(2)]


# --- prices -----------------------------------------------------------------------------


def test_prices_override_per_call(store: Store, loop_id: str) -> None:
    # 50k of each: a 150k-token prompt, under the 200k tier.
    u = usage(input=50_000, output=50_000, cache_read=50_000, cache_write=50_000)
    store.messages.append_turn(loop_id, 0, [assistant(u=u)])
    store.messages.append_turn(loop_id, 1, [assistant(model="house-model", provider="local", u=u)])
    custom = {"claude-sonnet-4-5": {"input": 1, "output": 2, "cache_read": 3, "cache_write": 4}}
    listed = (3 + 15 + 0.30 + 3.75) / 20
    assert store.usage.turn(loop_id, 0, prices=custom).cost == pytest.approx(0.5)
    assert store.usage.turn(loop_id, 0).cost == pytest.approx(listed)
    assert store.usage.turn(loop_id, 1).cost is None
    house = {"house-model": {"input": 0.5, "output": 0.5}}
    assert store.usage.turn(loop_id, 1, prices=house).cost == pytest.approx(0.05)
    assert store.usage.loop(loop_id, prices=house).cost == pytest.approx(listed + 0.05)
    assert store.usage.loop(loop_id, prices=house).unpriced_records == 0
    session = store.usage.session(store.loops.get(loop_id).session_id, prices=custom)
    assert (session.cost, session.unpriced_records, session.unpriced_models) == (
        pytest.approx(0.5),
        1,
        ["house-model"],
    )
    assert store.usage.total(prices=PriceTable(house)).cost == pytest.approx(listed + 0.05)
    by_model = {row.model: row.cost for row in store.usage.by_model(prices=custom)}
    assert by_model == {"claude-sonnet-4-5": pytest.approx(0.5), "house-model": None}


def test_prices_override_on_every_breakdown(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(model="house-model", u=usage(2_000_000, 0), timestamp=0)])
    house = {"house-model": {"input": 1, "output": 1}}
    assert [row.cost for row in store.usage.by_loop(session_id, prices=house)] == [pytest.approx(2.0)]
    assert [row.cost for row in store.usage.by_session(prices=house)] == [pytest.approx(2.0)]
    assert [row.cost for row in store.usage.by_day(prices=house)] == [pytest.approx(2.0)]
    assert [row.cost for row in store.usage.by_day()] == [None]


def test_store_prices_add_to_and_override_the_defaults(tmp_path: Path) -> None:
    prices = {
        "claude-sonnet-4-5": {"input": 10, "output": 20},
        "house-model": {"input_per_million": 1, "output_per_million": 1},
    }
    with Store(tmp_path / "priced.db", prices=prices) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        million = usage(1_000_000, 1_000_000)
        store.messages.append_turn(loop_id, 0, [assistant(u=million)])
        store.messages.append_turn(loop_id, 1, [assistant(model="house-model", u=million)])
        store.messages.append_turn(loop_id, 2, [assistant(model="gpt-5", provider="openai", u=million)])
        assert store.usage.turn(loop_id, 0).cost == pytest.approx(30.0)
        assert store.usage.turn(loop_id, 1).cost == pytest.approx(2.0)
        assert store.usage.turn(loop_id, 2).cost == pytest.approx(11.25)  # default gpt-5 price kept
        # A per-call table goes over the store's.
        assert store.usage.turn(loop_id, 1, prices={"house-model": {"input": 5}}).cost == pytest.approx(5.0)


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("claude-sonnet-4-5", SONNET_RATES),
        ("claude-sonnet-4-5-20250929", SONNET_RATES),
        ("anthropic/claude-sonnet-4.5", SONNET_RATES),
        ("claude-3-7-sonnet-latest", SONNET_RATES),
        ("claude-3-5-sonnet-20241022", SONNET_RATES),
        ("o1", rates(15, 60, 7.5, 0)),
        ("claude-opus-4-5", rates(5, 25, 0.50, 6.25)),
        ("claude-opus-4-1-20250805", rates(15, 75, 1.50, 18.75)),
        ("gpt-5", GPT5_RATES),
        ("gpt-5-mini", rates(0.25, 2, 0.025, 0)),
        ("gpt-5-mini-2025-08-07", rates(0.25, 2, 0.025, 0)),
        ("gpt-4.1", rates(2, 8, 0.50, 0)),
        ("openai/gpt-4.1-mini", rates(0.40, 1.60, 0.10, 0)),
        ("GPT-4o-Mini", rates(0.15, 0.60, 0.075, 0)),
        ("gemini-2.5-flash-preview-05-20", rates(0.15, 0.60, 0, 0)),
        ("google/gemini-2.5-pro", rates(1.25, 10, 0.125, 0)),
    ],
)
def test_price_table_lookup(model: str, expected: CostConfig) -> None:
    assert DEFAULT_PRICES.for_model(model) == expected
    assert model in DEFAULT_PRICES


@pytest.mark.parametrize("model", ["llama-3-70b", "house-model", "sonnet", "", None])
def test_price_table_unknown_model_is_none(model: str | None) -> None:
    assert DEFAULT_PRICES.for_model(model) is None
    assert model not in DEFAULT_PRICES


def test_price_table_variants_are_not_priced_as_their_base_model() -> None:
    table = PriceTable({"acme": {"input": 1}, "acme-pro": {"input": 2}, "acme-pro-max": {"input": 3}})
    assert table.for_model("acme-7b") is None
    assert table.for_model("acme-pro-2025-01-31").input_per_million == 2
    assert table.for_model("acme-pro-20250131").input_per_million == 2
    assert table.for_model("acme-pro-latest").input_per_million == 2
    assert table.for_model("acme-pro-max").input_per_million == 3
    assert table.for_model("ACME.PRO.MAX").input_per_million == 3
    assert table.for_model("acme-pro-max-v2") is None
    assert len(table) == 3


@pytest.mark.parametrize(
    ("model", "provider", "variant_of"),
    [
        ("gpt-4.1-nano", "openai", "gpt-4.1"),
        ("o3-pro", "openai", "o3"),
        ("o3-mini", "openai", "o3"),
        ("gpt-5-pro", "openai", "gpt-5"),
        ("gpt-5-mini", None, "gpt-5"),
    ],
)
def test_catalog_prices_a_variant_as_itself(model: str, provider: str | None, variant_of: str) -> None:
    own, base = DEFAULT_PRICES.for_model(model, provider), DEFAULT_PRICES.for_model(variant_of, provider)
    assert own is not None and base is not None
    assert own.input_per_million != base.input_per_million


@pytest.mark.parametrize("name", ["", "  "])
def test_price_table_refuses_an_empty_model_name(tmp_path: Path, name: str) -> None:
    """Every model name starts with the empty one: as a key it would price every model."""
    with pytest.raises(InvalidPrices, match=r"^a model name must not be empty, got '\s*'$"):
        PriceTable({name: {"input": 1}, "acme": {"input": 2}})
    with pytest.raises(InvalidPrices, match=r"^a model name must not be empty"):
        DEFAULT_PRICES.merged({name: {"input": 1}})
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({name: {"input": 1}}), encoding="utf-8")
    with pytest.raises(InvalidPrices, match=rf"^{path}: a model name must not be empty"):
        PriceTable.from_file(path)


def test_price_table_merged_overrides() -> None:
    base = PriceTable({"a": {"input": 1}, "b": {"input": 2}})
    merged = base.merged({"b": {"input": 20}, "c": {"input": 30}})
    assert [merged.for_model(m).input_per_million for m in "abc"] == [1, 20, 30]
    assert base.for_model("b").input_per_million == 2
    assert base.for_model("c") is None


def test_price_table_from_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {
                "house-model": {"input": 1, "output": 2, "cache_read": 0.5, "cache_write": 4},
                "other-model": {"input_per_million": 7, "output_per_million": 8},
            }
        ),
        encoding="utf-8",
    )
    table = PriceTable.from_file(path)
    assert table.for_model("house-model") == rates(1, 2, 0.5, 4)
    assert table.for_model("house-model-20250101") == rates(1, 2, 0.5, 4)
    assert table.for_model("house-model-v2") is None
    assert table.for_model("other-model") == rates(7, 8)
    assert table.for_model("claude-sonnet-4-5") is None

    with Store(tmp_path / "file-priced.db", prices=table) as store:
        store.sessions.create("s")
        loop_id = store.loops.start("s", config=SONNET).loop_id
        store.messages.append_turn(loop_id, 0, [assistant(model="house-model", u=usage(1_000_000, 1_000_000))])
        assert store.usage.loop(loop_id).cost == pytest.approx(3.0)


def test_price_table_from_file_rejects_a_non_object(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text("[1, 2, 3]", encoding="utf-8")
    with pytest.raises(ValueError):
        PriceTable.from_file(path)


# --- reported cost and unknown prices ------------------------------------------------------------


def test_reported_cost_is_used_when_the_model_is_unpriced(store: Store, loop_id: str) -> None:
    reported = Usage(input=100, output=10, total_tokens=110, cost=0.42)
    store.messages.append_turn(loop_id, 0, [assistant(model="house-model", provider="local", u=reported)])
    totals = store.usage.loop(loop_id)
    assert totals.cost == pytest.approx(0.42)
    assert totals.reported_cost == pytest.approx(0.42)


def test_reported_cost_wins_when_every_record_reported_one(store: Store, loop_id: str) -> None:
    # An imported session costs what its source says it cost, even for a model in the price table.
    reported = Usage(input=1_000_000, output=0, total_tokens=1_000_000, cost=99.0)
    store.messages.append_turn(loop_id, 0, [assistant(u=reported)])
    totals = store.usage.loop(loop_id)
    assert totals.cost == pytest.approx(99.0)
    assert totals.reported_cost == pytest.approx(99.0)


def test_reported_and_priced_records_of_one_model_add_up(store: Store, loop_id: str) -> None:
    # Cost is per record: the one that reported a cost costs that, the other its tokens at $3/M.
    reported = Usage(input=1_000_000, output=0, total_tokens=1_000_000, cost=99.0)
    store.messages.append_turn(loop_id, 0, [assistant(u=reported)])
    store.messages.append_turn(loop_id, 1, [assistant(u=usage(100_000, 0))])
    totals = store.usage.loop(loop_id)
    assert totals.cost == pytest.approx(99.0 + 0.3)
    assert totals.reported_cost == pytest.approx(99.0)


def test_mixed_and_unmixed_groups_are_priced_per_record_in_every_breakdown(
    store: Store, session_id: str, loop_id: str
) -> None:
    # One loop mixes a reported and an unreported record of one model; another loop has
    # only unreported records; a third only reported ones. Every breakdown adds up per record.
    reported = Usage(input=1_000_000, output=0, total_tokens=1_000_000, cost=99.0)
    store.messages.append_turn(loop_id, 0, [assistant(u=reported)])
    store.messages.append_turn(loop_id, 1, [assistant(u=usage(100_000, 0))])
    plain = store.loops.start(session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"}).loop_id
    store.messages.append_turn(plain, 0, [assistant(u=usage(200_000, 0))])
    only_reported = store.loops.start(session_id).loop_id
    store.messages.append_turn(only_reported, 0, [assistant(model="house-model", provider="local", u=reported)])

    by_loop = {row.loop_id: row.cost for row in store.usage.by_loop(session_id)}
    assert by_loop == pytest.approx({loop_id: 99.0 + 0.3, plain: 0.6, only_reported: 99.0})
    by_model = {row.model: row.cost for row in store.usage.by_model(session_id)}
    assert by_model == pytest.approx({"claude-sonnet-4-5": 99.0 + 0.3 + 0.6, "house-model": 99.0})
    assert store.usage.session(session_id).cost == pytest.approx(99.0 * 2 + 0.3 + 0.6)
    assert store.usage.turn(loop_id, 1).cost == pytest.approx(0.3)


def test_cost_is_none_when_nothing_is_priced(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(model="house-model", provider="local", u=usage(100, 10))])
    totals = store.usage.loop(loop_id)
    assert totals.cost is None
    assert totals.reported_cost is None
    assert (totals.input, totals.output, totals.requests) == (100, 10, 1)


def test_cost_covers_only_the_priced_part_of_a_mixed_total(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(model="house-model", u=usage(5_000_000, 0))])
    store.messages.append_turn(loop_id, 1, [assistant(u=usage(100_000, 0))])
    totals = store.usage.loop(loop_id)
    assert totals.input == 5_100_000
    assert totals.cost == pytest.approx(0.3)
    assert (totals.unpriced_records, totals.unpriced_tokens, totals.unpriced_models) == (1, 5_000_000, ["house-model"])


def test_zero_usage_on_a_priced_model_costs_zero(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(u=usage(0, 0))])
    totals = store.usage.loop(loop_id)
    assert (totals.cost, totals.requests, totals.cache_hit_rate) == (0.0, 1, 0.0)


@pytest.mark.parametrize(
    ("input", "cache_read", "cache_write", "rate"),
    [
        (100, 900, 0, 0.9),
        (0, 500, 0, 1.0),
        (250, 500, 250, 0.5),
        (100, 0, 0, 0.0),
        (0, 0, 0, 0.0),
    ],
)
def test_cache_hit_rate(store: Store, loop_id: str, input: int, cache_read: int, cache_write: int, rate: float) -> None:
    u = usage(input=input, output=10, cache_read=cache_read, cache_write=cache_write)
    store.messages.append_turn(loop_id, 0, [assistant(u=u)])
    assert store.usage.loop(loop_id).cache_hit_rate == pytest.approx(rate)
    assert store.usage.turn(loop_id, 0).cache_hit_rate == pytest.approx(u.cache_hit_rate())


# --- loop-level reported usage -------------------------------------------------------------------


def test_loop_reported_usage_counts_when_no_message_carries_usage(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), tool_result("x")])
    reported = usage(input=100_000, output=10_000)
    store.loops.end(loop_id, usage=reported)

    totals = store.usage.loop(loop_id)
    assert totals.usage == reported
    assert totals.requests == 1
    assert totals.cost == pytest.approx(0.3 + 0.15)
    assert store.usage.session(session_id).usage == reported
    assert store.usage.total().usage == reported
    assert [(row.loop_id, row.usage) for row in store.usage.by_loop(session_id)] == [(loop_id, reported)]
    assert [(row.session_id, row.usage) for row in store.usage.by_session()] == [(session_id, reported)]
    assert [(row.model, row.provider, row.usage) for row in store.usage.by_model()] == [
        ("claude-sonnet-4-5", "anthropic", reported)
    ]
    # Not attributed to any turn.
    assert store.usage.turn(loop_id, 0).requests == 0


def test_loop_reported_usage_of_an_empty_loop_counts(store: Store, session_id: str, loop_id: str) -> None:
    store.loops.end(loop_id, usage=usage(10, 1))
    assert store.usage.session(session_id).usage == usage(10, 1)


def test_loop_reported_usage_is_ignored_when_messages_carry_usage(store: Store, session_id: str, loop_id: str) -> None:
    own = usage(100, 10)
    store.messages.append_turn(loop_id, 0, [user(), assistant(u=own)])
    store.loops.end(loop_id, usage=usage(999_999, 99_999))
    assert store.usage.loop(loop_id).usage == own
    assert store.usage.session(session_id).usage == own
    assert store.usage.total().requests == 1
    assert [row.usage for row in store.usage.by_model()] == [own]
    assert [row.usage for row in store.usage.by_loop(session_id)] == [own]


def test_loop_reported_usage_sits_beside_other_loops_message_usage(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(u=usage(100, 10))])
    second = store.loops.start(session_id, config=GPT5).loop_id
    store.loops.end(second, usage=usage(1_000_000, 0))
    session = store.usage.session(session_id)
    assert (session.input, session.requests) == (1_000_100, 2)
    assert session.cost == pytest.approx(dollars(usage(100, 10), SONNET_RATES) + 1.25)
    assert {row.loop_id: row.input for row in store.usage.by_loop(session_id)} == {loop_id: 100, second: 1_000_000}


def test_loop_reported_cost_is_used_for_an_unpriced_loop(store: Store, session_id: str) -> None:
    loop_id = store.loops.start(session_id, config={"model": "house-model"}).loop_id
    store.loops.end(loop_id, usage=Usage(input=10, output=1, total_tokens=11, cost=0.07))
    totals = store.usage.loop(loop_id)
    assert totals.cost == pytest.approx(0.07)
    assert totals.reported_cost == pytest.approx(0.07)


# --- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.usage.turn("missing", 0),
        lambda s: s.usage.loop("missing"),
        lambda s: s.usage.by_model(loop_id="missing"),
        lambda s: s.usage.by_day(loop_id="missing"),
    ],
    ids=["turn", "loop", "by_model", "by_day"],
)
def test_unknown_loop_raises_loop_not_found(store: Store, call: Any) -> None:
    with pytest.raises(LoopNotFound):
        call(store)


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.usage.session("missing"),
        lambda s: s.usage.by_loop("missing"),
        lambda s: s.usage.by_model("missing"),
        lambda s: s.usage.by_day("missing"),
    ],
    ids=["session", "by_loop", "by_model", "by_day"],
)
def test_unknown_session_raises_session_not_found(store: Store, call: Any) -> None:
    with pytest.raises(SessionNotFound):
        call(store)


# --- property: SQL totals equal Python sums ------------------------------------------------------------

# (model, provider, price or None). house-model is priced through Store(prices=...), local-llama not at all.
MODELS = [
    ("claude-sonnet-4-5", "anthropic", SONNET_RATES),
    ("house-model", "acme", rates(0.7, 2.8, 0.07, 0.875)),
    ("local-llama", "ollama", None),
]
STORE_PRICES = {"house-model": {"input": 0.7, "output": 2.8, "cache_read": 0.07, "cache_write": 0.875}}
PRICE_OF = {(model, provider): price for model, provider, price in MODELS}
PRICING = Pricing(PriceTable(STORE_PRICES))

counts = st.one_of(st.just(0), st.integers(0, 2_000), st.integers(0, 10**12))
reported_costs = st.one_of(st.none(), st.integers(0, 10**6).map(lambda c: c / 10**4))
usages = st.builds(
    Usage,
    input=counts,
    output=counts,
    reasoning=counts,
    cache_read=counts,
    cache_write=counts,
    total_tokens=counts,
    cost=reported_costs,
)
timestamps = st.integers(0, 4_102_444_800_000)  # 1970 .. 2100
messages = st.one_of(
    st.tuples(st.just("assistant"), st.integers(0, len(MODELS) - 1), usages, timestamps),
    st.tuples(st.just("user"), timestamps),
    st.tuples(st.just("toolResult"), timestamps),
    st.tuples(st.just("extension")),
)
loops = st.fixed_dictionaries(
    {
        "model": st.integers(0, len(MODELS) - 1),
        "turns": st.lists(st.lists(messages, min_size=1, max_size=4), max_size=3),
        "reported": st.none() | usages,
        "started": st.integers(0, 4_102_444_800),
    }
)
transcripts = st.lists(st.lists(loops, max_size=3), min_size=1, max_size=3)


class Record(NamedTuple):
    """One usage record the store should count, with every key it can be grouped by."""

    session_id: str
    loop_id: str
    turn_index: int | None
    model: str
    provider: str
    usage: Usage
    day: str
    timestamp: int | None = None


def _day(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, timezone.utc).date().isoformat()


def _write(store: Store, transcript: list[list[dict[str, Any]]]) -> list[Record]:
    """Write the transcript through the API; return the usage records it holds."""
    records: list[Record] = []
    for s, session_loops in enumerate(transcript):
        session_id = f"s{s}"
        store.sessions.create(session_id)
        for n, spec in enumerate(session_loops):
            model, provider, _ = MODELS[spec["model"]]
            loop_id = f"{session_id}-loop{n}"
            started = datetime.fromtimestamp(spec["started"], timezone.utc)
            store.loops.start(
                session_id, config={"model": model, "provider": provider}, loop_id=loop_id, started_at=started
            )
            own: list[Record] = []
            for k, turn in enumerate(spec["turns"]):
                batch = []
                for item in turn:
                    if item[0] == "assistant":
                        m, p, _ = MODELS[item[1]]
                        batch.append(assistant(model=m, provider=p, u=item[2], timestamp=item[3]))
                        own.append(Record(session_id, loop_id, k, m, p, item[2], _day(item[3] / 1000), item[3]))
                    elif item[0] == "user":
                        batch.append(user(timestamp=item[1]))
                    elif item[0] == "toolResult":
                        batch.append(tool_result("call", timestamp=item[1]))
                    else:
                        batch.append(extension())
                store.messages.append_turn(loop_id, k, batch)
            if spec["reported"] is not None:
                store.loops.end(loop_id, usage=spec["reported"])
                if not own:
                    own.append(
                        Record(session_id, loop_id, None, model, provider, spec["reported"], _day(spec["started"]))
                    )
            records.extend(own)
    return records


def _expected(records: list[Record]) -> tuple[Usage, float | None, int]:
    """Tokens combined with Usage.combine, the cost and the record count, computed in Python.

    Cost, record by record, as turnstore.pricing prices one record: what the record
    reported; else its tokens at the store's or the catalog's rate for its model at its
    time; else unknown (not counted). The property is that the SQL sums add the records up.
    """
    total = reduce(Usage.combine, (r.usage for r in records), Usage(input=0, output=0))
    cost, priced = 0.0, False
    for r in records:
        u = r.usage
        value = PRICING.cost(
            r.model, r.provider, (u.input, u.output, u.cache_read, u.cache_write), r.timestamp, u.cost
        )[0]
        if value is None:
            assert PRICE_OF[r.model, r.provider] is None or u.cost is not None
            continue
        cost += value
        priced = True
    return total, (cost if priced else None), len(records)


def _close(actual: float | None, expected: float | None) -> bool:
    if actual is None or expected is None:
        return actual is expected
    return math.isclose(actual, expected, rel_tol=1e-9, abs_tol=1e-12)


def _check(totals: UsageTotals, records: list[Record], where: str) -> None:
    usage_sum, cost, requests = _expected(records)
    assert tokens(totals) == as_tuple(usage_sum), where
    assert totals.requests == requests, where
    assert _close(totals.cost, cost), (where, totals.cost, cost)
    assert _close(totals.reported_cost, usage_sum.cost), (where, totals.reported_cost, usage_sum.cost)
    assert math.isclose(totals.cache_hit_rate, usage_sum.cache_hit_rate(), rel_tol=1e-12), where


def _check_groups(rows: list[UsageRow], records: list[Record], key: Any, where: str) -> None:
    groups: dict[Any, list[Record]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(record)
    got = {key(row): row for row in rows}
    assert set(got) == set(groups), where
    assert len(rows) == len(got), where
    for name, row in got.items():
        _check(row, groups[name], f"{where} {name}")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(transcript=transcripts)
def test_sql_totals_equal_python_sums(transcript: list[list[dict[str, Any]]]) -> None:
    with tempfile.TemporaryDirectory() as directory, Store(Path(directory) / "p.db", prices=STORE_PRICES) as store:
        records = _write(store, transcript)

        _check(store.usage.total(), records, "total")
        _check_groups(store.usage.by_model(), records, lambda r: (r.model, r.provider), "by_model")
        _check_groups(store.usage.by_session(), records, lambda r: r.session_id, "by_session")
        _check_groups(store.usage.by_day(), records, lambda r: r.day, "by_day")

        for s, session_loops in enumerate(transcript):
            session_id = f"s{s}"
            mine = [r for r in records if r.session_id == session_id]
            _check(store.usage.session(session_id), mine, session_id)
            _check_groups(store.usage.by_loop(session_id), mine, lambda r: r.loop_id, f"by_loop {session_id}")
            _check_groups(store.usage.by_model(session_id), mine, lambda r: (r.model, r.provider), "by_model/s")
            _check_groups(store.usage.by_day(session_id), mine, lambda r: r.day, f"by_day {session_id}")
            for n, spec in enumerate(session_loops):
                loop_id = f"{session_id}-loop{n}"
                in_loop = [r for r in mine if r.loop_id == loop_id]
                _check(store.usage.loop(loop_id), in_loop, loop_id)
                for k in range(len(spec["turns"]) + 1):
                    in_turn = [r for r in in_loop if r.turn_index == k]
                    _check(store.usage.turn(loop_id, k), in_turn, f"{loop_id} turn {k}")


# --- run usage: loops.end(usage=..., requests=...) ----------------------------------------------------


def test_run_usage_given_only_to_end_counts_in_every_total(store: Store, session_id: str, loop_id: str) -> None:
    stamp = int(datetime(2026, 3, 1, 12, tzinfo=timezone.utc).timestamp() * 1000)
    calls = [
        Message.user("q", timestamp=stamp),
        Message.assistant("call", model="claude-sonnet-4-5", provider="anthropic", timestamp=stamp),
        Message.assistant("answer", model="claude-sonnet-4-5", provider="anthropic", timestamp=stamp),
    ]
    store.messages.append_turn(loop_id, 0, calls)
    run = usage(input=100_000, output=10_000)
    ended = store.loops.end(loop_id, usage={"input": 100_000, "output": 10_000, "total_tokens": 110_000})
    assert (ended.reported_usage, ended.reported_requests) == (run, 2)  # one request per assistant message

    for totals in (store.usage.loop(loop_id), store.usage.session(session_id), store.usage.total()):
        assert (totals.usage, totals.requests) == (run, 2)
        assert totals.cost == pytest.approx(0.3 + 0.15)
    assert [(row.model, row.usage, row.requests) for row in store.usage.by_model(session_id)] == [
        ("claude-sonnet-4-5", run, 2)
    ]
    day = store.loops.get(loop_id).started_at.astimezone(timezone.utc).strftime("%Y-%m-%d")
    assert [(row.day, row.usage, row.requests) for row in store.usage.by_day(session_id)] == [(day, run, 2)]
    assert [(row.session_id, row.requests) for row in store.usage.by_session()] == [(session_id, 2)]


def test_run_usage_requests_given_to_end_are_counted(store: Store, session_id: str, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [Message.user("q"), Message.assistant("a", model="claude-sonnet-4-5")])
    ended = store.loops.end(loop_id, usage=usage(10, 1), requests=7)
    assert ended.reported_requests == 7
    assert store.usage.session(session_id).requests == 7
    empty = store.loops.start(session_id, config=GPT5).loop_id
    assert store.loops.end(empty, usage=usage(5, 1)).reported_requests is None  # no calls recorded: counts one
    assert store.usage.session(session_id).requests == 8


def test_run_usage_is_never_counted_on_top_of_message_usage(store: Store, session_id: str, loop_id: str) -> None:
    own = usage(100, 10)
    store.messages.append_turn(loop_id, 0, [user(), assistant(u=own), assistant(u=own)])
    store.loops.end(loop_id, usage=usage(200, 20), requests=2)
    assert (store.usage.session(session_id).usage, store.usage.session(session_id).requests) == (own + own, 2)
    assert [row.usage for row in store.usage.by_day(session_id)] == [own + own]


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        pytest.param({"requests": 3}, "requests", id="requests-without-usage"),
        pytest.param({"usage": usage(1, 1), "requests": -1}, "requests", id="negative-requests"),
        pytest.param({"usage": usage(1, 1), "requests": True}, "requests", id="bool-requests"),
        pytest.param({"usage": usage(1, 1), "requests": 2**63}, "requests", id="requests-over-64-bits"),
        pytest.param({"usage": {"input": -5, "output": 0}}, "usage", id="negative-usage"),
        pytest.param({"usage": "lots"}, "usage", id="usage-not-a-dict"),
        pytest.param({"status": "finished"}, "status", id="unknown-status"),
    ],
)
def test_end_with_bad_arguments_raises_invalid_argument_and_writes_nothing(
    store: Store, loop_id: str, kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidArgument) as caught:
        store.loops.end(loop_id, **kwargs)
    assert caught.value.argument == argument and "\n" not in str(caught.value)
    loop = store.loops.get(loop_id)
    assert (loop.ended_at, loop.reported_usage, loop.reported_requests) == (None, None, None)


# --- requests reported by a source ----------------------------------------------------------------


def test_requests_are_appams_request_count(store: Store, tmp_path: Path) -> None:
    from test_import_appam import fx  # the appam fixture builder, loaded once

    store.import_("appam", fx.build(tmp_path / "sessions.db"))
    # request_count in each session's usage column (the fixture's rows); a row without one counts none
    assert [store.usage.session(s).requests for s in (fx.RICH, fx.LEGACY, fx.OLD)] == [3, 2, 0]
    assert store.loops.get(f"{fx.RICH}.appam.1").reported_requests == 3


def test_requests_are_the_openai_agents_turn_usage_requests(store: Store) -> None:
    store.import_("openai-agents", Path(__file__).parent / "fixtures" / "openai_agents" / "advanced_session.db")
    # turn_usage rows: main turn 1 made 2 requests, main turn 2 made 1, the "shorter" branch's turn 2 made 2
    assert [(row.loop_id, row.requests) for row in store.usage.by_loop("trip")] == [
        ("trip.openai-agents.1", 2),
        ("trip.openai-agents.2", 1),
        ("trip.openai-agents.3", 2),
    ]
    assert store.usage.session("trip").requests == 5
