"""Hostile input for the fuzz tests (``test_fuzz_models.py``, ``test_fuzz_importers.py``).

Three kinds of input, all driven by hypothesis so a failure shrinks and replays:

* JSON-ish values from recursive strategies: huge integers (beyond 2**64 and
  beyond what a JSON reader takes), extreme floats (1e308, -0.0, NaN,
  ±Infinity), strings with NUL, lone surrogates and line separators, odd keys.
* Mutations of valid records (the examples in ``docs/wire-format.md``): drop a field,
  change a value's type, swap two values, insert an unknown key, and the
  heavy values below in place of any one value.
* Mutations of valid source files, byte-wise and line-wise: truncate the file
  or a line, drop, duplicate or swap lines, invalid UTF-8, NUL bytes, a value
  of a line replaced by a wrong type, a huge number, deep nesting or a 10 MB
  string; for SQLite sources the JSON held in a column is mutated the same way
  (or the column gets a wrong type), and the file itself is cut or scribbled on.

Heavy values (10 MB strings, 5,000-level nesting) are drawn rarely; tests that
must see them have explicit cases.

Case counts: :func:`examples` scales ``max_examples`` by 10 under
``TURNSTORE_STRESS=1``; :data:`COUNTS` tallies how many cases each property
ran and what became of them (``accepted``, ``rejected``...), and is written
out at the end of each fuzz module (:func:`report_counts`).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

STRESS = os.environ.get("TURNSTORE_STRESS") == "1"
"""``TURNSTORE_STRESS=1``: ten times the examples of every fuzz property."""

BIG = 10 * 1024 * 1024
"""Length of the "10 MB string" values."""

DEEP = 5_000
"""Nesting depth of the "deep nesting" values."""

COUNTS: defaultdict[str, Counter[str]] = defaultdict(Counter)
"""property name -> outcome -> number of cases (printed and written at the end of the session)."""


def examples(n: int) -> int:
    """``n``, or ``10 * n`` under ``TURNSTORE_STRESS=1``."""
    return n * 10 if STRESS else n


def fuzz_settings(n: int) -> settings:
    """Hypothesis settings for a fuzz property of ``n`` examples (×10 under stress), no deadline."""
    return settings(
        max_examples=examples(n),
        deadline=None,
        derandomize=not STRESS,  # CI runs the same cases every time; a stress run explores
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
            HealthCheck.filter_too_much,
        ],
    )


def tally(name: str, outcome: str) -> None:
    """Count one case of property ``name``."""
    COUNTS[name]["cases"] += 1
    COUNTS[name][outcome] += 1


def report_counts(counts: dict[str, Counter[str]] | None = None) -> str:
    """The case counts (of ``counts``, default all) as a table, one property a line."""
    counts = COUNTS if counts is None else counts
    lines = [f"fuzz cases ({'TURNSTORE_STRESS=1' if STRESS else 'default'}):"]
    total = 0
    for name in sorted(counts):
        counter = counts[name]
        total += counter["cases"]
        outcomes = ", ".join(f"{key}={value}" for key, value in sorted(counter.items()) if key != "cases")
        lines.append(f"  {name}: {counter['cases']} ({outcomes})")
    lines.append(f"  total: {total}")
    return "\n".join(lines)


def write_counts(prefixes: tuple[str, ...], default_folder: Path) -> None:
    """Append the counts of the properties named ``prefixes*`` to ``$TURNSTORE_FUZZ_COUNTS``
    (default ``default_folder/fuzz-counts.txt``) and print them (shown under ``pytest -s``)."""
    mine = {name: COUNTS[name] for name in COUNTS if name.startswith(prefixes)}
    if not mine:
        return
    text = report_counts(mine)
    target = Path(os.environ.get("TURNSTORE_FUZZ_COUNTS") or default_folder / "fuzz-counts.txt")
    with target.open("a", encoding="utf-8") as file:
        file.write(text + "\n")
    print("\n" + text)


# --- values -------------------------------------------------------------------------------

NASTY_CHARS = [
    "\x00",
    "\ud800",
    "\udfff",
    "\udbff\udfff",
    "\u2028",
    "\u2029",
    "\x85",
    "\ufeff",
    "\x1e",
    "é",
    "😀",
    '"',
    "\\",
    "\n",
]


class HugeInt(int):
    """An integer too long for ``str()`` (over 4,300 digits), that still has a repr for hypothesis' reports."""

    def __repr__(self) -> str:
        return f"HugeInt(<{len(format(self, 'x')) * 4 * 3 // 10 + 1} digits>)"


HUGE_INTS = [
    2**53 + 1,
    2**63 - 1,
    2**63,
    2**64,
    2**64 + 1,
    -(2**63) - 1,
    10**40,
    -(10**40),
    HugeInt(10**4299),
    HugeInt(10**4400),
]
"""Integers around the 64-bit column edges, beyond them, and beyond what JSON readers convert (4,300 digits)."""

EDGE_FLOATS = [1e308, -1e308, 1.7976931348623157e308, 5e-324, -0.0, 0.1, float("nan"), float("inf"), float("-inf")]

nasty_text = st.lists(st.one_of(st.sampled_from(NASTY_CHARS), st.text(max_size=4)), max_size=6).map("".join)
"""Short strings that mix NUL, lone surrogates, line separators, a BOM, quotes and backslashes."""

keys = st.one_of(
    st.sampled_from(["role", "type", "content", "text", "turnId", "usage", "x", "", "\x00", "\ud800", "turn"]),
    nasty_text,
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from(HUGE_INTS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGE_FLOATS),
    nasty_text,
    st.text(max_size=20),
)

json_values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=4)),
    max_leaves=16,
)
"""JSON-ish Python values: what a caller could hand ``append`` as a message or part of one."""


def nested(depth: int, kind: str = "list", leaf: Any = 1) -> Any:
    """A value nested ``depth`` levels deep (lists, or objects under key ``a``)."""
    value = leaf
    for _ in range(depth):
        value = [value] if kind == "list" else {"a": value}
    return value


@st.composite
def heavy_values(draw: st.DrawFn) -> Any:
    """One value a parser or a database may choke on."""
    choice = draw(st.sampled_from(["huge_int", "float", "deep", "nasty", "big_string", "wrong_type", "empty"]))
    if choice == "huge_int":
        return draw(st.sampled_from(HUGE_INTS))
    if choice == "float":
        return draw(st.sampled_from(EDGE_FLOATS))
    if choice == "deep":
        return nested(
            draw(st.sampled_from([50, 198, 199, 200, 201, 202, 253, 254, 255, 1_000, DEEP])),
            draw(st.sampled_from(["list", "dict"])),
        )
    if choice == "nasty":
        return draw(nasty_text)
    if choice == "big_string":
        # Rare by construction (one choice of seven, then one of four): 10 MB strings are slow to push around.
        return draw(st.sampled_from(["x" * 70_000, "\x00" * 1000, "é" * 5000, "y" * BIG]))
    if choice == "wrong_type":
        return draw(st.sampled_from([None, True, False, 0, -1, 1.5, "", "0", [], {}, [None], {"": None}]))
    return draw(st.sampled_from(["", [], {}]))


replacement_values = st.one_of(heavy_values(), json_values)


# --- paths into a JSON value ---------------------------------------------------------------------


def paths(value: Any, limit: int = 2_000) -> list[tuple[Any, ...]]:
    """Paths (tuples of keys and indexes) to values inside ``value``, the root first; at most ``limit``
    (without recursion: values may be nested thousands of levels deep)."""
    found: list[tuple[Any, ...]] = []
    stack: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while stack and len(found) < limit:
        path, item = stack.pop()
        found.append(path)
        if isinstance(item, dict):
            stack.extend(((*path, key), child) for key, child in reversed(item.items()))
        elif isinstance(item, list):
            stack.extend(((*path, index), child) for index, child in reversed(list(enumerate(item))))
    return found


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-ish value, without recursion (:func:`copy.deepcopy` recurses)."""
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any]] = [(value, root, 0)]
    while stack:
        item, parent, key = stack.pop()
        if isinstance(item, dict):
            copied: Any = dict.fromkeys(item)  # keys in their order; values filled in below
            stack.extend((child, copied, name) for name, child in item.items())
        elif isinstance(item, list):
            copied = [None] * len(item)
            stack.extend((child, copied, index) for index, child in enumerate(item))
        else:
            copied = item
        parent[key] = copied
    return root[0]


def get_at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def set_at(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """``value`` with the value at ``path`` replaced (a copy for the root)."""
    if not path:
        return new
    get_at(value, path[:-1])[path[-1]] = new
    return value


TAG_KEYS = frozenset(
    {
        "role",
        "type",
        "kind",
        "stopReason",
        "stop_reason",
        "status",
        "id",
        "parent_id",
        "parentId",
        "timestamp",
        "usage",
        "content",
        "contents",
        "message",
        "turnId",
        "loopId",
        "turnIndex",
        "session_id",
        "loop_id",
        "turn_index",
        "version",
        "arguments",
        "data",
        "toolCallId",
        "call_id",
        "name",
        "model",
        "provider",
    }
)
"""Keys that steer a reader (tags, ids, links, counts): retyped and replaced more often than the rest."""


@st.composite
def mutated_values(draw: st.DrawFn, original: Any) -> tuple[str, Any]:
    """``(what was done, a mutated deep copy of original)``: drop, retype, swap, insert or replace one value."""
    value = json_copy(original)
    op = draw(st.sampled_from(["drop", "retype", "swap", "insert", "replace", "replace"]))
    where = paths(value)
    if op == "drop":
        inner = [p for p in where if p]
        if not inner:
            return "nothing", value
        path = draw(st.sampled_from(inner))
        parent = get_at(value, path[:-1])
        del parent[path[-1]]
        return f"drop {path!r}", value
    if op == "swap" and len(where) > 2:
        first, second = draw(st.sampled_from(where[1:])), draw(st.sampled_from(where[1:]))
        a, b = json_copy(get_at(value, first)), json_copy(get_at(value, second))
        try:
            value = set_at(value, first, b)
            value = set_at(value, second, a)
        except (KeyError, IndexError, TypeError):  # one path ran through the other
            pass
        return f"swap {first!r} {second!r}", value
    if op == "insert":
        objects = [p for p in where if isinstance(get_at(value, p), dict)]
        if objects:
            path = draw(st.sampled_from(objects))
            key = draw(keys)
            get_at(value, path)[key] = draw(replacement_values)
            return f"insert {key!r} at {path!r}", value
    tagged = [p for p in where if p and p[-1] in TAG_KEYS]
    path = draw(st.sampled_from(tagged if tagged and draw(st.booleans()) else where))
    if op == "retype":
        new = draw(st.sampled_from([None, True, 0, -1, 2**64, 1.5, "", "text", [], {}, [1], {"k": "v"}]))
    else:
        new = draw(replacement_values)
    return f"{op} {path!r}", set_at(value, path, new)


# --- JSON text --------------------------------------------------------------------------------


def to_json(value: Any, ascii_only: bool = True) -> str:
    """JSON text of ``value`` as a writer would produce it (NaN/Infinity as the bare constants Python writes).

    Nesting deeper than :func:`json.dumps` can recurse is written without it.
    """
    try:
        return json.dumps(value, ensure_ascii=ascii_only, separators=(",", ":"))
    except RecursionError:
        return _dumps_iteratively(value, ascii_only)
    except ValueError:  # an int beyond the 4,300-digit str() limit
        return _dumps_iteratively(value, ascii_only)


def _dumps_iteratively(value: Any, ascii_only: bool) -> str:
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Raw):
            out.append(item.text)
        elif isinstance(item, dict):
            out.append("{")
            parts: list[Any] = []
            for index, (key, child) in enumerate(item.items()):
                if index:
                    parts.append(_Raw(","))
                parts.append(_Raw(json.dumps(str(key), ensure_ascii=ascii_only) + ":"))
                parts.append(child)
            parts.append(_Raw("}"))
            stack.extend(reversed(parts))
        elif isinstance(item, list):
            out.append("[")
            parts = []
            for index, child in enumerate(item):
                if index:
                    parts.append(_Raw(","))
                parts.append(child)
            parts.append(_Raw("]"))
            stack.extend(reversed(parts))
        elif isinstance(item, int) and not isinstance(item, bool):
            out.append(_int_text(item))
        else:
            out.append(json.dumps(item, ensure_ascii=ascii_only))
    return "".join(out)


class _Raw:
    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _int_text(number: int) -> str:
    try:
        return str(number)
    except ValueError:  # beyond the str() digit limit: a number of that many digits, written without str()
        sign = "-" if number < 0 else ""
        return sign + "1" + "0" * (len(format(abs(number), "x")) * 4 * 3 // 10)


def encode(text: str) -> bytes:
    """UTF-8 bytes of ``text``; lone surrogates written as their (invalid) 3-byte forms."""
    return text.encode("utf-8", "surrogatepass")


# --- file mutations -----------------------------------------------------------------------

INVALID_UTF8 = [
    b"\xff",
    b"\xfe",
    b"\x80",
    b"\xc3",
    b"\xc3(",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xe2\x82",
]


@st.composite
def mutated_text_file(draw: st.DrawFn, data: bytes, whole_json: bool) -> tuple[str, bytes]:
    """``(what was done, new bytes)`` for a JSON (``whole_json``) or JSONL source file."""
    ops = ["truncate_file", "flip_byte", "invalid_utf8", "nul_byte", "value"]
    if not whole_json:
        ops += ["truncate_line", "drop_line", "duplicate_line", "swap_lines", "value", "value", "blank_junk"]
    op = draw(st.sampled_from(ops))
    if op == "truncate_file":
        cut = draw(st.integers(0, max(len(data) - 1, 0)))
        return f"truncate file at {cut}", data[:cut]
    if op in {"flip_byte", "invalid_utf8", "nul_byte"}:
        at = draw(st.integers(0, max(len(data) - 1, 0)))
        if op == "flip_byte":
            bit = draw(st.integers(0, 7))
            return f"flip bit {bit} of byte {at}", data[:at] + bytes([data[at] ^ (1 << bit)]) + data[at + 1 :]
        insert = draw(st.sampled_from(INVALID_UTF8)) if op == "invalid_utf8" else b"\x00"
        replace = draw(st.booleans())
        return f"{op} {insert!r} at {at}", data[:at] + insert + data[at + int(replace) :]
    if whole_json:
        value = json.loads(data.decode("utf-8-sig"))
        what, new = draw(mutated_values(value))
        return what, encode(to_json(new, draw(st.booleans())))
    lines = data.split(b"\n")
    real = [i for i, line in enumerate(lines) if line.strip()]
    index = draw(st.sampled_from(real))
    if op == "truncate_line":
        cut = draw(st.integers(0, max(len(lines[index]) - 1, 0)))
        lines[index] = lines[index][:cut]
        return f"truncate line {index + 1} at {cut}", b"\n".join(lines)
    if op == "drop_line":
        del lines[index]
        return f"drop line {index + 1}", b"\n".join(lines)
    if op == "duplicate_line":
        lines.insert(index, lines[index])
        return f"duplicate line {index + 1}", b"\n".join(lines)
    if op == "swap_lines":
        other = draw(st.sampled_from(real))
        lines[index], lines[other] = lines[other], lines[index]
        return f"swap lines {index + 1} {other + 1}", b"\n".join(lines)
    if op == "blank_junk":
        junk = draw(
            st.sampled_from([b"null", b"[]", b"42", b'"text"', b"{}", b"\xef\xbb\xbf{}", b'{"a":', b"]", b"\r"])
        )
        lines.insert(index, junk)
        return f"insert {junk!r} before line {index + 1}", b"\n".join(lines)
    value = json.loads(lines[index].decode("utf-8"))
    what, new = draw(mutated_values(value))
    lines[index] = encode(to_json(new, draw(st.booleans())))
    return f"line {index + 1}: {what}", b"\n".join(lines)


def json_columns(path: Path) -> list[tuple[str, str, int]]:
    """``(table, column, rowid)`` of every text cell of a SQLite file that holds JSON."""
    found = []
    with sqlite3.connect(path) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for table in tables:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]
            for column in columns:
                for rowid, text in connection.execute(f'SELECT rowid, "{column}" FROM "{table}"'):
                    if isinstance(text, str) and text[:1] in "[{":
                        try:
                            json.loads(text)
                        except ValueError:
                            continue
                        found.append((table, column, rowid))
    connection.close()
    return found


def all_cells(path: Path) -> list[tuple[str, str, int]]:
    """``(table, column, rowid)`` of every cell of a SQLite file."""
    found = []
    with sqlite3.connect(path) as connection:
        tables = [
            row[0]
            for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        for table in tables:
            columns = [row[1] for row in connection.execute(f'PRAGMA table_info("{table}")')]
            rowids = [row[0] for row in connection.execute(f'SELECT rowid FROM "{table}"')]
            found.extend((table, column, rowid) for column in columns for rowid in rowids)
    connection.close()
    return found


@st.composite
def mutate_sqlite(draw: st.DrawFn, path: Path) -> str:
    """Mutate the SQLite source at ``path`` in place; returns what was done."""
    op = draw(st.sampled_from(["json", "json", "json", "cell", "delete_row", "file_bytes"]))
    if op == "file_bytes":
        data = path.read_bytes()
        how = draw(st.sampled_from(["truncate", "scribble", "header"]))
        if how == "truncate":
            cut = draw(st.integers(0, len(data) - 1))
            path.write_bytes(data[:cut])
            return f"truncate file at {cut}"
        if how == "header":
            at = draw(st.integers(0, 99))
            path.write_bytes(data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :])
            return f"flip header byte {at}"
        at = draw(st.integers(100, len(data) - 64))
        junk = draw(st.binary(min_size=1, max_size=64))
        path.write_bytes(data[:at] + junk + data[at + len(junk) :])
        return f"scribble {len(junk)} bytes at {at}"
    connection = sqlite3.connect(path)
    try:
        if op == "json":
            cells = json_columns(path)
            table, column, rowid = draw(st.sampled_from(cells))
            (text,) = connection.execute(f'SELECT "{column}" FROM "{table}" WHERE rowid = ?', (rowid,)).fetchone()
            how = draw(st.sampled_from(["value", "value", "truncate", "blob"]))
            if how == "truncate":
                cut = draw(st.integers(0, max(len(text) - 1, 0)))
                new: Any = text[:cut]
                what = f"truncate {table}.{column} rowid={rowid} at {cut}"
            elif how == "blob":
                new = text.encode()[:-1] + draw(st.sampled_from(INVALID_UTF8)) + text.encode()[-1:]
                what = f"{table}.{column} rowid={rowid}: a BLOB with invalid UTF-8"
            else:
                done, value = draw(mutated_values(json.loads(text)))
                new = to_json(value, draw(st.booleans()))
                what = f"{table}.{column} rowid={rowid}: {done}"
            try:
                connection.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (new, rowid))
            except (sqlite3.Error, UnicodeEncodeError, OverflowError) as error:  # a value SQLite itself refuses
                return f"{what} (refused by sqlite3: {type(error).__name__})"
            connection.commit()
            return what
        if op == "cell":
            table, column, rowid = draw(st.sampled_from(all_cells(path)))
            new = draw(
                st.sampled_from([None, 0, -1, 2**63 - 1, 1.5, "", "x", "null", "[]", "{}", b"\xff\xfe", b"{}", "\x00"])
            )
            try:
                connection.execute(f'UPDATE "{table}" SET "{column}" = ? WHERE rowid = ?', (new, rowid))
            except sqlite3.Error as error:  # NOT NULL, UNIQUE...: the source cannot hold it
                return f"set {table}.{column} rowid={rowid} = {new!r} (refused: {error})"
            connection.commit()
            return f"set {table}.{column} rowid={rowid} = {new!r}"
        table, _, rowid = draw(st.sampled_from(all_cells(path)))
        connection.execute(f'DELETE FROM "{table}" WHERE rowid = ?', (rowid,))
        connection.commit()
        return f"delete {table} rowid={rowid}"
    finally:
        connection.close()
