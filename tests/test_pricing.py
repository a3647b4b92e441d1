"""Cost fixed per usage record when it is written: catalog matching, tiers, dates, overrides, unpriced totals.

Each record is priced once, on write (append, import, loops.end), from its
reported cost, an override, or the genai-prices catalog at its timestamp and
tier; totals are SQL sums of the stored costs and say what they leave unpriced.
"""

from __future__ import annotations

import shutil
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from cli_runner import run_cli
from factories import assistant, usage, user
from genai_prices import data_snapshot
from genai_prices.types import StartDateConstraint

from turnstore import Store, migrate
from turnstore.engine import create_engine
from turnstore.pricing import CATALOG_VERSION, Pricing

SCHEMA_FIXTURES = Path(__file__).parent / "fixtures" / "schema"
JAN_2026 = int(datetime(2026, 1, 15, tzinfo=timezone.utc).timestamp() * 1000)


def _priced(store: Any, loop_id: str, turn: int) -> tuple[Any, ...]:
    """(priced_cost, cost_source, price_version) of a turn's assistant row, read from the table."""
    (row,) = store._db.fetchall(
        sa.text(
            "SELECT priced_cost, cost_source, price_version FROM messages "
            "WHERE loop_id = :loop AND turn_index = :turn AND input_tokens IS NOT NULL"
        ),
        {"loop": loop_id, "turn": turn},
    )
    return tuple(row)


# --- catalog matching -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "provider", "expected"),
    [
        # 100k in / 10k out: a variant at its own price, not its base model's.
        ("gpt-4.1-nano", "openai", 100_000 * 0.10 / 1e6 + 10_000 * 0.40 / 1e6),
        ("gpt-4.1", "openai", 100_000 * 2 / 1e6 + 10_000 * 8 / 1e6),
        ("o3-pro", "openai", 100_000 * 20 / 1e6 + 10_000 * 80 / 1e6),
        # Dated and provider-prefixed names the catalog knows.
        ("claude-3-5-sonnet-20241022", "anthropic", 0.3 + 0.15),
        ("claude-3-7-sonnet-latest", "anthropic", 0.3 + 0.15),
        ("anthropic/claude-sonnet-4.5", "", 0.3 + 0.15),
    ],
)
def test_a_record_is_priced_on_write_by_the_catalog(
    store: Any, session_id: str, model: str, provider: str, expected: float
) -> None:
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(
        loop_id, 0, [assistant(model=model, provider=provider, u=usage(100_000, 10_000), timestamp=JAN_2026)]
    )
    assert store.usage.loop(loop_id).cost == pytest.approx(expected)
    cost, source, version = _priced(store, loop_id, 0)
    assert (cost, source, version) == (pytest.approx(expected), "catalog", CATALOG_VERSION)


def test_a_mixed_session_is_three_times_what_the_old_table_said(store: Any, session_id: str) -> None:
    # gpt-5 and claude-3-7-sonnet-latest, 100k in / 10k out each: $0.225 + $0.45, all priced.
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(loop_id, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 10_000))])
    store.messages.append_turn(
        loop_id, 1, [assistant(model="claude-3-7-sonnet-latest", provider="anthropic", u=usage(100_000, 10_000))]
    )
    totals = store.usage.session(session_id)
    assert totals.cost == pytest.approx(0.675)
    assert (totals.unpriced_records, totals.unpriced_tokens, totals.unpriced_models) == (0, 0, [])


# --- tiers and dates ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("input", "cache_read", "rates"),
    [
        (200_000, 0, (3, 15)),  # at the threshold: the base rates
        (200_001, 0, (6, 22.5)),  # over it: every token at the higher rate
        (150_000, 50_001, (6, 22.5)),  # the prompt counts cached tokens too
    ],
)
def test_a_tiered_request_is_priced_at_its_own_tier(
    store: Any, loop_id: str, input: int, cache_read: int, rates: tuple[float, float]
) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(u=usage(input, 1_000, cache_read=cache_read))])
    store.messages.append_turn(loop_id, 1, [assistant(u=usage(1_000, 1_000))])  # a small one beside it
    read_rate = rates[0] / 10
    expected = (input * rates[0] + 1_000 * rates[1] + cache_read * read_rate) / 1e6
    assert store.usage.turn(loop_id, 0).cost == pytest.approx(expected)
    assert store.usage.turn(loop_id, 1).cost == pytest.approx((1_000 * 3 + 1_000 * 15) / 1e6)
    # Additive: the loop is the sum of its records, not its token sums at one tier.
    assert store.usage.loop(loop_id).cost == pytest.approx(expected + 0.018)


def _base(rate: Any) -> Any:
    return getattr(rate, "base", rate)


def _dated_price_change() -> tuple[str, str, date]:
    """A catalog model whose input price changes on a date: (model, provider, the date)."""
    for provider in data_snapshot.get_snapshot().providers:
        for model in provider.models:
            if not isinstance(model.prices, list):
                continue
            for earlier, later in zip(model.prices, model.prices[1:]):
                if isinstance(later.constraint, StartDateConstraint) and (
                    _base(earlier.prices.input_mtok) != _base(later.prices.input_mtok)
                ):
                    return model.id, provider.id, later.constraint.start_date
    pytest.skip("the installed price data has no dated price change")


def test_a_price_change_between_two_dates(store: Any, loop_id: str) -> None:
    model, provider, changed = _dated_price_change()
    noon = datetime(changed.year, changed.month, changed.day, 12, tzinfo=timezone.utc)
    before, after = (int((noon + timedelta(days=days)).timestamp() * 1000) for days in (-1, 0))
    u = usage(1_000, 0)
    store.messages.append_turn(loop_id, 0, [assistant(model=model, provider=provider, u=u, timestamp=before)])
    store.messages.append_turn(loop_id, 1, [assistant(model=model, provider=provider, u=u, timestamp=after)])
    pricing = Pricing()
    old = pricing.cost(model, provider, (1_000, 0, 0, 0), before)[0]
    new = pricing.cost(model, provider, (1_000, 0, 0, 0), after)[0]
    assert old is not None and new is not None and old != new
    assert store.usage.turn(loop_id, 0).cost == pytest.approx(old)
    assert store.usage.turn(loop_id, 1).cost == pytest.approx(new)
    assert store.usage.loop(loop_id).cost == pytest.approx(old + new)


# --- unpriced is never silent ---------------------------------------------------------------------


def _mixed(store: Any) -> str:
    """A session of gpt-5 (priced) and an unknown model, 100k in / 10k out each."""
    session_id = store.sessions.create("mixed").session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(
        loop_id, 0, [user(), assistant(model="gpt-5", provider="openai", u=usage(100_000, 10_000))]
    )
    store.messages.append_turn(
        loop_id, 1, [user(), assistant(model="house-model-x", provider="acme", u=usage(100_000, 10_000))]
    )
    return session_id


def test_an_unknown_model_in_a_mixed_session_is_counted_in_every_total(store: Any) -> None:
    session_id = _mixed(store)
    for totals in (store.usage.session(session_id), store.usage.total(), *store.usage.by_session()):
        assert totals.cost == pytest.approx(0.225)
        assert (totals.unpriced_records, totals.unpriced_tokens) == (1, 110_000)
        assert totals.unpriced_models == ["house-model-x"]
    by_model = store.usage.by_model(session_id)
    assert [row.model for row in by_model] == ["house-model-x", "gpt-5"]  # the unpriced first
    assert (by_model[0].cost, by_model[0].unpriced_records) == (None, 1)
    assert store.usage.session(session_id).unpriced_note() == "110,000 tokens unpriced (house-model-x)"


def test_the_cli_prints_and_the_json_carries_what_is_unpriced(tmp_path: Path) -> None:
    path = tmp_path / "mixed.db"
    with Store(path) as store:
        session_id = _mixed(store)
    table = run_cli("--db", path, "usage", "--session", session_id)
    assert table.code == 0, table.err
    assert "$0.2250 + 110,000 tokens unpriced (house-model-x)" in table.out
    data = run_cli("--db", path, "usage", "--json").json()
    assert (data["cost"], data["unpriced_records"], data["unpriced_tokens"], data["unpriced_models"]) == (
        pytest.approx(0.225),
        1,
        110_000,
        ["house-model-x"],
    )
    rows = run_cli("--db", path, "usage", "--by", "model", "--json").json()
    assert [row["model"] for row in rows] == ["house-model-x", "gpt-5"]


def test_the_viewer_marks_unpriced_totals_and_charts(tmp_path: Path) -> None:
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from starlette.testclient import TestClient

    from turnstore.web import create_app

    path = tmp_path / "mixed.db"
    with Store(path) as store:
        session_id = _mixed(store)
    with Store(path, read_only=True) as read_only:
        client = TestClient(create_app(read_only))
        spend = client.get("/spend").text
        sessions = client.get("/").text
        session = client.get("/session", params={"id": session_id}).text
    note = "$0.2250 + 110,000 tokens unpriced (house-model-x)"
    assert note in spend and note in sessions and note in session
    assert "Cost by model (USD); 110,000 tokens unpriced, not in the bars" in spend
    assert "house-model-x (acme) (+110,000 tokens unpriced)" in spend


# --- overrides for the process ------------------------------------------------------------------------


def test_store_prices_win_over_the_catalog_and_are_stored_as_override(tmp_path: Path) -> None:
    with Store(tmp_path / "p.db", prices={"gpt-5": {"input": 10, "output": 10}}) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        store.messages.append_turn(loop_id, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0))])
        assert store.usage.loop(loop_id).cost == pytest.approx(1.0)
        assert _priced(store, loop_id, 0) == (pytest.approx(1.0), "override", None)


def test_a_reported_cost_is_stored_as_reported(store: Any, loop_id: str) -> None:
    reported = usage(100_000, 0).model_copy(update={"cost": 7.5})
    store.messages.append_turn(loop_id, 0, [assistant(u=reported)])
    assert _priced(store, loop_id, 0) == (7.5, "reported", None)
    assert store.usage.loop(loop_id).reported_cost == 7.5


# --- migration 0010 ---------------------------------------------------------------------------


def test_0010_prices_a_store_written_by_the_previous_release_and_downgrades_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(SCHEMA_FIXTURES / "0004.db", path)
    engine = create_engine(str(path))
    try:
        migrate.upgrade(engine, "0009")
        with engine.begin() as connection:
            before = connection.exec_driver_sql(
                "SELECT id, cost FROM messages WHERE input_tokens IS NOT NULL ORDER BY id"
            ).fetchall()
            assert before
        migrate.upgrade(engine)
        with engine.begin() as connection:
            rows = connection.exec_driver_sql(
                "SELECT id, cost, priced_cost, cost_source, price_version, model FROM messages "
                "WHERE input_tokens IS NOT NULL ORDER BY id"
            ).fetchall()
        assert [(row[0], row[1]) for row in rows] == before  # the reported costs are as they were
        for _id, cost, priced, source, version, model in rows:
            if cost is not None:
                assert (priced, source, version) == (cost, "reported", None)
            else:
                assert source == "catalog" and priced is not None and version == CATALOG_VERSION, model
        assert migrate.check(engine) == []

        migrate.downgrade(engine, "0009")
        columns = {column["name"] for column in sa.inspect(engine).get_columns("messages")}
        assert {"priced_cost", "cost_source", "price_version"}.isdisjoint(columns)
        assert "ix_messages_cost" in {index["name"] for index in sa.inspect(engine).get_indexes("messages")}
        with engine.begin() as connection:
            assert (
                connection.exec_driver_sql(
                    "SELECT id, cost FROM messages WHERE input_tokens IS NOT NULL ORDER BY id"
                ).fetchall()
                == before
            )
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with Store(path, auto_upgrade=False) as store:
        assert store.usage.total().cost is not None
        assert store.usage.total().unpriced_records == 0


def test_0010_on_postgresql_up_and_down(postgres: Any) -> None:
    url = postgres.new_database()
    with Store(url) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        store.messages.append_turn(loop_id, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0))])
    engine = create_engine(url)
    try:
        migrate.downgrade(engine, "0009")
        assert "cost_source" not in {column["name"] for column in sa.inspect(engine).get_columns("messages")}
        migrate.upgrade(engine)
        assert migrate.check(engine) == []
    finally:
        engine.dispose()
    with Store(url, auto_upgrade=False) as store:
        assert store.usage.loop(loop_id).cost == pytest.approx(0.125)


# --- reprice ----------------------------------------------------------------------------------------


def test_reprice_after_an_override_changes_only_what_it_covers(store_url: str, backend: str) -> None:
    if backend.endswith("async"):
        pytest.skip("the sync API is enough: the async one is generated from it")
    with Store(store_url) as store:
        first = store.sessions.create("first").session_id
        second = store.sessions.create("second").session_id
        one = store.loops.start(first).loop_id
        two = store.loops.start(second, config={"model": "gpt-5", "provider": "openai"}).loop_id
        reported = usage(100_000, 0).model_copy(update={"cost": 9.0})
        store.messages.append_turn(one, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0))])
        store.messages.append_turn(one, 1, [assistant(model="gpt-5", provider="openai", u=reported)])
        store.messages.append_turn(one, 2, [assistant(model="house-model", provider="acme", u=usage(100_000, 0))])
        store.messages.append_turn(two, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0))])
        store.loops.end(two, usage=usage(0, 0))  # a loop's reported usage (not counted: its messages carry usage)
        assert store.usage.session(first).cost == pytest.approx(0.125 + 9.0)
    prices = {"gpt-5": {"input": 10}, "house-model": {"input": 1}}
    with Store(store_url, prices=prices) as store:
        assert store.usage.reprice(first, model="gpt-5") == 1  # the reported one is kept
        assert store.usage.session(first).cost == pytest.approx(1.0 + 9.0)
        assert store.usage.session(first).unpriced_models == ["house-model"]
        assert store.usage.session(second).cost == pytest.approx(0.125)  # another session: untouched
        assert store.usage.reprice() == 3  # house-model (now priced), second's gpt-5, second's loop usage
        assert store.usage.session(first).cost == pytest.approx(1.0 + 9.0 + 0.1)
        assert store.usage.session(second).cost == pytest.approx(1.0)
        assert store.usage.reprice() == 0  # nothing left to change
    with Store(store_url) as store:  # without the overrides: back to the catalog, and unpriced
        # The messages are dated 1970 (their timestamps); the loop's usage by its end, now.
        assert store.usage.reprice(since=datetime(2000, 1, 1, tzinfo=timezone.utc)) == 1
        assert store.usage.reprice() == 3
        assert store.usage.session(first).cost == pytest.approx(0.125 + 9.0)
        assert store.usage.session(first).unpriced_records == 1


def test_turnstore_reprice_restores_catalog_prices(tmp_path: Path) -> None:
    path = tmp_path / "r.db"
    with Store(path) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        store.messages.append_turn(loop_id, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0))])
        with store._db.write():  # as if priced by older price data
            store._db.execute(sa.text("UPDATE messages SET priced_cost = 5, price_version = 'old'"))
        assert store.usage.loop(loop_id).cost == 5
    result = run_cli("--db", path, "reprice", "--model", "gpt-5")
    assert (result.code, result.out) == (0, "repriced 1 usage records\n"), result.err
    with Store(path) as store:
        assert store.usage.loop(loop_id).cost == pytest.approx(0.125)
    assert run_cli("--db", path, "reprice", "--json").json() == {"repriced": 0}


# --- overrides saved in the store -----------------------------------------------------------------


def test_a_saved_price_is_used_by_usage_and_serve_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "saved.db"
    with Store(path) as store:
        loop_id = store.loops.start(store.sessions.create("s").session_id).loop_id
        store.messages.append_turn(loop_id, 0, [assistant(model="house-model", provider="acme", u=usage(100_000, 0))])
        assert store.usage.loop(loop_id).cost is None
    # Another process saves a price: the stored record is repriced.
    result = run_cli("--db", path, "prices", "set", "house-model", "--input", "2")
    assert (result.code, result.out) == (0, "saved; repriced 1 usage records\n"), result.err
    assert run_cli("--db", path, "usage", "--json").json()["cost"] == pytest.approx(0.2)
    listed = run_cli("--db", path, "prices", "list", "--json").json()
    assert [(p["model"], p["provider"], p["since"], p["input"]) for p in listed] == [("house-model", None, None, 2.0)]
    # A third process writes with it; the viewer shows it.
    with Store(path) as store:
        store.messages.append_turn(loop_id, 1, [assistant(model="house-model", provider="acme", u=usage(100_000, 0))])
        assert _priced(store, loop_id, 1) == (pytest.approx(0.2), "override", None)
    pytest.importorskip("starlette", reason="the serve extra is not installed")
    from starlette.testclient import TestClient

    from turnstore.web import create_app

    with Store(path, read_only=True) as read_only:
        assert "$0.4000" in TestClient(create_app(read_only)).get("/spend").text
    deleted = run_cli("--db", path, "prices", "delete", "house-model")
    assert (deleted.code, deleted.out) == (0, "deleted; repriced 2 usage records\n"), deleted.err
    assert run_cli("--db", path, "usage", "--json").json()["unpriced_records"] == 2


def test_a_saved_price_since_a_date_covers_the_records_from_then_on(store: Any, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0))])
    store.messages.append_turn(
        loop_id, 1, [assistant(model="gpt-5", provider="openai", u=usage(100_000, 0), timestamp=JAN_2026)]
    )
    repriced = store.prices.set("gpt-5", "openai", input=10, since=datetime(2025, 1, 1, tzinfo=timezone.utc))
    assert repriced == 1
    assert store.usage.turn(loop_id, 0).cost == pytest.approx(0.125)  # 1970: the catalog's price
    assert store.usage.turn(loop_id, 1).cost == pytest.approx(1.0)
    (saved,) = store.prices.list()
    assert (saved.model, saved.provider, saved.since) == ("gpt-5", "openai", datetime(2025, 1, 1, tzinfo=timezone.utc))


@pytest.mark.parametrize(
    ("rates", "words"),
    [
        ({"input": -1.0}, "input is -1.0"),
        ({"output": float("nan")}, "output is nan"),
        ({"cache_read": float("inf")}, "cache_read is inf"),
        ({"cache_write": 1e12}, "not a price from 0 to 1,000,000"),
    ],
)
def test_a_bad_rate_is_refused_and_nothing_changes(store: Any, rates: dict[str, float], words: str) -> None:
    from turnstore import InvalidPrices

    with pytest.raises(InvalidPrices, match=words):
        store.prices.set("gpt-5", **rates)
    assert store.prices.list() == []


def test_a_model_name_of_megabytes_is_refused(store: Any) -> None:
    from turnstore import InvalidPrices

    with pytest.raises(InvalidPrices) as raised:
        store.prices.set("m" * 2_000_000, input=1)
    assert len(str(raised.value)) < 200 and "\n" not in str(raised.value)
    assert store.prices.list() == []


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"house-model": {"input": -3}}', "input is -3"),
        ('{"house-model": {"input": 1, "colour": 2}}', "unknown rate 'colour'"),
        ('{"house-model": {"input": 1e400}}', "input is inf"),
    ],
)
def test_a_bad_price_file_is_refused_in_one_line_and_nothing_changes(tmp_path: Path, content: str, words: str) -> None:
    path, prices = tmp_path / "p.db", tmp_path / "prices.json"
    prices.write_text('{"ok-model": {"input": 1}, ' + content[1:], encoding="utf-8")
    with Store(path):
        pass
    result = run_cli("--db", path, "prices", "import", prices)
    assert result.code == 1 and result.out == "" and len(result.err.splitlines()) == 1, result
    assert words in result.err and "prices.json" in result.err
    assert run_cli("--db", path, "prices", "list", "--json").json() == []


def test_prices_set_on_the_command_line_refuses_nan(tmp_path: Path) -> None:
    path = tmp_path / "p.db"
    with Store(path):
        pass
    result = run_cli("--db", path, "prices", "set", "gpt-5", "--input", "nan")
    assert result.code == 1 and result.out == "" and len(result.err.splitlines()) == 1, result
    assert "input is nan" in result.err
    assert run_cli("--db", path, "prices", "list", "--json").json() == []
