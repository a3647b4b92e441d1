"""The ``turnstore`` command line: a thin layer over the library.

Every command takes ``--db URL`` (a bare path means SQLite; default
``$TURNSTORE_URL``, else ``sqlite:///turnstore.db``) and ``--json``, before or
after the command name. Errors print one line and exit non-zero; set
``TURNSTORE_DEBUG=1`` to see the traceback of an unexpected one.
"""

from __future__ import annotations

import os

import click

from ..errors import TurnstoreError
from .app import cli

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (0 ok, 1 error, 2 usage error)."""
    try:
        code = cli.main(args=argv, prog_name="turnstore", standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.ClickException as error:
        error.show()
        return error.exit_code
    except click.Abort:
        click.echo("aborted", err=True)
        return 130
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        return 130
    except TurnstoreError as error:
        click.echo(f"error: {error}", err=True)
        return 1
    except Exception as error:  # never a traceback at the CLI, unless asked for
        if os.environ.get("TURNSTORE_DEBUG"):
            raise
        click.echo(f"error: unexpected {type(error).__name__}: {error} (TURNSTORE_DEBUG=1 shows the traceback)", err=True)
        return 1
    return code if isinstance(code, int) else 0

