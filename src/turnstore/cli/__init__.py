"""The ``turnstore`` command line: a thin layer over the library.

Every command takes ``--db URL`` (a bare path means SQLite; default
``$TURNSTORE_URL``, else ``sqlite:///turnstore.db``) and ``--json``, before or
after the command name. Errors print one line (stored text in it escaped) and exit non-zero; set
``TURNSTORE_DEBUG=1`` to see the traceback of an unexpected one.
"""

from __future__ import annotations

import os
import shlex
import sys

import click

from ..engine import storage_error
from ..errors import TurnstoreError
from .app import cli
from .escaping import visible

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage error).

    Every failure prints exactly one line on stderr, stored text in it escaped.
    """
    try:
        code = cli.main(args=argv, prog_name="turnstore", standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        hint = _query_hint(error, sys.argv[1:] if argv is None else argv)
        _fail((error.format_message().rstrip(".") + hint if hint else error.format_message()) + _help_hint(error))
        return error.exit_code
    except click.Abort:
        _fail("aborted")
        return 130
    except KeyboardInterrupt:
        _fail("interrupted")
        return 130
    except TurnstoreError as error:
        _fail(str(error))
        return 1
    except Exception as error:  # never a traceback at the CLI, unless asked for
        typed = storage_error(error)
        if typed is not None:
            _fail(str(typed))
            return 1
        if isinstance(error, OSError) and error.strerror:
            _fail(f"{error.strerror}: {error.filename}" if error.filename else error.strerror)
            return 1
        if os.environ.get("TURNSTORE_DEBUG"):
            raise
        _fail(f"unexpected {type(error).__name__}: {error} (TURNSTORE_DEBUG=1 shows the traceback)")
        return 1
    return code if isinstance(code, int) else 0


def _fail(message: str) -> None:
    """The one line a failure prints: ``error: ...`` on stderr, escaped."""
    click.echo(f"error: {visible(message)}", err=True)


def _query_hint(error: click.ClickException, argv: list[str]) -> str:
    """For ``search -draft report``: click reads ``-draft`` as the short options ``-d -r ...`` and names ``-d``
    alone; say which argument it was and that a query starting with an exclusion goes after ``--``."""
    context = getattr(error, "ctx", None)
    if not isinstance(error, click.NoSuchOption) or context is None or context.command.name != "search":
        return ""
    name = error.option_name
    if name.startswith("--") or "search" not in argv:
        return ""
    args = argv[argv.index("search") + 1 :]
    first = next((arg for arg in args if arg.startswith(name) and not arg.startswith("--")), None)
    if first is None:
        return ""
    words = [first, *(arg for arg in args[args.index(first) + 1 :] if not arg.startswith("-"))]
    return f" (from {first}): a query that starts with an exclusion goes after --, as in turnstore search -- {shlex.join(words)}"


def _help_hint(error: click.ClickException) -> str:
    context = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and context is not None:
        return f" (see: {context.command_path} --help)"
    return ""
