"""Fuzzing the message parser and ``append`` / ``append_turn`` (docs/design.md: "bad input gets a clear, typed error").

Every case is either stored and read back equal, or rejected with a typed
turnstore error; never an unhandled exception, never a partial write:

* ``turnstore.parse_message(dict)``: a model whose stored JSON
  (``dump_message``) reads back equal, or :class:`InvalidMessage` (from the
  parse, or from the dump: a value JSON or the database cannot carry, or the
  store could not read back).
* ``AGENT_MESSAGE.validate_json(text)``: a model (as above), or pydantic's
  ``ValidationError`` for the raw adapter.
* ``store.messages.append`` / ``append_turn`` on every backend: accepted →
  ``store.messages.loop`` gives it back equal; rejected → a
  :class:`TurnstoreError` and the loop unchanged (for a turn: none of it).

Inputs come from ``fuzz_inputs``: random JSON-ish values, mutations of the
phi-core records of ``docs/wire-format.md``'s examples (and a few more shapes), and
explicit heavy cases (5,000-level nesting, the 200-level read limit, integers
beyond 2**64 and 4,300 digits, 1e308, -0.0, NaN, NUL, lone surrogates, 10 MB
strings). Case counts are printed at the end of the module (``-s``) and
written to ``fuzz-counts.txt`` in pytest's base temp directory; see
``docs/reliability.md``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_inputs import (
    BIG,
    DEEP,
    HUGE_INTS,
    INVALID_UTF8,
    encode,
    fuzz_settings,
    json_copy,
    json_values,
    keys,
    mutated_values,
    nested,
    tally,
    to_json,
    write_counts,
)
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from turnstore import InvalidMessage, TurnId, TurnstoreError, parse_message
from turnstore.models import AGENT_MESSAGE
from turnstore.repositories.messages import READ_DEPTH, dump_message
from turnstore.repositories.rows import parse_rows

LOOP = "3f1c9a2e-7b4d-4c1e-9a55-0d2f6b8e1a77.anthropic.claude-sonnet-4-5.thinking.1"

SECTION_1_5 = [
    # docs/wire-format.md's examples, verbatim.
    '{"content":[{"text":"List the files in src/","type":"text"}],"role":"user","timestamp":1767225600000,'
    '"turnId":{"loopId":"' + LOOP + '","turnIndex":0}}',
    '{"content":[{"signature":"EqQBCkYIBxgCKkC...","thinking":"I should run ls on src/.","type":"thinking"},'
    '{"text":"Let me look.","type":"text"},{"arguments":{"command":"ls src/"},"id":"toolu_01A","name":"bash",'
    '"type":"toolCall"}],"model":"claude-sonnet-4-5","provider":"anthropic","role":"assistant","stopReason":"toolUse",'
    '"timestamp":1767225601234,"turnId":{"loopId":"' + LOOP + '","turnIndex":0},"usage":{"cache_read":1024,'
    '"cache_write":0,"input":1200,"output":85,"reasoning":0,"total_tokens":2309}}',
    '{"content":[{"text":"lib.rs\\nmain.rs\\n","type":"text"}],"isError":false,"role":"toolResult",'
    '"timestamp":1767225601500,"toolCallId":"toolu_01A","toolName":"bash","turnId":{"loopId":"' + LOOP + '",'
    '"turnIndex":0}}',
    '{"role":"extension","kind":"status_update","data":{"status":"running"}}',
    '{"content":[{"text":"legacy, no turn","type":"text"}],"role":"user","timestamp":1}',
    '{"content":[],"error_message":"prompt is too long: 210000 tokens > 200000 maximum","model":"claude-sonnet-4-5",'
    '"provider":"anthropic","role":"assistant","stopReason":"error","timestamp":1767225609000,"usage":{"cache_read":0,'
    '"cache_write":0,"input":0,"output":0,"reasoning":0,"total_tokens":0}}',
]

MORE_SHAPES = [
    # The shapes turnstore adds (docs/wire-format.md) and yoagent's spellings.
    '{"role":"system","content":[{"type":"text","text":"You are terse."}],"timestamp":5}',
    '{"role":"user","content":[{"type":"image","data":"iVBORw0KGgo=","mimeType":"image/png"},'
    '{"type":"audio","data":"UklGRg==","mimeType":"audio/wav"},{"type":"file","url":"https://x/y.pdf","name":"y.pdf"}],'
    '"timestamp":6,"nodeId":7,"tags":["a"]}',
    '{"role":"toolResult","toolCallId":"c1","toolName":"read","content":[{"type":"text","text":"ok"}],"isError":true,'
    '"timestamp":8,"details":{"lines":[1,2,3],"big":18446744073709551617},"narration":"read a file"}',
    '{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"read","arguments":"{not json"}],'
    '"stopReason":"refusal","model":"m","provider":"p","usage":{"input":1,"output":2,"cacheRead":3,"cacheWrite":4,'
    '"totalTokens":10,"cost":0.25},"timestamp":9,"errorMessage":"no"}',
]

RECORDS = [json.loads(text) for text in SECTION_1_5 + MORE_SHAPES]


@pytest.fixture(scope="module", autouse=True)
def _counts(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Report how many cases each property of this module ran (printed under ``-s``; always written to a file)."""
    yield
    write_counts(("model.", "append"), tmp_path_factory.getbasetemp())


# --- the checks ---------------------------------------------------------------------------


def check_parsed(value: Any) -> str:
    """``parse_message(value)``: a model that stores and reads back equal, or InvalidMessage naming a field."""
    try:
        model = parse_message(value)
    except InvalidMessage as error:
        assert str(error) and error.errors, "an InvalidMessage names what is wrong"
        return "rejected"
    return check_stored(model)


def check_stored(model: Any) -> str:
    """The model's stored JSON reads back equal (alone, and as ``parse_rows`` reads a loop), or InvalidMessage."""
    try:
        text = dump_message(model)
    except InvalidMessage as error:
        assert str(error) and error.errors
        return "refused_on_dump"
    dumped = model.model_dump(mode="json")
    assert json.loads(text) == dumped
    assert AGENT_MESSAGE.validate_json(text).model_dump(mode="json") == dumped
    assert [m.model_dump(mode="json") for m in parse_rows([1, 2], [text, text])] == [dumped, dumped]
    return "accepted"


def check_json_text(text: str | bytes) -> str:
    """``AGENT_MESSAGE.validate_json``: a model that stores and reads back equal, or pydantic's ValidationError."""
    try:
        model = AGENT_MESSAGE.validate_json(text)
    except ValidationError:
        return "rejected"
    outcome = check_stored(model)
    return "accepted" if outcome == "accepted" else outcome


# --- strategies ---------------------------------------------------------------------------


@st.composite
def mutated_records(draw: st.DrawFn, records: list[dict[str, Any]] = RECORDS) -> Any:
    """A valid record with one to three mutations (drop, retype, swap, insert, replace)."""
    value: Any = json_copy(draw(st.sampled_from(records)))
    for _ in range(draw(st.integers(1, 3))):
        _, value = draw(mutated_values(value))
    return value


message_like = st.one_of(
    mutated_records(),
    mutated_records(),
    json_values,
    st.dictionaries(keys, json_values, max_size=6).map(lambda d: {"role": "user", **d}),
    st.builds(
        lambda role, rest: {"role": role, **rest},
        st.sampled_from(["user", "assistant", "toolResult", "system", "extension"]),
        st.dictionaries(keys, json_values, max_size=6),
    ),
)
"""What a caller could hand the parser: mostly near-valid records, some noise."""


# --- parse_message and validate_json --------------------------------------------------------


@fuzz_settings(400)
@given(value=message_like)
def test_parse_message_returns_a_storable_model_or_invalid_message(value: Any) -> None:
    tally("model.parse_message", check_parsed(value))


@fuzz_settings(300)
@given(data=st.data())
def test_validate_json_takes_mutated_text_or_raises_validation_error(data: st.DataObject) -> None:
    value = data.draw(mutated_records())
    text = to_json(value, data.draw(st.booleans()))
    how = data.draw(st.sampled_from(["as is", "truncated", "bytes", "invalid utf-8", "nul byte"]))
    payload: str | bytes = text
    if how == "truncated":
        payload = text[: data.draw(st.integers(0, max(len(text) - 1, 0)))]
    elif how == "bytes":
        payload = encode(text)
    elif how in {"invalid utf-8", "nul byte"}:
        raw = encode(text)
        at = data.draw(st.integers(0, len(raw)))
        insert = data.draw(st.sampled_from(INVALID_UTF8)) if how == "invalid utf-8" else b"\x00"
        payload = raw[:at] + insert + raw[at:]
    tally("model.validate_json", check_json_text(payload))


def with_value(where: str, value: Any) -> dict[str, Any]:
    """A valid record holding ``value`` in one spot (a JSON-valued field, an unknown key, a text, a key)."""
    if where == "arguments":
        record = json.loads(SECTION_1_5[1])
        record["content"][2]["arguments"] = {"v": value}
    elif where == "data":
        record = json.loads(SECTION_1_5[3])
        record["data"] = value
    elif where == "details":
        record = json.loads(MORE_SHAPES[2])
        record["details"] = value
    elif where == "unknown key":
        record = json.loads(SECTION_1_5[4])
        record["extra"] = value
    elif where == "text":
        record = json.loads(SECTION_1_5[4])
        record["content"][0]["text"] = value
    elif where == "kind":
        record = json.loads(SECTION_1_5[3])
        record["kind"] = value
    elif where == "model":
        record = json.loads(SECTION_1_5[5])
        record["model"] = value
    elif where == "timestamp":
        record = json.loads(SECTION_1_5[4])
        record["timestamp"] = value
    elif where == "usage.input":
        record = json.loads(SECTION_1_5[5])
        record["usage"]["input"] = value
    elif where == "usage.cost":
        record = json.loads(MORE_SHAPES[3])
        record["usage"]["cost"] = value
    elif where == "turnIndex":
        record = json.loads(SECTION_1_5[0])
        record["turnId"]["turnIndex"] = value
    else:
        raise AssertionError(where)
    return record


JSON_SPOTS = ["arguments", "data", "details", "unknown key"]
TEXT_SPOTS = ["text", "kind", "model"]
NUMBER_SPOTS = ["timestamp", "usage.input", "usage.cost", "turnIndex"]

HEAVY_CASES: list[tuple[str, str, Any]] = [
    *[(f"deep {kind} {DEEP}", spot, nested(DEEP, kind)) for spot in JSON_SPOTS for kind in ("list", "dict")],
    *[
        (f"depth {depth}", spot, nested(depth))
        for spot in ("data", "unknown key")
        for depth in range(READ_DEPTH - 6, READ_DEPTH + 4)
    ],
    *[(f"int {number.bit_length()} bits", spot, number) for spot in JSON_SPOTS + NUMBER_SPOTS for number in HUGE_INTS],
    *[
        (f"float {number!r}", spot, number)
        for spot in JSON_SPOTS + NUMBER_SPOTS
        for number in (1e308, -1e308, -0.0, 5e-324, float("nan"), float("inf"), float("-inf"))
    ],
    *[
        (f"text {name}", spot, text)
        for spot in TEXT_SPOTS + JSON_SPOTS
        for name, text in (
            ("NUL", "a\x00b"),
            ("lone surrogate", "a\ud800b"),
            ("low surrogate", "\udfff"),
            ("separators", "\u2028\u2029\x85"),
        )
    ],
    ("key NUL", "data", {"a\x00": 1}),
    ("key lone surrogate", "data", {"\ud800": 1}),
]


@pytest.mark.parametrize(
    ("case", "where", "value"), HEAVY_CASES, ids=[f"{case}@{where}" for case, where, _ in HEAVY_CASES]
)
def test_heavy_values_are_stored_whole_or_refused(case: str, where: str, value: Any) -> None:
    record = with_value(where, value)
    tally("model.heavy_cases", check_parsed(record))
    text = to_json(record)
    tally("model.heavy_cases_json", check_json_text(text))


@pytest.mark.parametrize("where", ["text", "arguments", "unknown key", "kind", "key"])
def test_ten_megabyte_strings(where: str) -> None:
    big = "x" * (BIG - 1) + "é"
    record = with_value("data", {big: 1}) if where == "key" else with_value(where, big)
    assert check_parsed(record) == "accepted"
    assert check_json_text(to_json(record, ascii_only=False)) == "accepted"
    tally("model.ten_megabytes", "accepted")


def test_nesting_at_the_read_limit_is_stored_and_one_level_more_is_refused() -> None:
    # pydantic-core reads 200 levels inside the array parse_rows wraps a loop in; the message object is one.
    fits = with_value("data", nested(READ_DEPTH - 2))
    too_deep = with_value("data", nested(READ_DEPTH - 1))
    assert check_parsed(fits) == "accepted"
    with pytest.raises(InvalidMessage, match="nested more than 200 levels") as caught:
        dump_message(parse_message(too_deep))
    assert caught.value.errors[0][0].startswith("data[0]")


def test_integers_beyond_the_readers_digit_limit_are_refused_naming_the_field() -> None:
    assert check_parsed(with_value("details", 10**4299)) == "accepted"
    with pytest.raises(InvalidMessage, match="more than 4300 digits") as caught:
        dump_message(parse_message(with_value("details", 10**4300)))
    assert caught.value.errors == [("details", "number too large")]


def test_a_lone_surrogate_is_refused_naming_the_field() -> None:
    with pytest.raises(InvalidMessage, match="lone surrogate") as caught:
        dump_message(parse_message(with_value("text", "a\ud800")))
    assert caught.value.errors == [("content[0].text", "lone surrogate")]


# --- append and append_turn, on every backend ---------------------------------------------------

APPEND_EXAMPLES = {"sqlite": 150, "sqlite-async": 40, "postgresql": 40, "postgresql-async": 25}
TURN_EXAMPLES = {"sqlite": 80, "sqlite-async": 20, "postgresql": 25, "postgresql-async": 15}


def as_loop(record: dict[str, Any], loop_id: str, turn_index: int | None = None) -> dict[str, Any]:
    """The record with its turnId naming ``loop_id`` (and ``turn_index`` when given)."""
    record = json_copy(record)
    if isinstance(record.get("turnId"), dict):
        record["turnId"]["loopId"] = loop_id
        if turn_index is not None:
            record["turnId"]["turnIndex"] = turn_index
    return record


def stored(store: Any, loop_id: str) -> list[Any]:
    return [message.model_dump(mode="json") for message in store.messages.loop(loop_id)]


def expected(value: Any, loop_id: str, turn_index: int | None, dated: Any = None) -> Any:
    """What the store should give back for an accepted ``value``: the parsed model, turn-stamped as append does
    (and, for a dict of a user, assistant or tool result without a time, dated ``dated``, as append dates it)."""
    if (
        isinstance(value, dict)
        and "timestamp" not in value
        and value.get("role") in ("user", "assistant", "toolResult")
    ):
        value = {**value, "timestamp": dated}
    model = parse_message(value)
    if turn_index is not None and model.role != "extension" and model.turn_id() is None:
        model = model.with_turn_id(TurnId(loop_id=loop_id, turn_index=turn_index))
    return model.model_dump(mode="json")


def new_loop(store: Any) -> str:
    if not store.sessions.exists("fuzz"):
        store.sessions.create("fuzz")
    loop_id = store.loops.start("fuzz").loop_id
    store.messages.append(
        {"role": "user", "content": [{"type": "text", "text": "first"}], "timestamp": 1}, loop_id=loop_id, turn_index=0
    )
    return loop_id


def test_append_stores_the_message_whole_or_refuses_it(store: Any, backend: str) -> None:
    name = f"append[{backend}]"

    @fuzz_settings(APPEND_EXAMPLES[backend])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        loop_id = new_loop(store)
        value = data.draw(st.one_of(mutated_records([as_loop(r, loop_id) for r in RECORDS]), message_like))
        turn_index = data.draw(st.sampled_from([None, None, 1, 0, 2**31 - 1, 2**31, 2**63, -1]))
        before = stored(store, loop_id)
        try:
            store.messages.append(value, loop_id=loop_id, turn_index=turn_index)
        except TurnstoreError as error:
            assert str(error)
            assert stored(store, loop_id) == before, "a refused append wrote nothing"
            tally(name, type(error).__name__)
            return
        after = stored(store, loop_id)
        assert after[:-1] == before and len(after) == len(before) + 1
        assert after[-1] == expected(value, loop_id, turn_index, after[-1].get("timestamp"))
        tally(name, "accepted")

    run()


def test_append_turn_writes_all_of_the_turn_or_none_of_it(store: Any, backend: str) -> None:
    name = f"append_turn[{backend}]"
    good = [RECORDS[0], RECORDS[1], RECORDS[2], RECORDS[3], RECORDS[4]]

    @fuzz_settings(TURN_EXAMPLES[backend])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        loop_id = new_loop(store)
        turn = data.draw(st.integers(1, 3))
        messages: list[Any] = [
            as_loop(r, loop_id, turn) for r in data.draw(st.lists(st.sampled_from(good), min_size=1, max_size=4))
        ]
        bad_at = data.draw(st.integers(0, len(messages)))  # == len: every message stays valid
        if bad_at < len(messages):
            messages[bad_at] = data.draw(st.one_of(mutated_records([messages[bad_at]]), message_like))
        before = stored(store, loop_id)
        try:
            store.messages.append_turn(loop_id, turn, messages)
        except TurnstoreError as error:
            assert str(error)
            assert stored(store, loop_id) == before, "a refused turn wrote none of its messages"
            tally(name, type(error).__name__)
            return
        after = stored(store, loop_id)
        assert after[: len(before)] == before
        written = after[len(before) :]
        assert len(written) == len(messages)
        assert written == [expected(m, loop_id, turn, got.get("timestamp")) for m, got in zip(messages, written)]
        tally(name, "accepted" if bad_at == len(messages) else "accepted_mutated")

    run()


@pytest.mark.parametrize(
    ("case", "value"),
    [
        ("deep 5000", with_value("data", nested(DEEP))),
        ("depth at the limit + 1", with_value("data", nested(READ_DEPTH - 1))),
        ("int 4301 digits", with_value("details", 10**4300)),
        ("int 2**64", with_value("unknown key", 2**64)),
        ("NaN", with_value("data", float("nan"))),
        ("Infinity in an unknown key", with_value("unknown key", float("inf"))),
        ("NUL in kind", with_value("kind", "a\x00b")),
        ("NUL in model", with_value("model", "a\x00b")),
        ("NUL in text", with_value("text", "a\x00b")),
        ("lone surrogate in text", with_value("text", "a\ud800b")),
        ("lone surrogate in a key", with_value("data", {"\udfff": 1})),
        ("turnIndex 2**31", with_value("turnIndex", 2**31)),
        ("turnIndex 2**63 - 1", with_value("turnIndex", 2**63 - 1)),
        ("10 MB text", with_value("text", "y" * BIG)),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_heavy_values_through_append(store: Any, backend: str, case: str, value: Any) -> None:
    loop_id = new_loop(store)
    value = as_loop(value, loop_id)
    before = stored(store, loop_id)
    try:
        store.messages.append(value, loop_id=loop_id)
    except TurnstoreError as error:
        assert isinstance(error, InvalidMessage), error
        assert stored(store, loop_id) == before
        tally(f"append_heavy[{backend}]", type(error).__name__)
        return
    after = stored(store, loop_id)
    assert after == [*before, expected(value, loop_id, None, after[-1].get("timestamp"))]
    tally(f"append_heavy[{backend}]", "accepted")
