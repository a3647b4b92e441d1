"""A large session's entry tree in bounded memory: a few bytes of columns per entry, ids in a temporary file.

:mod:`turnstore.importers.tree` builds loops from one Python object per entry
(its id, parent, message, children...), about a kilobyte each with the
dictionaries that find them. For a session of a million entries that is a
gigabyte. Once a session is spilled (:mod:`turnstore.importers.spill`), its
entries are kept here instead, as :mod:`array` columns indexed by the entry's
position in the file:

* the message's stand-in, in a :class:`~turnstore.importers.spill.StubTable`;
* the parent's position (entries mostly hang from the entry before them; any
  other parent id waits, as a string, until the whole file is read);
* the line number (the place of errors), what loop the entry opens, and the
  model settings in force (codes into a list of the few distinct ones).

The ids themselves go to a temporary SQLite database (deleted when closed,
and by the operating system if the process dies), which finds an entry by id
and the duplicated ids. :func:`build_compact_loops` then walks the tree exactly
as :func:`~turnstore.importers.tree.build_loops` walks the nodes, and the
session's rows become a :class:`~turnstore.importers.spill.SpilledRows`: the
same loops, rows, turns and reported errors, in about sixty bytes an entry.
"""

from __future__ import annotations

import sqlite3
from array import array

from .base import LoopRow, RecordError, SessionBundle, SpilledMessage
from .derive import TurnDeriver
from .spill import SpilledRows, StubTable
from .tree import BRANCH_SUMMARY, COMPACTION, CYCLE_IDS_SHOWN, UNKNOWN_MODELS, Node

__all__ = ["CompactTree", "build_compact_loops"]

ROOT = -1
"""Parent of an entry without one."""
MISSING = -2
"""Parent of an entry whose parent id is not in the file (it becomes a root, reported)."""
PENDING = -3
"""Parent not yet known: its id waits in :attr:`CompactTree.pending`."""
DUPLICATE = -4
"""A later entry with an id already taken: not in the tree (reported)."""

_OPENS = {None: 0, COMPACTION: 1, BRANCH_SUMMARY: 2}
_OPENED = [None, COMPACTION, BRANCH_SUMMARY]

ID_BATCH = 2_000
"""Ids written to the temporary database at a time."""


class CompactTree:
    """The entries of one large session, in file order (see the module docstring)."""

    def __init__(self, origin: str) -> None:
        self.stubs = StubTable()
        self.parent = array("i")
        self.number = array("i")
        """Line number of each entry (0 when its place is in :attr:`places`)."""
        self.places: dict[int, str] = {}
        self.opens = array("b")
        self.config = array("i")
        """Code in :attr:`configs` of the settings for the loops an entry opens (-1: none)."""
        self.raw = array("i")
        """Code in :attr:`configs` of the settings in force after an entry (-1: none recorded)."""
        self.configs: list[dict[str, object]] = []
        self._config_codes: dict[int, int] = {}
        self._copies: dict[int, dict[str, object]] = {}
        self.keep_from: dict[int, str] = {}
        self.pending: dict[int, str] = {}
        self.last_id: str | None = None
        self._prefix = f"{origin}:"
        self._batch: list[tuple[int, str]] = []
        self._db = sqlite3.connect("")  # a private temporary database, removed when closed
        self._db.execute("PRAGMA journal_mode = OFF")
        self._db.execute("PRAGMA synchronous = OFF")
        self._db.execute("PRAGMA cache_size = -2048")
        self._db.execute("CREATE TABLE entry (idx INTEGER PRIMARY KEY, id TEXT NOT NULL)")
        self._db.execute("CREATE INDEX entry_id ON entry (id, idx)")

    def __len__(self) -> int:
        return len(self.parent)

    def close(self) -> None:
        """Remove the temporary database."""
        self._db.close()

    # --- reading ----------------------------------------------------------------------

    def add(self, node: Node, stub: SpilledMessage, raw: dict[str, object] | None) -> None:
        """Keep ``node`` (whose message is spilled as ``stub``) and the settings in force after it."""
        index = len(self.parent)
        parent_id = node.parent_id
        if parent_id is None:
            self.parent.append(ROOT)
        elif parent_id == self.last_id:
            self.parent.append(index - 1)
        else:
            self.parent.append(PENDING)
            self.pending[index] = parent_id
        place = node.place
        number = place[len(self._prefix) :] if place.startswith(self._prefix) else ""
        if number.isdigit() and number[0] != "0" and len(number) < 10:
            self.number.append(int(number))
        else:
            self.number.append(0)
            self.places[index] = place
        self.opens.append(_OPENS[node.opens])
        self.config.append(self._code(node.config))
        self.raw.append(self._code(raw))
        if node.keep_from_id is not None:
            self.keep_from[index] = node.keep_from_id
        self.stubs.add(stub)
        self._batch.append((index, node.id))
        if len(self._batch) >= ID_BATCH:
            self._flush()
        self.last_id = node.id

    def set_raw(self, entry_id: str, config: dict[str, object] | None) -> None:
        """Record the settings in force after the last entry, ``entry_id`` (a retained tail's end)."""
        assert entry_id == self.last_id
        self.raw[-1] = self._code(config)

    def config_after(self, entry_id: str) -> dict[str, object] | None:
        """The settings in force after the last entry read with id ``entry_id`` (None when none)."""
        if entry_id == self.last_id:
            code = self.raw[-1]
        else:
            found = self._find(entry_id)
            code = self.raw[found[1]] if found is not None else -1
        return self.configs[code] if code >= 0 else None

    def place(self, index: int) -> str:
        """Where entry ``index`` is (``file:line``)."""
        number = self.number[index]
        return f"{self._prefix}{number}" if number else self.places[index]

    def id_of(self, index: int) -> str:
        """The id of entry ``index``."""
        self._flush()
        row = self._db.execute("SELECT id FROM entry WHERE idx = ?", (index,)).fetchone()
        return str(row[0])

    def _code(self, config: dict[str, object] | None) -> int:
        if config is None:
            return -1
        code = self._config_codes.get(id(config))
        if code is None:  # each config object is kept (in self.configs), so its id() is not reused
            code = self._config_codes[id(config)] = len(self.configs)
            self.configs.append(config)
        return code

    def _flush(self) -> None:
        if self._batch:
            self._db.executemany("INSERT INTO entry VALUES (?, ?)", self._batch)
            self._batch = []

    def _find(self, entry_id: str) -> tuple[int, int] | None:
        """(first, last) position of the entries with id ``entry_id``; None when there is none."""
        self._flush()
        row = self._db.execute("SELECT min(idx), max(idx) FROM entry WHERE id = ?", (entry_id,)).fetchone()
        return None if row is None or row[0] is None else (int(row[0]), int(row[1]))

    # --- the tree ---------------------------------------------------------------------

    def resolve(self, errors: list[RecordError]) -> dict[int, int]:
        """Settle every parent (reporting duplicated ids, then parents not in the file, as the node walk does);
        a map from each duplicate's position to the first entry with its id."""
        self._flush()
        parent = self.parent
        first_of: dict[int, int] = {}
        duplicated = self._db.execute(
            "SELECT e.idx, e.id, d.first FROM entry AS e JOIN "
            "(SELECT id, min(idx) AS first FROM entry GROUP BY id HAVING count(*) > 1) AS d "
            "ON e.id = d.id AND e.idx > d.first ORDER BY e.idx"
        ).fetchall()
        for index, entry_id, first in duplicated:
            errors.append(RecordError(self.place(index), f"duplicate entry id {entry_id!r}"))
            first_of[index] = first
        for index in sorted(self.pending):
            found = self._find(self.pending[index])
            parent[index] = found[0] if found is not None else MISSING
        if first_of:
            for index in range(len(parent)):
                if parent[index] in first_of:
                    parent[index] = first_of[parent[index]]
            for index in first_of:
                parent[index] = DUPLICATE
        for index in sorted(self.pending):
            if parent[index] == MISSING:
                errors.append(
                    RecordError(self.place(index), f"parent entry {self.pending[index]!r} is not in the file")
                )
        return first_of

    def release(self) -> None:
        """Let go of what only building the loops needs (the rows go on reading places and stand-ins)."""
        self.parent = self.config = self.raw = array("i")
        self.opens = array("b")
        self.pending, self.keep_from, self._copies = {}, {}, {}
        self.configs, self._config_codes = [], {}

    def loop_config(self, code: int) -> dict[str, object] | None:
        """A copy of config ``code`` for loops to hold (one copy, shared by every loop that runs with it:
        a loop's config is replaced, never changed in place); None for none or an empty one."""
        if code < 0 or not self.configs[code]:
            return None
        copy = self._copies.get(code)
        if copy is None:
            copy = self._copies[code] = dict(self.configs[code])
        return copy

    def shared(self, config: dict[str, object]) -> dict[str, object]:
        """One copy of ``config`` per distinct settings object (see :meth:`loop_config`)."""
        return self.loop_config(self._code(config)) or dict(config)

    def raw_of_id(self, index: int, duplicated: bool) -> dict[str, object] | None:
        """The settings in force after the last entry with entry ``index``'s id."""
        if duplicated:
            found = self._find(self.id_of(index))
            if found is not None:
                index = found[1]
        code = self.raw[index]
        return self.configs[code] if code >= 0 else None


class _Line:
    __slots__ = ("deriver", "loop")

    def __init__(self, loop: LoopRow) -> None:
        self.loop = loop
        self.deriver = TurnDeriver()


def build_compact_loops(bundle: SessionBundle, tree: CompactTree, loop_prefix: str) -> tuple[SpilledRows, array[int]]:
    """Fill ``bundle.loops`` and ``bundle.messages`` from a compact tree, as
    :func:`~turnstore.importers.tree.build_loops` does from nodes.

    Returns the rows, and each entry's row (-1 when it has none).
    """
    errors = bundle.errors
    tree.resolve(errors)
    parent = tree.parent
    size = len(parent)
    first_child = array("i", [-1]) * size
    next_sibling = array("i", [-1]) * size
    roots: list[int] = []
    entries = 0
    for index in range(size - 1, -1, -1):  # from the end: each child goes before its later siblings
        above = parent[index]
        if above == DUPLICATE:
            continue
        entries += 1
        if above < 0:
            roots.append(index)
        else:
            next_sibling[index] = first_child[above]
            first_child[above] = index
    roots.reverse()
    rows = SpilledRows(tree.stubs, tree.place)
    row_of = array("i", [-1]) * size
    walk = _Walk(bundle, tree, rows, row_of, first_child, next_sibling, loop_prefix)
    walk.run(roots)
    if len(rows) < entries:  # some entries sit on (or below) a cycle of parent links
        unplaced = [index for index in range(size) if row_of[index] < 0 and parent[index] != DUPLICATE]
        walk.run(_cut_cycles(unplaced, tree, first_child, next_sibling, errors))
    bundle.messages = rows  # type: ignore[assignment]  # a sequence of rows, made on demand
    _fill_configs(bundle, rows)
    return rows, row_of


class _Walk:
    """The depth-first walk of :func:`~turnstore.importers.tree._walk`, over positions."""

    def __init__(
        self,
        bundle: SessionBundle,
        tree: CompactTree,
        rows: SpilledRows,
        row_of: array[int],
        first_child: array[int],
        next_sibling: array[int],
        loop_prefix: str,
    ) -> None:
        self.bundle, self.tree, self.rows, self.row_of = bundle, tree, rows, row_of
        self.first_child, self.next_sibling, self.prefix = first_child, next_sibling, loop_prefix
        self.count = 0

    def new_loop(self, kind: str, parent: LoopRow | None, fork: int, config: int) -> _Line:
        self.count += 1
        fork_row = self.row_of[fork] if fork >= 0 else -1
        loop = LoopRow(
            loop_id=f"{self.prefix}.{self.count}",
            parent_loop_id=parent.loop_id if parent else None,
            continuation_kind=kind if parent else "initial",
            fork_after=fork_row if fork_row >= 0 else None,
            config=self.tree.loop_config(config),
        )
        self.bundle.loops.append(loop)
        return _Line(loop)

    def run(self, roots: list[int]) -> None:
        tree, rows, row_of = self.tree, self.rows, self.row_of
        first_child, next_sibling = self.first_child, self.next_sibling
        opens_of, config_of, stubs = tree.opens, tree.config, tree.stubs
        append_row = rows.append_row
        stack: list[tuple[int, _Line | None, bool, int]] = [(root, None, False, -1) for root in reversed(roots)]
        while stack:
            node, line, branching, parent = stack.pop()
            while True:
                role = stubs.role(node)
                opens = _OPENED[opens_of[node]]
                if opens is not None or branching or line is None:
                    base = line.loop if line is not None else None
                    if opens == COMPACTION:
                        line = self.new_loop("compaction", base, parent, config_of[node])
                        line.loop.keep_from = self._keep_from(node)
                    elif opens == BRANCH_SUMMARY or branching:
                        line = self.new_loop("branch", base, parent, config_of[node])
                    elif line is None:
                        line = self.new_loop("initial", None, -1, config_of[node])
                assert line is not None
                tools = role == "assistant" and stubs.asks_tools(node)
                opens_loop, turn = line.deriver.step(role, tools)
                if opens_loop:
                    line = self.new_loop("default", line.loop, -1, config_of[node])
                    _, turn = line.deriver.step(role, tools)
                if opens is not None:
                    turn = None
                row_of[node] = len(rows)
                append_row(node, line.loop.loop_id, turn)
                child = first_child[node]
                if child < 0:
                    break
                later: list[int] = []
                sibling = next_sibling[child]
                while sibling >= 0:
                    later.append(sibling)
                    sibling = next_sibling[sibling]
                for other in reversed(later):
                    stack.append((other, line, True, node))
                node, branching, parent = child, False, node

    def _keep_from(self, node: int) -> int | None:
        keep_id = self.tree.keep_from.get(node)
        if keep_id is None or not keep_id:
            return None
        found = self.tree._find(keep_id)
        if found is None:
            return None
        row = self.row_of[found[0]]
        return row if row >= 0 else None


def _cut_cycles(
    unplaced: list[int],
    tree: CompactTree,
    first_child: array[int],
    next_sibling: array[int],
    errors: list[RecordError],
) -> list[int]:
    """:func:`~turnstore.importers.tree._cut_cycles` over positions (``unplaced`` in file order)."""
    parent = tree.parent
    walked: dict[int, int] = {}
    cut: list[int] = []
    for walk, start in enumerate(unplaced):
        node = start
        path: list[int] = []
        while node not in walked:
            walked[node] = walk
            path.append(node)
            node = parent[node]
        if walked[node] != walk:
            continue
        cycle = path[path.index(node) :]
        first = min(cycle)  # positions are file order
        _unlink(parent[first], first, first_child, next_sibling)
        errors.append(RecordError(tree.place(first), _cycle_reason(tree, first, len(cycle))))
        cut.append(first)
    cut.sort()
    return cut


def _unlink(above: int, child: int, first_child: array[int], next_sibling: array[int]) -> None:
    if first_child[above] == child:
        first_child[above] = next_sibling[child]
        return
    node = first_child[above]
    while next_sibling[node] != child:
        node = next_sibling[node]
    next_sibling[node] = next_sibling[child]


def _cycle_reason(tree: CompactTree, first: int, length: int) -> str:
    first_id = tree.id_of(first)
    if length == 1:
        return f"entry {first_id!r} is its own parent"
    chain = [first_id]
    node = first
    while len(chain) < min(length, CYCLE_IDS_SHOWN):
        node = tree.parent[node]
        chain.append(tree.id_of(node))
    shown = " -> ".join(repr(ident) for ident in chain)
    more = f" -> ... ({length} entries)" if length > CYCLE_IDS_SHOWN else ""
    return f"entry {first_id!r} is its own ancestor (parent links {shown}{more} -> {first_id!r})"


def _fill_configs(bundle: SessionBundle, rows: SpilledRows) -> None:
    """:func:`~turnstore.importers.derive.fill_configs` over the rows' columns."""
    first = rows.first_entries("assistant")
    stubs = rows.stubs
    made: dict[tuple[str | None, str | None], dict[str, object]] = {}  # one config per model (see loop_config)
    for loop in bundle.loops:
        entry = first.get(loop.loop_id)
        if entry is None or loop.config is not None:
            continue
        stub = stubs.stub(entry)
        if stub.model not in UNKNOWN_MODELS:
            key = (stub.model, stub.provider)
            config = made.get(key)
            if config is None:
                config = made[key] = {"model": stub.model, "provider": stub.provider}
            loop.config = config
