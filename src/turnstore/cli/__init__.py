"""The ``turnstore`` command line: a thin layer over the library.

Every command takes ``--db URL`` (a bare path means SQLite; default
``$TURNSTORE_URL``, else ``sqlite:///turnstore.db``) and ``--json``, before or
after the command name. Errors print one line (stored text in it escaped) and exit non-zero; set
``TURNSTORE_DEBUG=1`` to see the traceback of an unexpected one.
"""

from __future__ import annotations

import os

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
        _fail(error.format_message() + _help_hint(error))
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


def _help_hint(error: click.ClickException) -> str:
    context = getattr(error, "ctx", None)
    if isinstance(error, click.UsageError) and context is not None:
        return f" (see: {context.command_path} --help)"
    return ""
