"""Edge values the store accepts never break a read, and read the same on every backend.

* Usage: every token count the store accepts (``0..2**63 - 1``) sums exactly, at every
  level and in every breakdown, through the API and ``turnstore usage``, even where the
  sum passes 64 bits (SQLite's ``sum()`` fails there; PostgreSQL's returns a numeric).
* Days: a message's day is the UTC date of its timestamp, floored, from 0001-01-01 to
  9999-12-31; any other timestamp (far future, far past) has no day, shown as ``-``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any, NamedTuple

import pytest
from factories import assistant, user

from turnstore import ExtensionMessage, Store, Usage, UsageRow, UsageTotals
from turnstore.cli import main
from turnstore.models import MAX_INT

FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens")
DAY = 1_767_225_600_000  # 2026-01-01T00:00:00Z

# --- usage sums past 64 bits ----------------------------------------------------------------


class Record(NamedTuple):
    """One usage record written, with every key the store can group it by."""

    session_id: str
    loop_id: str
    turn_index: int | None
    model: str | None
    provider: str | None
    day: str | None
    tokens: tuple[int, ...]


def _huge(shift: int) -> Usage:
    """A usage whose every count is near the largest the store accepts (each one different)."""
    return Usage(**{name: MAX_INT - shift - n for n, name in enumerate(FIELDS)})


def _tokens(u: Usage) -> tuple[int, ...]:
    return tuple(getattr(u, name) for name in FIELDS)


@pytest.fixture
def huge(store: Store) -> list[Record]:
    """Two sessions whose usage records each hold counts near 2**63: message usage in several
    turns and models, a record with a reported cost, and a loop that reported its own usage."""
    records: list[Record] = []
    for s in ("a", "b"):
        store.sessions.create(f"huge-{s}")
        loop_id = store.loops.start(f"huge-{s}", loop_id=f"huge-{s}-1").loop_id
        for turn in range(2):
            replies = [
                assistant(model=model, provider=provider, u=_huge(turn + n), timestamp=DAY + turn * 86_400_000)
                for n, (model, provider) in enumerate([("claude-sonnet-4-5", "anthropic")] * 2 + [("gpt-5", "openai")])
            ]
            store.messages.append_turn(loop_id, turn, [user(), *replies])
            for reply in replies:
                day = datetime.fromtimestamp(reply.timestamp / 1000, timezone.utc).date().isoformat()
                record = Record(f"huge-{s}", loop_id, turn, reply.model, reply.provider, day, _tokens(reply.usage))
                records.append(record)
        reported = _huge(7).model_copy(update={"cost": 2.5})
        reply = assistant(model="gpt-5", provider="openai", u=reported, timestamp=DAY)
        store.messages.append_turn(loop_id, 2, [user(), reply])
        records.append(Record(f"huge-{s}", loop_id, 2, "gpt-5", "openai", "2026-01-01", _tokens(reported)))
        own = store.loops.start(f"huge-{s}", loop_id=f"huge-{s}-2", config={"model": "o3", "provider": "openai"})
        store.loops.end(own.loop_id, usage=_huge(9))
        started = own.started_at.astimezone(timezone.utc).date().isoformat()
        records.append(Record(f"huge-{s}", own.loop_id, None, "o3", "openai", started, _tokens(_huge(9))))
    return records


def _sum(records: list[Record]) -> tuple[int, ...]:
    return tuple(sum(record.tokens[n] for record in records) for n in range(len(FIELDS)))


def _check(totals: UsageTotals, records: list[Record]) -> None:
    assert tuple(getattr(totals, name) for name in FIELDS) == _sum(records)
    assert _tokens(totals.usage) == _sum(records)
    assert totals.requests == len(records)
    assert totals.cost is not None and totals.cost > 0


def _check_groups(rows: list[UsageRow], records: list[Record], key: Callable[[Any], Any]) -> None:
    groups: dict[Any, list[Record]] = defaultdict(list)
    for record in records:
        groups[key(record)].append(record)
    assert sorted(groups, key=str) == sorted((key(row) for row in rows), key=str)
    for row in rows:
        _check(row, groups[key(row)])


def test_turn_usage_past_64_bits_is_exact(store: Store, huge: list[Record]) -> None:
    for turn in range(3):
        records = [r for r in huge if r.loop_id == "huge-a-1" and r.turn_index == turn]
        _check(store.usage.turn("huge-a-1", turn), records)


def test_loop_usage_past_64_bits_is_exact(store: Store, huge: list[Record]) -> None:
    for loop_id in ("huge-a-1", "huge-a-2", "huge-b-1"):
        _check(store.usage.loop(loop_id), [r for r in huge if r.loop_id == loop_id])


def test_session_and_store_usage_past_64_bits_is_exact(store: Store, huge: list[Record]) -> None:
    _check(store.usage.session("huge-b"), [r for r in huge if r.session_id == "huge-b"])
    _check(store.usage.total(), huge)


def test_breakdowns_past_64_bits_are_exact(store: Store, huge: list[Record]) -> None:
    _check_groups(store.usage.by_model(), huge, lambda r: (r.model, r.provider))
    session_records = [r for r in huge if r.session_id == "huge-a"]
    _check_groups(store.usage.by_model("huge-a"), session_records, lambda r: (r.model, r.provider))
    loop_records = [r for r in huge if r.loop_id == "huge-b-1"]
    _check_groups(store.usage.by_model(loop_id="huge-b-1"), loop_records, lambda r: (r.model, r.provider))
    _check_groups(store.usage.by_loop("huge-a"), session_records, lambda r: r.loop_id)
    _check_groups(store.usage.by_session(), huge, lambda r: r.session_id)
    _check_groups(store.usage.by_day(), huge, lambda r: r.day)
    _check_groups(store.usage.by_day("huge-a"), session_records, lambda r: r.day)


def test_a_total_of_exactly_the_largest_count_is_exact(store: Store, loop_id: str) -> None:
    store.messages.append_turn(loop_id, 0, [user(), assistant(u=Usage(input=MAX_INT - 1, output=0))])
    store.messages.append_turn(loop_id, 1, [user(), assistant(u=Usage(input=1, output=0))])
    assert store.usage.loop(loop_id).input == MAX_INT
    store.messages.append_turn(loop_id, 2, [user(), assistant(u=Usage(input=1, output=0))])
    assert store.usage.loop(loop_id).input == MAX_INT + 1


def test_a_derived_token_total_past_64_bits_is_exact(
    store: Store, session_id: str, loop_id: str, capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    """A record that reports no total counts input + output + cache read + cache write, which for one
    record of counts near ``2**63`` passes 64 bits (each column's own sum does not): still exact."""
    derived = Usage(input=MAX_INT, output=MAX_INT - 1, cache_read=MAX_INT - 2, cache_write=MAX_INT - 3)
    store.messages.append_turn(loop_id, 0, [user(), assistant(u=derived)])
    store.messages.append_turn(loop_id, 1, [user(), assistant(u=Usage(input=1, output=1, total_tokens=5))])
    own = store.loops.start(session_id, config={"model": "o3", "provider": "openai"}).loop_id
    store.loops.end(own, usage=derived)
    one = 4 * MAX_INT - 6
    assert derived.total == one
    assert store.usage.turn(loop_id, 0).total_tokens == one
    assert store.usage.loop(loop_id).total_tokens == one + 5
    assert store.usage.loop(own).total_tokens == one
    for totals in (store.usage.session(session_id), store.usage.total()):
        assert totals.total_tokens == 2 * one + 5
        assert totals.input == 2 * MAX_INT + 1
    assert sorted(row.total_tokens for row in store.usage.by_model()) == sorted([one + 5, one])
    assert [row.total_tokens for row in store.usage.by_loop(session_id)] == [one + 5, one]
    assert json.loads(_cli(capsys, store_url, "usage", "--json"))["total_tokens"] == 2 * one + 5


def test_reported_costs_past_the_largest_float_do_not_break_a_read(
    store: Store, session_id: str, loop_id: str, capsys: pytest.CaptureFixture[str], store_url: str
) -> None:
    """Each cost is a finite float; a sum past the largest one reads as infinity, on every backend."""
    for turn in range(2):
        store.messages.append_turn(loop_id, turn, [user(), assistant(u=Usage(input=1, output=1, cost=1e308))])
    own = store.loops.start(session_id, config={"model": "o3", "provider": "openai"}).loop_id
    store.loops.end(own, usage=Usage(input=1, output=1, cost=1e308))
    [replies] = [row for row in store.usage.by_day() if row.day == "1970-01-01"]
    for totals in (store.usage.total(), store.usage.session(session_id), store.usage.loop(loop_id), replies):
        assert (totals.cost, totals.reported_cost) == (math.inf, math.inf)
    assert store.usage.turn(loop_id, 0).cost == 1e308
    assert [row.cost for row in store.usage.by_loop(session_id)] == [math.inf, 1e308]
    assert "too large" in _cli(capsys, store_url, "usage")  # the table; --json refuses it in one line


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> str:
    capsys.readouterr()
    code = main(["--db", url, *args])
    captured = capsys.readouterr()
    assert (code, captured.err) == (0, "")
    return captured.out


def test_cli_usage_past_64_bits_is_exact(
    store: Store, store_url: str, huge: list[Record], capsys: pytest.CaptureFixture[str]
) -> None:
    totals = json.loads(_cli(capsys, store_url, "usage", "--json"))
    assert tuple(totals[name] for name in FIELDS) == _sum(huge)
    by_model = json.loads(_cli(capsys, store_url, "usage", "--by", "model", "--json"))
    assert sorted((row["model"], row["input"]) for row in by_model) == sorted(
        (model, sum(r.tokens[0] for r in huge if r.model == model)) for model in {r.model for r in huge}
    )
    for group in ("day", "session"):
        rows = json.loads(_cli(capsys, store_url, "usage", "--by", group, "--json"))
        assert sum(row["output"] for row in rows) == _sum(huge)[1]
    table = _cli(capsys, store_url, "usage")  # a cell too wide for the table is cut short, never an error
    assert f"{_sum(huge)[0]:,}"[:20] in table


# --- the day of a timestamp -----------------------------------------------------------------

FIRST_DAY_MS = -62_135_596_800_000  # 0001-01-01T00:00:00Z
LAST_DAY_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z

STAMPS = [
    0,
    1,
    -1,
    -999,
    -1_000,
    -1_001,
    -86_400_000,
    -86_400_001,
    DAY - 1,
    FIRST_DAY_MS,
    FIRST_DAY_MS + 1,
    FIRST_DAY_MS - 1,
    LAST_DAY_MS,
    LAST_DAY_MS + 1,
    10**16,
    MAX_INT,
    -(10**16),
    -MAX_INT - 1,
]


def _day_of(stamp: int) -> str | None:
    """The UTC day of unix milliseconds, by Python's calendar; None where it has no four-digit year."""
    try:
        return (datetime(1970, 1, 1) + timedelta(milliseconds=stamp)).date().isoformat()
    except OverflowError:
        return None


def _append_at(store: Store, loop_id: str, turn: int, stamp: int, u: Usage) -> None:
    """A usage record dated ``stamp``: an assistant reply, or (a message timestamp is never
    negative) an extension message carrying usage, dated by the caller."""
    if stamp >= 0:
        store.messages.append_turn(loop_id, turn, [user(timestamp=stamp), assistant(u=u, timestamp=stamp)])
    else:
        store.messages.append(
            ExtensionMessage(kind="summary", data={}),
            loop_id=loop_id,
            turn_index=turn,
            usage=u,
            model="claude-sonnet-4-5",
            provider="anthropic",
            timestamp=stamp,
        )


def test_the_python_calendar_agrees_with_the_rule() -> None:
    assert [_day_of(s) for s in (0, -1, FIRST_DAY_MS, FIRST_DAY_MS - 1, LAST_DAY_MS, LAST_DAY_MS + 1)] == [
        "1970-01-01",
        "1969-12-31",
        "0001-01-01",
        None,
        "9999-12-31",
        None,
    ]


@pytest.mark.parametrize("stamp", STAMPS)
def test_usage_by_day_files_every_timestamp_by_the_same_rule(
    store: Store, session_id: str, loop_id: str, stamp: int
) -> None:
    _append_at(store, loop_id, 0, DAY, Usage(input=1, output=1))
    _append_at(store, loop_id, 1, stamp, Usage(input=10, output=20))
    expected: dict[str | None, int] = defaultdict(int)
    expected["2026-01-01"] += 1
    expected[_day_of(stamp)] += 10
    for rows in (store.usage.by_day(), store.usage.by_day(session_id), store.usage.by_day(loop_id=loop_id)):
        assert {row.day: row.input for row in rows} == expected
    assert store.usage.total().input == 11


def test_days_out_of_range_do_not_break_a_read(
    store: Store, store_url: str, loop_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    for turn, stamp in enumerate([DAY, MAX_INT, LAST_DAY_MS + 1, FIRST_DAY_MS - 1, -MAX_INT - 1]):
        _append_at(store, loop_id, turn, stamp, Usage(input=1, output=1))
    rows = json.loads(_cli(capsys, store_url, "usage", "--by", "day", "--json"))
    assert sorted((row.get("day", "-"), row["input"]) for row in rows) == [("-", 4), ("2026-01-01", 1)]
    table = _cli(capsys, store_url, "usage", "--by", "day")
    assert "2026-01-01" in table and "\n│ -" in table


def test_an_extension_message_dated_zero_is_dated_zero(store: Store, loop_id: str) -> None:
    """0 is a time like any other (1970-01-01), not a missing one: only None means "now"."""
    store.messages.append(
        ExtensionMessage(kind="summary", data={}),
        loop_id=loop_id,
        usage=Usage(input=3, output=1),
        model="claude-sonnet-4-5",
        provider="anthropic",
        timestamp=0,
    )
    assert [(row.day, row.input) for row in store.usage.by_day()] == [("1970-01-01", 3)]
