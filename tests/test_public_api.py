"""The public surface: what ``import turnstore`` exports, and that every public method says what it does."""

from __future__ import annotations

import inspect
import types

import pytest

import turnstore
from turnstore import Store
from turnstore.aio import (
    AsyncLoopRepository,
    AsyncMessageRepository,
    AsyncPriceRepository,
    AsyncSessionRepository,
    AsyncUsageRepository,
)
from turnstore.repositories import (
    LoopRepository,
    MessageRepository,
    PriceRepository,
    SessionRepository,
    UsageRepository,
)

# Module attributes that are public although they start with an underscore (httpx's rule).
PRIVATE_BUT_EXPORTED = {"__version__"}
# Names a module gets from its own imports, never meant as exports.
NOT_EXPORTS = {"annotations", "Any", "TYPE_CHECKING"}


def public_names() -> set[str]:
    """What ``turnstore`` defines or re-exports (loaded now or on first use), leaving out its submodules."""
    return {
        name
        for name in dir(turnstore)
        if (not name.startswith("_") or name in PRIVATE_BUT_EXPORTED)
        and not isinstance(getattr(turnstore, name), types.ModuleType)
        and name not in NOT_EXPORTS
    }


def test_all_is_sorted_case_insensitively() -> None:
    assert turnstore.__all__ == sorted(turnstore.__all__, key=str.casefold)


def test_all_lists_every_public_name_once() -> None:
    assert len(turnstore.__all__) == len(set(turnstore.__all__))
    assert set(turnstore.__all__) == public_names()


def test_every_name_in_all_is_importable() -> None:
    namespace: dict[str, object] = {}
    exec("from turnstore import *", namespace)
    namespace.pop("__builtins__", None)
    assert set(namespace) == set(turnstore.__all__)
    for name in turnstore.__all__:
        assert namespace[name] is getattr(turnstore, name)


def test_store_and_errors_are_exported_from_the_top_level() -> None:
    assert turnstore.Store is Store
    for name in ("SchemaError", "SchemaOutOfDate", "SchemaTooNew", "NotFound", "StoreBusy"):
        assert issubclass(getattr(turnstore, name), turnstore.TurnstoreError), name
    assert issubclass(turnstore.SchemaOutOfDate, turnstore.SchemaError)
    assert issubclass(turnstore.SchemaTooNew, turnstore.SchemaError)


def public_methods(cls: type) -> list[tuple[str, object]]:
    """The public functions and properties a class defines (inherited from turnstore classes too, not object)."""
    found = []
    for klass in cls.__mro__:
        if klass is object:
            continue
        for name, member in vars(klass).items():
            if name.startswith("_") or name in dict(found):
                continue
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if inspect.isfunction(member) or isinstance(member, property):
                found.append((name, member))
    return found


PUBLIC_CLASSES = [
    turnstore.Store,
    turnstore.AsyncStore,
    SessionRepository,
    LoopRepository,
    MessageRepository,
    UsageRepository,
    PriceRepository,
    AsyncSessionRepository,
    AsyncLoopRepository,
    AsyncMessageRepository,
    AsyncUsageRepository,
    AsyncPriceRepository,
]


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda cls: cls.__name__)
def test_every_public_method_has_a_docstring(cls: type) -> None:
    methods = public_methods(cls)
    assert methods, f"{cls.__name__} has no public methods"
    undocumented = [name for name, member in methods if not (member.__doc__ or "").strip()]
    assert undocumented == [], f"{cls.__name__} methods without a docstring: {undocumented}"


@pytest.mark.parametrize(
    ("sync_class", "async_class"),
    [
        (SessionRepository, AsyncSessionRepository),
        (LoopRepository, AsyncLoopRepository),
        (MessageRepository, AsyncMessageRepository),
        (UsageRepository, AsyncUsageRepository),
        (PriceRepository, AsyncPriceRepository),
    ],
)
def test_async_repositories_have_every_sync_method(sync_class: type, async_class: type) -> None:
    sync_names = {name for name, member in public_methods(sync_class) if name != "from_row"}
    async_names = {name for name, _ in public_methods(async_class)}
    assert sync_names == async_names
