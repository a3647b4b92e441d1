"""The ``turnstore`` command line (docs/design.md §5, §7), run in-process through ``turnstore.cli.main``."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from cli_runner import Result
from factories import assistant, extension, tool_result, usage, user
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

import turnstore
from turnstore import Message, Store, migrate
from turnstore.cli import cli, main
from turnstore.cli.escaping import UNSAFE
from turnstore.demo import DEMO_SESSIONS
from turnstore.migrate import head

FIXTURES = Path(__file__).parent / "fixtures"
ARRAY = FIXTURES / "phi_core" / "messages" / "save_messages.json"
SESSIONS_DIR = FIXTURES / "phi_core" / "sessions"
SMALL_TURNSTORE = FIXTURES / "turnstore" / "small.jsonl"
ARRAY_SESSION = "3f1c9a2e-7b4d-4c1e-9a55-0d2f6b8e1a77"

USAGE_KEYS = {"input", "output", "reasoning", "cache_read", "cache_write", "total_tokens", "cost"}
ONE = "one-loop"
TWO = "two-loops"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Any:
    """Run the CLI in-process; no output may ever hold a traceback."""

    def invoke(*args: str | Path) -> Result:
        capsys.readouterr()
        code = main([str(arg) for arg in args])
        captured = capsys.readouterr()
        assert "Traceback" not in captured.out + captured.err
        return Result(code, captured.out, captured.err)

    return invoke


def one_line(text: str) -> bool:
    return text.strip() != "" and "\n" not in text.strip()


@pytest.fixture
def db(tmp_path: Path) -> Path:
    """A store file holding a one-loop session and a two-loop session."""
    path = tmp_path / "cli.db"
    with Store(path) as store:
        store.sessions.create(ONE, title="Single loop")
        loop = store.loops.start(ONE, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
        store.messages.append_turn(
            loop.loop_id,
            0,
            [
                user("list files", 1_767_225_600_000),
                assistant("looking", calls=("c1",), u=usage(1_000, 100, cache_read=2_000), timestamp=1_767_225_601_000),
                tool_result("c1", "a.py", timestamp=1_767_225_602_000),
            ],
        )
        store.messages.append(extension("note", {"text": "hi"}), loop_id=loop.loop_id)
        store.messages.append_turn(
            loop.loop_id,
            1,
            [
                assistant("a.py only", u=usage(500, 50), timestamp=1_767_225_603_000),
            ],
        )
        store.loops.end(loop.loop_id)

        store.sessions.create(TWO, title="Two loops")
        first = store.loops.start(TWO, config={"model": "gpt-5", "provider": "openai"})
        store.messages.append_turn(
            first.loop_id,
            0,
            [
                user("hi", 1_767_312_000_000),
                assistant("hello", model="gpt-5", provider="openai", u=usage(200, 20), timestamp=1_767_312_001_000),
            ],
        )
        store.loops.end(first.loop_id)
        second = store.loops.start(TWO, config={"model": "gpt-5", "provider": "openai"})
        store.messages.append_turn(
            second.loop_id,
            0,
            [
                user("bye", 1_767_312_100_000),
                assistant("goodbye", model="gpt-5", provider="openai", u=usage(300, 30), timestamp=1_767_312_101_000),
            ],
        )
        store.loops.end(second.loop_id)
    return path


def loop_ids(db: Path, session_id: str) -> list[str]:
    with Store(db) as store:
        return [loop.loop_id for loop in store.loops.list(session_id)]


# --- the root command ---------------------------------------------------------------------


def test_version(run: Any) -> None:
    result = run("--version")

    assert result.code == 0
    assert turnstore.__version__ in result.out and "turnstore" in result.out


def command_paths() -> Iterator[list[str]]:
    def walk(command: click.Command, path: list[str]) -> Iterator[list[str]]:
        yield path
        if isinstance(command, click.Group):
            for name, sub in sorted(command.commands.items()):
                yield from walk(sub, [*path, name])

    return walk(cli, [])


ALL_COMMANDS = list(command_paths())


def command_at(path: list[str]) -> click.Command:
    command: click.Command = cli
    for part in path:
        command = command.commands[part]  # type: ignore[attr-defined]
    return command


def test_every_design_command_exists() -> None:
    names = {" ".join(path) for path in ALL_COMMANDS}

    assert {
        "db upgrade", "db current", "db check", "db downgrade",
        "import", "sessions", "show", "usage", "export", "demo",
    } <= names  # fmt: skip


@pytest.mark.parametrize("path", ALL_COMMANDS, ids=lambda path: " ".join(path) or "turnstore")
def test_help_of_every_command(run: Any, path: list[str]) -> None:
    result = run(*path, "--help")

    assert result.code == 0
    assert result.out.startswith("Usage: turnstore" + "".join(f" {part}" for part in path))
    first_words = " ".join(command_at(path).help.split()[:4])
    assert first_words in " ".join(result.out.split())


def test_every_command_and_option_has_help_text() -> None:
    for path in ALL_COMMANDS:
        command = command_at(path)
        assert command.help and command.help.strip(), f"{path} has no help"
        for param in command.params:
            if isinstance(param, click.Option):
                assert param.help, f"{path} option {param.name} has no help"


def test_unknown_command_is_a_usage_error(run: Any, db: Path) -> None:
    result = run("--db", db, "frobnicate")

    assert result.code == 2
    assert "frobnicate" in result.err


# --- --db and $TURNSTORE_URL --------------------------------------------------------------


def test_db_before_and_after_the_command(run: Any, db: Path) -> None:
    before = run("--db", db, "sessions", "--json")
    after = run("sessions", "--db", db, "--json")

    assert before.code == after.code == 0
    assert before.json() == after.json()
    assert {row["session_id"] for row in before.json()} == {ONE, TWO}


def test_db_as_url_or_bare_path(run: Any, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    as_url = run("--db", f"sqlite:///{db}", "sessions", "--json")
    monkeypatch.chdir(tmp_path)
    relative = run("--db", "cli.db", "sessions", "--json")

    assert as_url.code == relative.code == 0
    assert as_url.json() == relative.json() != []


def test_bare_path_creates_a_sqlite_file(run: Any, tmp_path: Path) -> None:
    target = tmp_path / "sub" / "fresh.db"

    result = run("--db", target, "db", "upgrade")

    assert result.code == 0
    assert target.read_bytes().startswith(b"SQLite format 3")


def test_turnstore_url_is_the_default(run: Any, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TURNSTORE_URL", f"sqlite:///{db}")

    result = run("sessions", "--json")

    assert result.code == 0
    assert {row["session_id"] for row in result.json()} == {ONE, TWO}
    assert not (tmp_path / "turnstore.db").exists()


def test_default_is_turnstore_db_in_the_working_directory(
    run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNSTORE_URL", raising=False)

    created = run("db", "upgrade")
    result = run("sessions")

    assert created.code == result.code == 0
    assert "no sessions" in result.out
    assert (tmp_path / "turnstore.db").exists()


def test_db_option_beats_turnstore_url(run: Any, db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNSTORE_URL", f"sqlite:///{tmp_path / 'other.db'}")

    result = run("--db", db, "sessions", "--json")

    assert len(result.json()) == 2


# --- db -------------------------------------------------------------------------------------


def test_db_upgrade_current_check(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "schema.db"

    empty = run("--db", path, "db", "current")
    assert empty.code == 0 and "none" in empty.out and head() in empty.out

    first = run("db", "upgrade", "--db", path)
    assert first.code == 0 and head() in first.out and "empty database" in first.out

    again = run("--db", path, "db", "upgrade")
    assert again.code == 0 and f"already at {head()}" in again.out

    current = run("--db", path, "db", "current", "--json")
    assert current.code == 0 and current.json() == {"current": head(), "head": head(), "up_to_date": True}

    check = run("--db", path, "db", "check")
    assert check.code == 0 and "ok" in check.out


def test_db_downgrade_base_then_check_fails_naming_the_upgrade_command(run: Any, db: Path) -> None:
    down = run("--db", db, "db", "downgrade", "base", "--yes")
    assert down.code == 0 and "base" in down.out

    current = run("--db", db, "db", "current", "--json")
    assert current.json()["current"] is None and current.json()["up_to_date"] is False

    check = run("--db", db, "db", "check")
    assert check.code != 0
    assert one_line(check.err)
    assert re.search(r"turnstore .*db upgrade", check.err)

    up = run("--db", db, "db", "upgrade")
    assert up.code == 0
    assert run("--db", db, "db", "check").code == 0


def test_db_downgrade_without_a_terminal_needs_yes(run: Any, db: Path) -> None:
    for revision in ("base", "-1"):
        result = run("--db", db, "db", "downgrade", revision)
        assert result.code == 2 and result.out == "" and one_line(result.err), result
        assert "pass --yes" in result.err and revision in result.err
    assert "drops every table" in run("--db", db, "db", "downgrade", "base").err
    assert run("--db", db, "db", "current", "--json").json()["current"] == head()
    with Store(db) as store:
        assert store.sessions.list()  # nothing dropped


@pytest.mark.parametrize(("answer", "dropped"), [("n\n", False), ("y\n", True)])
def test_db_downgrade_on_a_terminal_asks(monkeypatch: pytest.MonkeyPatch, db: Path, answer: str, dropped: bool) -> None:
    from click.testing import CliRunner

    from turnstore.cli import db as db_command
    from turnstore.cli import main

    monkeypatch.setattr(db_command, "_interactive", lambda: True)
    with CliRunner().isolation(input=answer) as (out, err, _):
        code = main(["--db", str(db), "db", "downgrade", "base"])
    asked = err.getvalue().decode()
    assert f"downgrade {db} from {head()} to base? It drops every table and all data [y/N]:" in asked
    assert code == (0 if dropped else 130)
    assert (b"downgraded" in out.getvalue()) == dropped
    connection = sqlite3.connect(db)
    try:
        tables = {name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    finally:
        connection.close()
    assert ("sessions" in tables) != dropped


def test_db_downgrade_to_a_named_revision(run: Any, db: Path) -> None:
    result = run("db", "downgrade", head(), "--db", db, "-y")

    assert result.code == 0
    assert run("--db", db, "db", "current", "--json").json()["current"] == head()


def test_db_downgrade_relative_revision(run: Any, db: Path) -> None:
    script = ScriptDirectory.from_config(migrate.alembic_config()).get_revision(head())
    result = run("--db", db, "db", "downgrade", "-1", "--yes")

    assert result.code == 0
    assert run("--db", db, "db", "current", "--json").json()["current"] == script.down_revision


def test_db_downgrade_unknown_revision_is_one_line_error(run: Any, db: Path) -> None:
    result = run("--db", db, "db", "downgrade", "no-such-rev", "--yes")

    assert result.code != 0
    assert one_line(result.err)
    assert "no-such-rev" in result.err
    assert run("--db", db, "db", "current", "--json").json()["current"] == head()


def test_db_downgrade_needs_a_revision(run: Any, db: Path) -> None:
    result = run("--db", db, "db", "downgrade")

    assert result.code == 2
    assert "REVISION" in result.err


# --- sessions -----------------------------------------------------------------------------


def test_sessions_table(run: Any, db: Path) -> None:
    result = run("--db", db, "sessions")

    assert result.code == 0
    for text in (ONE, TWO, "Single loop", "Two loops"):
        assert text in result.out
    row = next(line for line in result.out.splitlines() if ONE in line)
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert cells[:4] == [ONE, "Single loop", "1", "5"]  # session, title, loops, messages


def test_sessions_json(run: Any, db: Path) -> None:
    result = run("--db", db, "--json", "sessions")

    assert result.code == 0
    rows = {row["session_id"]: row for row in result.json()}
    assert set(rows) == {ONE, TWO}
    for row in rows.values():
        assert {"session_id", "title", "created_at", "updated_at", "loops", "messages"} <= set(row)
    assert (rows[ONE]["title"], rows[ONE]["loops"], rows[ONE]["messages"]) == ("Single loop", 1, 5)
    assert (rows[TWO]["title"], rows[TWO]["loops"], rows[TWO]["messages"]) == ("Two loops", 2, 4)


def test_sessions_of_an_empty_store(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    Store(path).close()

    assert "no sessions" in run("--db", path, "sessions").out
    assert run("--db", path, "sessions", "--json").json() == []


# --- show -----------------------------------------------------------------------------------


def test_show_tree(run: Any, db: Path) -> None:
    (loop,) = loop_ids(db, ONE)

    result = run("--db", db, "show", ONE)

    assert result.code == 0
    assert f"session {ONE}" in result.out and "Single loop" in result.out
    assert loop in result.out
    for text in ("user", "assistant", "toolResult", "extension", "list files", "a.py only", "note"):
        assert text in result.out


def test_show_tree_of_a_multi_loop_session(run: Any, db: Path) -> None:
    first, second = loop_ids(db, TWO)

    result = run("--db", db, "show", TWO)

    assert result.code == 0
    assert first in result.out and second in result.out
    assert f"continuation of {first}" in result.out


def test_show_json_shape(run: Any, db: Path) -> None:
    (loop,) = loop_ids(db, ONE)

    result = run("--db", db, "show", ONE, "--json")

    assert result.code == 0
    data = result.json()
    assert set(data) == {"session", "loops"}
    assert data["session"]["session_id"] == ONE and data["session"]["title"] == "Single loop"
    (record,) = data["loops"]
    assert {"loop_id", "parent_loop_id", "continuation_kind", "status", "config", "messages"} <= set(record)
    assert (record["loop_id"], record["parent_loop_id"], record["continuation_kind"], record["status"]) == (
        loop, None, "initial", "completed",
    )  # fmt: skip
    assert record["config"] == {"model": "claude-sonnet-4-5", "provider": "anthropic"}
    assert [(m["turn_index"], m["seq"], m["message"]["role"]) for m in record["messages"]] == [
        (0, 0, "user"), (0, 1, "assistant"), (0, 2, "toolResult"), (None, 3, "extension"), (1, 4, "assistant"),
    ]  # fmt: skip
    assert record["messages"][0]["message"]["content"] == [{"type": "text", "text": "list files"}]
    assert record["messages"][1]["message"]["stopReason"] == "toolUse"


def test_show_loop(run: Any, db: Path) -> None:
    first, second = loop_ids(db, TWO)

    result = run("--db", db, "show", TWO, "--loop", second, "--json")

    assert result.code == 0
    (record,) = result.json()["loops"]
    assert (record["loop_id"], record["parent_loop_id"], record["continuation_kind"]) == (second, first, "default")
    assert [m["message"]["content"][0]["text"] for m in record["messages"]] == ["bye", "goodbye"]
    tree = run("--db", db, "show", TWO, "--loop", second)
    assert second in tree.out and "goodbye" in tree.out and "hello" not in tree.out
    assert f"(continuation of {first}" in " ".join(tree.out.split())  # phi-core's "default", as a reader names it


def test_show_turn_of_the_only_loop(run: Any, db: Path) -> None:
    result = run("--db", db, "show", ONE, "--turn", "1", "--json")

    assert result.code == 0
    (record,) = result.json()["loops"]
    assert [(m["turn_index"], m["message"]["role"]) for m in record["messages"]] == [(1, "assistant")]


def test_show_turn_with_loop_on_a_multi_loop_session(run: Any, db: Path) -> None:
    first, _ = loop_ids(db, TWO)

    result = run("--db", db, "show", TWO, "--loop", first, "--turn", "0", "--json")

    assert result.code == 0
    (record,) = result.json()["loops"]
    assert [m["message"]["role"] for m in record["messages"]] == ["user", "assistant"]


@pytest.mark.parametrize("turn", ["99", "-1"])
def test_show_a_turn_the_loop_does_not_have_is_an_error(run: Any, db: Path, turn: str) -> None:
    result = run("--db", db, "show", ONE, "--turn", turn)

    assert result.code != 0 and result.out == ""
    assert f"has no turn {turn}" in result.err and len(result.err.strip().splitlines()) == 1


def test_show_turn_without_loop_on_a_multi_loop_session_is_a_usage_error(run: Any, db: Path) -> None:
    result = run("--db", db, "show", TWO, "--turn", "0")

    assert result.code == 2
    assert "--loop" in result.err
    assert result.out == ""


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(["show", "no-such-session"], "no-such-session", id="unknown session"),
        pytest.param(["show", "no-such-session", "--json"], "no-such-session", id="unknown session json"),
        pytest.param(["show", ONE, "--loop", "no-such-loop"], "no-such-loop", id="unknown loop"),
    ],
)
def test_show_unknown_is_one_line_error(run: Any, db: Path, args: list[str], needle: str) -> None:
    result = run("--db", db, *args)

    assert result.code == 1
    assert one_line(result.err) and needle in result.err
    assert result.out == ""


def test_show_loop_of_another_session_is_an_error(run: Any, db: Path) -> None:
    (other,) = loop_ids(db, ONE)

    result = run("--db", db, "show", TWO, "--loop", other)

    assert result.code == 1
    assert one_line(result.err)


# --- usage ----------------------------------------------------------------------------------

ONE_TOTALS = {
    "input": 1_500,
    "output": 150,
    "reasoning": 0,
    "cache_read": 2_000,
    "cache_write": 0,
    "total_tokens": 3_650,
}
TWO_TOTALS = {"input": 500, "output": 50, "reasoning": 0, "cache_read": 0, "cache_write": 0, "total_tokens": 550}


def token_part(row: dict[str, Any]) -> dict[str, Any]:
    return {key: row[key] for key in ONE_TOTALS}


def test_usage_table(run: Any, db: Path) -> None:
    result = run("--db", db, "usage")

    assert result.code == 0
    assert "all sessions" in result.out
    assert "$" in result.out
    assert "2,000" in result.out  # cache read, formatted


def test_usage_json_total(run: Any, db: Path) -> None:
    result = run("--db", db, "usage", "--json")

    assert result.code == 0
    data = result.json()
    assert set(data) >= USAGE_KEYS
    assert token_part(data) == {key: ONE_TOTALS[key] + TWO_TOTALS[key] for key in ONE_TOTALS}
    assert data["cost"] > 0


def test_usage_of_a_session_and_a_loop(run: Any, db: Path) -> None:
    first, second = loop_ids(db, TWO)

    session = run("--db", db, "usage", "--session", ONE, "--json")
    loop = run("--db", db, "usage", "--loop", second, "--json")
    table = run("--db", db, "usage", "--session", TWO)

    assert session.code == loop.code == table.code == 0
    assert token_part(session.json()) == ONE_TOTALS
    assert token_part(loop.json())["input"] == 300 and token_part(loop.json())["total_tokens"] == 330
    assert f"session {TWO}" in table.out and "$" in table.out


@pytest.mark.parametrize(
    ("args", "key", "expected"),
    [
        pytest.param(["--by", "model"], "model", {"claude-sonnet-4-5": 1_500, "gpt-5": 500}, id="model"),
        pytest.param(["--by", "session"], "session_id", {ONE: 1_500, TWO: 500}, id="session"),
        pytest.param(["--by", "day"], "day", {"2026-01-01": 1_500, "2026-01-02": 500}, id="day"),
        pytest.param(["--by", "model", "--session", TWO], "model", {"gpt-5": 500}, id="model of a session"),
        pytest.param(["--by", "day", "--session", ONE], "day", {"2026-01-01": 1_500}, id="day of a session"),
    ],
)
def test_usage_by(run: Any, db: Path, args: list[str], key: str, expected: dict[str, int]) -> None:
    result = run("--db", db, "usage", *args, "--json")

    assert result.code == 0
    rows = result.json()
    assert isinstance(rows, list)
    for row in rows:
        assert set(row) >= USAGE_KEYS and key in row
    assert {row[key]: row["input"] for row in rows} == expected


def test_usage_by_model_names_the_provider(run: Any, db: Path) -> None:
    rows = run("--db", db, "usage", "--by", "model", "--json").json()

    assert {(row["model"], row["provider"]) for row in rows} == {
        ("claude-sonnet-4-5", "anthropic"),
        ("gpt-5", "openai"),
    }
    table = run("--db", db, "usage", "--by", "model")
    assert "anthropic/claude-sonnet-4-5" in table.out and "openai/gpt-5" in table.out


def test_usage_by_loop_of_a_session(run: Any, db: Path) -> None:
    first, second = loop_ids(db, TWO)

    result = run("--db", db, "usage", "--session", TWO, "--by", "loop", "--json")

    assert result.code == 0
    assert {row["loop_id"]: row["input"] for row in result.json()} == {first: 200, second: 300}


def test_usage_by_model_of_a_loop(run: Any, db: Path) -> None:
    (loop,) = loop_ids(db, ONE)

    rows = run("--db", db, "usage", "--loop", loop, "--by", "model", "--json").json()

    assert [(row["model"], row["input"]) for row in rows] == [("claude-sonnet-4-5", 1_500)]


def test_usage_prices_file(run: Any, db: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(
        json.dumps({"claude-sonnet-4-5": {"input": 1000, "output": 0, "cache_read": 0, "cache_write": 0}})
    )

    default = run("--db", db, "usage", "--session", ONE, "--json").json()
    priced = run("--db", db, "usage", "--session", ONE, "--prices", prices, "--json").json()

    assert priced["cost"] == pytest.approx(1_500 * 1000 / 1_000_000)
    assert default["cost"] != pytest.approx(priced["cost"])
    table = run("--db", db, "usage", "--session", ONE, "--prices", prices)
    assert "$1.50" in table.out


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["--session", ONE, "--loop", "x"], id="session and loop"),
        pytest.param(["--by", "loop"], id="by loop without session"),
        pytest.param(["--by", "session", "--session", ONE], id="by session with session"),
        pytest.param(["--by", "session", "--loop", "x"], id="by session with loop"),
        pytest.param(["--by", "week"], id="unknown grouping"),
    ],
)
def test_usage_invalid_combinations_are_usage_errors(run: Any, db: Path, args: list[str]) -> None:
    result = run("--db", db, "usage", *args)

    assert result.code == 2
    assert result.err.startswith("error: ") and one_line(result.err)
    assert "turnstore usage --help" in result.err
    assert result.out == ""


@pytest.mark.parametrize("args", [["--session", "nope"], ["--loop", "nope"]])
def test_usage_of_unknown_scope_is_one_line_error(run: Any, db: Path, args: list[str]) -> None:
    result = run("--db", db, "usage", *args)

    assert result.code == 1
    assert one_line(result.err) and "nope" in result.err


# --- export -------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["phi-core", "phi-core-session", "turnstore"])
def test_export_to_stdout_matches_the_library(run: Any, db: Path, fmt: str) -> None:
    result = run("--db", db, "export", ONE, "--format", fmt)

    assert result.code == 0
    with Store(db) as store:
        assert result.out == store.export(ONE, fmt)


def test_export_default_format_is_the_library_s_lossless_one(run: Any, db: Path, tmp_path: Path) -> None:
    result = run("--db", db, "export", ONE)

    assert result.code == 0
    with Store(db) as store:
        assert result.out == store.export(ONE)
    assert [json.loads(line)["type"] for line in result.out.splitlines()] == ["session", "loop"] + ["message"] * 5
    target = tmp_path / "s.jsonl"
    assert run("--db", db, "export", ONE, "-o", target).code == 0
    imported = run("--db", tmp_path / "other.db", "import", "turnstore", target)
    assert imported.code == 0, imported
    with Store(db) as store, Store(tmp_path / "other.db") as other:
        assert other.export(ONE) == store.export(ONE)


def test_export_phi_core_session_form(run: Any, db: Path) -> None:
    data = run("--db", db, "export", TWO, "--format", "phi-core-session").json()

    assert data["session_id"] == TWO
    assert [(loop["continuation_kind"], loop["status"]) for loop in data["loops"]] == [
        ("Initial", "Completed"), ("Default", "Completed"),
    ]  # fmt: skip


@pytest.mark.parametrize("flag", ["-o", "--output"])
def test_export_to_file(run: Any, db: Path, tmp_path: Path, flag: str) -> None:
    target = tmp_path / "out.jsonl"

    result = run("--db", db, "export", ONE, "--format", "turnstore", flag, target)

    assert result.code == 0
    assert result.out == ""
    lines = [json.loads(line) for line in target.read_text(encoding="utf-8").splitlines()]
    assert [line["type"] for line in lines] == ["session", "loop"] + ["message"] * 5


def test_export_unknown_session_is_one_line_error(run: Any, db: Path, tmp_path: Path) -> None:
    target = tmp_path / "never.json"

    result = run("--db", db, "export", "no-such-session", "-o", target)

    assert result.code == 1
    assert one_line(result.err) and "no-such-session" in result.err
    assert not target.exists()
    assert run("--db", db, "export", "no-such-session").out == ""


def test_export_unknown_format_is_a_usage_error(run: Any, db: Path) -> None:
    result = run("--db", db, "export", ONE, "--format", "yaml")

    assert result.code == 2
    assert "yaml" in result.err


# --- import ---------------------------------------------------------------------------------


def test_import_phi_core_array(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "phi-core", ARRAY)

    assert result.code == 0
    assert "wrote 1 session(s), 2 loop(s), 8 message(s)" in result.out
    assert "status_update 1" in result.out
    sessions = run("--db", path, "sessions", "--json").json()
    assert [(row["session_id"], row["loops"], row["messages"]) for row in sessions] == [(ARRAY_SESSION, 2, 8)]


def test_import_several_paths_and_a_directory(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "phi-core", ARRAY, SESSIONS_DIR, "--json")

    assert result.code == 0
    report = result.json()
    assert report["files"] == 3
    assert len(report["sessions"]["written"]) == 3


def test_import_json_report(run: Any, tmp_path: Path) -> None:
    result = run("--db", tmp_path / "import.db", "import", "phi-core", ARRAY, "--json")

    assert result.code == 0
    report = result.json()
    assert report["ok"] is True and report["dry_run"] is False
    assert (report["records"], report["messages"], report["loops"]) == (8, 8, 2)
    assert report["by_role"] == {"assistant": 3, "extension": 1, "toolResult": 1, "user": 3}
    assert report["by_kind"] == {"status_update": 1}
    assert report["sessions"] == {"written": [ARRAY_SESSION], "unchanged": [], "failed": []}
    assert report["skipped"] == [] and report["errors"] == []


def test_import_again_prints_unchanged(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"
    run("--db", path, "import", "phi-core", ARRAY)

    again = run("--db", path, "import", "phi-core", ARRAY)

    assert again.code == 0
    assert "wrote 0 session(s)" in again.out and "1 unchanged" in again.out
    assert run("--db", path, "import", "phi-core", ARRAY, "--json").json()["sessions"]["unchanged"] == [ARRAY_SESSION]


def test_import_dry_run_writes_nothing(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "phi-core", ARRAY, "--dry-run")

    assert result.code == 0
    assert "would write 1 session(s)" in result.out
    assert list(tmp_path.iterdir()) == []  # no store created for a dry run
    path.touch()  # an empty file: what a first import would set up
    assert "would write 1 session(s)" in run("--db", path, "import", "phi-core", ARRAY, "--dry-run").out
    assert path.read_bytes() == b"" and sorted(p.name for p in tmp_path.iterdir()) == ["import.db"]
    assert "wrote 1 session(s)" in run("--db", path, "import", "phi-core", ARRAY).out


def test_import_dry_run_on_a_store_checks_it_read_only(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"
    run("--db", path, "import", "phi-core", ARRAY)
    run("--db", path, "sessions")  # a clean close: the log checkpointed into the file
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    result = run("--db", path, "import", "phi-core", ARRAY, "--dry-run", "--json")

    assert result.code == 0 and result.json()["sessions"]["unchanged"] == [ARRAY_SESSION]
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_import_dry_run_on_an_empty_postgresql_database_creates_no_table(run: Any, postgres: Any) -> None:
    url = postgres.new_database()

    result = run("--db", url, "import", "phi-core", ARRAY, "--dry-run")

    assert result.code == 0 and "would write 1 session(s)" in result.out
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as connection:
            assert sa.inspect(connection).get_table_names() == []
    finally:
        engine.dispose()


def test_import_dry_run_never_upgrades_an_old_store(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with Store(path):
        pass
    engine = create_engine(f"sqlite:///{path}")
    migrate.downgrade(engine, "0001")
    engine.dispose()
    with contextlib.closing(
        sqlite3.connect(path)
    ) as plain:  # a rollback journal: opening it for writing would change it
        plain.execute("PRAGMA journal_mode=delete")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}

    result = run("--db", path, "import", "phi-core", ARRAY, "--dry-run")

    assert result.code == 1 and "db upgrade" in result.err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_import_session_id_option(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "phi-core", ARRAY, "--session-id", "mine")

    assert result.code == 0
    assert [row["session_id"] for row in run("--db", path, "sessions", "--json").json()] == ["mine"]


def test_import_turnstore_jsonl(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "turnstore", SMALL_TURNSTORE)

    assert result.code == 0
    shown = run("--db", path, "show", "small-session", "--json").json()
    assert [loop["continuation_kind"] for loop in shown["loops"]] == ["initial", "branch"]


@pytest.fixture
def bad_array(tmp_path: Path) -> Path:
    records = json.loads(ARRAY.read_text(encoding="utf-8"))
    records[4] = {"content": [{"text": "beep", "type": "text"}], "role": "robot", "timestamp": 2}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(records), encoding="utf-8")
    return path


def test_import_malformed_names_the_record_and_writes_nothing(run: Any, tmp_path: Path, bad_array: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "phi-core", bad_array)

    assert f"{bad_array}: record 5" in result.err
    assert "1 failed" in result.out
    assert run("--db", path, "sessions", "--json").json() == []


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["text", "json"])
def test_import_malformed_exits_1(run: Any, tmp_path: Path, bad_array: Path, extra: list[str]) -> None:
    result = run("--db", tmp_path / "import.db", "import", "phi-core", bad_array, *extra)

    assert result.code == 1


def test_import_malformed_exits_1_from_the_console_script(tmp_path: Path, bad_array: Path) -> None:
    completed = run_script("--db", tmp_path / "import.db", "import", "phi-core", bad_array, cwd=tmp_path)

    assert completed.returncode == 1


def test_import_json_syntax_error_names_file_and_line(run: Any, tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text('[\n{"role": "user",\n "content": [}\n]\n', encoding="utf-8")

    result = run("--db", tmp_path / "import.db", "import", "phi-core", broken, "--json")

    report = result.json()
    assert report["ok"] is False
    assert [error["place"] for error in report["errors"]] == [f"{broken}:3"]


def test_import_skip_invalid_lists_skipped_and_exits_0(run: Any, tmp_path: Path, bad_array: Path) -> None:
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "phi-core", bad_array, "--skip-invalid")

    assert result.code == 0
    assert "skipped" in result.err and f"{bad_array}: record 5" in result.err
    assert "wrote 1 session(s)" in result.out and "7 message(s)" in result.out
    report = run("--db", tmp_path / "other.db", "import", "phi-core", bad_array, "--skip-invalid", "--json").json()
    assert [entry["place"] for entry in report["skipped"]] == [f"{bad_array}: record 5"]


def test_import_malformed_turnstore_line_names_file_and_line(run: Any, tmp_path: Path) -> None:
    lines = SMALL_TURNSTORE.read_text(encoding="utf-8").splitlines()
    lines[3] = lines[3][:-5]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("\n".join(lines) + "\n", encoding="utf-8")
    path = tmp_path / "import.db"

    result = run("--db", path, "import", "turnstore", broken)
    skipping = run("--db", path, "import", "turnstore", broken, "--skip-invalid")

    assert f"{broken}:4" in result.err
    assert skipping.code == 0 and f"{broken}:4" in skipping.err
    assert [row["messages"] for row in run("--db", path, "sessions", "--json").json()] == [3]


def test_import_missing_path_is_one_line_error(run: Any, tmp_path: Path) -> None:
    result = run("--db", tmp_path / "import.db", "import", "phi-core", tmp_path / "missing.json")

    assert result.code == 1
    assert one_line(result.err) and "missing.json" in result.err


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["import", "no-such-format", str(ARRAY)], id="unknown format"),
        pytest.param(["import", "phi-core"], id="no path"),
    ],
)
def test_import_usage_errors(run: Any, tmp_path: Path, args: list[str]) -> None:
    result = run("--db", tmp_path / "import.db", *args)

    assert result.code == 2


# --- demo -----------------------------------------------------------------------------------


def test_demo_prints_three_usage_tables_with_cost(run: Any, tmp_path: Path) -> None:
    result = run("--db", tmp_path / "demo.db", "demo")

    assert result.code == 0
    for title in ("Usage by session", "Usage by loop", "Usage by model"):
        assert title in result.out
    total_rows = [line for line in result.out.splitlines() if re.match(r"│ total\b", line)]
    assert len(total_rows) == 3 and all("$" in line for line in total_rows)
    assert not re.search(r"│\s+-\s+│", result.out)  # every cost is known


def test_demo_prints_commands_that_run_as_pasted_from_a_folder_with_spaces(run: Any, tmp_path: Path) -> None:
    folder = tmp_path / "my agent's data"
    folder.mkdir()
    result = run("--db", folder / "demo.db", "demo")
    commands = [shlex.split(line) for line in result.out.splitlines() if line.startswith("  turnstore --db ")]
    assert len(commands) == 4
    for command in commands:
        assert command[:3] == ["turnstore", "--db", str(folder / "demo.db")]
        assert run(*command[1:]).code == 0, command


@pytest.mark.parametrize(
    "name", ["esc\x1b]0;pwned\x07 here", "tab\there", "bidi\u202egnp.db", "latin1 \udce9t\udce9", "quote ' and \\"]
)
def test_demo_prints_commands_that_name_a_folder_with_control_characters_exactly(
    run: Any, tmp_path: Path, name: str
) -> None:
    """The printed command holds only printable characters, and bash reads back the very path (bash's $'...')."""
    folder = tmp_path / name
    folder.mkdir()
    result = run("--db", folder / "demo.db", "demo")
    assert result.code == 0
    lines = [line for line in result.out.splitlines() if line.startswith("  turnstore --db ")]
    assert len(lines) == 4
    for line in lines:
        assert not any(ord(char) in UNSAFE for char in line), line
        shown = subprocess.run(
            ["bash", "-c", "printf '%s\\0' " + line.removeprefix("  turnstore ")], capture_output=True, check=True
        )
        words = [os.fsdecode(word) for word in shown.stdout.split(b"\0")[:-1]]
        assert words[:2] == ["--db", str(folder / "demo.db")], line
        assert run(*words).code == 0, line


@pytest.mark.parametrize("where", ["user part", "query"])
def test_demo_never_prints_a_database_password(run: Any, postgres: Any, where: str) -> None:
    postgres.empty()
    base = make_url(postgres.url)  # trust auth: any password logs in
    if where == "user part":
        url = base.set(password="s3cr$t-pw").render_as_string(hide_password=False)
    else:
        url = base.update_query_dict({"password": "s3cr$t-pw"}).render_as_string(hide_password=False)
    result = run("--db", url, "demo")
    assert result.code == 0 and "s3cr" not in result.out
    commands = [line for line in result.out.splitlines() if line.startswith("  turnstore ")]
    assert len(commands) == 4 and not any("--db" in line for line in commands)
    assert "TURNSTORE_URL" in result.out
    shown = run("--db", url, "--json", "demo")
    assert shown.code == 0 and "s3cr" not in shown.out
    postgres.empty()


def test_demo_twice_gives_the_same_sessions(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "demo.db"

    def state() -> tuple[Any, ...]:
        listed = run("--db", path, "sessions", "--json").json()
        sessions = sorted((r["session_id"], r["title"], r["loops"], r["messages"]) for r in listed)
        totals = run("--db", path, "usage", "--json").json()
        by_model = run("--db", path, "usage", "--by", "model", "--json").json()
        return sessions, totals, by_model

    assert run("--db", path, "demo").code == 0
    first = state()
    assert run("--db", path, "demo").code == 0

    assert state() == first
    assert sorted(row[0] for row in first[0]) == sorted(DEMO_SESSIONS)


def test_demo_screenshot_is_a_real_size_png_the_same_every_time(tmp_path: Path) -> None:
    import base64
    import struct
    import zlib

    from turnstore.demo import build_demo

    images = []
    for name in ("one.db", "two.db"):
        with Store(tmp_path / name) as store:
            build_demo(store)
            images += [
                block.data
                for sid in DEMO_SESSIONS
                for record in store.messages.records(sid)
                for block in getattr(record.message, "content", [])
                if getattr(block, "type", None) == "image"
            ]
    assert len(images) == 2 and images[0] == images[1]  # one screenshot per demo, the same bytes each time
    png = base64.b64decode(images[0])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) < 16_384  # small on disk
    chunks, at = {}, 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        assert struct.unpack(">I", png[at + 8 + length : at + 12 + length])[0] == zlib.crc32(kind + data)
        chunks[kind] = data
        at += 12 + length
    width, height, depth, colour = struct.unpack(">IIBB", chunks[b"IHDR"][:10])
    assert (width, height, depth, colour) == (480, 270, 8, 2) and width >= 300
    rows = zlib.decompress(chunks[b"IDAT"])
    assert len(rows) == height * (1 + 3 * width)
    stride = 1 + 3 * width
    colours = {rows[y * stride + 1 + 3 * x : y * stride + 4 + 3 * x] for y in range(height) for x in range(width)}
    assert len(colours) > 4  # a picture, not a flat fill


def test_demo_leaves_other_sessions_alone(run: Any, db: Path) -> None:
    assert run("--db", db, "demo").code == 0

    ids = {row["session_id"] for row in run("--db", db, "sessions", "--json").json()}
    assert ids == {ONE, TWO, *DEMO_SESSIONS}


def test_demo_json(run: Any, tmp_path: Path) -> None:
    result = run("--db", tmp_path / "demo.db", "demo", "--json")

    assert result.code == 0
    data = result.json()
    assert {"sessions", "loops", "models"} <= set(data)
    assert [row["session_id"] for row in data["sessions"]] == list(DEMO_SESSIONS)
    for row in data["sessions"] + data["loops"] + data["models"]:
        assert set(row) >= USAGE_KEYS
        assert row["cost"] is not None and row["cost"] > 0
    total = run("--db", tmp_path / "demo.db", "usage", "--json").json()
    assert sum(row["total_tokens"] for row in data["sessions"]) == total["total_tokens"]


# --- the installed entry point ----------------------------------------------------------------


def console_script() -> Path:
    scripts = Path(sys.executable).parent
    for name in ("turnstore", "turnstore.exe"):
        if (scripts / name).exists():
            return scripts / name
    pytest.skip("no turnstore console script next to the interpreter")


def run_script(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run the installed ``turnstore`` console script in a subprocess."""
    env = {key: value for key, value in os.environ.items() if key != "TURNSTORE_URL"}
    command = [str(console_script()), *(str(arg) for arg in args)]
    return subprocess.run(command, capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


def test_console_script_runs(tmp_path: Path) -> None:
    path = tmp_path / "sub.db"

    demo = run_script("--db", path, "demo", cwd=tmp_path)
    listed = run_script("sessions", "--json", "--db", path, cwd=tmp_path)
    missing = run_script("--db", path, "show", "nope", cwd=tmp_path)

    assert demo.returncode == 0, demo.stderr
    assert "Usage by session" in demo.stdout
    assert listed.returncode == 0
    assert sorted(row["session_id"] for row in json.loads(listed.stdout)) == sorted(DEMO_SESSIONS)
    assert missing.returncode == 1
    assert one_line(missing.stderr) and "Traceback" not in missing.stderr


@pytest.mark.skipif(not (Path(turnstore.__file__).parent / "__main__.py").exists(), reason="no turnstore/__main__.py")
def test_python_dash_m(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "turnstore", "--version"], capture_output=True, text=True, cwd=tmp_path, timeout=120
    )

    assert completed.returncode == 0
    assert turnstore.__version__ in completed.stdout


def test_an_invalid_argument_is_one_line_naming_it(run: Any, db: Path) -> None:
    result = run("--db", db, "sessions", "--limit", "-1")
    assert result.code == 1 and one_line(result.err)
    assert result.err.startswith("error: limit: ")


def test_show_marks_an_assistant_message_without_usage(run: Any, tmp_path: Path) -> None:
    path = tmp_path / "run.db"
    with Store(path) as store:
        store.sessions.create("run")
        loop = store.loops.start("run", config={"model": "gpt-5", "provider": "openai"})
        store.messages.append_turn(loop.loop_id, 0, [Message.user("q"), Message.assistant("a", model="gpt-5")])
    result = run("--db", path, "show", "run")
    assert result.code == 0 and "usage unknown" in result.out


def test_show_says_usage_unknown_for_a_reply_stored_without_it(run: Any, tmp_path: Path) -> None:
    """A reply stored with usage_known=False (an OpenAI Agents import) holds zeros in its JSON: shown as unknown."""
    path = tmp_path / "run.db"
    with Store(path) as store:
        store.sessions.create("run")
        loop = store.loops.start("run", config={"model": "gpt-5", "provider": "openai"})
        store.messages.append_turn(loop.loop_id, 0, [user("q"), assistant("unknown", u=usage(0, 0))], usage_known=False)
        store.messages.append_turn(loop.loop_id, 1, [user("q"), assistant("known", u=usage(12, 34))])
    result = run("--db", path, "show", "run")
    assert result.code == 0
    unknown, known = (
        next(line for line in result.out.splitlines() if f"assistant  {t}" in line) for t in ("unk", "kno")
    )
    assert "usage unknown" in unknown and "tok" not in unknown
    assert "12+34 tok" in known

    assert "run:" not in result.out  # no usage reported for the run
    with Store(path) as store:
        store.loops.end(store.loops.list("run")[0].loop_id, usage={"input": 700, "output": 30})
    assert "run: 700+30 tok" in run("--db", path, "show", "run").out

    shown = json.loads(run("--db", path, "--json", "show", "run").out)
    assert (shown["loops"][0]["reported_usage"]["input"], shown["loops"][0]["reported_usage"]["output"]) == (700, 30)
    flags = [(m["message"]["role"], m.get("usage_known")) for m in shown["loops"][0]["messages"]]
    assert flags == [("user", None), ("assistant", False), ("user", None), ("assistant", True)]


def test_json_times_are_written_one_way(run: Any, db: Path) -> None:
    """Session, loop and list times in --json output alike: ISO 8601, UTC as Z (as pydantic writes the records')."""
    shown = run("--db", db, "show", ONE, "--json").json()
    listed = run("--db", db, "sessions", "--json").json()
    times = [shown["session"]["created_at"], shown["session"]["updated_at"], listed[0]["created_at"]]
    times += [loop["started_at"] for loop in shown["loops"]]
    assert times and all(time.endswith("Z") and "+00:00" not in time for time in times)
