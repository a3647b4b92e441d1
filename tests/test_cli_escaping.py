"""Stored text cannot drive the terminal: every command prints control and bidi characters escaped.

A hostile session (ids, title, model and provider names, message text,
thinking, tool names and arguments, extension kinds, error messages) and
hostile file names are printed by every command that shows stored text, as
tables for people and as ``--json``; nothing a terminal acts on may come out
raw, rich markup prints as written, and the JSON reads back equal.
"""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import UNSAFE, Result, assert_one_error_line, raw_unsafe, run_cli
from factories import assistant, extension, tool_result, usage

from turnstore import Store, TextContent, ToolCallContent, UserMessage
from turnstore.cli.escaping import UNSAFE as UNSAFE_POINTS
from turnstore.cli.escaping import shell_word

CLEAR = "\x1b[2J\x1b[H"
CLIPBOARD = "\x1b]52;c;aGFja2Vk\x07"
LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
TITLE = "\x1b]0;pwned\x07"
CONCEALED = "\x1b[8mconcealed\x1b[0m"
C1 = "\x9b2J\x9d0;c1\x9c\x85"
BIDI = "\u202egnp.exe\u202c\u2066x\u2069\u200e\u200f\u061c\u202a\u202b\u202d"
MARKUP = "[bold red]markup[/bold red]"
ATTACK = CLEAR + CLIPBOARD + LINK + TITLE + CONCEALED + C1 + BIDI + MARKUP

SESSION = "s" + TITLE
LOOP = "loop" + C1
MODEL = "model" + BIDI
PROVIDER = "prov" + CONCEALED


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A store whose every printed field carries terminal escapes, C1 controls, bidi overrides and markup."""
    path = tmp_path / "hostile.db"
    with Store(path) as store:
        store.sessions.create(SESSION, title=ATTACK, agent_id="agent" + CLEAR)
        loop = store.loops.start(SESSION, loop_id=LOOP, config={"model": MODEL, "provider": PROVIDER})
        call = ToolCallContent(id="c1", name="tool" + CLIPBOARD, arguments={"cmd": LINK, "x": BIDI})
        reply = assistant(ATTACK, model=MODEL, provider=PROVIDER, u=usage(1_000, 100), thinking=TITLE, error=C1 + TITLE)
        reply.content.append(call)
        store.messages.append_turn(loop.loop_id, 0, [
            UserMessage(content=[TextContent(text=MARKUP + CLEAR)], timestamp=1_000),
            reply,
            tool_result("c1", LINK + BIDI, error=True),
        ])  # fmt: skip
        store.messages.append(extension("kind" + CLEAR, {"v": C1 + BIDI}), loop_id=loop.loop_id)
    return path


def assert_human_safe(result: Result) -> None:
    assert result.code == 0, result
    assert raw_unsafe(result.out) == [] and raw_unsafe(result.err) == []


def assert_json_safe(result: Result) -> Any:
    assert result.code == 0, result
    assert raw_unsafe(result.out) == [], "JSON must escape C1 and bidi controls too"
    assert "Infinity" not in result.out and "NaN" not in result.out
    return result.json()


HUMAN_COMMANDS = [
    ["sessions"],
    ["show", SESSION],
    ["show", SESSION, "--loop", LOOP, "--turn", "0"],
    ["usage", "--session", SESSION],
    ["usage", "--loop", LOOP],
    ["usage", "--by", "model"],
    ["usage", "--by", "session"],
    ["usage", "--by", "loop", "--session", SESSION],
    ["search", "markup"],
]


@pytest.mark.parametrize("args", HUMAN_COMMANDS, ids=lambda args: " ".join(args[:1] + args[2:3]).strip())
def test_human_output_escapes_every_control_and_bidi_character(hostile: Path, args: list[str]) -> None:
    result = run_cli("--db", hostile, *args)

    assert_human_safe(result)
    assert "\\x1b" in result.out or "\\x9b" in result.out or "\\u202e" in result.out


def test_sessions_shows_the_escapes_and_markup_literally(hostile: Path) -> None:
    result = run_cli("--db", hostile, "sessions")

    assert_human_safe(result)
    flat = "".join(line.strip("│ ") for line in result.out.splitlines())
    assert "\\x1b]0;pwned\\x07" in flat  # the session id, escaped
    assert "\\x1b[2J" in flat  # the title's screen clear, escaped


def test_show_prints_markup_as_written_and_escapes_every_field(hostile: Path) -> None:
    result = run_cli("--db", hostile, "show", SESSION)

    assert_human_safe(result)
    assert MARKUP in result.out  # the user message's text, not bold red
    for escaped in ("\\x1b]0;pwned\\x07", "\\x9b2J\\x9d0;c1\\x9c", "model\\u202egnp.exe", "kind\\x1b[2J"):
        assert escaped in result.out, escaped


def test_usage_by_model_escapes_model_and_provider(hostile: Path) -> None:
    result = run_cli("--db", hostile, "usage", "--by", "model")

    assert_human_safe(result)
    assert "prov\\x1b[8mconcealed\\x1b[0m/model\\u202egnp.exe" in result.out


JSON_COMMANDS = [
    ["sessions"],
    ["show", SESSION],
    ["usage", "--by", "model"],
    ["usage", "--by", "loop", "--session", SESSION],
]


@pytest.mark.parametrize("args", JSON_COMMANDS, ids=lambda args: " ".join(args[:1] + args[2:3]))
def test_json_escapes_c1_and_bidi_and_reads_back_equal(hostile: Path, args: list[str]) -> None:
    result = run_cli("--db", hostile, *args, "--json")

    assert_json_safe(result)
    assert "\\u009b" in result.out or "\\u202e" in result.out


def test_json_values_are_the_stored_values(hostile: Path) -> None:
    sessions = assert_json_safe(run_cli("--db", hostile, "sessions", "--json"))
    shown = assert_json_safe(run_cli("--db", hostile, "show", SESSION, "--json"))
    by_model = assert_json_safe(run_cli("--db", hostile, "usage", "--by", "model", "--json"))

    assert (sessions[0]["session_id"], sessions[0]["title"]) == (SESSION, ATTACK)
    messages = shown["loops"][0]["messages"]
    assert messages[1]["message"]["content"][-1]["arguments"] == {"cmd": LINK, "x": BIDI}
    assert messages[1]["message"]["error_message"] == C1 + TITLE
    assert (by_model[0]["model"], by_model[0]["provider"]) == (MODEL, PROVIDER)


@pytest.mark.parametrize("fmt", ["phi-core", "phi-core-session", "turnstore"])
def test_export_to_stdout_escapes_c1_and_bidi_and_imports_back_equal(hostile: Path, tmp_path: Path, fmt: str) -> None:
    result = run_cli("--db", hostile, "export", SESSION, "--format", fmt)

    assert result.code == 0 and raw_unsafe(result.out) == []
    with Store(hostile) as store:
        direct = store.export(SESSION, fmt)
    assert direct is not None
    parse = (lambda text: [json.loads(line) for line in text.split("\n") if line]) if fmt == "turnstore" else json.loads
    assert parse(result.out) == parse(direct)


def hostile_file(folder: Path, content: str) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"bad{TITLE}{BIDI}\x9b\n[bold red]markup.jsonl"
    path.write_text(content, encoding="utf-8")
    return path


def test_import_error_lines_escape_the_file_name_and_record(tmp_path: Path) -> None:
    source = hostile_file(
        tmp_path / "src", '{"role": "user", "content": "' + "\\u001b]0;x\\u0007" + '", "timestamp": "x"}\n'
    )

    result = run_cli("--db", tmp_path / "in.db", "import", "clark", source)

    assert result.code == 1
    assert raw_unsafe(result.out) == [] and raw_unsafe(result.err) == []
    error_lines = [line for line in result.err.splitlines() if line.strip()]
    assert len(error_lines) == 1 and "\\x1b]0;pwned\\x07\\u202egnp.exe" in error_lines[0]
    assert "\\x9b\\n[bold red]markup.jsonl:1" in error_lines[0]


def test_import_json_report_escapes_the_file_name(tmp_path: Path) -> None:
    source = hostile_file(tmp_path / "src", "{not json\n")

    result = run_cli("--db", tmp_path / "in.db", "import", "clark", source, "--json")

    assert result.code == 1 and raw_unsafe(result.out) == []
    assert result.json()["errors"][0]["place"] == f"{source}:1"


def test_import_of_a_missing_hostile_path_is_one_escaped_line(tmp_path: Path) -> None:
    missing = tmp_path / f"gone{CLIPBOARD}{BIDI}.json"

    line = assert_one_error_line(run_cli("--db", tmp_path / "in.db", "import", "phi-core", missing))

    assert "gone\\x1b]52;c;aGFja2Vk\\x07\\u202e" in line


def test_error_lines_escape_stored_and_typed_ids(hostile: Path) -> None:
    line = assert_one_error_line(run_cli("--db", hostile, "show", "nope" + TITLE + BIDI))

    assert "nope\\x1b]0;pwned\\x07\\u202e" in line


def test_usage_errors_escape_the_argument(hostile: Path) -> None:
    line = assert_one_error_line(run_cli("--db", hostile, "usage", "--by", "w" + CLEAR))

    assert "w\\x1b[2J" in line


def test_on_a_terminal_nothing_hostile_reaches_it(hostile: Path) -> None:
    """The same through a real pseudo-terminal, where rich styles its output."""
    for args in (["show", SESSION], ["sessions"], ["usage", "--by", "model"]):
        output = _run_on_a_terminal("--db", str(hostile), *args)
        for raw in ("\x1b]", "\x1b[2J", "\x1b[8m", "\x07", "\x9b", "\x9d", "\u202e", "\u2066", "\u200f", "\u061c"):
            assert raw not in output, (args, repr(raw))
        assert "\\x1b" in output


def _run_on_a_terminal(*args: str) -> str:
    leader, follower = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"}
    env.pop("NO_COLOR", None)
    process = subprocess.Popen(
        [sys.executable, "-m", "turnstore", *args], stdin=follower, stdout=follower, stderr=follower, env=env
    )
    os.close(follower)
    chunks: list[bytes] = []
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed with the process
            break
        if not chunk:
            break
        chunks.append(chunk)
    process.wait(timeout=60)
    os.close(leader)
    assert process.returncode == 0, b"".join(chunks)
    return b"".join(chunks).decode("utf-8")


# --- the escaping functions themselves (imported here: the tests above run against any version) -------


def test_visible_escapes_every_unsafe_code_point() -> None:
    from turnstore.cli.escaping import visible

    for point in UNSAFE:
        shown = visible(chr(point))
        assert shown.startswith("\\") and all(ord(c) not in UNSAFE for c in shown), hex(point)


def test_visible_keeps_ordinary_text() -> None:
    from turnstore.cli.escaping import visible

    text = "plain ASCII ~ é 中文 👩‍💻 zero\u200cwidth C:\\path [b]x[/b] \u00a0"

    assert visible(text) == text


def test_json_safe_reads_back_as_the_same_characters() -> None:
    from turnstore.cli.escaping import json_safe

    value = {"k" + chr(0x9B): "".join(chr(point) for point in sorted(UNSAFE)) + "é中"}

    text = json_safe(json.dumps(value, ensure_ascii=False, indent=2))

    assert raw_unsafe(text) == []
    assert json.loads(text) == value


def test_import_json_report_of_a_name_that_is_not_utf8_is_valid_utf8_json(tmp_path: Path) -> None:
    folder = tmp_path / "src"
    folder.mkdir()
    raw_name = b"x\x9b\xe2\x80\xaey\xff.jsonl"
    (folder / os.fsdecode(raw_name)).write_text("{not json\n")

    result = run_cli("--db", tmp_path / "in.db", "--json", "import", "clark", folder)

    assert result.code == 1
    result.out.encode("utf-8")  # no lone surrogate left raw: the report is UTF-8 text
    place = result.json()["errors"][0]["place"]
    assert os.fsencode(place).endswith(raw_name + b":1")


def test_zero_width_characters_are_shown_as_escapes() -> None:
    from turnstore.cli.escaping import json_safe, visible

    assert visible("s\u200bi\u2060d\ufeff") == "s\\u200bi\\u2060d\\ufeff"
    assert json.loads(json_safe(json.dumps("s\u200bid", ensure_ascii=False))) == "s\u200bid"


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        "with space and 'quote'",
        "esc\x1b[31mred\x1b]52;c;aGk=\x07",
        "c1 \x9b2J and del \x7f",
        "bidi \u202egnp.exe \u2066x\u2069",
        "zero\u200bwidth \ufeff",
        "tab\tnew\nline\rcr",
        "back\\slash \\x41 and \\'",
        "not utf-8 \udce9\udcff",
        "é and 漢字 stay as they are",
    ],
)
def test_shell_word_is_printable_and_bash_reads_back_the_same_bytes(text: str) -> None:
    word = shell_word(text)
    assert not any(ord(char) in UNSAFE_POINTS for char in word), word
    read = subprocess.run(["bash", "-c", f"printf '%s' {word}"], capture_output=True, check=True).stdout
    assert read == os.fsencode(text)
