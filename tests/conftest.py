"""Shared fixtures: a fresh store per test, upgraded by the migrations (never by create_all)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from turnstore import Store


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """Path of a SQLite database file that does not exist yet."""
    return tmp_path / "store.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    """A store on a fresh SQLite file."""
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
