"""A SQLite store is private to its owner: new files are created mode 0600, whatever the umask.

Transcripts hold whatever users told their agents. A new database file and
the ``-wal`` / ``-shm`` files SQLite puts beside it are created readable and
writable by the owner only, under a permissive umask (0o022, the usual one)
or none at all (0o000). An existing file keeps the mode its owner gave it.
A missing folder is created, mode 0700. SQLite URI filenames
(``sqlite:///file:PATH?...&uri=true``) get the same. Results are in
``docs/reliability.md``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from factories import assistant, user

from turnstore import AsyncStore, Store
from turnstore.cli import main

pytestmark = pytest.mark.skipif(os.name != "posix", reason="POSIX file modes")

UMASKS = [pytest.param(0o022, id="umask022"), pytest.param(0o000, id="umask000"), pytest.param(0o077, id="umask077")]


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under ``request.param`` as the process umask; the old one is restored after."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)
    assert os.umask(old) == old  # restored (os.umask returns the value it replaces)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_something(store: Any) -> None:
    """Enough writes that SQLite creates its WAL and shared-memory files."""
    session = store.sessions.create(title="private")
    loop = store.loops.start(session.session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"})
    store.messages.append_turn(loop.loop_id, 0, [user("my bank password is hunter2"), assistant("noted")])


def side_files(db_path: Path) -> dict[str, Path]:
    return {suffix: db_path.with_name(db_path.name + suffix) for suffix in ("-wal", "-shm")}


@pytest.mark.parametrize("umask", UMASKS, indirect=True)
def test_new_database_and_side_files_are_owner_only(tmp_path: Path, umask: int) -> None:
    db_path = tmp_path / "store.db"
    with Store(db_path) as store:
        write_something(store)
        files = {"db": db_path, **side_files(db_path)}
        # While the store is open the WAL and shm files exist: check them then.
        assert all(path.exists() for path in files.values()), sorted(p.name for p in tmp_path.iterdir())
        modes = {name: oct(mode(path)) for name, path in files.items()}
    assert modes == {"db": "0o600", "-wal": "0o600", "-shm": "0o600"}
    assert mode(db_path) == 0o600


@pytest.mark.parametrize("umask", UMASKS, indirect=True)
def test_missing_folders_are_created(tmp_path: Path, umask: int) -> None:
    db_path = tmp_path / "a" / "b" / "c" / "store.db"
    with Store(db_path) as store:
        write_something(store)
        side = {name: mode(path) for name, path in side_files(db_path).items()}
    assert db_path.parent.is_dir()
    assert mode(db_path) == 0o600
    assert side == {"-wal": 0o600, "-shm": 0o600}


@pytest.mark.parametrize("umask", UMASKS, indirect=True)
def test_created_folders_are_not_writable_by_others(tmp_path: Path, umask: int, request: pytest.FixtureRequest) -> None:
    # Someone who can write to the folder can swap the database for another, or plant a
    # "-wal" file SQLite would replay into it: folders turnstore creates are 0o700.
    db_path = tmp_path / "a" / "b" / "store.db"
    Store(db_path).close()
    for folder in (tmp_path / "a", tmp_path / "a" / "b"):
        assert mode(folder) & 0o022 == 0, f"{folder} is {oct(mode(folder))}"


def test_existing_folder_keeps_its_mode(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    os.chmod(folder, 0o755)
    Store(folder / "store.db").close()
    assert mode(folder) == 0o755


@pytest.mark.parametrize("existing_mode", [0o644, 0o640, 0o660, 0o600, 0o400 | 0o200])
def test_existing_file_mode_is_left_alone(tmp_path: Path, existing_mode: int) -> None:
    db_path = tmp_path / "store.db"
    Store(db_path).close()  # a real, migrated database...
    os.chmod(db_path, existing_mode)  # ...that its owner chose to share (or not)
    with Store(db_path) as store:
        write_something(store)
        # SQLite gives the side files the main file's mode.
        side = {name: mode(path) for name, path in side_files(db_path).items()}
    assert mode(db_path) == existing_mode
    assert side == {"-wal": existing_mode, "-shm": existing_mode}


def test_existing_empty_file_keeps_its_mode(tmp_path: Path) -> None:
    # An empty file (e.g. made by `touch`) is a new database to SQLite, but not a new file.
    db_path = tmp_path / "store.db"
    db_path.touch()
    os.chmod(db_path, 0o664)
    with Store(db_path) as store:
        write_something(store)
    assert mode(db_path) == 0o664


@pytest.mark.parametrize("umask", [pytest.param(0o000, id="umask000")], indirect=True)
def test_async_store_and_cli_create_private_files(
    tmp_path: Path, umask: int, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    async def use_async() -> None:
        store = await AsyncStore.open(tmp_path / "async.db")
        try:
            await store.sessions.create(title="x")
        finally:
            await store.close()

    asyncio.run(use_async())
    assert mode(tmp_path / "async.db") == 0o600

    assert main(["--db", str(tmp_path / "cli" / "upgrade.db"), "db", "upgrade"]) == 0
    source = Path(__file__).parent / "fixtures" / "phi_core" / "messages" / "save_messages.json"
    assert main(["--db", str(tmp_path / "cli" / "import.db"), "import", "phi-core", str(source), "--json"]) == 0
    capsys.readouterr()
    assert mode(tmp_path / "cli" / "upgrade.db") == 0o600
    assert mode(tmp_path / "cli" / "import.db") == 0o600


@pytest.mark.parametrize("umask", [pytest.param(0o022, id="umask022")], indirect=True)
@pytest.mark.parametrize("form", ["sqlite:///{path}", "sqlite:///{path}?timeout=5", "sqlite+pysqlite:///{path}"])
def test_url_forms_create_private_files(tmp_path: Path, umask: int, form: str) -> None:
    db_path = tmp_path / "store.db"
    with Store(form.format(path=db_path)) as store:
        write_something(store)
    assert mode(db_path) == 0o600


@pytest.mark.parametrize("umask", [pytest.param(0o022, id="umask022")], indirect=True)
def test_uri_url_creates_a_private_file(tmp_path: Path, umask: int) -> None:
    db_path = tmp_path / "store.db"
    with Store(f"sqlite:///file:{db_path}?mode=rwc&uri=true") as store:
        write_something(store)
        side = {name: mode(path) for name, path in side_files(db_path).items()}
    assert mode(db_path) == 0o600
    assert side == {"-wal": 0o600, "-shm": 0o600}
