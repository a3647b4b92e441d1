"""Shared fixtures: a fresh store per test, upgraded by the migrations (never by create_all).

``store`` runs each test that takes it on every backend in
``backends.selected_backends()``: SQLite and PostgreSQL, sync and async.
PostgreSQL tests use a database created for the run on the server at
``$TURNSTORE_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``)
and dropped at the end; when the server cannot be reached they are skipped,
except under ``CI=true``, where that is a failure.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from backends import PostgresDatabase, SyncAsyncStore, postgres_reachable, selected_backends

from turnstore import Store


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresDatabase]:
    """This run's PostgreSQL database, migrated to head once."""
    reason = postgres_reachable()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: PostgreSQL tests may not be skipped)")
        pytest.skip(reason)
    database = PostgresDatabase()
    Store(database.url).close()
    yield database
    database.drop()


@pytest.fixture(params=selected_backends())
def backend(request: pytest.FixtureRequest) -> str:
    """Which backend the test runs on."""
    return request.param


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Path of a SQLite database file that does not exist yet."""
    return tmp_path / "store.db"


@pytest.fixture
def store_url(backend: str, db_path: Path, request: pytest.FixtureRequest) -> str:
    """URL of an empty, migrated database on the test's backend."""
    return _empty_database(backend, db_path, request)


def _empty_database(backend: str, db_path: Path, request: pytest.FixtureRequest) -> str:
    if backend.startswith("postgresql"):
        database: PostgresDatabase = request.getfixturevalue("postgres")
        database.empty()
        return database.url
    return str(db_path)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """An empty store's URL, on SQLite and on the test PostgreSQL server (for tests that open stores themselves)."""
    if request.param == "postgresql":
        database: PostgresDatabase = request.getfixturevalue("postgres")
        database.empty()
        return str(database.url)
    return str(tmp_path / "store.db")


@pytest.fixture
def store(backend: str, store_url: str) -> Iterator[Any]:
    """A store on a fresh database of the test's backend (an AsyncStore behind a sync facade for async ones)."""
    opened = SyncAsyncStore(store_url) if backend.endswith("async") else Store(store_url)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture(params=[name for name in selected_backends() if not name.endswith("async")])
def sync_store(request: pytest.FixtureRequest, db_path: Path) -> Iterator[Store]:
    """A sync ``Store`` on a fresh database of each selected sync backend (for code that takes a ``Store``)."""
    with Store(_empty_database(request.param, db_path, request)) as opened:
        yield opened


@pytest.fixture
def sqlite_store(db_path: Path) -> Iterator[Store]:
    """A sync store on a fresh SQLite file, for tests of SQLite itself (pragmas, files)."""
    with Store(db_path) as opened:
        yield opened


@pytest.fixture
def session_id(store: Store) -> str:
    """A new, empty session."""
    return store.sessions.create(title="test session").session_id


@pytest.fixture
def loop_id(store: Store, session_id: str) -> str:
    """A new loop of ``session_id`` on claude-sonnet-4-5."""
    return store.loops.start(session_id, config={"model": "claude-sonnet-4-5", "provider": "anthropic"}).loop_id


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say loudly, last, that the browser tests were skipped and why (tests/test_browser.py: Chromium missing)."""
    reasons = set()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""
        if "BROWSER TESTS NOT RUN" in reason:
            reasons.add(reason.removeprefix("Skipped: "))
    for reason in sorted(reasons):
        terminalreporter.write_sep("!", reason, red=True, bold=True)
