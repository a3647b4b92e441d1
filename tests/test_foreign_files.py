"""turnstore changes no file that is not its own, and reads a store it may not write.

Every read-only command, on an OpenAI Agents database (in WAL mode, closed and
open), an appam-like database, an arbitrary SQLite file, another app's Alembic
database and a file that is not SQLite at all, fails with one line saying so
and leaves the file byte-identical and its folder's listing unchanged; on a
path that does not exist, it creates nothing. Commands that write refuse the
same files. ``Store(url)`` refuses them with ``NotAStore``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest
from cli_runner import Result, assert_one_error_line, run_cli
from factories import assistant, user
from helpers import file_state

from turnstore import (
    AsyncStore,
    NotAStore,
    ReadOnlyStore,
    SchemaOutOfDate,
    Store,
    migrate,
)

FIXTURES = Path(__file__).parent / "fixtures"
OPENAI_AGENTS = FIXTURES / "openai_agents" / "sqlite_session.db"
ARRAY = FIXTURES / "phi_core" / "messages" / "save_messages.json"

T = TypeVar("T")


def _openai_agents(path: Path) -> None:
    shutil.copyfile(OPENAI_AGENTS, path)
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")  # the SDK leaves its files in WAL mode
    connection.close()


def _sqlite(path: Path, *statements: str) -> None:
    with sqlite3.connect(path) as connection:
        for statement in statements:
            connection.execute(statement)
    connection.close()


FOREIGN: dict[str, Callable[[Path], None]] = {
    "openai-agents": _openai_agents,
    "appam": lambda path: _sqlite(
        path,
        "CREATE TABLE session_history (id TEXT PRIMARY KEY, messages TEXT)",
        "INSERT INTO session_history VALUES ('a', '[]')",
    ),
    "arbitrary": lambda path: _sqlite(
        path, "CREATE TABLE notes (id INTEGER, body TEXT)", "INSERT INTO notes VALUES (1, 'x')"
    ),
    "other-alembic-app": lambda path: _sqlite(
        path,
        "CREATE TABLE alembic_version (version_num TEXT)",
        "INSERT INTO alembic_version VALUES ('abc123')",
        "CREATE TABLE users (id INTEGER)",
    ),
    "not-sqlite": lambda path: path.write_text("name,value\na,1\n"),
}


@pytest.fixture(params=sorted(FOREIGN))
def foreign(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    """A file that is not a turnstore store, alone in its folder."""
    folder = tmp_path / "app"
    folder.mkdir()
    path = folder / "app.db"
    FOREIGN[request.param](path)
    return path


READ_ONLY_COMMANDS = [
    ["sessions"],
    ["sessions", "--json"],
    ["show", "s1"],
    ["usage"],
    ["usage", "--by", "model", "--json"],
    ["export", "s1"],
    ["db", "current"],
    ["db", "check"],
]
WRITING_COMMANDS = [
    ["import", "phi-core", str(ARRAY)],
    ["demo"],
    ["db", "upgrade"],
    ["db", "downgrade", "base", "--yes"],
    ["db", "downgrade", "base"],
]


def _ids(args: list[str]) -> str:
    return " ".join(arg for arg in args if not arg.startswith("/"))


@pytest.mark.parametrize("args", READ_ONLY_COMMANDS + WRITING_COMMANDS, ids=_ids)
def test_commands_refuse_a_foreign_file_and_leave_it_byte_identical(foreign: Path, args: list[str]) -> None:
    before = file_state(foreign)

    line = assert_one_error_line(run_cli("--db", foreign, *args))

    assert "not a turnstore store" in line and str(foreign) in line
    assert file_state(foreign) == before


def test_a_foreign_wal_database_in_use_is_left_alone(tmp_path: Path) -> None:
    """With the owning app's connection open (-wal and -shm present), turnstore still changes nothing."""
    path = tmp_path / "agents.db"
    _openai_agents(path)
    owner = sqlite3.connect(path)
    owner.execute("INSERT INTO agent_sessions (session_id) VALUES ('live')")
    owner.commit()
    try:
        before = file_state(path)
        for args in READ_ONLY_COMMANDS + WRITING_COMMANDS:
            assert_one_error_line(run_cli("--db", path, *args), "not a turnstore store")
        assert file_state(path) == before
        assert owner.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        owner.close()


@pytest.mark.parametrize("args", [a for a in READ_ONLY_COMMANDS if a != ["db", "current"]], ids=_ids)
def test_read_only_commands_create_nothing_at_a_missing_path(tmp_path: Path, args: list[str]) -> None:
    missing = tmp_path / "sub" / "missing.db"

    assert_one_error_line(run_cli("--db", missing, *args), "no database at", str(missing))

    assert not (tmp_path / "sub").exists()


def test_db_current_of_a_missing_path_is_none_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"

    result = run_cli("--db", missing, "db", "current")

    assert result.code == 0 and "none" in result.out
    assert os.listdir(tmp_path) == []


def test_default_database_is_not_created_by_a_read_only_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TURNSTORE_URL", raising=False)

    assert_one_error_line(run_cli("sessions"), "no database at turnstore.db")

    assert os.listdir(tmp_path) == []


def test_read_only_command_on_an_empty_file_names_the_upgrade_command(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()

    assert_one_error_line(run_cli("--db", empty, "sessions"), "db upgrade")

    assert empty.read_bytes() == b""


@pytest.mark.parametrize("args", [["db", "upgrade"], ["import", "phi-core", str(ARRAY)]], ids=_ids)
def test_writing_commands_make_a_store_of_an_empty_file(tmp_path: Path, args: list[str]) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()

    assert run_cli("--db", empty, *args).code == 0

    assert Store(empty, auto_upgrade=False).schema_version() == migrate.head()


# --- the API -----------------------------------------------------------------------------------


def test_store_refuses_a_foreign_file_untouched(foreign: Path) -> None:
    before = file_state(foreign)

    with pytest.raises(NotAStore, match="not a turnstore store"):
        Store(foreign)
    with pytest.raises(NotAStore):
        Store(f"sqlite:///{foreign}", read_only=True)

    assert file_state(foreign) == before


def test_async_store_refuses_a_foreign_file_untouched(foreign: Path) -> None:
    before = file_state(foreign)

    with pytest.raises(NotAStore):
        asyncio.run(AsyncStore.open(foreign))

    assert file_state(foreign) == before


def test_store_opens_a_store_that_holds_tables_of_its_app_too(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    Store(path).close()
    _sqlite(path, "CREATE TABLE app_settings (key TEXT)")

    with Store(path) as store:
        store.sessions.create("s1")
        assert store.sessions.exists("s1")


def test_read_only_store_reads_and_refuses_writes(tmp_path: Path) -> None:
    path = _store_with_a_session(tmp_path / "store.db")

    with Store(path, read_only=True) as store:
        assert [row.session_id for row in store.sessions.list()] == ["s1"]
        with pytest.raises(ReadOnlyStore, match="read-only"):
            store.sessions.create("s2")
        with pytest.raises(ReadOnlyStore):
            store.messages.append_turn(store.loops.list("s1")[0].loop_id, 1, [user("more")])
    with Store(path) as store:
        assert not store.sessions.exists("s2")


def test_read_only_commands_leave_a_store_and_its_folder_as_they_were(tmp_path: Path) -> None:
    path = _store_with_a_session(tmp_path / "store.db")
    before = file_state(path)

    codes = [run_cli("--db", path, *args).code for args in READ_ONLY_COMMANDS]

    assert codes == [0] * len(READ_ONLY_COMMANDS)
    assert file_state(path) == before  # no -wal or -shm left behind either


def test_read_only_store_never_creates_or_upgrades(tmp_path: Path) -> None:
    missing = tmp_path / "missing.db"
    with pytest.raises(NotAStore, match="no database at"):
        Store(missing, read_only=True)
    assert not missing.exists()

    old = _store_with_a_session(tmp_path / "old.db")
    with Store(old, auto_upgrade=False) as writer:  # closed: its WAL is in the file before the snapshot
        migrate.downgrade(writer.engine, "-1")
    before = file_state(old)
    with pytest.raises(SchemaOutOfDate, match="db upgrade"):
        Store(old, read_only=True)
    assert file_state(old)[0] == before[0]


def _store_with_a_session(path: Path) -> Path:
    with Store(path) as store:
        store.sessions.create("s1", title="kept")
        loop = store.loops.start("s1", config={"model": "claude-sonnet-4-5"})
        store.messages.append_turn(loop.loop_id, 0, [user("hi"), assistant("hello")])
    return path


# --- a store the process may not write -----------------------------------------------------------------


def unprivileged(function: Callable[[], T]) -> T:
    """Run ``function`` where file permissions bind: directly, or as user nobody in a forked child under root.

    The child returns its result (or the type and text of what it raised) through a pipe.
    """
    if os.geteuid() != 0:
        return function()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        try:
            os.setgid(65534)
            os.setuid(65534)
            payload = pickle.dumps(("returned", function()))
        except BaseException as error:
            payload = pickle.dumps(("raised", (type(error).__name__, str(error))))
        with os.fdopen(write, "wb") as pipe:
            pipe.write(payload)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        outcome, value = pickle.loads(pipe.read())
    os.waitpid(pid, 0)
    if outcome == "raised":
        raise AssertionError(f"{value[0]}: {value[1]}")
    return value  # type: ignore[no-any-return]


@pytest.fixture(params=["file-0444", "folder-0555"])
def read_only_store(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A store with one session, that the test (or, under root, user nobody) may read but not write."""
    folder = Path(tempfile.mkdtemp(prefix="turnstore-ro-"))
    path = _store_with_a_session(folder / "store.db")
    for name in os.listdir(folder):
        assert name == "store.db"  # closed cleanly: no -wal or -shm left
    root = os.geteuid() == 0
    warm = Path(tempfile.mkdtemp(prefix="turnstore-warm-"))
    shutil.copyfile(path, warm / "store.db")
    run_cli("--db", warm / "store.db", "show", "s1")  # imports every module the child will need
    shutil.rmtree(warm)
    if request.param == "file-0444":
        path.chmod(0o444)
        folder.chmod(0o777 if root else 0o755)  # others may make the -shm file, not change the database
    else:
        path.chmod(0o644)
        folder.chmod(0o755 if root else 0o555)
    try:
        yield path
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_read_only_commands_read_a_store_they_may_not_write(read_only_store: Path) -> None:
    before = hashlib.sha256(read_only_store.read_bytes()).hexdigest()

    results = unprivileged(
        lambda: [
            run_cli("--db", read_only_store, *args)
            for args in (["sessions", "--json"], ["show", "s1"], ["usage"], ["db", "check"])
        ]
    )

    assert [r.code for r in results] == [0, 0, 0, 0], results
    assert [row["session_id"] for row in results[0].json()] == ["s1"]
    assert hashlib.sha256(read_only_store.read_bytes()).hexdigest() == before


@pytest.mark.parametrize("args", [["import", "phi-core", str(ARRAY)], ["demo"]], ids=_ids)
def test_writing_to_a_store_it_may_not_write_is_one_read_only_line(read_only_store: Path, args: list[str]) -> None:
    result: Result = unprivileged(lambda: run_cli("--db", read_only_store, *args))

    assert_one_error_line(result, "read-only", str(read_only_store))


def test_api_reads_a_store_it_may_not_write_and_refuses_writes(read_only_store: Path) -> None:
    def attempt() -> tuple[list[str], str, str]:
        with Store(read_only_store) as store:
            listed = [row.session_id for row in store.sessions.list()]
            try:
                store.sessions.create("s2")
            except Exception as error:
                return listed, type(error).__name__, str(error)
        return listed, "nothing raised", ""

    listed, raised, message = unprivileged(attempt)

    assert listed == ["s1"]
    assert raised == "ReadOnlyStore" and "\n" not in message


def test_a_new_database_in_a_folder_it_may_not_write_is_a_read_only_error() -> None:
    folder = Path(tempfile.mkdtemp(prefix="turnstore-ro-"))
    folder.chmod(0o755 if os.geteuid() == 0 else 0o555)
    try:
        result: Result = unprivileged(lambda: run_cli("--db", folder / "new.db", "import", "phi-core", str(ARRAY)))
        assert_one_error_line(result, "read-only", "new.db")
        assert os.listdir(folder) == []
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_a_second_store_on_an_open_file_leaves_the_first_ones_locks(tmp_path: Path) -> None:
    """Opening a store reads the file's header; closing a descriptor of a file drops every POSIX lock the
    process holds on it, so the header is read through the descriptor SQLite holds. Otherwise another
    process's closing connection took itself for the last, checkpointed, and deleted the -wal file."""
    path = tmp_path / "shared.db"
    other = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT 1 FROM sessions').fetchall(); c.close()"
    with Store(path) as first:
        first.sessions.create("a")
        with Store(path) as second:
            subprocess.run([sys.executable, "-c", other, str(path)], check=True, timeout=60)
            assert Path(f"{path}-wal").exists()
            first.sessions.create("b")
            assert second.sessions.count() == 2
        counted = "import sys; from turnstore import Store; print(Store(sys.argv[1]).sessions.count())"
        seen = subprocess.run([sys.executable, "-c", counted, str(path)], capture_output=True, text=True, timeout=60)
        assert seen.stdout.strip() == "2"
