"""Reading a source file's text: whole, line by line, as JSON; and what a file that does not read reports.

Every error names its place (``file:line``) and is one line: bytes that are not
UTF-8 (and the byte), JSON that does not parse (and the column), JSON nested
deeper than Python reads, a number longer than Python reads. Memory is bounded:
a JSONL file is read a line at a time, and a whole-file JSON source only up to
:data:`MAX_WHOLE_FILE_BYTES`.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pydantic_core import from_json

from ..errors import ImportFailed, InvalidRecord
from .files import open_source

__all__ = [
    "MAX_WHOLE_FILE_BYTES",
    "json_problem",
    "loads_json",
    "read_json",
    "read_jsonl",
    "read_lines",
    "read_text",
]


def read_text(path: Path) -> str:
    """A source file as text (UTF-8, a BOM allowed); undecodable bytes are an error naming the file."""
    try:
        with open_source(path) as file:
            data = file.read()
    except OSError as error:
        raise ImportFailed(f"{path}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InvalidRecord(f"{path}:{line}", f"invalid UTF-8 at byte {error.start}") from None


MAX_WHOLE_FILE_BYTES = 64 * 1024 * 1024
"""Largest whole-file JSON source (a JSON array) an importer reads: such a file is parsed into memory
at once, and its records take many times its size there. JSONL sources are read line by line."""


def read_json(path: Path) -> Any:
    """A whole JSON file; a syntax error is reported with its line.

    Raises:
        ImportFailed: the file cannot be read.
        InvalidRecord: the file is larger than :data:`MAX_WHOLE_FILE_BYTES`, not UTF-8, or not JSON.
    """
    try:
        size = path.stat().st_size
    except OSError as error:
        raise ImportFailed(f"{path}: {error.strerror or error}") from None
    if size > MAX_WHOLE_FILE_BYTES:
        raise InvalidRecord(
            f"{path}:1",
            f"file is {size} bytes; a whole-file JSON source is read only up to {MAX_WHOLE_FILE_BYTES} bytes",
        )
    text = read_text(path)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as error:
        raise InvalidRecord(f"{path}:{_error_line(text, error)}", json_problem(error)) from None


def read_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` for each line of a text file, read from the file one line at a time.

    Only ``"\n"`` ends a line (a ``"\r"`` before it is dropped): ``str.splitlines()`` would also
    split on U+2028, U+2029, ``\x85`` and ``\x1c``-``\x1e``, which JSON writers (pydantic's among
    them) leave raw inside strings. A UTF-8 BOM at the start is skipped. Memory holds one line.

    Raises:
        ImportFailed: the file cannot be read.
        InvalidRecord: a line is not UTF-8 (naming the line and the byte of the file).
    """
    try:
        file = open_source(path)
    except OSError as error:
        raise ImportFailed(f"{path}: {error.strerror or error}") from None
    with file:
        offset = 0
        number = 0
        try:
            for data in file:  # a binary file's lines end at b"\n" only
                number += 1
                start = 3 if number == 1 and data.startswith(b"\xef\xbb\xbf") else 0
                try:
                    raw = data[start:].decode("utf-8") if start else data.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise InvalidRecord(
                        f"{path}:{number}", f"invalid UTF-8 at byte {offset + start + error.start}"
                    ) from None
                offset += len(data)
                yield number, raw.removesuffix("\n").removesuffix("\r")
        except OSError as error:
            raise ImportFailed(f"{path}: {error.strerror or error}") from None


def read_jsonl(path: Path, fast: Callable[[str], Any] | None = None) -> Iterator[tuple[int, str, Any]]:
    """``(line number, verbatim line, parsed value or an InvalidRecord)`` for each non-blank line,
    read from the file as they are asked for (:func:`read_lines`).

    ``fast(line)``, when given, is tried first: a format's one-pass parse of the
    lines it knows (None for a line it does not take, or that fails it); the
    other lines, and any error, go through the general parser, which names
    what is wrong.
    """
    for number, line in read_lines(path):
        if not line or line.isspace():  # blank (without copying the line, as strip() would)
            continue
        if fast is not None:
            value = fast(line)
            if value is not None:
                yield number, line, value
                continue
        try:
            yield number, line, loads_json(line)
        except (ValueError, RecursionError) as error:
            yield number, line, InvalidRecord(f"{path}:{number}", json_problem(error))


def _error_line(text: str, error: ValueError | RecursionError) -> int:
    """The line of ``text`` a JSON error is on: the parser's own, or the first number too long to read; else 1."""
    if isinstance(error, json.JSONDecodeError):
        return error.lineno
    if isinstance(error, ValueError):
        digits = re.search(rf"\d{{{sys.get_int_max_str_digits() + 1},}}", text)
        if digits:
            return text.count("\n", 0, digits.start()) + 1
    return 1


def json_problem(error: ValueError | RecursionError) -> str:
    """Why a JSON text did not parse, in one line, for an :class:`InvalidRecord` (its place names file and line).

    ``json.loads`` raises a ``JSONDecodeError`` for bad syntax, ``RecursionError``
    for nesting deeper than the interpreter's stack, and a plain ``ValueError``
    for an integer longer than Python reads (``sys.get_int_max_str_digits()``).
    """
    if isinstance(error, json.JSONDecodeError):  # "Unterminated string starting at" + the column
        return f"invalid JSON: {error.msg.removesuffix(' at')} at column {error.colno}"
    if isinstance(error, RecursionError):
        return "JSON nested too deeply"
    return f"invalid JSON: a number has more than {sys.get_int_max_str_digits():,} digits"


def loads_json(text: str) -> Any:
    """Parse JSON like ``json.loads``, twice as fast where pydantic-core's parser agrees.

    pydantic-core rejects a few inputs Python accepts (lone surrogates such as
    ``"\\ud800"``, NaN literals); those, and real errors, go through ``json.loads``,
    which gives the error messages (and the acceptance) the importers rely on.
    """
    try:
        return from_json(text, allow_inf_nan=False, cache_strings=False)
    except ValueError:
        return json.loads(text)
