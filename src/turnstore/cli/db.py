"""``turnstore db``: the schema (Alembic revisions) of a store."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

import click
from sqlalchemy.engine import Engine

from .. import migrate
from ..engine import describe, open_engine, resolve_url, sqlite_path
from ..errors import SchemaOutOfDate
from .app import Settings, cli, pass_settings, shared_options
from .escaping import visible
from .output import print_json


@cli.group()
def db() -> None:
    """Show, check, upgrade or downgrade the database schema."""


def _engine(settings: Settings, *, read_only: bool) -> Engine:
    """The engine of ``--db``: ``upgrade`` and ``downgrade`` write, the other commands only read.

    Either way a file that is not a turnstore store (nor empty) is refused untouched.
    """
    return open_engine(settings.db, read_only=read_only)


@contextmanager
def _progress_on_stderr() -> Iterator[None]:
    """Print what a long migration logs to ``turnstore.migrate`` (a backfill's progress) on stderr, while it runs
    (not with ``--json``, whose output is the one JSON document)."""
    logger = logging.getLogger("turnstore.migrate")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@db.command(short_help="Upgrade the schema to the newest revision.")
@shared_options
@pass_settings
def upgrade(settings: Settings) -> None:
    """Upgrade the schema to the newest revision (back up the database first)."""
    engine = _engine(settings, read_only=False)
    try:
        before = migrate.current(engine)
        with nullcontext() if settings.json else _progress_on_stderr():
            migrate.upgrade(engine)
        after = migrate.current(engine)
    finally:
        engine.dispose()
    if settings.json:
        print_json({"from": before, "to": after})
    elif before == after:
        click.echo(f"already at {after}")
    else:
        click.echo(f"upgraded {before or 'empty database'} -> {after}")


@db.command(short_help="Print the schema revision, and the newest known.")
@shared_options
@pass_settings
def current(settings: Settings) -> None:
    """Print the schema revision the database is at, and the newest this turnstore knows."""
    path = sqlite_path(resolve_url(settings.db))
    revision: str | None = None
    if path is None or path.exists():  # a missing file is at no revision, and is not created
        engine = _engine(settings, read_only=True)
        try:
            revision = migrate.current(engine)
        finally:
            engine.dispose()
    head = migrate.head()
    if settings.json:
        print_json({"current": revision, "head": head, "up_to_date": revision == head})
    else:
        click.echo(f"{revision or 'none (empty database)'} (head: {head})")


@db.command(short_help="Exit non-zero unless the schema is at head.")
@shared_options
@pass_settings
def check(settings: Settings) -> None:
    """Exit non-zero unless the database is at head and matches the code's tables."""
    engine = _engine(settings, read_only=True)
    try:
        revision = migrate.current(engine)
        head = migrate.head()
        if revision != head:
            migrate.ensure_schema(engine, auto_upgrade=False, url=resolve_url(settings.db))
        differences = migrate.check(engine)
    finally:
        engine.dispose()
    if settings.json:
        print_json({"current": revision, "head": head, "differences": [str(d) for d in differences]})
    if differences:
        raise SchemaOutOfDate(f"database tables differ from this turnstore's schema: {differences[0]}")
    if not settings.json:
        click.echo(f"ok: at {head}, tables match")


@db.command(context_settings={"ignore_unknown_options": True}, short_help="Downgrade the schema to REVISION.")
@click.argument("revision")
@click.option("--yes", "-y", is_flag=True, help="Do not ask: downgrade (scripts; needed without a terminal).")
@shared_options
@pass_settings
def downgrade(settings: Settings, revision: str, yes: bool) -> None:
    """Downgrade the schema to REVISION (e.g. -1, 0001, base). base drops every table and all data.

    Asks first on a terminal (back up the database); without one, refuses unless --yes.
    """
    engine = _engine(settings, read_only=False)
    try:
        before = migrate.current(engine)
        if not yes:
            _confirm(settings, before, revision)
        migrate.downgrade(engine, revision)
        after = migrate.current(engine)
    finally:
        engine.dispose()
    if settings.json:
        print_json({"from": before, "to": after})
    else:
        click.echo(f"downgraded {before} -> {after or 'base (empty)'}")


def _interactive() -> bool:
    """Whether there is someone to ask: standard input is a terminal."""
    return sys.stdin.isatty()


def _confirm(settings: Settings, before: str | None, revision: str) -> None:
    """Ask before a downgrade (on stderr, so ``--json`` output stays one document); refuse when no one can answer.

    Raises:
        click.UsageError: no terminal to ask on, and no ``--yes``.
        click.Abort: the answer was no.
    """
    effect = "drops every table and all data" if revision == "base" else "changes the schema under every app using it"
    if not _interactive():
        raise click.UsageError(f"downgrading to {revision} {effect}: pass --yes to do it without a terminal to ask on")
    where = visible(describe(resolve_url(settings.db)))
    question = f"downgrade {where} from {before or 'base'} to {visible(revision)}? It {effect}"
    click.confirm(question, abort=True, err=True)
