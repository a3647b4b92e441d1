"""Starting fast: what importing turnstore, opening a store and running a read-only command load.

Each check runs in a fresh interpreter and looks at ``sys.modules``: these are
structural facts (the time they save is measured by ``benchmarks/startup.py``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import turnstore
from turnstore import Store, migrate

HEAVY = (
    "alembic",
    "mako",
    "rich",
    "turnstore.aio",
    "turnstore.importers",
    "turnstore.demo",
    "turnstore.integrations",
    "pydantic_ai",
    "langchain_core",
    "agents",
    "turnstore.web",
    "starlette",
    "jinja2",
    "uvicorn",
)
"""Modules that only some calls need: migrations, the async layer, importers, terminal output, framework integrations,
the web viewer."""


def loaded_after(code: str) -> set[str]:
    """Which of :data:`HEAVY` (or their submodules) are in ``sys.modules`` after running ``code`` in a new interpreter."""
    probe = (
        f"{code}\n"
        "import json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted({h for h in heavy for m in sys.modules if m == h or m.startswith(h + '.')})))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    return set(json.loads(done.stdout.splitlines()[-1]))


def test_import_turnstore_loads_none_of_the_heavy_parts() -> None:
    assert loaded_after("import turnstore") == set()


def test_importing_store_and_message_loads_no_migrations_importers_or_async_layer() -> None:
    assert loaded_after("from turnstore import Store, Message, SessionNotFound") == set()


def test_opening_a_store_at_head_does_not_load_alembic(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    assert loaded_after(f"from turnstore import Store\nStore({str(path)!r}).sessions.list()") == set()


def test_opening_a_new_store_still_migrates_it(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    assert "alembic" in loaded_after(f"from turnstore import Store\nStore({str(path)!r}).close()")
    assert Store(path).schema_version() == migrate.head()


def test_listing_sessions_on_the_command_line_loads_no_migrations_or_importers(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    Store(path).close()
    code = f"from turnstore.cli import main\nassert main(['--db', {str(path)!r}, 'sessions']) == 0"
    assert loaded_after(code) <= {"rich"}


def test_head_constant_matches_the_migration_scripts() -> None:
    assert migrate.head() == migrate.HEAD


def test_every_public_name_resolves_on_first_access() -> None:
    for name in turnstore.__all__:
        assert getattr(turnstore, name) is not None


def test_an_unknown_attribute_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        turnstore.Nope
