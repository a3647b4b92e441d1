"""What a store is opened with: SQLite pragmas are checked before any connection, and a URL of a database turnstore
does not keep its data in, or whose driver or server is missing, is a typed one-line error."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from cli_runner import assert_one_error_line, run_cli

from turnstore import InvalidArgument, StorageError, Store, StoreBusy
from turnstore.engine import sqlite_file
from turnstore.pragmas import check_pragmas


@pytest.mark.parametrize(
    ("pragmas", "expected"),
    [
        ({"synchronus": "full"}, "SQLite has no pragma 'synchronus'"),
        ({"synchronous": "fulll"}, "synchronous takes one of"),
        ({"journal_mode": "wall"}, "journal_mode takes one of"),
        ({"foreign_keys": "maybe"}, "foreign_keys takes one of"),
        ({"busy_timeout": "soon"}, "busy_timeout takes a 64-bit integer"),
        ({"cache_size": 1.5}, "cache_size takes a 64-bit integer"),
        ({"user_version": 7}, "'user_version' is not a connection setting"),
        ({"optimize": 1}, "'optimize' is not a connection setting"),
        ({"synchronous": "normal; DROP TABLE sessions"}, "synchronous takes one of"),
        ({3: "x"}, "SQLite has no pragma 3"),
        ({"encoding": "UTF8"}, "'encoding' is not a connection setting"),
        ({"cache_size": " -2000 "}, "cache_size takes a 64-bit integer"),
        ({"cache_size": "--5"}, "cache_size takes a 64-bit integer"),
        ({"cache_size": "\u00b2"}, "cache_size takes a 64-bit integer"),
        ({"busy_timeout": "\u0663"}, "busy_timeout takes a 64-bit integer"),
        ({"cache_size": 2**63}, "cache_size takes a 64-bit integer"),
    ],
)
def test_a_pragma_sqlite_would_ignore_is_refused_before_the_file_is_made(
    tmp_path: Path, pragmas: dict[Any, Any], expected: str
) -> None:
    path = tmp_path / "store.db"
    with pytest.raises(InvalidArgument, match=expected) as raised:
        Store(path, pragmas=pragmas)
    assert "\n" not in str(raised.value)
    assert not path.exists()


def test_pragmas_must_be_a_mapping() -> None:
    with pytest.raises(InvalidArgument, match="must be a mapping"):
        check_pragmas([("synchronous", "full")])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("pragmas", "read", "expected"),
    [
        ({"synchronous": "FULL"}, "synchronous", 2),
        ({"synchronous": 3}, "synchronous", 3),
        ({"foreign_keys": True}, "foreign_keys", 1),
        ({"cache_size": "-20000"}, "cache_size", -20000),
        ({"cache_spill": "off"}, "cache_spill", 0),
        ({"secure_delete": "fast"}, "secure_delete", 2),
        ({"synchronous": "on"}, "synchronous", 1),
        ({"synchronous": True}, "synchronous", 1),
        ({"SYNCHRONOUS": "full"}, "synchronous", 2),
        ({"Busy_Timeout": 1234}, "busy_timeout", 1234),
    ],
)
def test_settings_sqlite_takes_are_applied(tmp_path: Path, pragmas: dict[str, Any], read: str, expected: int) -> None:
    with Store(tmp_path / "store.db", pragmas=pragmas) as store:
        with store.engine.connect() as connection:
            assert connection.exec_driver_sql(f"PRAGMA {read}").scalar() == expected


def test_a_read_only_store_checks_its_pragmas_too(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with Store(path) as store:
        store.sessions.create("s")
    with pytest.raises(InvalidArgument, match="SQLite has no pragma"):
        Store(path, read_only=True, pragmas={"nope": 1})
    # A reader never sets the journal mode, however its name is spelled.
    with Store(path, read_only=True, pragmas={"JOURNAL_MODE": "delete"}) as reader:
        assert [s.session_id for s in reader.sessions.list()] == ["s"]


def test_a_url_of_another_database_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="SQLite or PostgreSQL, not 'mysql'"):
        Store("mysql://user@localhost/db")


def test_a_postgresql_url_without_its_driver_says_what_to_install() -> None:
    pytest.importorskip("sqlalchemy.dialects.postgresql.pg8000")
    try:
        import pg8000  # type: ignore[import-not-found]  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pg8000 is installed here")
    with pytest.raises(InvalidArgument, match=r"needs its driver \(pg8000\): pip install 'turnstore\[postgres\]'"):
        Store("postgresql+pg8000://user@localhost/db")


def test_a_postgresql_server_that_cannot_be_reached_is_a_storage_error() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(StorageError, match="cannot connect to the database server") as raised:
        Store("postgresql://someone:secret@127.0.0.1:1/db")
    assert "secret" not in str(raised.value) and "\n" not in str(raised.value)


def test_the_cli_names_an_unreachable_server_in_one_line() -> None:
    pytest.importorskip("psycopg")
    result = run_cli("--db", "postgresql://someone:secret@127.0.0.1:1/db", "sessions")
    line = assert_one_error_line(result, "cannot connect to the database server")
    assert "secret" not in line


def test_the_defaults_stay_what_the_docs_say(tmp_path: Path) -> None:
    with Store(tmp_path / "store.db"):
        pass
    with sqlite3.connect(tmp_path / "store.db") as connection:
        assert connection.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_bare_path_with_a_tilde_is_in_the_home_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    with Store("~/agent.db") as store:
        session = store.sessions.create(title="t")
    assert (home / "agent.db").exists() and not (tmp_path / "~").exists()
    (home / "in").mkdir()
    with Store(home / "agent.db") as store:
        store.export(session.session_id, "turnstore", "~/in/session.jsonl")
    assert (home / "in" / "session.jsonl").exists()
    with Store(tmp_path / "other.db") as other:
        assert other.import_("turnstore", "~/in").ok
        assert [s.session_id for s in other.sessions.list()] == [session.session_id]


@pytest.mark.parametrize(
    "name", ["q?x.db", "p%41x.db", "a#b.db", "50% off.db", "x?mode=ro.db", "latin1 \udce9t\udce9.db", "\udce9?%.db"]
)
def test_a_bare_path_names_exactly_that_file(tmp_path: Path, name: str) -> None:
    """``?``, ``#`` and ``%`` in a bare path are part of the file name, not the URL's query, fragment or escapes;
    a name that is not UTF-8 (``\\udcXX``: its bytes, as Python gives them) opens that very file."""
    with Store(tmp_path / name) as store:
        store.sessions.create("s")
    with Store(str(tmp_path / name)) as again:
        assert again.sessions.exists("s")
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == [name]
    result = run_cli("--db", str(tmp_path / name), "sessions", "--json")
    assert result.code == 0 and '"s"' in result.out


def test_a_store_whose_name_is_not_utf8_opens_read_only_and_by_uri(tmp_path: Path) -> None:
    """The file SQLite opens is the one named: by bare path, read-only, and as a ``file:`` URI of its bytes."""
    path = tmp_path / "caf\udce9.db"
    with Store(path) as store:
        store.sessions.create("s")
    with Store(path, read_only=True) as store:
        assert store.sessions.exists("s")
    file_uri = "file:" + quote(os.fsencode(path), safe="/")  # SQLite's URI filename: its bytes, %-escaped
    uri = f"sqlite:///{quote(file_uri, safe='/:')}?mode=ro&uri=true"  # in a URL, escaped once more
    assert sqlite_file(uri) == path
    with Store(uri, read_only=True) as store:
        assert store.sessions.exists("s")
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".db"] == [path.name]


@pytest.mark.parametrize("flag", ["dry_run", "skip_invalid", "replace", "tune_process"])
@pytest.mark.parametrize("value", ["no", 1, None])
def test_an_import_flag_that_is_not_a_bool_is_refused_before_anything_is_read(
    tmp_path: Path, flag: str, value: object
) -> None:
    with Store(tmp_path / "store.db") as store:
        with pytest.raises(InvalidArgument, match=f"^{flag}: must be True or False"):
            store.import_("turnstore", tmp_path / "missing.jsonl", **{flag: value})  # type: ignore[arg-type]
        assert store.sessions.count() == 0


def test_an_unknown_export_format_is_a_typed_error(tmp_path: Path) -> None:
    with Store(tmp_path / "store.db") as store:
        session = store.sessions.create()
        with pytest.raises(InvalidArgument, match="unknown export format 'csv'"):
            store.export(session.session_id, "csv")


def test_opening_a_current_store_does_not_wait_for_another_writer(tmp_path: Path) -> None:
    """A store at head opens while another connection holds the write lock (it only reads its schema
    version); one that needs its schema upgraded waits for the lock, then fails typed, nothing changed."""
    path = tmp_path / "busy.db"
    Store(path).close()
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with Store(path, pragmas={"busy_timeout": 50}) as store:
            assert store.sessions.count() == 0
        with sqlite3.connect(tmp_path / "other.db") as plain:  # an empty file: its schema must be created
            plain.execute("PRAGMA user_version = 0")
        holder = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StoreBusy, match="stayed locked by another writer"):
                Store(tmp_path / "other.db", pragmas={"busy_timeout": 50})
        finally:
            holder.execute("ROLLBACK")
            holder.close()
    finally:
        writer.execute("ROLLBACK")
        writer.close()
