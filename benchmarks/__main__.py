"""The benchmarks' one entry point: ``python -m benchmarks SUITE [OPTIONS]``, from the repository's root.

Each suite is one of the scripts in this folder, run as if it were started
directly, with the options given after the suite's name (``--help`` lists
them). ``python -m benchmarks`` alone lists the suites. benchmarks/README.md
says what each measures and how to read its output.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SUITES: dict[str, tuple[str, list[str], str]] = {
    "main": ("run.py", [], "the main table: turnstore's sync Store vs raw sqlite3, nine operations"),
    "async": ("run.py", ["--async"], "the main table, then AsyncStore vs Store on SQLite (+ aiosqlite)"),
    "postgres": ("run.py", ["--postgres"], "the main table, then PostgreSQL: sync and async vs raw psycopg [URL]"),
    "all": ("run.py", ["--all"], "the main table, async and PostgreSQL from one run"),
    "peers": ("peers.py", [], "turnstore vs the session stores agent frameworks ship (its own virtualenv)"),
    "scale": ("scale.py", [], "does turnstore stay fast when the store holds 1M messages"),
    "index-costs": ("index_costs.py", [], "what each index on messages and the session touch cost an append"),
    "search": ("search.py", [], "full-text search over 1M messages; the index's cost on appends, imports, file size"),
    "import-pi": ("import_pi.py", [], "import throughput: a 10,000-message pi session vs a raw sqlite3 floor"),
    "import-memory": ("import_memory.py", [], "peak memory of large imports, with appenders running"),
    "integrations": (
        "integrations.py",
        [],
        "OpenAI Agents SDK sessions: TurnstoreSession vs SQLiteSession (+ Advanced)",
    ),
    "media": ("media.py", [], "image-heavy sessions: file size, appends and last(50) with media out of line"),
    "startup": ("startup.py", [], "import turnstore and `turnstore sessions`: how fast they start"),
    "serve": ("serve.py", [], "turnstore serve: a 5,000-message session page, the sessions list of a 1M store"),
    "report": ("report.py", [], "docs/performance.md (and its plot) from the result files"),
}
"""Suite name -> (script, options it always gets, what it measures)."""


def usage() -> str:
    width = max(map(len, SUITES))
    lines = [f"  {name:{width}}  {about}" for name, (_, _, about) in SUITES.items()]
    return "usage: python -m benchmarks SUITE [OPTIONS]   (SUITE --help for its options)\n\nsuites:\n" + "\n".join(
        lines
    )


def main(argv: list[str]) -> int:
    if not argv or argv[0] in {"-h", "--help"}:
        print(usage())
        return 0
    name, *options = argv
    if name not in SUITES:
        print(f"unknown suite {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    script, fixed, _ = SUITES[name]
    path = HERE / script
    sys.argv = [str(path), *fixed, *options]
    sys.path.insert(0, str(HERE))
    runpy.run_path(str(path), run_name="__main__")  # the script exits with its own status
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
