"""SQLite sources are read within bounds: nothing computed on read, no value over the limit, no more than the file holds.

A few kilobytes of SQLite can describe gigabytes: a view or a generated column
computes its values when read (``printf('%.*c', 1000000000, 'x')``,
``zeroblob``, ``randomblob``). Every SQLite importer refuses such a file
before reading a row, with one line naming the file and the table or
column, and writes nothing; each hostile file here is a few kilobytes and is
imported in a subprocess, whose time and peak memory are measured. A stored
value over the limit is an invalid record at its row; values adding up to
more than the file holds (defaults of a column added later) stop the file.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from turnstore import Store
from turnstore.importers import sqlite_source

HUGE_TEXT = "printf('%.*c', 200000000, 'x')"  # 200 MB a row, within SQLite's default length limit

LANGCHAIN = "CREATE TABLE message_store (id INTEGER PRIMARY KEY, session_id TEXT, message TEXT)"
OPENAI_SESSIONS = "CREATE TABLE agent_sessions (session_id TEXT PRIMARY KEY, created_at TEXT, updated_at TEXT)"
OPENAI_MESSAGES = (
    "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT, message_data TEXT, "
    "created_at TEXT)"
)
ADK_SESSIONS = (
    "CREATE TABLE sessions (app_name TEXT, user_id TEXT, id TEXT, state TEXT, create_time TEXT, update_time TEXT)"
)
ADK_EVENTS = (
    "CREATE TABLE events (id TEXT, app_name TEXT, user_id TEXT, session_id TEXT, invocation_id TEXT, "
    "timestamp TEXT, event_data TEXT)"
)
APPAM = (
    "CREATE TABLE session_history (id TEXT PRIMARY KEY, agent_name TEXT, model TEXT, messages TEXT, "
    "started_at TEXT, updated_at TEXT)"
)
TAU = "CREATE TABLE entries (seq INTEGER PRIMARY KEY, session_id TEXT, payload TEXT)"

HUMAN = json.dumps({"type": "human", "data": {"content": "hello"}})

HOSTILE: dict[str, tuple[str, list[str], str, str]] = {
    # name: (format, statements, place after the file name, reason)
    "langchain generated column": (
        "langchain",
        [
            f"CREATE TABLE message_store (id INTEGER PRIMARY KEY, session_id TEXT, message TEXT AS ({HUGE_TEXT}))",
            *["INSERT INTO message_store (session_id) VALUES ('s')"] * 20,
        ],
        "message_store.message",
        "is a generated column, computed when read: only stored columns are read",
    ),
    "langchain stored generated column": (
        "langchain",
        [
            "CREATE TABLE message_store (id INTEGER PRIMARY KEY, session_id TEXT, "
            'message TEXT AS (\'{"type": "human", "data": {}}\') STORED)',
            "INSERT INTO message_store (session_id) VALUES ('s')",
        ],
        "message_store.message",
        "is a generated column, computed when read: only stored columns are read",
    ),
    "langchain view of zeroblob": (
        "langchain",
        [
            "CREATE TABLE rows_ (id INTEGER PRIMARY KEY, session_id TEXT)",
            "CREATE VIEW message_store AS SELECT id, session_id, zeroblob(200000000) AS message FROM rows_",
            *["INSERT INTO rows_ (session_id) VALUES ('s')"] * 20,
        ],
        "message_store",
        "is a view, whose values are computed when read: only a table is read",
    ),
    "langchain trigger": (
        "langchain",
        [
            LANGCHAIN,
            "CREATE TRIGGER grow AFTER INSERT ON message_store BEGIN SELECT 1; END",
            f"INSERT INTO message_store (session_id, message) VALUES ('s', '{HUMAN}')",
        ],
        "message_store",
        "has a trigger (grow), which no framework's schema has: not read",
    ),
    "openai-agents view of randomblob": (
        "openai-agents",
        [
            OPENAI_SESSIONS,
            "CREATE TABLE rows_ (id INTEGER PRIMARY KEY, session_id TEXT)",
            "CREATE VIEW agent_messages AS SELECT id, session_id, randomblob(200000000) AS message_data, "
            "NULL AS created_at FROM rows_",
            "INSERT INTO agent_sessions VALUES ('s', NULL, NULL)",
            *["INSERT INTO rows_ (session_id) VALUES ('s')"] * 20,
        ],
        "agent_messages",
        "is a view, whose values are computed when read: only a table is read",
    ),
    "adk generated event_data": (
        "adk",
        [
            ADK_SESSIONS,
            "CREATE TABLE events (id TEXT, app_name TEXT, user_id TEXT, session_id TEXT, invocation_id TEXT, "
            f"timestamp TEXT, event_data TEXT AS ({HUGE_TEXT}))",
            "INSERT INTO sessions VALUES ('app', 'u', 's', '{}', NULL, NULL)",
            *[
                "INSERT INTO events (id, app_name, user_id, session_id, invocation_id) VALUES ('e', 'app', 'u', 's', 'i')"
            ]
            * 20,
        ],
        "events.event_data",
        "is a generated column, computed when read: only stored columns are read",
    ),
    "adk app_states view": (
        "adk",
        [
            ADK_SESSIONS,
            ADK_EVENTS,
            f"CREATE VIEW app_states AS SELECT 'app' AS app_name, {HUGE_TEXT} AS state",
            "INSERT INTO sessions VALUES ('app', 'u', 's', '{}', NULL, NULL)",
        ],
        "app_states",
        "is a view, whose values are computed when read: only a table is read",
    ),
    "appam generated messages": (
        "appam",
        [
            "CREATE TABLE session_history (id TEXT PRIMARY KEY, agent_name TEXT, model TEXT, "
            f"messages TEXT AS ({HUGE_TEXT}), started_at TEXT, updated_at TEXT)",
            *[f"INSERT INTO session_history (id) VALUES ('s{n}')" for n in range(20)],
        ],
        "session_history.messages",
        "is a generated column, computed when read: only stored columns are read",
    ),
    "tau view of entries": (
        "tau",
        [
            "CREATE TABLE rows_ (seq INTEGER PRIMARY KEY, session_id TEXT)",
            f"CREATE VIEW entries AS SELECT seq, session_id, {HUGE_TEXT} AS payload FROM rows_",
            *["INSERT INTO rows_ (session_id) VALUES ('s')"] * 20,
        ],
        "entries",
        "is a view, whose values are computed when read: only a table is read",
    ),
}

_RUN = """
import json, resource, sys
from turnstore import Store
fmt, source, db = sys.argv[1:]
with Store(db) as store:
    report = store.import_(fmt, source)
    sessions = [session.session_id for session in store.sessions.list()]
print(json.dumps({
    "peak_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "errors": [[error.place, error.reason] for error in report.errors],
    "written": report.sessions_written,
    "sessions": sessions,
}))
"""


def build(path: Path, statements: list[str]) -> Path:
    """A database made by ``statements``. A table whose generated column computes 200 MB a row is
    made with a small one, filled, and then given the large one in its schema (``writable_schema``),
    as a hostile file would be: SQLite computes a generated column on every insert."""
    connection = sqlite3.connect(path)
    hostile: dict[str, str] = {}
    try:
        for statement in statements:
            if statement.startswith("CREATE TABLE ") and HUGE_TEXT in statement:
                hostile[statement.split()[2]] = statement
                statement = statement.replace(HUGE_TEXT, "'x'")
            connection.execute(statement)
        connection.commit()
        if hostile:
            connection.execute("PRAGMA writable_schema = ON")
            for name, statement in hostile.items():
                connection.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?", (statement, name))
            connection.commit()
    finally:
        connection.close()
    return path


def run_import(fmt: str, source: Path, db: Path) -> dict[str, Any]:
    """Import in a fresh interpreter, its memory its own; the timeout fails a hostile file that would take minutes."""
    done = subprocess.run(
        [sys.executable, "-c", _RUN, fmt, str(source), str(db)], capture_output=True, text=True, timeout=60, check=True
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_source_computed_on_read_is_refused_fast_and_writes_nothing(tmp_path: Path, case: str) -> None:
    fmt, statements, where, reason = HOSTILE[case]
    source = build(tmp_path / "hostile.db", statements)
    assert source.stat().st_size <= 16 * 1024

    result = run_import(fmt, source, tmp_path / "store.db")

    assert result["errors"] == [[f"{source}: {where}", reason]]
    assert result["written"] == result["sessions"] == []
    assert result["peak_kb"] < 300 * 1024  # one value of the hostile file alone is 200 MB


def test_a_virtual_table_is_refused(store: Store, tmp_path: Path) -> None:
    try:
        source = build(
            tmp_path / "virtual.db", ["CREATE VIRTUAL TABLE message_store USING fts5(id, session_id, message)"]
        )
    except sqlite3.OperationalError:
        pytest.skip("this SQLite has no FTS5")

    report = store.import_("langchain", source)

    assert [(error.place, error.reason) for error in report.errors] == [
        (
            f"{source}: message_store",
            "is a virtual table, whose values are computed when read: only a table is read",
        )
    ]
    assert store.sessions.list() == []


@pytest.fixture
def small_values(monkeypatch: pytest.MonkeyPatch) -> int:
    """A value limit of 1,000 bytes, so a row over it is small to write."""
    monkeypatch.setattr(sqlite_source, "MAX_VALUE_BYTES", 1000)
    return 1000


def _over(limit: int) -> str:
    return json.dumps({"type": "human", "data": {"content": "x" * (limit + 50)}})


def test_a_value_over_the_limit_is_an_invalid_record_at_its_row(
    store: Store, tmp_path: Path, small_values: int
) -> None:
    large = _over(small_values)
    source = build(
        tmp_path / "history.db",
        [
            LANGCHAIN,
            f"INSERT INTO message_store VALUES (1, 'a', '{HUMAN}')",
            f"INSERT INTO message_store VALUES (2, 'b', '{HUMAN}')",
            f"INSERT INTO message_store VALUES (3, 'b', '{large}')",
        ],
    )
    size = len(large.encode())

    report = store.import_("langchain", source)

    assert [(error.place, error.reason) for error in report.errors] == [
        (f"{source}: message_store id=3", f"message is {size} bytes, over the limit of 1000 bytes for a value")
    ]
    assert report.sessions_written == ["a"]
    assert report.sessions_failed == ["b"]

    skipped = store.import_("langchain", source, skip_invalid=True)

    assert skipped.ok
    assert [error.place for error in skipped.skipped] == [f"{source}: message_store id=3"]
    assert [record.message.role for record in store.messages.records("b")] == ["user"]


@pytest.mark.parametrize(
    ("fmt", "statements", "place"),
    [
        (
            "openai-agents",
            [
                OPENAI_SESSIONS,
                OPENAI_MESSAGES,
                "INSERT INTO agent_sessions VALUES ('s', NULL, NULL)",
                "INSERT INTO agent_messages VALUES (7, 's', :large, NULL)",
            ],
            "agent_messages id=7",
        ),
        (
            "adk",
            [
                ADK_SESSIONS,
                ADK_EVENTS,
                "INSERT INTO sessions VALUES ('app', 'u', 's', '{}', NULL, NULL)",
                "INSERT INTO events VALUES ('e', 'app', 'u', 's', 'i', NULL, :large)",
            ],
            "events rowid=1",
        ),
        (
            "appam",
            [APPAM, "INSERT INTO session_history VALUES ('s', 'a', 'm', :large, NULL, NULL)"],
            "session_history id=s",
        ),
        ("tau", [TAU, "INSERT INTO entries VALUES (4, 's', :large)"], "entries seq=4"),
    ],
)
def test_every_sqlite_importer_bounds_its_values(
    store: Store, tmp_path: Path, small_values: int, fmt: str, statements: list[str], place: str
) -> None:
    large = "x" * (small_values + 1)
    source = tmp_path / "source.db"
    with sqlite3.connect(source) as connection:
        for statement in statements:
            connection.execute(statement, {"large": large} if ":large" in statement else {})
    connection.close()

    report = store.import_(fmt, source)

    assert (f"{source}: {place}", "is 1001 bytes, over the limit of 1000 bytes for a value") in [
        (error.place, error.reason.split(" ", 1)[1]) for error in report.errors
    ]
    assert report.sessions_written == []
    assert store.sessions.list() == []


def test_values_adding_up_to_more_than_the_file_holds_stop_the_file(store: Store, tmp_path: Path) -> None:
    """A column added with a default: every older row reads the default, which the file holds once."""
    default = json.dumps({"type": "human", "data": {"content": "x" * 3000}})
    source = build(
        tmp_path / "history.db",
        [
            "CREATE TABLE message_store (id INTEGER PRIMARY KEY, session_id TEXT)",
            *[f"INSERT INTO message_store (session_id) VALUES ('s{n // 50}')" for n in range(200)],
            f"ALTER TABLE message_store ADD COLUMN message TEXT DEFAULT '{default}'",
        ],
    )
    holds = source.stat().st_size
    assert holds < 200 * len(default)

    report = store.import_("langchain", source)

    assert [(error.place, error.reason) for error in report.errors] == [
        (
            f"{source}: message_store",
            f"the values read add up to more than the {holds} bytes the file holds "
            "(values made up when read, not stored): not read further",
        )
    ]
    assert report.sessions_written == []
    assert store.sessions.list() == []
