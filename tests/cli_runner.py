"""Running the ``turnstore`` entry point in-process under click's CliRunner, and checking failures."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from turnstore.cli import main

UNSAFE = frozenset(
    (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
)
"""What a terminal acts on: C0 and C1 controls, DEL, and the bidi controls that reorder text."""


@dataclass
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def run_cli(*args: str | Path) -> Result:
    """``turnstore ARGS`` through :func:`turnstore.cli.main` (the console script's function), output captured."""
    with CliRunner().isolation() as (out, err, _):
        code = main([str(arg) for arg in args])
    return Result(code, out.getvalue().decode("utf-8"), err.getvalue().decode("utf-8"))


def raw_unsafe(text: str) -> list[str]:
    """The control and bidi characters in ``text`` that a terminal would act on (line ends excepted)."""
    return sorted({f"U+{ord(c):04X}" for c in text if ord(c) in UNSAFE and c != "\n"})


def assert_one_error_line(result: Result, *needles: str) -> str:
    """The run failed with exactly one ``error: ...`` line on stderr, nothing on stdout, nothing raw in it."""
    assert result.code != 0, result
    assert result.out == "", result
    assert "Traceback" not in result.err
    lines = result.err.splitlines()
    assert len(lines) == 1 and result.err.endswith("\n"), result.err
    assert lines[0].startswith("error: "), lines[0]
    assert raw_unsafe(lines[0]) == [], lines[0]
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]
