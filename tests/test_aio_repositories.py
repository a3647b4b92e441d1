"""The async repositories are typed twins of the sync ones, and a typed async app type-checks.

``turnstore/aio_repositories.py`` is generated from the sync repositories by
``tools/generate_aio_repositories.py``; these tests fail when it is not
current, when a sync method has no async twin or a twin's signature differs,
and when ``mypy --strict`` rejects ``examples/async_app.py``.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from turnstore import AsyncStore, Store
from turnstore.aio_repositories import (
    AsyncLoopRepository,
    AsyncMessageRepository,
    AsyncSessionRepository,
    AsyncUsageRepository,
)
from turnstore.repositories import LoopRepository, MessageRepository, SessionRepository, UsageRepository

ROOT = Path(__file__).resolve().parent.parent
GENERATOR = ROOT / "tools" / "generate_aio_repositories.py"
EXAMPLE = ROOT / "examples" / "async_app.py"
PAIRS = [
    (SessionRepository, AsyncSessionRepository),
    (LoopRepository, AsyncLoopRepository),
    (MessageRepository, AsyncMessageRepository),
    (UsageRepository, AsyncUsageRepository),
]
NOT_TWINNED = {"from_row"}


def _load(path: Path) -> ModuleType:
    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} is not in this checkout (an sdist ships src/ and tests/ only)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _public(cls: type) -> dict[str, Callable[..., Any]]:
    return {  # inherited ones too: MessageRepository's are written in its two halves
        name: member
        for name, member in inspect.getmembers(cls, inspect.isfunction)
        if not name.startswith("_") and name not in NOT_TWINNED
    }


def _parameters(method: Callable[..., Any]) -> list[tuple[str, Any, Any, str]]:
    return [
        (p.name, p.kind, p.default, re.sub(r"\bbuiltins\.", "", str(p.annotation)))
        for p in inspect.signature(method).parameters.values()
    ]


def test_the_generated_module_is_current() -> None:
    generator = _load(GENERATOR)
    current = (ROOT / "src" / "turnstore" / "aio_repositories.py").read_text()
    assert generator.render() == current, "out of date: run python tools/generate_aio_repositories.py"


@pytest.mark.parametrize(("sync_class", "async_class"), PAIRS, ids=lambda cls: cls.__name__)
def test_every_sync_method_has_an_async_twin_with_its_signature(sync_class: type, async_class: type) -> None:
    sync_methods, async_methods = _public(sync_class), _public(async_class)
    assert sorted(async_methods) == sorted(sync_methods), "run python tools/generate_aio_repositories.py"
    for name, method in sync_methods.items():
        twin = async_methods[name]
        assert _parameters(twin) == _parameters(method), name
        returns = str(inspect.signature(method).return_annotation)
        twin_returns = re.sub(r"\bbuiltins\.", "", str(inspect.signature(twin).return_annotation))
        if returns.startswith("Iterator["):  # a stream: an async generator of the same items
            assert inspect.isasyncgenfunction(twin), name
            assert twin_returns == f"AsyncGenerator[{returns.removeprefix('Iterator[')[:-1]}, None]", name
        else:
            assert inspect.iscoroutinefunction(twin), name
            assert twin_returns == returns, name
        assert f"{sync_class.__name__}.{name}" in (twin.__doc__ or ""), f"{name}: the docstring names its sync twin"


def test_a_sync_method_without_an_async_twin_fails_the_comparison() -> None:
    """The check above is not vacuous: a sync method added without regenerating is caught."""

    class Grown(SessionRepository):
        def archive(self, session_id: str) -> None:
            """A method that exists only on the sync side."""

    vars_of_grown = {**_public(SessionRepository), **_public(Grown)}
    assert sorted(vars_of_grown) != sorted(_public(AsyncSessionRepository))


def test_the_typed_example_passes_mypy_strict(tmp_path: Path) -> None:
    pytest.importorskip("mypy")
    if not EXAMPLE.exists():
        pytest.skip("examples/ is not in this checkout")
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(ROOT / ".mypy_cache"), str(EXAMPLE)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_typed_example_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    example = _load(EXAMPLE)
    asyncio.run(example.main(f"sqlite:///{tmp_path / 'example.db'}"))
    assert "3 runs, 6 messages stored" in capsys.readouterr().out


@pytest.mark.parametrize(
    "opener", [AsyncStore.__init__, AsyncStore.open.__func__], ids=["AsyncStore()", "AsyncStore.open"]
)
def test_async_store_takes_the_sync_stores_arguments_by_name(opener: Callable[..., Any]) -> None:
    store_parameters = _parameters(Store.__init__)[1:]
    async_parameters = [p for p in _parameters(opener)[1:] if p[0] != "workers"]
    assert async_parameters == store_parameters
    assert inspect.signature(opener).parameters["workers"].kind is inspect.Parameter.KEYWORD_ONLY
    assert str(inspect.signature(AsyncStore.import_).return_annotation) == "ImportReport"
    import_parameters = _parameters(Store.import_)[1:]
    assert _parameters(AsyncStore.import_)[1:] == import_parameters


def test_the_typed_example_passes_mypy_strict_without_the_pydantic_plugin(tmp_path: Path) -> None:
    """An app's own mypy has no pydantic plugin: models with defaults (``Usage(input=.., output=..)``) still type-check."""
    pytest.importorskip("mypy")
    if not EXAMPLE.exists():
        pytest.skip("examples/ is not in this checkout")
    config = tmp_path / "mypy.ini"
    config.write_text("[mypy]\n")
    checked = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--config-file",
            str(config),
            "--cache-dir",
            str(tmp_path / "cache"),
            str(EXAMPLE),
        ],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
