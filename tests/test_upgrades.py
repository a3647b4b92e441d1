"""Upgrading a database that holds data: every row and every total survives.

``tests/fixtures/schema/NNNN.db`` is a small SQLite database left at schema
revision NNNN by the turnstore of that revision, full of representative rows
(branches, a compaction, sub-agents, extension messages, imported sessions
with source records, loop-level reported usage, costs); ``NNNN.expected.json``
is a snapshot of every row and total taken from it when it was built
(``tests/fixtures/schema/make_0001.py`` builds both and says how to add one
per future revision). Every committed ``NNNN.db`` is checked: a new revision's
fixture is picked up by adding its files.

Each check copies the fixture, opens it with today's turnstore (which upgrades
it to head) and compares a fresh snapshot with the saved one: sessions,
loops, messages (canonical JSON, exactly), imports rows, the context of every
loop, and usage totals per turn, loop, session, model, day and store.
``turnstore db check`` must pass afterwards. The same rows are also loaded
into a PostgreSQL database created at the fixture's revision, upgraded and
checked the same way.

Downgrades: a step down and back up must keep the data where the revision
allows it. Revision 0001 is the first: its downgrade drops every table, so it
cannot be downgraded with its data kept (``docs/reliability.md``).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from factories import assistant, usage, user

from turnstore import InvalidArgument, SchemaOutOfDate, Store, migrate
from turnstore.cli import main
from turnstore.engine import create_engine

SCHEMA_FIXTURES = Path(__file__).parent / "fixtures" / "schema"
FIXTURE_DBS = sorted(SCHEMA_FIXTURES.glob("[0-9][0-9][0-9][0-9].db"))
TABLES = ("sessions", "loops", "messages", "imports")
USAGE_FIELDS = ("input", "output", "reasoning", "cache_read", "cache_write", "total_tokens", "requests")


def _load_builder() -> Any:
    spec = importlib.util.spec_from_file_location("make_0001", SCHEMA_FIXTURES / "make_0001.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


builder = _load_builder()


# --- comparing snapshots ---------------------------------------------------------------


def rounded(value: Any) -> Any:
    """Floats to 9 decimals, recursively: SUM order may differ between databases."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [rounded(item) for item in value]
    return value


def projected(actual: Any, expected: Any) -> Any:
    """``actual`` cut down to the keys ``expected`` has, recursively.

    A newer turnstore may add fields to sessions, loops or totals; the fields
    the old snapshot has must keep their values. A key it lost shows as missing.
    """
    if isinstance(actual, dict) and isinstance(expected, dict):
        return {key: projected(actual.get(key, "<missing>"), value) for key, value in expected.items()}
    if isinstance(actual, list) and isinstance(expected, list) and len(actual) == len(expected):
        return [projected(a, e) for a, e in zip(actual, expected)]
    return actual


def assert_snapshot_matches(actual: dict[str, Any], expected: dict[str, Any]) -> None:
    assert actual["counts"] == expected["counts"]
    # Messages and contexts are the wire format: exactly equal, no key added or lost.
    assert len(actual["messages"]) == len(expected["messages"])
    for got, want in zip(actual["messages"], expected["messages"]):
        assert got == want, f"message {want['id']} changed"
    assert actual["contexts"] == expected["contexts"]
    for part in ("sessions", "loops", "imports", "usage"):
        assert rounded(projected(actual[part], expected[part])) == rounded(expected[part]), part


RAW = {
    "messages": "SELECT id, message, source FROM messages ORDER BY id",
    "loops": "SELECT loop_id, source FROM loops ORDER BY loop_id",
    "sessions": "SELECT session_id, source FROM sessions ORDER BY session_id",
}
"""Text columns that must come through an upgrade byte for byte: message JSON and verbatim source records."""


def raw_text(rows: list[Any]) -> list[tuple[Any, ...]]:
    return [tuple(value if not isinstance(value, (dict, list)) else json.dumps(value) for value in row) for row in rows]


def fixture_raw(db_path: Path) -> dict[str, list[tuple[Any, ...]]]:
    connection = read_only(db_path)
    try:
        return {table: raw_text(connection.execute(sql).fetchall()) for table, sql in RAW.items()}
    finally:
        connection.close()


def store_raw(store: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {table: raw_text(store._db.fetchall(sa.text(sql))) for table, sql in RAW.items()}


def expected_for(db_path: Path) -> dict[str, Any]:
    return json.loads(db_path.with_suffix(".expected.json").read_text(encoding="utf-8"))


def read_only(path: Path) -> sqlite3.Connection:
    """A connection that never writes, nor leaves -wal/-shm files beside a committed fixture."""
    return sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)


def sqlite_revision(path: Path) -> list[str]:
    connection = read_only(path)
    try:
        return [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]
    finally:
        connection.close()


@pytest.fixture(params=FIXTURE_DBS, ids=lambda path: path.stem)
def fixture_db(request: pytest.FixtureRequest) -> Path:
    """One committed fixture database (never opened in place)."""
    return request.param


@pytest.fixture
def db_copy(fixture_db: Path, tmp_path: Path) -> Path:
    """A copy of the fixture to upgrade."""
    copy = tmp_path / "old.db"
    shutil.copyfile(fixture_db, copy)
    return copy


def run_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# --- the fixtures themselves ----------------------------------------------------------------


def test_fixtures_come_in_pairs_at_known_revisions() -> None:
    assert [path.name for path in FIXTURE_DBS][:1] == ["0001.db"]
    for path in FIXTURE_DBS:
        expected = expected_for(path)
        assert expected["revision"] == path.stem
        assert path.stem in migrate.known_revisions()
        assert expected["counts"]["sessions"] >= 5 and expected["counts"]["messages"] >= 30
    assert not list(SCHEMA_FIXTURES.glob("*.db-*")), "commit the fixture without -wal/-shm files"


def test_fixture_is_at_its_revision_and_sound(fixture_db: Path) -> None:
    assert sqlite_revision(fixture_db) == [fixture_db.stem]
    connection = read_only(fixture_db)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert connection.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        connection.close()


def test_fixture_covers_what_upgrades_must_carry(fixture_db: Path) -> None:
    expected = expected_for(fixture_db)
    kinds = {loop["continuation_kind"] for loop in expected["loops"]}
    assert {"initial", "default", "branch", "compaction", "rerun"} <= kinds
    assert any(loop["keep_from"] for loop in expected["loops"] if loop["continuation_kind"] == "compaction")
    assert any(loop["fork_after"] for loop in expected["loops"] if loop["continuation_kind"] == "branch")
    assert any(loop["spawn_loop_id"] for loop in expected["loops"])
    assert sum(1 for loop in expected["loops"] if loop["reported_usage"]) >= 2
    roles = {m["message"]["role"] for m in expected["messages"]}
    assert roles == {"system", "user", "assistant", "toolResult", "extension"}
    assert any(m["source"] for m in expected["messages"])
    assert {row["format"] for row in expected["imports"]} == {"pi", "appam"}
    assert expected["usage"]["total"]["reported_cost"] > 0 and expected["usage"]["total"]["cost"] > 0


# --- upgrading SQLite --------------------------------------------------------------------


def test_upgrade_keeps_every_row_and_total(db_copy: Path, fixture_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    expected = expected_for(fixture_db)
    with Store(db_copy) as store:  # auto-upgrades to head
        assert store.schema_version() == migrate.head()
        assert migrate.check(store.engine) == []
        assert_snapshot_matches(builder.snapshot(store, expected["prices"]), expected)
        assert store_raw(store) == fixture_raw(fixture_db)
    code, out = run_cli(capsys, "--db", str(db_copy), "db", "check")
    assert code == 0, out
    assert f"at {migrate.head()}" in out
    code, out = run_cli(capsys, "--db", str(db_copy), "usage", "--json")
    assert code == 0, out
    total = json.loads(out)
    assert {field: total[field] for field in USAGE_FIELDS} == {
        field: expected["usage"]["total"][field] for field in USAGE_FIELDS
    }


def test_upgrade_through_the_cli(db_copy: Path, fixture_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_cli(capsys, "--db", str(db_copy), "--json", "db", "upgrade")
    assert code == 0, out
    assert json.loads(out) == {"from": fixture_db.stem, "to": migrate.head()}
    expected = expected_for(fixture_db)
    with Store(db_copy, auto_upgrade=False) as store:
        assert_snapshot_matches(builder.snapshot(store, expected["prices"]), expected)


def test_upgraded_store_takes_new_writes(db_copy: Path, fixture_db: Path) -> None:
    expected = expected_for(fixture_db)
    last_id = max(m["id"] for m in expected["messages"])
    with Store(db_copy) as store:
        chat_loops = store.loops.list("chat")
        loop = store.loops.start("chat", parent_loop_id=chat_loops[0].loop_id)
        ids = store.messages.append_turn(
            loop.loop_id, 0, [user("after the upgrade"), assistant("still here", u=usage(10, 1))]
        )
        assert ids == [last_id + 1, last_id + 2]
        assert store.messages.get(ids[1]).seq == 1
        with pytest.raises(InvalidArgument):  # the fixture's loops have ended: they take no more messages
            store.messages.append_turn(chat_loops[0].loop_id, 9, [user("one more")])
        totals = store.usage.session("chat", prices=expected["prices"])
        assert totals.input == expected["usage"]["sessions"]["chat"]["input"] + 10
        assert totals.requests == expected["usage"]["sessions"]["chat"]["requests"] + 1
        # The imports rows (digests) survived: importing the same source again changes nothing.
        report = store.import_("pi", builder.PI_SOURCE)
        assert report.sessions_written == [] and len(report.sessions_unchanged) == 1
        store.sessions.delete("sub")
        assert store.sessions.count() == expected["counts"]["sessions"] - 1


def test_without_auto_upgrade_an_old_fixture_is_refused(db_copy: Path, fixture_db: Path) -> None:
    if fixture_db.stem == migrate.head():
        with Store(db_copy, auto_upgrade=False) as store:
            assert store.schema_version() == migrate.head()
        return
    before = db_copy.read_bytes()
    with pytest.raises(SchemaOutOfDate, match="db upgrade"):
        Store(db_copy, auto_upgrade=False)
    assert sqlite_revision(db_copy) == [fixture_db.stem]
    assert db_copy.read_bytes() == before


# --- downgrades -----------------------------------------------------------------------------


def head_script() -> Any:
    return ScriptDirectory.from_config(migrate.alembic_config()).get_revision(migrate.head())


def test_downgrade_one_step_and_back_keeps_the_data(db_copy: Path, fixture_db: Path) -> None:
    script = head_script()
    if script.down_revision is None:
        pytest.skip(
            f"head {script.revision} is the first revision: its downgrade drops every table, so there is no step "
            "down that keeps data (test_first_revision_downgrade_drops_every_table checks that)"
        )
    expected = expected_for(fixture_db)
    Store(db_copy).close()
    engine = create_engine(str(db_copy))
    try:
        migrate.downgrade(engine, "-1")
        assert migrate.current(engine) == script.down_revision
        migrate.upgrade(engine)
        assert migrate.current(engine) == migrate.head()
    finally:
        engine.dispose()
    with Store(db_copy, auto_upgrade=False) as store:
        assert_snapshot_matches(builder.snapshot(store, expected["prices"]), expected)


def test_first_revision_downgrade_drops_every_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Revision 0001 creates the schema; its downgrade drops every table and all the data in
    # them. There is no downgrade of 0001 that keeps data: back up the file first.
    copy = tmp_path / "old.db"
    shutil.copyfile(SCHEMA_FIXTURES / "0001.db", copy)
    Store(copy).close()
    engine = create_engine(str(copy))
    try:
        migrate.downgrade(engine, "base")
        assert migrate.current(engine) is None
        assert set(sa.inspect(engine).get_table_names()).isdisjoint(TABLES)
        migrate.upgrade(engine)
        assert migrate.current(engine) == migrate.head()
        assert migrate.check(engine) == []
    finally:
        engine.dispose()
    with Store(copy, auto_upgrade=False) as store:
        assert {
            table: int(store._db.scalar(sa.text(f"SELECT count(*) FROM {table}"))) for table in TABLES
        } == dict.fromkeys(TABLES, 0)
        store.sessions.create("fresh")
        loop = store.loops.start("fresh")
        store.messages.append_turn(loop.loop_id, 0, [user("hi"), assistant("hello")])
        assert store.usage.total().requests == 1
    code, out = run_cli(capsys, "--db", str(copy), "db", "check")
    assert code == 0, out


# --- the same rows on PostgreSQL ------------------------------------------------------------


def load_into_postgres(sqlite_file: Path, url: str) -> dict[str, int]:
    """Copy every row of the fixture's tables into a PostgreSQL database at the same revision.

    Values go over as the SQLite file holds them: JSON as text (cast to json/jsonb, so
    message text stays byte for byte), times as UTC text, ids as they are; then the
    message id sequence is moved past the copied ids.
    """
    source = read_only(sqlite_file)
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    copied: dict[str, int] = {}
    try:
        with engine.begin() as connection:
            for table in TABLES:
                columns = [row[1] for row in source.execute(f"PRAGMA table_info({table})")]
                types = dict(
                    connection.exec_driver_sql(
                        "SELECT column_name, data_type FROM information_schema.columns "
                        "WHERE table_schema = current_schema() AND table_name = %s",
                        (table,),
                    ).fetchall()
                )
                assert set(columns) == set(types), table
                marks, timestamp_columns = [], set()
                for index, column in enumerate(columns):
                    kind = types[column]
                    if kind in ("json", "jsonb"):
                        marks.append(f"%s::{kind}")
                    elif kind == "timestamp with time zone":
                        marks.append("%s::timestamptz")
                        timestamp_columns.add(index)
                    else:
                        marks.append("%s")
                rows = [
                    tuple(
                        value + "+00:00" if index in timestamp_columns and value is not None else value
                        for index, value in enumerate(row)
                    )
                    for row in source.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY rowid")
                ]
                if rows:
                    connection.exec_driver_sql(
                        f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(marks)})", rows
                    )
                copied[table] = len(rows)
            connection.exec_driver_sql(
                "SELECT setval(pg_get_serial_sequence('messages', 'id'), (SELECT max(id) FROM messages))"
            )
    finally:
        engine.dispose()
        source.close()
    return copied


def test_fixture_rows_upgrade_on_postgresql(
    fixture_db: Path, postgres: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    expected = expected_for(fixture_db)
    url = postgres.new_database()
    engine = create_engine(url)
    try:
        migrate.upgrade(engine, fixture_db.stem)  # the schema as the fixture's turnstore made it
        assert migrate.current(engine) == fixture_db.stem
    finally:
        engine.dispose()
    assert load_into_postgres(fixture_db, url) == expected["counts"]

    with Store(url) as store:  # auto-upgrades to head
        assert store.schema_version() == migrate.head()
        assert migrate.check(store.engine) == []
        assert_snapshot_matches(builder.snapshot(store, expected["prices"]), expected)
        assert store_raw(store) == fixture_raw(fixture_db)
        last_id = max(m["id"] for m in expected["messages"])
        loop = store.loops.start("chat")
        ids = store.messages.append_turn(loop.loop_id, 0, [user("after"), assistant("ok", u=usage(10, 1))])
        assert ids == [last_id + 1, last_id + 2]
    code, out = run_cli(capsys, "--db", url, "db", "check")
    assert code == 0, out
