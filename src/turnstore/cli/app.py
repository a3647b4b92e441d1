"""The root command group and the options every command shares."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import click
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from ..engine import create_engine, resolve_url, sqlite_path
from ..errors import SchemaOutOfDate
from ..media import MEDIA_MODES
from ..store import Store

F = TypeVar("F", bound=Callable[..., Any])


class Settings:
    """What the root options set for the command that runs: where the store is, how to print."""

    def __init__(self) -> None:
        self.db: str | None = None
        self.json = False
        self._store: Store | None = None

    def store(self, *, read_only: bool = False) -> Store:
        """The store at ``--db``, opened on first use.

        Commands that write open it as writers (created or upgraded when needed);
        the others with ``read_only``, which never creates, upgrades or changes a file.
        """
        if self._store is None:
            self._store = Store(self.db, read_only=read_only)
        return self._store

    def store_to_check(self) -> Store:
        """The store a dry run checks against, opened so that nothing can be written.

        The store at ``--db`` read-only; an empty store in memory while that is a
        SQLite file that does not exist yet, or is empty, or a PostgreSQL database
        with no table (what a first import would create and set up): a dry run
        creates no file and changes none.
        """
        url = resolve_url(self.db)
        path = sqlite_path(url)
        new = path is not None and (not path.exists() or path.stat().st_size == 0)
        try:
            if not new:
                return self.store(read_only=True)
        except SchemaOutOfDate:
            # An empty server database is what a first import would set up; a SQLite file is never looked at
            # again (its empty case is above, and a read-write engine would set its journal mode).
            if make_url(url).get_backend_name() == "sqlite" or not _holds_no_tables(url):
                raise
        if self._store is None:
            self._store = Store("sqlite://")  # an empty store, in memory
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None


def _holds_no_tables(url: str) -> bool:
    """Whether the PostgreSQL database at ``url`` holds no table at all (a new one), read without writing."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return not sa.inspect(connection).get_table_names()
    finally:
        engine.dispose()


def _set_db(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.ensure_object(Settings).db = value
    return value


def _set_json(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.ensure_object(Settings).json = True
    return value


def shared_options(command: F) -> F:
    """Accept ``--db`` and ``--json`` after the command name too."""
    command = click.option(
        "--json", "as_json", is_flag=True, expose_value=False, callback=_set_json, help="Print JSON."
    )(command)
    command = click.option(
        "--db", metavar="URL", expose_value=False, callback=_set_db, help="Database URL or SQLite file path."
    )(command)
    return command


def media_option(command: F) -> F:
    """``--media inline|omit|ref``: how media kept out of line is shown or written (:data:`turnstore.MediaMode`)."""
    return click.option(
        "--media",
        type=click.Choice(MEDIA_MODES),
        default="inline",
        show_default=True,
        help="inline: media data as stored; omit: left out (an image's data is empty); ref: media:sha256:<digest>.",
    )(command)


def pass_settings(command: F) -> F:
    """Hand the command the shared :class:`Settings`."""

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return command(click.get_current_context().ensure_object(Settings), *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@shared_options
@click.version_option(package_name="turnstore", prog_name="turnstore")
@click.pass_context
def cli(ctx: click.Context) -> None:
    """turnstore: the session and transcript store for LLM agent apps.

    Sessions hold loops (agent runs), loops hold turns (model calls), turns hold
    messages. SQLite by default; PostgreSQL with a postgresql:// URL.
    """
    settings = ctx.ensure_object(Settings)
    ctx.call_on_close(settings.close)


from . import browse, db, demo, prices, search, serve, transfer, usage  # noqa: E402,F401  (registers the commands)
