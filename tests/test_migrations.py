"""The Alembic migrations and how a store applies them: written by hand, no pytest-alembic plugin.

Covers the three classic checks (one head, upgrade equals the models, up/down/up),
then what :class:`turnstore.Store` does on open: upgrade by default, refuse an
out-of-date database with ``auto_upgrade=False`` and a database newer than the
code always, survive concurrent first opens, and set up SQLite connections.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import shlex
import shutil
import sqlite3
import stat
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory
from factories import assistant, user

import turnstore
from turnstore import Store, migrate
from turnstore.engine import create_engine, resolve_url

REPO = Path(__file__).resolve().parents[1]
TABLES = {"sessions", "loops", "messages", "imports", "staging", "media", "session_media"}


@pytest.fixture
def engine(db_path: Path) -> Iterator[sa.Engine]:
    """A turnstore engine on a new SQLite file, nothing migrated yet."""
    created = create_engine(str(db_path))
    yield created
    created.dispose()


def table_names(path: Path) -> set[str]:
    """The tables in a SQLite file, read with a plain sqlite3 connection."""
    return sqlite_names(path, "table")


def sqlite_names(path: Path, *types: str) -> set[str]:
    """Names of the objects of these types (table, trigger, index) in a SQLite file, read with plain sqlite3."""
    connection = sqlite3.connect(path)
    try:
        marks = ", ".join("?" * len(types))
        rows = connection.execute(f"SELECT name FROM sqlite_master WHERE type IN ({marks})", types).fetchall()
    finally:
        connection.close()
    return {name for (name,) in rows}


def version_rows(path: Path) -> list[str]:
    """Every row of ``alembic_version``, read with a plain sqlite3 connection."""
    connection = sqlite3.connect(path)
    try:
        return [rev for (rev,) in connection.execute("SELECT version_num FROM alembic_version").fetchall()]
    finally:
        connection.close()


def stamp_unknown_revision(path: Path, revision: str = "9999") -> None:
    """Make ``path`` look like a database migrated by a newer turnstore."""
    connection = sqlite3.connect(path)
    try:
        with connection:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS alembic_version (version_num VARCHAR(32) NOT NULL PRIMARY KEY)"
            )
            connection.execute("DELETE FROM alembic_version")
            connection.execute("INSERT INTO alembic_version (version_num) VALUES (?)", (revision,))
    finally:
        connection.close()


def write_and_read_back(store: Store) -> None:
    """Write a session, a loop and one turn, and read them back."""
    session = store.sessions.create(title="after upgrade")
    loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    store.messages.append_turn(loop.loop_id, 0, [user("hello"), assistant("hi there")])
    assert store.sessions.get(session.session_id).title == "after upgrade"
    turn = store.messages.turn(loop.loop_id, 0)
    assert [m.role for m in turn.messages] == ["user", "assistant"]
    assert store.usage.session(session.session_id).input == 100


# --- the migration scripts ---------------------------------------------------------


def test_single_head() -> None:
    heads = ScriptDirectory.from_config(migrate.alembic_config()).get_heads()
    assert len(heads) == 1
    assert heads[0] == migrate.head()


def test_script_location_is_the_repo_folder_in_an_editable_install() -> None:
    # The editable install's package (src/turnstore) has no migrations/; the
    # locator must fall back to the repository's top-level folder.
    location = migrate.script_location()
    assert Path(location) == REPO / "migrations"
    assert (Path(location) / "env.py").is_file()


def test_upgrade_matches_the_models(engine: sa.Engine, db_path: Path) -> None:
    assert migrate.current(engine) is None
    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head()
    assert table_names(db_path) >= TABLES
    assert migrate.check(engine) == []


def test_check_finds_a_difference(engine: sa.Engine) -> None:
    # check() must be able to fail: on a database missing one of the models' indexes it reports it.
    migrate.upgrade(engine)
    with engine.begin() as connection:
        connection.exec_driver_sql("DROP INDEX ix_sessions_agent_id")
    differences = migrate.check(engine)
    assert differences
    assert "ix_sessions_agent_id" in str(differences)


def test_upgrade_downgrade_upgrade(engine: sa.Engine, db_path: Path) -> None:
    migrate.upgrade(engine)
    with Store(db_path) as store:
        store.sessions.create(title="before downgrade")

    migrate.downgrade(engine, "base")
    assert migrate.current(engine) is None
    assert table_names(db_path).isdisjoint(TABLES)

    migrate.upgrade(engine)
    assert migrate.current(engine) == migrate.head()
    assert migrate.check(engine) == []
    with Store(db_path, auto_upgrade=False) as store:
        # The downgrade dropped the old data; the re-created tables work.
        assert store.sessions.count() == 0
        write_and_read_back(store)


def test_upgrade_twice_is_a_no_op(engine: sa.Engine, db_path: Path) -> None:
    migrate.upgrade(engine)
    migrate.upgrade(engine)
    assert version_rows(db_path) == [migrate.head()]


def test_downgrade_to_unknown_revision_raises_schema_error(engine: sa.Engine) -> None:
    migrate.upgrade(engine)
    with pytest.raises(turnstore.SchemaError, match="nonexistent"):
        migrate.downgrade(engine, "nonexistent")
    assert migrate.current(engine) == migrate.head()


def test_upgrade_to_unknown_revision_raises_schema_error(engine: sa.Engine) -> None:
    with pytest.raises(turnstore.SchemaError, match="nonexistent"):
        migrate.upgrade(engine, "nonexistent")


# --- opening a store ----------------------------------------------------------------


def test_store_upgrades_a_new_database_by_default(db_path: Path) -> None:
    assert not db_path.exists()
    with Store(db_path) as store:
        assert store.schema_version() == migrate.head()
        assert migrate.check(store.engine) == []
        write_and_read_back(store)
    assert version_rows(db_path) == [migrate.head()]


def test_store_upgrade_and_schema_version(db_path: Path) -> None:
    with Store(db_path) as store:
        migrate.downgrade(store.engine, "base")
        assert store.schema_version() is None
        store.upgrade()
        assert store.schema_version() == migrate.head()
        store.upgrade()  # already at head: nothing to do
        assert store.schema_version() == migrate.head()
        write_and_read_back(store)


def test_store_upgrade_to_unknown_revision_raises_schema_error(store: Store) -> None:
    with pytest.raises(turnstore.SchemaError):
        store.upgrade("nonexistent")
    assert store.schema_version() == migrate.head()


def assert_names_upgrade_command(message: str) -> None:
    assert re.search(r"\bturnstore\b.*\bdb upgrade\b", message), message


def test_no_auto_upgrade_refuses_an_empty_database(db_path: Path) -> None:
    with pytest.raises(turnstore.SchemaOutOfDate) as raised:
        Store(db_path, auto_upgrade=False)
    assert_names_upgrade_command(str(raised.value))
    assert migrate.head() in str(raised.value)
    assert isinstance(raised.value, turnstore.SchemaError)
    assert table_names(db_path) == set()


def test_no_auto_upgrade_refuses_a_database_behind_head(engine: sa.Engine, db_path: Path) -> None:
    # An "old" database: migrated once, then taken back to base (only alembic_version left).
    migrate.upgrade(engine)
    migrate.downgrade(engine, "base")
    with pytest.raises(turnstore.SchemaOutOfDate) as raised:
        Store(db_path, auto_upgrade=False)
    assert_names_upgrade_command(str(raised.value))
    assert table_names(db_path).isdisjoint(TABLES)
    assert migrate.current(engine) is None


def test_out_of_date_message_gives_a_runnable_command(tmp_path: Path) -> None:
    # The command in the message must work when pasted into a shell, even for a path with a space.
    db_path = tmp_path / "my agent" / "store.db"
    with pytest.raises(turnstore.SchemaOutOfDate) as raised:
        Store(db_path, auto_upgrade=False)
    command = str(raised.value).rsplit("run: ", 1)[1]
    argv = shlex.split(command)
    assert argv[0] == "turnstore"
    assert argv[-2:] == ["db", "upgrade"]
    if "--db" in argv:
        assert resolve_url(argv[argv.index("--db") + 1]) == resolve_url(db_path)


def test_out_of_date_message_hides_the_password(engine: sa.Engine) -> None:
    # Store() passes its full URL to ensure_schema; exercised here on a SQLite engine so no server is needed.
    url = "postgresql+psycopg://agent:s3cret-pw@db.example:5432/agents"
    with pytest.raises(turnstore.SchemaOutOfDate) as raised:
        migrate.ensure_schema(engine, auto_upgrade=False, url=url)
    assert_names_upgrade_command(str(raised.value))
    assert "s3cret-pw" not in str(raised.value)


def test_no_auto_upgrade_opens_a_database_at_head(db_path: Path) -> None:
    Store(db_path).close()
    with Store(db_path, auto_upgrade=False) as store:
        assert store.schema_version() == migrate.head()


def test_store_refuses_a_database_from_a_newer_turnstore(db_path: Path) -> None:
    Store(db_path).close()
    stamp_unknown_revision(db_path)
    with pytest.raises(turnstore.SchemaTooNew, match="9999"):
        Store(db_path)
    with pytest.raises(turnstore.SchemaTooNew):
        Store(db_path, auto_upgrade=False)
    assert version_rows(db_path) == ["9999"]


def test_store_refuses_a_newer_database_that_has_no_tables(db_path: Path) -> None:
    # Not "out of date" (which would upgrade it): unknown revisions are refused before anything runs.
    stamp_unknown_revision(db_path)
    with pytest.raises(turnstore.SchemaTooNew):
        Store(db_path)
    assert table_names(db_path) == {"alembic_version"}
    assert version_rows(db_path) == ["9999"]


def test_migrate_upgrade_refuses_a_database_from_a_newer_turnstore(engine: sa.Engine, db_path: Path) -> None:
    migrate.upgrade(engine)
    stamp_unknown_revision(db_path)
    with pytest.raises(turnstore.SchemaTooNew):
        migrate.upgrade(engine)
    assert version_rows(db_path) == ["9999"]


# --- concurrent first opens ------------------------------------------------------


def empty_wal_database(path: Path) -> None:
    """An empty database file (no tables) already in WAL mode.

    The concurrent-open tests start from this rather than from no file at all:
    switching a brand-new file to WAL races (see
    ``test_store_waits_for_a_writer_on_a_new_database``), and these tests are
    about the migrations racing, which this leaves fully in play.
    """
    connection = sqlite3.connect(path)
    try:
        assert connection.execute("PRAGMA journal_mode=wal").fetchone() == ("wal",)
    finally:
        connection.close()


def test_two_threads_open_a_new_database_at_once(db_path: Path) -> None:
    empty_wal_database(db_path)
    barrier = threading.Barrier(2)
    versions: list[str | None] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            barrier.wait(timeout=30)
            with Store(db_path) as store:
                versions.append(store.schema_version())
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=open_store) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert versions == [migrate.head(), migrate.head()]
    assert version_rows(db_path) == [migrate.head()]
    with Store(db_path, auto_upgrade=False) as store:
        assert migrate.check(store.engine) == []


def _open_in_process(path: str, barrier: multiprocessing.synchronize.Barrier, results: multiprocessing.Queue) -> None:
    try:
        barrier.wait(timeout=60)
        with Store(path) as store:
            results.put(("ok", store.schema_version()))
    except BaseException as error:  # sent to the parent, which asserts on it
        results.put(("error", f"{type(error).__name__}: {error}"))


def test_processes_open_a_new_database_at_once(db_path: Path) -> None:
    # Separate processes do not share migrate's in-process lock: only the database's own lock serializes them.
    empty_wal_database(db_path)
    # fork where there is one: the children need not import turnstore again (seconds on a loaded machine).
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    count = 3
    barrier = context.Barrier(count)
    results = context.Queue()
    processes = [context.Process(target=_open_in_process, args=(str(db_path), barrier, results)) for _ in range(count)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert outcomes == [("ok", migrate.head())] * count
    assert [process.exitcode for process in processes] == [0] * count
    assert version_rows(db_path) == [migrate.head()]


def test_store_waits_for_a_writer_on_a_new_database(db_path: Path) -> None:
    # Another connection (another process, in real life) holds the write lock on the new file briefly.
    writer = sqlite3.connect(db_path, isolation_level=None, check_same_thread=False)
    writer.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, writer.execute, args=("COMMIT",))
    release.start()
    try:
        with Store(db_path) as store:
            assert store.schema_version() == migrate.head()
            assert pragma(store, "journal_mode") == "wal"
    finally:
        release.join()
        writer.close()


# --- SQLite connections -----------------------------------------------------------


def pragma(store: Store, name: str) -> object:
    """A pragma as seen by the store's own connection."""
    return store._db.scalar(sa.text(f"PRAGMA {name}"))


def test_default_pragmas(sqlite_store: Store) -> None:
    store = sqlite_store
    assert pragma(store, "journal_mode") == "wal"
    assert pragma(store, "synchronous") == 1  # NORMAL
    assert pragma(store, "foreign_keys") == 1
    assert pragma(store, "busy_timeout") == 5000


def test_pragmas_apply_to_every_connection(sqlite_store: Store) -> None:
    store = sqlite_store
    # Each thread gets its own connection; the settings must hold there too.
    seen: dict[str, object] = {}

    def read() -> None:
        seen.update({name: pragma(store, name) for name in ("synchronous", "foreign_keys", "busy_timeout")})

    thread = threading.Thread(target=read)
    thread.start()
    thread.join(timeout=30)
    assert seen == {"synchronous": 1, "foreign_keys": 1, "busy_timeout": 5000}


def test_pragmas_can_be_overridden(db_path: Path) -> None:
    with Store(db_path, pragmas={"synchronous": "full", "busy_timeout": 250}) as store:
        assert pragma(store, "synchronous") == 2  # FULL
        assert pragma(store, "busy_timeout") == 250
        # The others keep their defaults.
        assert pragma(store, "foreign_keys") == 1
        assert pragma(store, "journal_mode") == "wal"


def test_wal_mode_persists_in_the_file(db_path: Path) -> None:
    Store(db_path).close()
    connection = sqlite3.connect(db_path)
    try:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        connection.close()


def test_invalid_pragma_value_is_rejected(db_path: Path) -> None:
    with pytest.raises(ValueError, match="pragma"):
        Store(db_path, pragmas={"synchronous": "normal; DROP TABLE sessions"})


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_new_database_file_is_private(tmp_path: Path) -> None:
    db_path = tmp_path / "nested" / "store.db"
    old_umask = os.umask(0o022)
    try:
        with Store(db_path) as store:
            store.sessions.create(title="x")
            mode = stat.S_IMODE(db_path.stat().st_mode)
            # SQLite gives the WAL side files the main file's mode.
            side_modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in db_path.parent.glob("store.db-*")}
    finally:
        os.umask(old_umask)
    assert mode == 0o600
    assert side_modes and set(side_modes.values()) == {0o600}


@pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")
def test_existing_database_file_keeps_its_mode(db_path: Path) -> None:
    db_path.touch(mode=0o644)
    os.chmod(db_path, 0o644)
    Store(db_path).close()
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o644


def test_0004_adds_the_staging_table_to_a_store_with_data_and_takes_it_away(engine: sa.Engine, db_path: Path) -> None:
    migrate.upgrade(engine, "0003")
    with Store(db_path, auto_upgrade=True) as store:  # 0003 -> head on open
        session_id = store.sessions.create(title="kept").session_id
    assert "staging" in table_names(db_path)
    migrate.downgrade(engine, "0003")
    assert "staging" not in table_names(db_path)
    migrate.upgrade(engine)
    assert migrate.check(engine) == []
    with Store(db_path, auto_upgrade=False) as store:
        assert store.sessions.get(session_id).title == "kept" and store.sessions.count() == 1


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_url(request: pytest.FixtureRequest, db_path: Path) -> str:
    """A new, unmigrated database of each backend."""
    if request.param == "sqlite":
        return str(db_path)
    return str(request.getfixturevalue("postgres").new_database())


def test_0006_moves_media_of_a_store_with_data_out_of_line_and_back(empty_url: str) -> None:
    """Rows written at 0004 (an image twice, in a message and its source; an escaped solidus; more rows
    than one batch) read back byte for byte after the upgrade, and the downgrade puts every text back."""
    import base64

    from turnstore.media import MARK

    engine = create_engine(empty_url)
    migrate.upgrade(engine, "0004")
    image = base64.b64encode(bytes(range(256)) * 100).decode()
    with_image = (
        '{"role":"user","content":[{"type":"image","data":"' + image + '","mimeType":"image/png"}],"timestamp":1}'
    )
    rows = [(with_image, '{"url":"data:image/png;base64,' + image + '"}'), (with_image, None)]
    rows += [
        ('{"role":"user","content":[{"type":"text","text":"a\\\\/b ' + str(i) + '"}],"timestamp":2}', "x\\/y")
        for i in range(250)
    ]
    rows.append((with_image, with_image))
    json_value = "CAST(:message AS JSON)" if engine.dialect.name == "postgresql" else ":message"
    with engine.begin() as connection:
        # How each backend's timestamp column takes a time (turnstore's Database.bind_time).
        when: Any = "2026-01-01 00:00:00.000000"
        if engine.dialect.name == "postgresql":
            when = datetime(2026, 1, 1, tzinfo=timezone.utc)
        connection.execute(
            sa.text("INSERT INTO sessions (session_id, created_at, updated_at) VALUES ('s', :when, :when)"),
            {"when": when},
        )
        connection.execute(
            sa.text(
                "INSERT INTO loops (loop_id, session_id, continuation_kind, status, started_at) "
                "VALUES ('l', 's', 'initial', 'running', (SELECT created_at FROM sessions))"
            )
        )
        connection.execute(
            sa.text(
                "INSERT INTO messages (session_id, loop_id, seq, role, message, source) "
                f"VALUES ('s', 'l', :seq, 'user', {json_value}, :source)"
            ),
            [{"seq": seq, "message": message, "source": source} for seq, (message, source) in enumerate(rows)],
        )

    def raw(query: str) -> list[tuple[Any, ...]]:
        with engine.connect() as connection:
            return [tuple(row) for row in connection.execute(sa.text(query))]

    def texts() -> list[tuple[Any, ...]]:
        return raw("SELECT CAST(message AS TEXT), source FROM messages ORDER BY id")

    try:
        migrate.upgrade(engine)
        assert migrate.check(engine) == []
        stored = texts()
        assert image not in "".join(f"{message}{source}" for message, source in stored)
        assert stored[2] == (
            '{"role":"user","content":[{"type":"text","text":"a\\\\/\\/b 0"}],"timestamp":2}',
            "x\\/\\/y",
        )
        assert raw("SELECT count(*), min(length(data)) FROM media") == [(1, len(image))]
        assert raw("SELECT session_id FROM session_media") == [("s",)]
        with Store(empty_url, auto_upgrade=False) as store:
            assert [(row.message, row.source) for row in store.messages.rows("s")] == rows
            assert store.messages.loop("l", media="omit")[0].content[0].data == ""  # type: ignore[union-attr]
        migrate.downgrade(engine, "0004")
        assert texts() == rows and not any(MARK + "m" in message for message, _ in texts())
        assert {"media", "session_media"}.isdisjoint(sa.inspect(engine).get_table_names())
    finally:
        engine.dispose()


# --- 0007: full-text search --------------------------------------------------------------

FIXTURE_0004 = REPO / "tests" / "fixtures" / "schema" / "0004.db"


def sqlite_objects(path: Path) -> set[str]:
    """Names of the tables and triggers in a SQLite file."""
    return sqlite_names(path, "table", "trigger")


def message_columns(engine: sa.Engine) -> set[str]:
    return {column["name"] for column in sa.inspect(engine).get_columns("messages")}


def test_0007_indexes_a_store_written_at_0004_and_downgrades_cleanly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    shutil.copyfile(FIXTURE_0004, path)
    with caplog.at_level("INFO", logger="turnstore.migrate"), Store(path) as store:  # 0004 -> head on open
        messages = sum(1 for session in store.sessions.list() for _ in store.messages.records(session.session_id))
        assert [hit.snippet for hit in store.messages.search('"escaped quotes"')] == [
            "src/parser.ts:12: // TODO: escaped quotes"
        ]
        assert {hit.role for hit in store.messages.search("parser")} >= {"assistant", "toolResult"}
        assert store.messages.search("reasoning", thinking=False) == []
        assert len(store.messages.search("reasoning")) >= 1
    assert f"indexed {messages} of {messages} messages" in caplog.text
    assert {"message_search", "message_search_insert", "message_search_delete"} <= sqlite_objects(path)

    engine = create_engine(str(path))
    try:
        migrate.downgrade(engine, "0004")
        assert not {name for name in sqlite_objects(path) if name.startswith("message_search")}
        assert {"search_text", "search_thinking"}.isdisjoint(message_columns(engine))
        with engine.connect() as connection:
            assert connection.exec_driver_sql("SELECT count(*) FROM messages").scalar() == messages
        migrate.upgrade(engine)
        assert migrate.check(engine) == []
    finally:
        engine.dispose()
    with Store(path, auto_upgrade=False) as store:
        assert len(store.messages.search("parser")) >= 2


def test_0007_up_and_down_on_postgresql_with_data(postgres: Any) -> None:
    url = postgres.new_database()
    with Store(url) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        store.messages.append_turn(loop_id, 0, [user("the quarterly report"), assistant("reasoning done")])
    engine = create_engine(url)
    try:
        migrate.downgrade(engine, "0004")
        assert {"search_text", "search_thinking"}.isdisjoint(message_columns(engine))
        assert "ix_messages_search" not in {index["name"] for index in sa.inspect(engine).get_indexes("messages")}
        migrate.upgrade(engine)  # the backfill indexes the two messages written before
        assert "ix_messages_search" in {index["name"] for index in sa.inspect(engine).get_indexes("messages")}
        assert migrate.check(engine) == []
    finally:
        engine.dispose()
    with Store(url, auto_upgrade=False) as store:
        assert [hit.snippet for hit in store.messages.search("quarterly")] == ["the quarterly report"]
        assert len(store.messages.search("report reasoning", match="any")) == 2


def test_0007_leaves_a_stored_message_that_no_longer_validates_unindexed(tmp_path: Path) -> None:
    """A row changed outside turnstore does not stop the upgrade: it is left out of the index, the rest indexed."""
    path = tmp_path / "store.db"
    with Store(path) as store:
        loop_id = store.loops.start(store.sessions.create("s").session_id).loop_id
        ids = store.messages.append_turn(loop_id, 0, [user("first quarterly"), user("second quarterly")])
    engine = create_engine(str(path))
    try:
        migrate.downgrade(engine, "0006")
        with engine.begin() as connection:
            connection.exec_driver_sql(
                "UPDATE messages SET message = ? WHERE id = ?", ('{"role":"user","content":5,"timestamp":1}', ids[0])
            )
        migrate.upgrade(engine)
    finally:
        engine.dispose()
    with Store(path) as store:
        assert [hit.message_id for hit in store.messages.search("quarterly")] == [ids[1]]


def test_0007_on_a_sqlite_without_fts5_adds_the_columns_only(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from turnstore.repositories import search as search_module

    monkeypatch.setattr(search_module, "fts5_available", lambda connection: False)
    Store(db_path).close()
    assert not {name for name in sqlite_objects(db_path) if name.startswith("message_search")}
    engine = create_engine(str(db_path))
    try:
        assert {"search_text", "search_thinking"} <= message_columns(engine)
        assert migrate.check(engine) == []
        migrate.downgrade(engine, "0004")  # nothing to drop but the columns
        assert {"search_text", "search_thinking"}.isdisjoint(message_columns(engine))
    finally:
        engine.dispose()


# --- 0009: PostgreSQL indexes the stored words as they are --------------------------------


def index_definition(engine: sa.Engine) -> str | None:
    with engine.connect() as connection:
        found = connection.exec_driver_sql("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_messages_search'")
        return found.scalar()


def has_words_function(engine: sa.Engine) -> bool:
    with engine.connect() as connection:
        return connection.exec_driver_sql("SELECT to_regproc('turnstore_search_words') IS NOT NULL").scalar() is True


def test_0009_up_and_down_on_postgresql_with_data(postgres: Any) -> None:
    """Words PostgreSQL's own parser dropped (U+09F4) or lowercased apart (Cherokee) are found once 0009 remakes
    the index over the words as stored; the downgrade puts back exactly the index 0008 had."""
    at_0008 = create_engine(postgres.new_database())
    try:
        migrate.upgrade(at_0008, "0008")
        index_0008 = index_definition(at_0008)
    finally:
        at_0008.dispose()
    url = postgres.new_database()
    with Store(url) as store:
        loop_id = store.loops.start(store.sessions.create().session_id).loop_id
        ids = store.messages.append_turn(
            loop_id, 0, [user("\u13e3\u13b3\u13a9 tsalagi"), user("\u09f4 numerator"), assistant("other words")]
        )
    engine = create_engine(url)
    try:
        migrate.downgrade(engine, "0008")
        assert index_definition(engine) == index_0008 and not has_words_function(engine)
        migrate.upgrade(engine)
        assert "turnstore_search_words" in (index_definition(engine) or "") and has_words_function(engine)
        assert migrate.check(engine) == []
        with engine.begin() as connection:  # words written outside turnstore: quotes, backslashes, empty words
            connection.execute(
                sa.text("UPDATE messages SET search_thinking = :words WHERE id = :id"),
                {"words": " it's  a\\b ", "id": ids[2]},
            )
    finally:
        engine.dispose()
    with Store(url, auto_upgrade=False) as store:
        assert [hit.message_id for hit in store.messages.search("\uabb3\uab83\uab79")] == [ids[0]]
        assert [hit.message_id for hit in store.messages.search("\u09f4")] == [ids[1]]
        assert [hit.message_id for hit in store.messages.search("tsalagi numerator", match="any")] == ids[1::-1]
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            found = connection.execute(
                sa.text("SELECT id FROM messages WHERE turnstore_search_words(search_thinking, 'B') @@ :query"),
                {"query": "'it''s' <-> 'a\\\\b'"},
            )
            assert found.scalars().all() == [ids[2]]
    finally:
        engine.dispose()
