"""``turnstore search``: a table of hits with highlighted snippets, JSON lines with ``--json``, filters, errors;
and ``turnstore show`` taking a hit to its turn. Stored text is hostile: nothing a terminal acts on comes out raw."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_runner import assert_one_error_line, raw_unsafe, run_cli
from factories import assistant, tool_result, user
from helpers import SONNET
from test_cli_escaping import ATTACK, BIDI, CLEAR, LINK

from turnstore import Store, TextContent, UserMessage


@pytest.fixture
def db(tmp_path: Path) -> dict[str, Any]:
    """A store with two sessions; one message carries terminal escapes, bidi controls and rich markup."""
    path = tmp_path / "search.db"
    with Store(path) as store:
        first = store.sessions.create(title="first").session_id
        loop = store.loops.start(first, config=SONNET).loop_id
        store.messages.append_turn(
            loop,
            0,
            [
                user("the deploy failed on staging", 1_767_225_600_000),
                assistant("checking the deploy log", calls=("c1",), timestamp=1_767_225_601_000),
                tool_result("c1", "deploy: permission denied", timestamp=1_767_225_602_000),
            ],
        )
        second = store.sessions.create(title="second").session_id
        other = store.loops.start(second, config=SONNET).loop_id
        hostile = UserMessage(content=[TextContent(text=f"deploy {ATTACK} deploy")], timestamp=1_767_312_000_000)
        store.messages.append(hostile, loop_id=other, turn_index=0)
        store.loops.start(second, config=SONNET)  # a second loop: show needs --loop with --turn
    return {"path": path, "first": first, "loop": loop, "second": second, "other": other}


def lines_of_json(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def test_json_lines_one_hit_per_line(db: dict[str, Any]) -> None:
    result = run_cli("--db", db["path"], "search", "deploy", "--json")
    assert result.code == 0, result
    hits = lines_of_json(result.out)
    assert len(hits) == 4
    assert {hit["session_id"] for hit in hits} == {db["first"], db["second"]}
    assert set(hits[0]) >= {
        "session_id",
        "loop_id",
        "turn_index",
        "message_id",
        "role",
        "snippet",
        "highlights",
        "rank",
    }
    assert all(hit["snippet"][slice(*hit["highlights"][0])].lower() == "deploy" for hit in hits)


def test_filters_reach_the_search(db: dict[str, Any]) -> None:
    def roles(*args: str) -> list[str]:
        result = run_cli("--db", db["path"], "search", *args, "--json")
        assert result.code == 0, result
        return sorted(hit["role"] for hit in lines_of_json(result.out))

    assert roles("deploy", "--session", db["second"]) == ["user"]
    assert roles("deploy", "--loop", db["loop"]) == ["assistant", "toolResult", "user"]
    assert roles("deploy", "--role", "toolResult") == ["toolResult"]
    assert roles("deploy", "--tool", "bash") == ["assistant", "toolResult"]
    assert roles("deploy", "--since", "2026-01-02") == ["user"]
    assert roles("deploy", "--until", "2026-01-01T00:00:01") == ["user"]
    assert len(roles("deploy", "--limit", "1")) == 1
    assert roles("staging log", "--any", "--session", db["first"]) == ["assistant", "user"]
    assert roles("nothing-like-this") == []


def test_the_words_after_the_options_are_the_query(db: dict[str, Any]) -> None:
    def roles(*args: str) -> list[str]:
        result = run_cli("--db", db["path"], "--json", "search", *args)
        assert result.code == 0, result
        return sorted(hit["role"] for hit in lines_of_json(result.out))

    assert roles("deploy", "log") == roles("deploy log") == ["assistant"]
    assert roles("--session", db["first"], "deploy", "staging") == ["user"]
    assert roles("deploy", "--role", "assistant", "log") == ["assistant"]  # options may come between the words
    assert roles("--session", db["first"], "--", "-staging", "deploy") == ["assistant", "toolResult"]
    assert roles("--any", "staging", "permission") == ["toolResult", "user"]


def test_search_needs_a_query(db: dict[str, Any]) -> None:
    result = run_cli("--db", db["path"], "search")
    assert result.code == 2 and "QUERY" in result.err and result.out == ""


def test_the_table_highlights_snippets_and_escapes_stored_text(db: dict[str, Any]) -> None:
    result = run_cli("--db", db["path"], "search", "deploy")
    assert result.code == 0, result
    assert raw_unsafe(result.out) == []
    assert "\\x1b[2J" in result.out and "\\u202e" in result.out
    flat = "".join("".join(line.split("│")[3:]).replace(" ", "") for line in result.out.splitlines())
    assert "[boldred]markup[/boldred]" in flat  # printed as written, not taken as markup
    assert db["first"] in result.out and "checking the deploy log" in result.out


def test_json_escapes_controls_and_reads_back_the_stored_text(db: dict[str, Any]) -> None:
    result = run_cli("--db", db["path"], "search", "deploy", "--session", db["second"], "--json")
    assert result.code == 0 and raw_unsafe(result.out) == []
    (hit,) = lines_of_json(result.out)
    assert CLEAR in hit["snippet"] and BIDI[:1] in hit["snippet"] and LINK[:4] in hit["snippet"]


def test_no_hits_says_so(db: dict[str, Any]) -> None:
    result = run_cli("--db", db["path"], "search", "absent")
    assert (result.code, result.out) == (0, "no messages found\n")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (['"unbalanced'], "unbalanced quote"),
        (["--", "-only"], "no word to search for"),
        (["deploy", "--role", "robot"], "robot"),
        (["deploy", "--since", "yesterday"], "yesterday"),
        (["deploy", "--limit", "0"], "limit"),
    ],
)
def test_bad_queries_and_options_are_one_error_line(db: dict[str, Any], args: list[str], needle: str) -> None:
    result = run_cli("--db", db["path"], "search", *args)
    if result.code == 2:  # a usage error (click): it names the option
        assert needle in result.err and result.out == ""
    else:
        assert_one_error_line(result, needle)


def test_a_hit_leads_to_its_turn_with_show(db: dict[str, Any]) -> None:
    (hit,) = lines_of_json(run_cli("--db", db["path"], "search", "permission", "--json").out)
    shown = run_cli(
        "--db",
        db["path"],
        "show",
        hit["session_id"],
        "--loop",
        hit["loop_id"],
        "--turn",
        str(hit["turn_index"]),
        "--json",
    )
    assert shown.code == 0, shown
    (loop,) = shown.json()["loops"]
    assert [m["id"] for m in loop["messages"]][hit["seq"]] == hit["message_id"]
    # The one-loop session needs no --loop.
    assert run_cli("--db", db["path"], "show", hit["session_id"], "--turn", "0", "--json").json() == shown.json()


def test_db_upgrade_prints_the_backfill_progress(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    shutil.copyfile(Path(__file__).parent / "fixtures" / "schema" / "0004.db", path)
    result = run_cli("--db", path, "db", "upgrade")
    assert result.code == 0, result
    assert "indexed 57 of 57 messages" in result.err
    assert run_cli("--db", path, "search", "parser", "--json").out.count("\n") >= 2
