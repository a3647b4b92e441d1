"""Binding None without the sqlite3 driver's adapter search, while an import writes (turnstore/null_binding.py).

What is bound must not change (NULL), the ``sqlite3`` module must be left as
it was found, and an application's own ``NoneType`` adapter must be neither
replaced nor removed.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_import_background import write_export

from turnstore import Store
from turnstore.null_binding import fast_null_binding

KEY = (type(None), sqlite3.PrepareProtocol)


@pytest.fixture(autouse=True)
def no_none_adapter() -> Iterator[None]:
    """Each test starts, and must end, with no NoneType adapter registered."""
    assert KEY not in sqlite3.adapters
    yield
    assert KEY not in sqlite3.adapters, "the sqlite3 module was left changed"


def bound(value: object) -> tuple[object, object]:
    """What SQLite receives for ``value``: its type name and the value."""
    connection = sqlite3.connect(":memory:")
    try:
        return connection.execute("SELECT typeof(?), ?", (value, value)).fetchone()
    finally:
        connection.close()


def test_none_is_bound_as_null_inside_and_the_adapter_is_gone_after() -> None:
    assert bound(None) == ("null", None)
    with fast_null_binding():
        assert KEY in sqlite3.adapters
        assert bound(None) == ("null", None)
        assert bound(7) == ("integer", 7) and bound("x") == ("text", "x")
    assert KEY not in sqlite3.adapters
    assert bound(None) == ("null", None)


def test_nothing_is_registered_when_not_asked() -> None:
    with fast_null_binding(False):
        assert KEY not in sqlite3.adapters


def test_the_adapter_goes_when_the_block_fails() -> None:
    with pytest.raises(RuntimeError):
        with fast_null_binding():
            raise RuntimeError("stop")
    assert KEY not in sqlite3.adapters


def test_nested_blocks_keep_it_until_the_last_ends() -> None:
    with fast_null_binding():
        with fast_null_binding():
            assert KEY in sqlite3.adapters
        assert KEY in sqlite3.adapters
    assert KEY not in sqlite3.adapters


def test_blocks_on_several_threads_share_it() -> None:
    inside = threading.Barrier(3)
    leave = threading.Event()

    def hold() -> None:
        with fast_null_binding():
            inside.wait(10)
            leave.wait(10)

    threads = [threading.Thread(target=hold) for _ in range(2)]
    for thread in threads:
        thread.start()
    inside.wait(10)
    assert KEY in sqlite3.adapters
    leave.set()
    for thread in threads:
        thread.join(10)
    assert KEY not in sqlite3.adapters


def test_an_applications_own_adapter_is_left_in_place_and_used() -> None:
    def mine(value: None) -> str:
        return "none!"

    sqlite3.register_adapter(type(None), mine)
    try:
        with fast_null_binding():
            assert sqlite3.adapters[KEY] is mine
            assert bound(None) == ("text", "none!")
        assert sqlite3.adapters[KEY] is mine
    finally:
        del sqlite3.adapters[KEY]


def test_an_adapter_the_application_registers_meanwhile_is_kept() -> None:
    def mine(value: None) -> str:
        return "none!"

    try:
        with fast_null_binding():
            sqlite3.register_adapter(type(None), mine)
        assert sqlite3.adapters[KEY] is mine
    finally:
        del sqlite3.adapters[KEY]


def test_an_import_binds_nulls_and_leaves_the_module_as_it_was(tmp_path: Path) -> None:
    with Store(tmp_path / "a.db") as store:
        report = store.import_("turnstore", write_export(tmp_path / "big.jsonl", 40))
        assert report.ok and report.messages == 40
    assert KEY not in sqlite3.adapters
    connection = sqlite3.connect(tmp_path / "a.db")
    try:
        nulls = connection.execute(
            "SELECT count(*) FROM messages WHERE role = 'user' AND typeof(input_tokens) = 'null' AND model IS NULL"
        ).fetchone()[0]
    finally:
        connection.close()
    assert nulls == 10  # every fourth message is a user prompt, without usage or model
