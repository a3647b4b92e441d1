"""A full disk, a read-only database and malformed prices are typed errors, and one line at the CLI.

A full disk is SQLite's own ``SQLITE_FULL``, reached by capping the file with
``max_page_count``: the same error SQLite returns when the disk is full.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from cli_runner import assert_one_error_line, run_cli
from factories import assistant, usage, user

from turnstore import (
    InvalidPrices,
    NotAStore,
    PriceTable,
    ReadOnlyStore,
    StorageError,
    StorageFull,
    Store,
    TextContent,
    Usage,
    UserMessage,
    engine,
)
from turnstore.engine import storage_error

FIXTURES = Path(__file__).parent / "fixtures"
ARRAY = FIXTURES / "phi_core" / "messages" / "save_messages.json"
BIG = "x" * 200_000


def page_count(path: Path) -> int:
    with sqlite3.connect(path) as connection:
        count = int(connection.execute("PRAGMA page_count").fetchone()[0])
    connection.close()
    return count


@pytest.fixture
def nearly_full(tmp_path: Path) -> Path:
    """A store with one session, and the pages its next writes need capped."""
    path = tmp_path / "full.db"
    with Store(path) as store:
        store.sessions.create("s1")
        store.loops.start("s1", loop_id="l1")
    return path


def capped(path: Path, extra_pages: int = 2) -> dict[str, Any]:
    return {"max_page_count": page_count(path) + extra_pages}


# --- a full disk -------------------------------------------------------------------------------


def test_append_to_a_full_database_is_storage_full_and_writes_nothing(nearly_full: Path) -> None:
    with Store(nearly_full, pragmas=capped(nearly_full)) as store:
        with pytest.raises(StorageFull, match="full") as raised:
            store.messages.append_turn(
                "l1", 0, [UserMessage(content=[TextContent(text=BIG)], timestamp=1), assistant("ok")]
            )
        assert "\n" not in str(raised.value) and str(nearly_full) in str(raised.value)
        with pytest.raises(StorageFull):
            store.messages.append(UserMessage(content=[TextContent(text=BIG)], timestamp=1), loop_id="l1", turn_index=0)
        with pytest.raises(StorageFull):
            store.sessions.create("s2", title=BIG)
        assert store.messages.loop("l1") == [] and not store.sessions.exists("s2")


def test_import_into_a_full_database_is_storage_full_and_writes_nothing(nearly_full: Path, tmp_path: Path) -> None:
    source = tmp_path / "big.json"
    source.write_text(json.dumps([{"role": "user", "content": [{"type": "text", "text": BIG}], "timestamp": 1}]))

    with Store(nearly_full, pragmas=capped(nearly_full)) as store:
        with pytest.raises(StorageFull):
            store.import_("phi-core", source, session_id="imported")
        assert not store.sessions.exists("imported")


def test_cli_import_into_a_full_database_is_one_line(
    nearly_full: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = tmp_path / "big.json"
    source.write_text(json.dumps([{"role": "user", "content": [{"type": "text", "text": BIG}], "timestamp": 1}]))
    monkeypatch.setitem(engine.SQLITE_PRAGMAS, "max_page_count", capped(nearly_full)["max_page_count"])

    line = assert_one_error_line(
        run_cli("--db", nearly_full, "import", "phi-core", source, "--session-id", "x"), "full"
    )

    assert "unexpected" not in line and str(nearly_full) in line

    monkeypatch.delitem(engine.SQLITE_PRAGMAS, "max_page_count")
    with Store(nearly_full) as store:
        assert not store.sessions.exists("x")


# --- read-only, by the connection's own mode -----------------------------------------------------------


def test_a_read_only_connection_refuses_writes_with_read_only_store(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with Store(path) as store:
        store.sessions.create("s1")

    with Store(f"sqlite:///file:{path}?mode=ro&uri=true") as store:
        assert store.sessions.exists("s1")
        with pytest.raises(ReadOnlyStore, match="read-only"):
            store.sessions.create("s2")
        with pytest.raises(ReadOnlyStore):
            with store.transaction():
                store.sessions.rename("s1", "renamed")


def test_upgrading_a_read_only_store_is_read_only_store(tmp_path: Path) -> None:
    from turnstore import migrate

    path = tmp_path / "old.db"
    with Store(path) as store:
        migrate.downgrade(store.engine, "-1")

    with pytest.raises(ReadOnlyStore):
        Store(f"sqlite:///file:{path}?mode=ro&uri=true")


# --- the mapping itself ------------------------------------------------------------------------------


class _PostgresError(Exception):
    def __init__(self, sqlstate: str, text: str) -> None:
        super().__init__(text)
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        pytest.param(
            _PostgresError("53100", "could not extend file: No space left on device"), StorageFull, id="pg disk full"
        ),
        pytest.param(
            _PostgresError("25006", "cannot execute INSERT in read-only mode"), ReadOnlyStore, id="pg read-only"
        ),
        pytest.param(_PostgresError("58030", "could not read block"), StorageError, id="pg io"),
        pytest.param(sqlite3.OperationalError("disk I/O error"), StorageError, id="sqlite io (by text)"),
        pytest.param(sqlite3.DatabaseError("file is not a database"), NotAStore, id="sqlite notadb (by text)"),
    ],
)
def test_storage_errors_are_typed_and_one_line(error: Exception, expected: type[Exception]) -> None:
    typed = storage_error(error, "sqlite:///some/where.db")

    assert type(typed) is expected
    assert "\n" not in str(typed) and "some/where.db" in str(typed)


@pytest.mark.parametrize(
    "error",
    [
        sqlite3.IntegrityError("UNIQUE constraint failed: sessions.session_id"),
        _PostgresError("23505", "duplicate key"),
        ValueError("x"),
    ],
)
def test_other_errors_are_not_storage_errors(error: Exception) -> None:
    assert storage_error(error) is None


# --- prices ------------------------------------------------------------------------------------------


@pytest.fixture
def store_db(tmp_path: Path) -> Path:
    path = tmp_path / "store.db"
    with Store(path) as store:
        store.sessions.create("s1")
        loop = store.loops.start("s1", config={"model": "m1"})
        store.messages.append_turn(loop.loop_id, 0, [user("hi"), assistant("ok", model="m1", u=usage(1_000, 100))])
    return path


MALFORMED_PRICES = {
    "infinite rate": ('{"m1": {"input": 1e400}}', "input"),
    "nan rate": ('{"m1": {"input": NaN}}', "input"),
    "negative rate": ('{"m1": {"output": -1}}', "output"),
    "rate beyond the maximum": ('{"m1": {"output": 1e12}}', "output"),
    "string rate": ('{"m1": {"input": "3"}}', "not a number"),
    "boolean rate": ('{"m1": {"input": true}}', "not a number"),
    "unknown rate": ('{"m1": {"inptu": 3}}', "inptu"),
    "rates not an object": ('{"m1": 3}', "m1"),
    "top level an array": ("[1, 2]", "JSON object"),
    "syntax error": ('{"m1": {"input": 3,\n}}', "line 2"),
    "nested too deeply": ("[" * 100_000, "nested"),
    "integer of 5000 digits": ('{"m1": {"input": ' + "9" * 5000 + "}}", "digits"),
}


@pytest.mark.parametrize("content,needle", list(MALFORMED_PRICES.values()), ids=list(MALFORMED_PRICES))
def test_malformed_price_files_are_one_line_naming_the_file(
    store_db: Path, tmp_path: Path, content: str, needle: str
) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(content)

    assert_one_error_line(run_cli("--db", store_db, "usage", "--prices", prices), str(prices), needle)
    assert_one_error_line(run_cli("--db", store_db, "usage", "--prices", prices, "--json"), str(prices))
    with pytest.raises(InvalidPrices, match="prices.json"):
        PriceTable.from_file(prices)


def test_price_file_that_is_not_utf8(store_db: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_bytes(b'{"m1": {"input": "\xff"}}')

    assert_one_error_line(run_cli("--db", store_db, "usage", "--prices", prices), "not UTF-8")


def test_price_file_over_the_size_limit_is_refused_unread(store_db: Path, tmp_path: Path) -> None:
    from turnstore.usage import MAX_PRICE_FILE_BYTES

    prices = tmp_path / "prices.json"
    prices.write_text('{"m1": {"input": 1}}' + " " * MAX_PRICE_FILE_BYTES)

    assert_one_error_line(run_cli("--db", store_db, "usage", "--prices", prices), "over the limit")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "missing"])
def test_price_file_must_be_a_regular_file(store_db: Path, tmp_path: Path, kind: str) -> None:
    places = {
        "fifo": tmp_path / "p.fifo",
        "dev-zero": Path("/dev/zero"),
        "directory": tmp_path,
        "missing": tmp_path / "no.json",
    }
    prices = places[kind]
    if kind == "fifo":
        os.mkfifo(prices)  # no writer: opening it for reading would wait forever

    assert_one_error_line(run_cli("--db", store_db, "usage", "--prices", prices), str(prices))
    with pytest.raises(InvalidPrices):
        PriceTable.from_file(prices)


@pytest.mark.parametrize(
    "prices",
    [
        {"m1": {"input": float("inf")}},
        {"m1": {"input": float("nan")}},
        {"m1": {"input": -0.5}},
        {"m1": {"input_per_million": 1e300}},
        {"m1": {"bogus": 1}},
        {"m1": 3},
        {3: {"input": 1}},
    ],
    ids=["inf", "nan", "negative", "huge", "unknown rate", "not an object", "model not a string"],
)
def test_store_and_price_table_refuse_malformed_prices(store_db: Path, prices: dict[Any, Any]) -> None:
    with pytest.raises(InvalidPrices):
        PriceTable(prices)
    with pytest.raises(InvalidPrices):
        Store(store_db, prices=prices)


def test_valid_price_file_still_prices(store_db: Path, tmp_path: Path) -> None:
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"m1": {"input_per_million": 1000, "output": 0}}))

    result = run_cli("--db", store_db, "usage", "--prices", prices, "--json")

    assert result.code == 0 and result.json()["cost"] == pytest.approx(1.0)


def test_json_never_prints_infinity(tmp_path: Path) -> None:
    """Reported costs near the float maximum add up beyond it: --json refuses in one line, tables say so."""
    path = tmp_path / "huge.db"
    with Store(path) as store:
        store.sessions.create("s1")
        loop = store.loops.start("s1")
        for turn in range(2):
            reply = assistant("ok", model="m1", u=Usage(input=1, output=1, total_tokens=2, cost=1e308))
            store.messages.append_turn(loop.loop_id, turn, [user("hi"), reply])

    assert_one_error_line(run_cli("--db", path, "usage", "--json"), "JSON")
    table = run_cli("--db", path, "usage")
    assert table.code == 0 and "too large" in table.out and "inf" not in table.out.lower()
