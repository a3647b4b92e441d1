"""Importing turnstore's own lossless JSONL: round trips through export, and the line parser (docs/design.md §7)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, extension, tool_result, usage, user
from helpers import snapshot, tokens

from turnstore import Store
from turnstore.importers.base import parse_agent_message
from turnstore.importers.reading import loads_json
from turnstore.importers.turnstore import _fast_message_line
from turnstore.repositories.messages import dump_message

FIXTURES = Path(__file__).parent / "fixtures"
SMALL_TURNSTORE = FIXTURES / "turnstore" / "small.jsonl"


# --- turnstore JSONL -------------------------------------------------------------------------


def build_rich_session(store: Store, *, prelude: bool = False) -> str:
    """A session with a branch (fork_after), a compaction (keep_from, usage on the summary),
    extension messages and a sub-agent loop spawned by a tool call."""
    if prelude:  # another session first, so message ids differ from a fresh store's
        other = store.sessions.create("prelude").session_id
        loop = store.loops.start(other, config={"model": "gpt-5", "provider": "openai"})
        store.messages.append_turn(loop.loop_id, 0, [user("x"), assistant("y"), user("z")])
    sid = store.sessions.create(
        "rich", agent_id="agent-1", title="Rich session", metadata={"project": "dates", "tags": ["a", "b"]}
    ).session_id
    first = store.loops.start(
        sid, config={"model": "claude-sonnet-4-5", "provider": "anthropic", "thinking_level": "medium"}
    )
    store.messages.append_turn(
        first.loop_id,
        0,
        [
            user("fix it", 1_000),
            assistant("looking", calls=("c1",), thinking="run the test", signature="Sig+/==\u00e9xyz", timestamp=2_000),
            tool_result("c1", "1 failed", error=True, timestamp=3_000),
        ],
    )
    store.messages.append(extension("ui_notice", {"text": "tests ran"}), loop_id=first.loop_id)
    store.messages.append_turn(
        first.loop_id, 1, [assistant("fixed", u=usage(300, 40, cache_read=900), timestamp=4_000)]
    )
    store.loops.end(first.loop_id)

    second = store.loops.start(sid, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    prompt, _ = store.messages.append_turn(
        second.loop_id,
        0,
        [
            user("research it", 5_000),
            assistant(None, calls=("s1",), timestamp=6_000),
        ],
    )
    sub = store.loops.start(
        sid,
        config={"model": "gpt-5-mini", "provider": "openai"},
        continuation_kind="initial",
        spawn_loop_id=second.loop_id,
        spawn_tool_call_id="s1",
    )
    store.messages.append_turn(
        sub.loop_id,
        0,
        [
            user("sub task", 6_100),
            assistant("sub answer", model="gpt-5-mini", provider="openai", timestamp=6_200),
        ],
    )
    store.loops.end(sub.loop_id)
    store.messages.append(tool_result("s1", "sub answer", timestamp=6_300), loop_id=second.loop_id, turn_index=0)
    final = store.messages.append_turn(second.loop_id, 1, [assistant("final", timestamp=7_000)])[0]
    store.loops.end(second.loop_id)

    branch = store.loops.start(
        sid,
        config={"model": "gpt-5", "provider": "openai"},
        parent_loop_id=second.loop_id,
        continuation_kind="branch",
        fork_after=prompt,
    )
    store.messages.append_turn(
        branch.loop_id, 0, [assistant("alternative", model="gpt-5", provider="openai", timestamp=8_000)]
    )
    store.loops.end(branch.loop_id, "aborted")

    compacted = store.loops.compact(
        second.loop_id, "summary of the research", keep_from=final, tokens_before=1_234, usage=usage(500, 50)
    )
    store.messages.append_turn(compacted.loop_id, 0, [user("continue", 9_000), assistant("ok", timestamp=9_100)])
    return sid


def export_to(store: Store, session_id: str, path: Path) -> Path:
    store.export(session_id, "turnstore", path)
    return path


def position(store: Store, message_id: int | None) -> tuple[str, int] | None:
    """Where a message is: (loop, seq); ids differ between stores, places do not."""
    if message_id is None:
        return None
    stored = store.messages.get(message_id)
    return stored.loop_id, stored.seq


@pytest.fixture
def round_trip(tmp_path: Path) -> Any:
    """A rich session exported from one store (ids offset by a prelude) and imported into a fresh one."""
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        sid = build_rich_session(a, prelude=True)
        path = export_to(a, sid, tmp_path / "rich.jsonl")
        report = b.import_("turnstore", path)
        yield a, b, sid, report


def test_turnstore_round_trip_report(round_trip: Any) -> None:
    a, _b, sid, report = round_trip

    assert report.ok and report.sessions_written == [sid]
    assert report.loops == 5
    assert report.messages == len(list(a.messages.records(sid))) == 15
    assert dict(report.by_kind) == {"ui_notice": 1, "compaction_summary": 1}


def test_turnstore_round_trip_session_and_messages(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert b.sessions.get(sid) == a.sessions.get(sid)

    def rows(store: Store) -> list[Any]:
        return [(m.loop_id, m.turn_index, m.seq, m.message, m.source) for m in store.messages.records(sid)]

    assert rows(b) == rows(a)
    signature = next(m.message for m in b.messages.records(sid) if m.message.role == "assistant").content[0].signature
    assert signature == "Sig+/==\u00e9xyz"


def test_turnstore_round_trip_loops_with_fork_points_remapped(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    source_loops, imported_loops = a.loops.list(sid), b.loops.list(sid)
    assert [loop.model_dump(exclude={"fork_after", "keep_from"}) for loop in imported_loops] == [
        loop.model_dump(exclude={"fork_after", "keep_from"}) for loop in source_loops
    ]
    for old, new in zip(source_loops, imported_loops):
        assert position(b, new.fork_after) == position(a, old.fork_after)
        assert position(b, new.keep_from) == position(a, old.keep_from)
    kinds = {loop.continuation_kind.value: loop for loop in imported_loops}
    assert kinds["branch"].fork_after is not None and kinds["branch"].fork_after != next(
        loop.fork_after for loop in source_loops if loop.continuation_kind.value == "branch"
    )  # the ids really were remapped
    assert kinds["compaction"].keep_from is not None


def test_turnstore_round_trip_context(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    for loop in a.loops.list(sid):
        assert b.messages.context(loop.loop_id) == a.messages.context(loop.loop_id)


def test_turnstore_round_trip_usage_tokens(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert tokens(b.usage.session(sid)) == tokens(a.usage.session(sid))
    assert b.usage.session(sid).requests == a.usage.session(sid).requests
    assert [(row.loop_id, tokens(row)) for row in b.usage.by_loop(sid)] == [
        (row.loop_id, tokens(row)) for row in a.usage.by_loop(sid)
    ]


def test_turnstore_round_trip_usage_cost(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert b.usage.session(sid).cost == pytest.approx(a.usage.session(sid).cost)
    assert [(row.model, row.provider, row.cost) for row in b.usage.by_model(sid)] == [
        (row.model, row.provider, row.cost) for row in a.usage.by_model(sid)
    ]


def test_turnstore_round_trip_usage_by_day(round_trip: Any) -> None:
    a, b, sid, _ = round_trip

    assert [(row.day, tokens(row)) for row in b.usage.by_day(sid)] == [
        (row.day, tokens(row)) for row in a.usage.by_day(sid)
    ]


def test_turnstore_export_again_gives_identical_text(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b:
        sid = build_rich_session(a)
        first = a.export(sid, "turnstore")
        b.import_("turnstore", export_to(a, sid, tmp_path / "rich.jsonl"))

        assert b.export(sid, "turnstore") == first


def test_turnstore_second_generation_export_is_stable(tmp_path: Path) -> None:
    """Once imported, exporting and importing again reproduces the same text."""
    with Store(tmp_path / "a.db") as a, Store(tmp_path / "b.db") as b, Store(tmp_path / "c.db") as c:
        sid = build_rich_session(a)
        b.import_("turnstore", export_to(a, sid, tmp_path / "one.jsonl"))
        second = b.export(sid, "turnstore")
        c.import_("turnstore", export_to(b, sid, tmp_path / "two.jsonl"))

        assert c.export(sid, "turnstore") == second


def test_turnstore_reimport_is_unchanged(round_trip: Any, tmp_path: Path) -> None:
    _a, b, sid, _ = round_trip
    before = snapshot(b, sid)

    again = b.import_("turnstore", tmp_path / "rich.jsonl")

    assert again.sessions_unchanged == [sid] and again.sessions_written == []
    assert snapshot(b, sid) == before


def test_handwritten_turnstore_file(store: Store) -> None:
    report = store.import_("turnstore", SMALL_TURNSTORE)

    assert report.ok and report.sessions_written == ["small-session"]
    assert report.records == 6 and report.messages == 4 and report.loops == 2
    session = store.sessions.get("small-session")
    assert (session.agent_id, session.title, session.metadata) == (
        "agent-7",
        "Small handwritten session",
        {"origin": "hand"},
    )
    branch = store.loops.get("small-session.anthropic.claude-haiku-4-5.2")
    assert branch.continuation_kind.value == "branch" and branch.status.value == "aborted"
    assert position(store, branch.fork_after) == ("small-session.anthropic.claude-haiku-4-5.1", 0)
    assert [m.text() for m in store.messages.context(branch.loop_id)] == ["What is 2+2?", "Four."]
    assert tokens(store.usage.session("small-session")) == (40, 5, 0, 0, 0, 45)


def test_turnstore_bad_line_is_reported_with_file_and_line(store: Store, tmp_path: Path) -> None:
    lines = SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3][:-5]  # line 4: cut-off JSON
    bad = json.loads(lines[5])
    bad["message"]["role"] = "robot"
    lines[5] = json.dumps(bad)  # line 6: unknown role
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    report = store.import_("turnstore", path)

    assert [error.place for error in report.errors] == [f"{path}:4", f"{path}:6"]
    assert report.sessions_failed == ["small-session"]
    assert not store.sessions.exists("small-session")

    skipping = store.import_("turnstore", path, skip_invalid=True)

    assert skipping.ok and [error.place for error in skipping.skipped] == [f"{path}:4", f"{path}:6"]
    assert [str(m.message.role) for m in store.messages.records("small-session")] == ["assistant", "assistant"]


def test_turnstore_one_pass_message_lines_equal_the_general_parse(round_trip: Any, tmp_path: Path) -> None:
    # Export message lines are read in one pass of pydantic's JSON reader; what that gives must be
    # exactly what parsing the line and validating its message gives.
    lines = (tmp_path / "rich.jsonl").read_text(encoding="utf-8").splitlines()
    message_lines = [line for line in lines if line.startswith('{"type":"message",')]
    assert len(message_lines) >= 10
    for line in message_lines:
        fast = _fast_message_line(line)
        general = loads_json(line)
        assert fast is not None
        assert {key: value for key, value in fast.items() if key != "message"} == {
            key: value for key, value in general.items() if key in fast and key != "message"
        }
        expected = parse_agent_message(general["message"], "here")
        assert type(fast["message"]) is type(expected)
        assert dump_message(fast["message"]) == dump_message(expected)
        assert fast["message"].model_extra == expected.model_extra


@pytest.mark.parametrize(
    "line",
    [
        pytest.param('{"type":"loop","loop_id":"l"}', id="not-a-message-line"),
        pytest.param('{"type":"message","loop_id":"l","message":{"role":"robot"}}', id="invalid-message"),
        pytest.param('{"type":"message","loop_id":"l"}', id="no-message"),
        pytest.param('{"type":"message","loop_id":"l","message":null}', id="null-message"),
        pytest.param(
            '{"type":"message","loop_id":"l","message":{"role":"user","content":[],"timestamp":1},"type":"loop"}',
            id="repeated-type-key",
        ),
        pytest.param(
            '{"type":"message","loop_id":"l","message":{"role":"user","content":[{"type":"text",'
            '"text":"\\ud800"}],"timestamp":1}}',
            id="lone-surrogate",
        ),
        pytest.param(
            '{"type":"message","loop_id":"l","message":{"role":"user","content":[],"timestamp":1}', id="cut-off"
        ),
    ],
)
def test_turnstore_lines_the_one_pass_refuses_go_the_general_way(line: str) -> None:
    assert _fast_message_line(line) is None


def test_turnstore_compact_message_line_with_an_invalid_message_names_its_line(store: Store, tmp_path: Path) -> None:
    lines = SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()
    bad = json.loads(lines[4])
    bad["message"]["stopReason"] = "sleepy"
    lines[4] = json.dumps(bad, separators=(",", ":"))  # as an export writes it: one-pass candidate
    assert lines[4].startswith('{"type":"message",')
    path = tmp_path / "small.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    report = store.import_("turnstore", path)

    assert [error.place for error in report.errors] == [f"{path}:5"]
    assert "stopReason" in report.errors[0].reason
    assert not store.sessions.exists("small-session")


def test_turnstore_file_not_starting_with_a_session_line(store: Store, tmp_path: Path) -> None:
    path = tmp_path / "headless.jsonl"
    path.write_text("\n".join(SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()[1:]) + "\n", encoding="utf-8")

    report = store.import_("turnstore", path)

    assert not report.ok
    assert [error.place for error in report.errors] == [f"{path}:1"]
    assert store.sessions.count() == 0


@pytest.mark.parametrize("dry_run", [False, True])
def test_reimporting_the_stores_own_export_is_unchanged(store: Store, tmp_path: Path, dry_run: bool) -> None:
    session_id = store.sessions.create("own", title="written by the app", metadata={"k": [1, "é"]}).session_id
    loop_id = store.loops.start(session_id).loop_id
    store.messages.append_turn(loop_id, 0, [user("hi"), assistant("hello", u=usage(3, 2), calls=("c1",))])
    store.messages.append_turn(loop_id, 1, [tool_result("c1", "out"), extension("note", {"n": 1})])
    path = tmp_path / "own.jsonl"
    store.export(session_id, "turnstore", path)

    again = store.import_("turnstore", path, dry_run=dry_run)

    assert again.ok and again.sessions_unchanged == ["own"] and again.sessions_written == []
    store.messages.append(user("later"), loop_id=loop_id)
    changed = store.import_("turnstore", path, dry_run=dry_run)
    assert changed.sessions_failed == ["own"] and "with other content" in changed.errors[0].reason
    assert store.messages.last(session_id, 1)[0].text() == "later"


# --- an export given to another format's importer ------------------------------------------

EXPORT_READER = {"turnstore": "turnstore", "phi-core": "phi-core", "phi-core-session": "phi-core"}


@pytest.fixture
def exports(tmp_path: Path) -> dict[str, Path]:
    """One session exported in every format, each in a file named as the CLI's users name them."""
    with Store(tmp_path / "source.db") as source:
        sid = build_rich_session(source)
        files = {
            "turnstore": tmp_path / "s.jsonl",
            "phi-core": tmp_path / "s.json",
            "phi-core-session": tmp_path / "ss.json",
        }
        for fmt, path in files.items():
            source.export(sid, fmt, path)
    return files


@pytest.mark.parametrize("export_format", sorted(EXPORT_READER))
def test_an_export_given_to_another_importer_says_which_format_it_is(
    store: Any, exports: dict[str, Path], export_format: str
) -> None:
    from turnstore.importers import FORMATS

    reader = EXPORT_READER[export_format]
    for fmt in sorted(set(FORMATS) - {reader}):
        report = store.import_(fmt, exports[export_format])
        assert [str(error) for error in report.errors] == [
            f"{exports[export_format]}: this is a {export_format} export; use `turnstore import {reader}`"
        ], fmt
        assert report.records == 0 and report.sessions_written == [] and not report.ok
    assert store.sessions.list() == []
    assert store.import_(reader, exports[export_format]).ok


def test_the_cli_says_so_too(tmp_path: Path, exports: dict[str, Path]) -> None:
    from cli_runner import run_cli

    result = run_cli("--db", tmp_path / "new.db", "import", "turnstore", exports["phi-core"])
    assert result.code == 1
    assert result.err == f"  error: {exports['phi-core']}: this is a phi-core export; use `turnstore import phi-core`\n"


def test_a_file_not_told_from_its_head_goes_to_its_importer(store: Any, tmp_path: Path) -> None:
    from turnstore.importers.detect import HEAD_BYTES, export_format

    path = tmp_path / "big.json"
    path.write_text('[{"role":"user","content":"' + "x" * HEAD_BYTES + '","turnstoreSessionId":"s"}]', encoding="utf-8")
    assert export_format(path) is None
    plain = tmp_path / "plain.json"
    plain.write_text('[{"role":"user","content":"hi"}]', encoding="utf-8")
    assert export_format(plain) is None
    (error,) = store.import_("turnstore", plain).errors
    assert str(error) == f"{plain}:1: a turnstore export starts with a session line"
