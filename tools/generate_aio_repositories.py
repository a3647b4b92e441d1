"""Writes ``src/turnstore/aio_repositories.py``: the async twin of each sync repository.

Every public method of ``SessionRepository``, ``LoopRepository``,
``MessageRepository``, ``UsageRepository`` and ``PriceRepository`` gets an async method with the
same name and the same signature, copied from the sync source, that runs the
sync method on the async store's worker threads. A method returning an
iterator (``records()``) becomes an async generator reading it in batches.
The output is checked in so type checkers and editors see every method;
``tests/test_aio_repositories.py`` fails when it is not current.

Run from the repository root::

    python tools/generate_aio_repositories.py          # rewrite the module
    python tools/generate_aio_repositories.py --check  # exit 1 if it is not current
"""

from __future__ import annotations

import argparse
import ast
import builtins
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "turnstore"
TARGET = PACKAGE / "aio_repositories.py"

REPOSITORIES = [
    ("sessions", "SessionRepository", "AsyncSessionRepository"),
    ("loops", "LoopRepository", "AsyncLoopRepository"),
    ("messages", "MessageRepository", "AsyncMessageRepository"),
    ("usage", "UsageRepository", "AsyncUsageRepository"),
    ("prices", "PriceRepository", "AsyncPriceRepository"),
]
SKIPPED = {"from_row"}
"""Public sync methods with no async twin: row conversion, not a database call."""

ITERATORS = {"Iterator", "Iterable", "Generator"}
LINE = 120


@dataclass
class Imports:
    """``from module import name [as alias]`` lines the generated module needs, at run time or for types only."""

    runtime: dict[tuple[str, str, str], None] = field(default_factory=dict)
    typing: dict[tuple[str, str, str], None] = field(default_factory=dict)

    def lines(self, which: dict[tuple[str, str, str], None], indent: str = "") -> list[str]:
        by_module: dict[str, list[str]] = {}
        for module, name, alias in which:
            by_module.setdefault(module, []).append(name if name == alias else f"{name} as {alias}")
        out = []
        local = [module for module in by_module if module.startswith(".")]
        for group in (sorted(set(by_module) - set(local)), sorted(local)):
            if out and group:
                out.append("")
            for module in group:
                names = sorted(set(by_module[module]), key=_isort_key)
                line = f"{indent}from {module} import {', '.join(names)}"
                if len(line) > LINE:  # as ruff format wraps it: one name a line
                    inner = "".join(f"{indent}    {name},\n" for name in names)
                    line = f"{indent}from {module} import (\n{inner}{indent})"
                out.append(line)
        return out


def _isort_key(name: str) -> tuple[int, str]:
    """ruff/isort order: CONSTANTS, Classes, functions."""
    base = name.split(" as ")[0]
    if base.isupper() and len(base) > 1:
        return (0, base)
    if base[:1].isupper():
        return (1, base)
    return (2, base)


class Module:
    """One sync repository module: where each name it uses comes from."""

    def __init__(self, name: str) -> None:
        self.name = f"turnstore.repositories.{name}"
        self.relative = f".repositories.{name}"
        self.tree = ast.parse((PACKAGE / "repositories" / f"{name}.py").read_text())
        self.origins: dict[str, tuple[str, str]] = {}
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom):
                module = _absolute(node, self.name)
                for alias in node.names:
                    self.origins[alias.asname or alias.name] = (module, alias.name)
        for node in self.tree.body:
            targets: list[ast.expr] = []
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                self.origins[node.name] = (self.relative, node.name)
            elif isinstance(node, ast.Assign):
                targets = node.targets
            elif isinstance(node, ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    self.origins[target.id] = (self.relative, target.id)

    def need(self, expression: ast.expr, imports: dict[tuple[str, str, str], None]) -> None:
        for node in ast.walk(expression):
            if isinstance(node, ast.Name) and node.id not in vars(builtins):
                module, name = self.origins[node.id]
                imports[(module, name, node.id)] = None

    def repository(self, class_name: str) -> ast.ClassDef:
        for node in self.tree.body:
            if isinstance(node, ast.ClassDef) and node.name == class_name:
                return node
        raise SystemExit(f"{self.name} defines no class {class_name}")

    def methods(self, class_name: str) -> list[tuple[Module, ast.FunctionDef]]:
        """The class's own methods, then those of its bases in this package, in order, each with its module.

        A repository split in halves (``MessageRepository(MessageWrites, MessageReads)``) keeps each
        half in a module of its own: a method's annotations are resolved where it is written.
        """
        node = self.repository(class_name)
        found = [(self, item) for item in node.body if isinstance(item, ast.FunctionDef)]
        for base in node.bases:
            if not isinstance(base, ast.Name) or base.id not in self.origins:
                continue
            module, name = self.origins[base.id]
            if module.startswith(".repositories."):
                found += Module(module.removeprefix(".repositories.")).methods(name)
        return found


def _absolute(node: ast.ImportFrom, package_of: str) -> str:
    """The module an import names, relative to the ``turnstore`` package (``.records``) when inside it."""
    if not node.level:
        module = node.module or ""
    else:
        parts = package_of.split(".")[: -node.level]
        module = ".".join([*parts, *([node.module] if node.module else [])])
    if module == "turnstore" or module.startswith("turnstore."):
        return "." + module.removeprefix("turnstore").lstrip(".")
    return module


def _shadowed(expression: ast.expr, methods: set[str]) -> str:
    """The annotation's source, with builtins that a method of the class shadows spelled ``builtins.x``."""

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.expr:
            if node.id in methods and node.id in vars(builtins):
                return ast.copy_location(ast.Attribute(ast.Name("builtins", ast.Load()), node.id, ast.Load()), node)
            return node

    return ast.unparse(Rename().visit(ast.parse(ast.unparse(expression), mode="eval")).body)


def _default(expression: ast.expr) -> str:
    if isinstance(expression, ast.Constant) and isinstance(expression.value, str):
        return '"' + expression.value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return ast.unparse(expression)


def _method(
    module: Module, public_module: str, sync_class: str, method: ast.FunctionDef, methods: set[str], imports: Imports
) -> list[str]:
    """The async twin of ``method`` (written in ``module``) of the repository ``public_module.sync_class``."""
    arguments = method.args
    parameters: list[str] = []
    call: list[str] = [f"self._sync.{method.name}"]
    positional = [*arguments.posonlyargs, *arguments.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(arguments.defaults)) + list(arguments.defaults)

    def parameter(argument: ast.arg, default: ast.expr | None, prefix: str = "") -> str:
        text = prefix + argument.arg
        if argument.annotation is not None:
            module.need(argument.annotation, imports.typing)
            text += f": {_shadowed(argument.annotation, methods)}"
        if default is not None:
            module.need(default, imports.runtime)
            text += f" = {_default(default)}" if argument.annotation is not None else f"={_default(default)}"
        return text

    for index, (argument, default) in enumerate(zip(positional, defaults)):
        parameters.append(parameter(argument, default))
        if index == 0:
            continue  # self
        call.append(argument.arg)
        if arguments.posonlyargs and index == len(arguments.posonlyargs) - 1:
            parameters.append("/")
    if arguments.vararg is not None:
        parameters.append(parameter(arguments.vararg, None, "*"))
        call.append(f"*{arguments.vararg.arg}")
    elif arguments.kwonlyargs:
        parameters.append("*")
    for argument, kw_default in zip(arguments.kwonlyargs, arguments.kw_defaults):
        parameters.append(parameter(argument, kw_default))
        call.append(f"{argument.arg}={argument.arg}")
    if arguments.kwarg is not None:
        parameters.append(parameter(arguments.kwarg, None, "**"))
        call.append(f"**{arguments.kwarg.arg}")

    returns = method.returns
    if returns is None:
        raise SystemExit(f"{module.name}.{sync_class}.{method.name} has no return annotation")
    streamed = isinstance(returns, ast.Subscript) and ast.unparse(returns.value) in ITERATORS
    if streamed:
        assert isinstance(returns, ast.Subscript)
        item = returns.slice.elts[0] if isinstance(returns.slice, ast.Tuple) else returns.slice
        module.need(item, imports.typing)
        result = f"AsyncGenerator[{_shadowed(item, methods)}, None]"
        imports.typing[("collections.abc", "AsyncGenerator", "AsyncGenerator")] = None
    else:
        module.need(returns, imports.typing)
        result = _shadowed(returns, methods)

    reference = f":meth:`{sync_class}.{method.name} <{public_module}.{sync_class}.{method.name}>`"
    lines = ["", *_wrapped(f"    async def {method.name}(", parameters, f") -> {result}:")]
    if streamed:
        lines += [
            f'        """Async twin of {reference}: its items, read in batches on one worker."""',
            *_wrapped("        stream = self._workers.stream(functools.partial(", call, "))"),
            "        try:",
            "            while batch := await stream.batch():",
            "                for item in batch:",
            "                    yield item",
            "        finally:",
            "            await stream.close()",
        ]
    else:
        lines += [
            f'        """Async twin of {reference}."""',
            *_wrapped("        return await self._workers.call(functools.partial(", call, "))"),
        ]
    return lines


def _wrapped(opening: str, items: list[str], closing: str) -> list[str]:
    """``opening items closing`` laid out as ``ruff format`` does at line length 120.

    ``opening`` ends with one or two open brackets (``f(`` or ``f(g(``), ``closing`` starts with as many closing ones.
    """
    indent = opening[: len(opening) - len(opening.lstrip())]
    joined = ", ".join(items)
    if len(opening) + len(joined) + len(closing) <= LINE:
        return [opening + joined + closing]
    if opening.count("(") == 2:
        head, name = opening[:-1].rsplit("(", 1)
        outer, inner = head + "(", name + "("
    else:
        outer, inner = opening, ""
    deeper = indent + "    "
    if inner:  # f(g(items)): g(...) on its own line, exploded when it does not fit either
        if len(deeper) + len(inner) + len(joined) + 1 <= LINE:
            return [outer, f"{deeper}{inner}{joined})", indent + closing[1:]]
        return [
            outer,
            f"{deeper}{inner}",
            *(f"{deeper}    {item}," for item in items),
            f"{deeper})",
            indent + closing[1:],
        ]
    if len(deeper) + len(joined) <= LINE:
        return [outer, deeper + joined, indent + closing]
    return [outer, *(f"{deeper}{item}," for item in items), indent + closing]


def render() -> str:
    """The generated module's text."""
    imports = Imports()
    classes: list[str] = []
    for module_name, sync_class, async_class in REPOSITORIES:
        module = Module(module_name)
        imports.runtime[(module.relative, sync_class, sync_class)] = None
        public = [
            (defined_in, item)
            for defined_in, item in module.methods(sync_class)
            if not item.name.startswith("_") and item.name not in SKIPPED
        ]
        methods = {item.name for _, item in public}
        classes += [
            "",
            "",
            f"class {async_class}:",
            f'    """Async twin of :class:`{module.name}.{sync_class}`: the same methods, awaited."""',
            "",
            f"    _sync_class = {sync_class}",
            "",
            f"    def __init__(self, sync: {sync_class}, workers: _Workers) -> None:",
            "        self._sync = sync",
            "        self._workers = workers",
        ]
        for defined_in, method in public:
            classes += _method(defined_in, module.name, sync_class, method, methods, imports)
    uses_builtins = any("builtins." in line for line in classes)
    for key in list(imports.typing):
        if key in imports.runtime:
            del imports.typing[key]
    imports.typing[(".aio", "_Workers", "_Workers")] = None
    typing_lines = imports.lines(imports.typing, "    ")
    head = [
        '"""The async repositories of :class:`~turnstore.AsyncStore`: each sync repository method, awaited.',
        "",
        "Generated by ``tools/generate_aio_repositories.py`` from the sync repositories; do not edit.",
        "Each method runs its sync twin on the async store's worker threads, one thread hop per call;",
        "``records()`` is an async generator that reads in batches on one worker.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        *(["import builtins"] if uses_builtins else []),
        "import functools",
        "from typing import TYPE_CHECKING",
        "",
        *imports.lines(imports.runtime),
        "",
        "if TYPE_CHECKING:",
        *typing_lines,
        "",
        "__all__ = [",
        *(f'    "{async_class}",' for _, _, async_class in sorted(REPOSITORIES, key=lambda r: r[2])),
        "]",
    ]
    return "\n".join([*head, *classes]) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the module is not current; write nothing")
    options = parser.parse_args(argv)
    text = render()
    current = TARGET.read_text() if TARGET.exists() else ""
    if options.check:
        if current != text:
            print(f"{TARGET.relative_to(ROOT)} is not current: run python tools/generate_aio_repositories.py")
            return 1
        return 0
    if current != text:
        TARGET.write_text(text)
        print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
