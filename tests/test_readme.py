"""The README's Quick start runs as written: each of its Python blocks is a whole program (the PostgreSQL
one-liner, which needs a server, excepted), run as a new process in an empty folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"


def quick_start_blocks() -> list[str]:
    """The ```python blocks of the README's "Quick start" section, in order."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^```python\n(.*?)^```$", section, flags=re.DOTALL | re.MULTILINE)


RUNNABLE = [block for block in quick_start_blocks() if "postgresql://" not in block]


def test_the_quick_start_has_its_blocks() -> None:
    assert len(quick_start_blocks()) >= 3 and len(RUNNABLE) == len(quick_start_blocks()) - 1
    assert "store.messages.append(reply" in RUNNABLE[0] and "AsyncStore" in RUNNABLE[1]


@pytest.mark.parametrize("block", RUNNABLE, ids=[f"block-{n}" for n in range(len(RUNNABLE))])
def test_a_quick_start_block_runs_as_written(tmp_path: Path, block: str) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TURNSTORE_URL"}
    done = subprocess.run(
        [sys.executable, "-W", "error::DeprecationWarning", "-c", block],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""


def test_the_first_block_prints_what_its_comments_say(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TURNSTORE_URL"}
    done = subprocess.run([sys.executable, "-c", RUNNABLE[0]], cwd=tmp_path, env=env, capture_output=True, text=True)
    roles, cost = done.stdout.splitlines()
    assert roles == "['user', 'assistant']"
    assert float(cost) > 0
    assert (tmp_path / "agent.db").is_file()
