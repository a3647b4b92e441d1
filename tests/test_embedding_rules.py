"""The source keeps the rules of an embedded library, checked on its syntax tree.

* :mod:`gc` is used by :mod:`turnstore.collector` alone (the pause around each
  file of an import);
* nothing registers a global ``sqlite3`` adapter or converter;
* threads are started only by the import writer's checkpoint
  (``repositories/import_writes.py``) and by ``AsyncStore`` (``aio.py``), whose
  workers the app asked for;
* importers only read: nothing under ``importers/`` imports the repositories or the store;
* only ``Database`` (``database.py``) and the repositories reach into another object's ``_db``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import turnstore

SRC = Path(turnstore.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {path.relative_to(SRC).as_posix(): ast.parse(path.read_text("utf-8")) for path in sorted(SRC.rglob("*.py"))}


MODULES = _modules()


def _imported(tree: ast.Module, module: str) -> list[tuple[str, str | None]]:
    """``(module, name)`` of every import in ``tree`` (``name`` None for ``import x``), made absolute."""
    package = module.rsplit("/", 1)[0].replace("/", ".") if "/" in module else ""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = ["turnstore", *filter(None, package.split("."))]
                base = parts[: len(parts) - (node.level - 1)]
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            found.extend((name, alias.name) for alias in node.names)
    return found


def _attribute_uses(tree: ast.Module) -> list[tuple[str, str, int]]:
    """``(object name, attribute, line)`` of every ``name.attribute`` in ``tree``."""
    return [
        (node.value.id, node.attr, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
    ]


def test_the_modules_are_found() -> None:
    assert {"collector.py", "database.py", "aio.py", "repositories/import_writes.py", "importers/pi.py"} <= set(MODULES)


def test_only_the_collector_module_uses_gc() -> None:
    users = sorted(
        module
        for module, tree in MODULES.items()
        if any(name == "gc" or name.startswith("gc.") for name, _ in _imported(tree, module))
    )
    assert users == ["collector.py"]


def test_nothing_registers_a_global_sqlite3_adapter_or_converter() -> None:
    found = [
        (module, attr, line)
        for module, tree in MODULES.items()
        for _, attr, line in _attribute_uses(tree)
        if attr in ("register_adapter", "register_converter")
    ]
    found += [
        (module, name or "", 0)
        for module, tree in MODULES.items()
        for source, name in _imported(tree, module)
        if source == "sqlite3" and name in ("register_adapter", "register_converter")
    ]
    assert found == []


def test_threads_are_started_only_by_the_import_checkpoint_and_async_store() -> None:
    starters = {"Thread", "ThreadPoolExecutor", "start_new_thread", "start_joinable_thread", "Timer"}
    found = set()
    for module, tree in MODULES.items():
        for node in ast.walk(tree):
            name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None
            if name in starters:
                found.add(module)
        if any(
            source in ("_thread", "multiprocessing") or source.startswith("multiprocessing.")
            for source, _ in _imported(tree, module)
        ):
            found.add(module)
    assert found == {"aio.py", "repositories/import_writes.py"}


def test_importers_import_nothing_from_the_repositories_or_the_store() -> None:
    found = [
        (module, source, name)
        for module, tree in MODULES.items()
        if module.startswith("importers/")
        for source, name in _imported(tree, module)
        if source.startswith(("turnstore.repositories", "turnstore.store", "turnstore.database", "turnstore.aio"))
        or (source == "turnstore" and name in ("repositories", "store", "Store", "AsyncStore", "database", "aio"))
    ]
    assert found == []


def test_only_the_database_and_the_repositories_touch_a_stores_db() -> None:
    found = []
    for module, tree in MODULES.items():
        if module == "database.py" or module.startswith("repositories/"):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_db" and not _own(node):
                found.append((module, node.lineno))
    assert found == []


def _own(node: ast.Attribute) -> bool:
    """``self._db``: an object's own database (``Store``'s, or an importer's private scratch SQLite), not another's."""
    return isinstance(node.value, ast.Name) and node.value.id == "self"
