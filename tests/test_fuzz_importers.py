"""Fuzzing every importer with mutated sources (docs/design.md: typed errors naming file and line; whole sessions only).

Each case takes a valid fixture source of one format, mutates it (``fuzz_inputs``:
truncated file or line, dropped / duplicated / swapped lines, flipped bytes,
invalid UTF-8, NUL bytes, junk lines, a value of a record dropped, retyped,
swapped or replaced by a huge number, deep nesting, NUL or lone surrogates or a
10 MB string; for SQLite sources the JSON of a cell, a cell's type, a row, or
the file's bytes), and imports it with and without ``skip_invalid``. Then:

* the import raises nothing but a :class:`TurnstoreError` (``ImportFailed``
  for a file it cannot read at all);
* every error and skipped record names its place: the file, and a line
  (``file:LINE``), a record (``file: record N``, ``file: loop N message M``),
  a row (``file: table id=...``) or a session (``file#session``);
* the store holds whole sessions only: exactly the sessions the report says
  were written, each holding exactly the loops and messages the importer read
  for it (a clean re-read of the same file), and nothing of a failed session;
* importing the same file again changes nothing.

The CLI gets mutated files too: exit code 0 or 1, never a traceback.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_inputs import (
    BIG,
    DEEP,
    HugeInt,
    encode,
    fuzz_settings,
    mutate_sqlite,
    mutated_text_file,
    nested,
    paths,
    set_at,
    tally,
    to_json,
    write_counts,
)
from hypothesis import given
from hypothesis import strategies as st

from turnstore import ImportFailed, TurnstoreError
from turnstore.cli import main
from turnstore.importers import get_importer
from turnstore.importers.base import ImportOptions
from turnstore.limits import Limits
from turnstore.repositories.imports import screen_messages

FIXTURES = Path(__file__).parent / "fixtures"

TEXT_SOURCES: dict[str, list[Path]] = {
    "phi-core": [
        FIXTURES / "phi_core" / "messages" / "save_messages.json",
        *sorted((FIXTURES / "phi_core" / "sessions").glob("*.json")),
    ],
    "yoagent": [
        FIXTURES / "yoagent" / "sessions" / "rename-refactor.jsonl",
        FIXTURES / "yoagent" / "messages" / "weather-chat.json",
    ],
    "clark": [FIXTURES / "clark" / "conversation-42.jsonl", FIXTURES / "clark" / "support-ticket.json"],
    "tau": sorted((FIXTURES / "tau" / "sessions").glob("*.jsonl")),
    "pi": sorted((FIXTURES / "pi").glob("*.jsonl")),
    "turnstore": [FIXTURES / "turnstore" / "small.jsonl"],
}
OPENAI_SOURCES = sorted((FIXTURES / "openai_agents").glob("*.db"))
ADK_SOURCES = [FIXTURES / "adk" / name for name in ("database.db", "sqlite.db", "pickled.db")]
LANGCHAIN_SOURCES = [FIXTURES / "langchain" / "history.db"]
FORMATS = ["phi-core", "yoagent", "clark", "tau", "pi", "turnstore", "appam", "openai-agents", "adk", "langchain"]

EXAMPLES = {"sqlite": 40, "sqlite-async": 6, "postgresql": 10, "postgresql-async": 5}
"""Examples per format and backend (×10 under TURNSTORE_STRESS=1)."""

TAU_SCHEMA = """
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL, id TEXT NOT NULL,
    type TEXT NOT NULL, payload TEXT NOT NULL, UNIQUE (session_id, id)
);
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Path]]:
    """Sources of every format: the text fixtures, and SQLite ones built as the tests of each importer do."""
    folder = tmp_path_factory.mktemp("fuzz-sources")
    spec = importlib.util.spec_from_file_location("appam_make_fixture", FIXTURES / "appam" / "make_fixture.py")
    assert spec is not None and spec.loader is not None
    appam = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(appam)
    tau_db = folder / "tau-sessions.db"
    with sqlite3.connect(tau_db) as connection:
        connection.executescript(TAU_SCHEMA)
        for source in TEXT_SOURCES["tau"][:2]:
            rows = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
            for row, line in zip(
                rows, [line for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
            ):
                connection.execute(
                    "INSERT INTO entries (session_id, id, type, payload) VALUES (?, ?, ?, ?)",
                    (rows[0]["id"], row["id"], row["type"], line),
                )
    connection.close()
    return {
        **TEXT_SOURCES,
        "tau": [*TEXT_SOURCES["tau"], tau_db],
        "appam": [appam.build(folder / "sessions.db")],
        "openai-agents": OPENAI_SOURCES,
        "adk": ADK_SOURCES,
        "langchain": LANGCHAIN_SOURCES,
    }


@pytest.fixture(scope="module", autouse=True)
def _counts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Report how many cases each property of this module ran (printed under ``-s``; always written to a file)."""
    yield
    write_counts(("import",), tmp_path_factory.getbasetemp())


# --- the checks -------------------------------------------------------------------------------


def wipe(store: Any) -> None:
    for summary in store.sessions.list(limit=100_000):
        store.sessions.delete(summary.session_id)


def content(store: Any, session_id: str) -> tuple[set[str], list[tuple[str, int | None, Any]]]:
    """A stored session: its loop ids, and its messages as (loop, turn, message JSON) in order."""
    loops = {loop.loop_id for loop in store.loops.list(session_id)}
    messages = [
        (m.loop_id, m.turn_index, m.message.model_dump(mode="json")) for m in store.messages.records(session_id)
    ]
    return loops, messages


def read_again(fmt: str, path: Path, skip: bool) -> dict[str, list[tuple[set[str], list[tuple[str, int | None, Any]]]]]:
    """What a clean read of ``path`` gives, per session id: each bundle's loops and messages (a session may repeat)."""
    found: dict[str, list[Any]] = {}
    try:
        for bundle in get_importer(fmt).bundles(path, ImportOptions(skip_invalid=skip)):
            screen_messages(bundle, Limits())  # as the import does: unstorable messages leave the bundle
            rows = [(row.loop_id, row.turn_index, row.message.model_dump(mode="json")) for row in bundle.messages]
            found.setdefault(bundle.session_id, []).append(({loop.loop_id for loop in bundle.loops}, rows))
    except ImportFailed:  # the rest of the file cannot be read; the sessions before it count
        pass
    return found


def place_pattern(path: Path) -> re.Pattern[str]:
    """The file, then optionally a line (and a part of it, e.g. ``:6 retainedTail[1]``), a record / loop /
    row / session."""
    return re.compile(rf"^{re.escape(str(path))}(:\d+( .+)?|: .+|#.+)?$", re.DOTALL)


def check_import(store: Any, fmt: str, path: Path, skip: bool, name: str) -> None:
    """Import ``path`` into the (empty) store and check the whole-session contract."""
    wipe(store)
    try:
        report = store.import_(fmt, path, skip_invalid=skip)
    except TurnstoreError as error:
        assert isinstance(error, ImportFailed), error
        assert store.sessions.list(limit=10) == [], "a failed import wrote nothing"
        tally(name, f"raised {type(error).__name__}")
        return
    pattern = place_pattern(path)
    for error in [*report.errors, *report.skipped]:
        assert pattern.match(error.place), f"{error.place!r} names no place in {path}"
        assert error.reason
        if error.place == str(path):
            tally(name, "error naming the file only")
    assert report.ok == (not report.errors and not report.sessions_failed)
    stored = {summary.session_id for summary in store.sessions.list(limit=100_000)}
    assert stored == set(report.sessions_written), "the store holds exactly the sessions written"
    expected = read_again(fmt, path, skip)
    for session_id in stored:
        assert content(store, session_id) in expected.get(session_id, []), f"session {session_id!r} is not whole"
    for failed in set(report.sessions_failed) - set(report.sessions_written):
        assert failed not in stored
    again = store.import_(fmt, path, skip_invalid=skip)
    assert again.sessions_written == [], "importing the same file again changes nothing"
    assert {summary.session_id for summary in store.sessions.list(limit=100_000)} == stored
    tally(name, ("ok" if report.ok else "errors") + (" skip" if skip else ""))


def mutated_copy(data: st.DataObject, source: Path, folder: Path) -> tuple[str, Path]:
    """A mutated copy of ``source`` in ``folder``; returns what was done and its path."""
    folder.mkdir(parents=True)
    target = folder / source.name
    if source.suffix == ".db":
        shutil.copyfile(source, target)
        what = data.draw(mutate_sqlite(target), label="mutation")
    else:
        what, new = data.draw(mutated_text_file(source.read_bytes(), source.suffix == ".json"), label="mutation")
        target.write_bytes(new)
    return what, target


# --- the properties -------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_importer_survives_mutated_sources(
    store: Any, backend: str, fmt: str, built: dict[str, list[Path]], tmp_path: Path
) -> None:
    name = f"import[{fmt}][{backend}]"
    cases = iter(range(10**9))

    @fuzz_settings(EXAMPLES[backend])
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        source = data.draw(st.sampled_from(built[fmt]), label="source")
        _, target = mutated_copy(data, source, tmp_path / f"case{next(cases)}")
        for skip in (False, True):
            check_import(store, fmt, target, skip, name)

    run()


# --- heavy values, explicitly ---------------------------------------------------------------------

HEAVY: dict[str, Any] = {
    "deep 5000": nested(DEEP),
    "deep 201": nested(201, "dict"),
    "int 2**64": 2**64 + 1,
    "int 4400 digits": HugeInt(10**4400),
    "1e308": 1e308,
    "-0.0": -0.0,
    "NaN": float("nan"),
    "NUL": "a\x00b",
    "lone surrogate": "a\ud800b",
    "10 MB string": "z" * BIG,
}
STRING_KEYS = ("text", "content", "thinking", "arguments", "output", "summary", "data", "kind", "model", "title")


def with_heavy(record: Any, value: Any, spot: str) -> Any:
    """``record`` with ``value`` under a new key of the outer object, or in place of its first text-like string."""
    if spot == "new key" and isinstance(record, dict):
        record["fuzz"] = value
        return record
    for path in paths(record):
        if path and path[-1] in STRING_KEYS and isinstance(_get(record, path), str):
            return set_at(record, path, value)
    return record


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def heavy_copy(source: Path, folder: Path, value: Any, spot: str) -> Path:
    """``source`` with a heavy value in its second record (line, array item, or the messages of a SQLite cell)."""
    folder.mkdir(parents=True)
    target = folder / source.name
    if source.suffix == ".db":
        shutil.copyfile(source, target)
        with sqlite3.connect(target) as connection:
            table, column = _json_cell(connection)
            rowid, text = connection.execute(
                f'SELECT rowid, "{column}" FROM "{table}" ORDER BY rowid LIMIT 1 OFFSET 1'
            ).fetchone()
            record = json.loads(text)
            if isinstance(record, list):
                record[1] = with_heavy(record[1], value, spot)
            else:
                record = with_heavy(record, value, spot)
            connection.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (to_json(record), rowid))
        connection.close()
    elif source.suffix == ".json":
        data = json.loads(source.read_text(encoding="utf-8"))
        if isinstance(data, list):
            data[1] = with_heavy(data[1], value, spot)
        else:
            data["loops"][0]["messages"][1] = with_heavy(data["loops"][0]["messages"][1], value, spot)
        target.write_bytes(encode(to_json(data)))
    else:
        lines = source.read_bytes().split(b"\n")
        lines[1] = encode(to_json(with_heavy(json.loads(lines[1]), value, spot)))
        target.write_bytes(b"\n".join(lines))
    return target


def _json_cell(connection: sqlite3.Connection) -> tuple[str, str]:
    tables = {row[0] for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, column in (
        ("session_history", "messages"),
        ("agent_messages", "message_data"),
        ("entries", "payload"),
        ("events", "event_data"),
        ("message_store", "message"),
    ):
        if table in tables:
            return table, column
    raise AssertionError(tables)


@pytest.mark.parametrize("spot", ["new key", "text"])
@pytest.mark.parametrize("heavy", list(HEAVY))
@pytest.mark.parametrize("fmt", FORMATS)
def test_heavy_values_in_every_format(
    store: Any, backend: str, fmt: str, heavy: str, spot: str, built: dict[str, list[Path]], tmp_path: Path
) -> None:
    if heavy == "10 MB string" and (backend != "sqlite" or spot == "new key"):
        pytest.skip("10 MB values: once per format, on sync SQLite")
    source = built[fmt][0] if fmt != "tau" else built[fmt][1]
    target = heavy_copy(source, tmp_path / "case", HEAVY[heavy], spot)
    for skip in (False, True):
        check_import(store, fmt, target, skip, f"import_heavy[{backend}]")


# --- the CLI ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_cli_import_of_a_mutated_file_exits_cleanly(
    fmt: str, built: dict[str, list[Path]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cases = iter(range(10**9))

    @fuzz_settings(3)
    @given(data=st.data())
    def run(data: st.DataObject) -> None:
        folder = tmp_path / f"case{next(cases)}"
        _, target = mutated_copy(data, data.draw(st.sampled_from(built[fmt])), folder)
        database = folder / "cli.db"
        for extra in ([], ["--skip-invalid"], ["--json"], ["--dry-run"]):
            capsys.readouterr()
            code = main(["--db", str(database), "import", fmt, str(target), *extra])
            out, err = capsys.readouterr()
            assert code in (0, 1), (code, out, err)
            assert "Traceback" not in out + err
            if extra == ["--json"]:
                json.loads(out)
            tally("import_cli", f"exit {code}")

    run()
