"""Running the Alembic migrations from code: the only way turnstore's schema is made or changed.

The scripts ship inside the wheel as ``turnstore/migrations``; in an editable
install (or a source checkout) they are found in the repository's top-level
``migrations/`` folder instead. The Alembic ``Config`` is built here, in code;
``alembic.ini`` exists only for developers running ``alembic`` by hand.

Opening a store calls :func:`ensure_schema`, which upgrades an old (or new,
empty) database to head, or, with ``auto_upgrade=False``, raises
:class:`~turnstore.errors.SchemaOutOfDate` naming the command to run. A database
stamped with a revision this code does not know was written by a newer
turnstore and is refused with :class:`~turnstore.errors.SchemaTooNew`.

Alembic is imported only when it has work to do: a database already at
:data:`HEAD` (every open but the first) is recognised with one query, so
opening a store does not pay for loading the migration machinery.
"""

from __future__ import annotations

import shlex
import threading
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import Connection, Engine, make_url

from .errors import SchemaError, SchemaOutOfDate, SchemaTooNew

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "HEAD",
    "alembic_config",
    "check",
    "current",
    "downgrade",
    "ensure_schema",
    "head",
    "script_location",
    "upgrade",
]

HEAD = "0010"
"""The newest revision in ``migrations/versions``, named here so that opening a store at head
needs no Alembic; a test checks it against the scripts' own head."""

# Alembic's command API uses process-global state; one migration at a time per process.
_LOCK = threading.RLock()


def script_location() -> str:
    """Where the migration scripts are: the packaged copy first, the repository's second."""
    packaged = resources.files("turnstore") / "migrations"
    if packaged.is_dir() and (packaged / "env.py").is_file():
        return "turnstore:migrations"
    repo = Path(__file__).resolve().parents[2] / "migrations"
    if (repo / "env.py").is_file():
        return str(repo)
    raise FileNotFoundError("turnstore's migration scripts are missing from this installation")


def alembic_config(connection: Connection | Engine | None = None) -> Config:
    """An Alembic Config built in code; ``connection`` is handed to ``env.py``."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", script_location())
    if connection is not None:
        config.attributes["connection"] = connection
    return config


@cache
def head() -> str:
    """The newest revision this code knows."""
    from alembic.script import ScriptDirectory

    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    if len(heads) != 1:
        raise RuntimeError(f"migration scripts have {len(heads)} heads: {heads}")
    return heads[0]


@cache
def known_revisions() -> frozenset[str]:
    """Every revision in this code's migration history."""
    from alembic.script import ScriptDirectory

    return frozenset({script.revision for script in ScriptDirectory.from_config(alembic_config()).walk_revisions()})


def current(engine: Engine) -> str | None:
    """The revision the database is at, or None if it has never been migrated."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Upgrade the database to ``revision`` (default: head), all in one transaction."""
    from alembic import command
    from alembic.runtime.migration import MigrationContext
    from alembic.util import CommandError

    with _LOCK, engine.begin() as connection:
        _serialize_schema_changes(connection)
        _refuse_unknown(MigrationContext.configure(connection).get_current_revision())
        try:
            command.upgrade(alembic_config(connection), revision)
        except CommandError as error:
            raise SchemaError(f"cannot upgrade to {revision!r}: {error}") from None


def downgrade(engine: Engine, revision: str) -> None:
    """Downgrade the database to ``revision`` (e.g. ``-1`` or ``base``), all in one transaction."""
    from alembic import command
    from alembic.util import CommandError

    with _LOCK, engine.begin() as connection:
        _serialize_schema_changes(connection)
        try:
            command.downgrade(alembic_config(connection), revision)
        except CommandError as error:
            raise SchemaError(f"cannot downgrade to {revision!r}: {error}") from None


def check(engine: Engine) -> list[object]:
    """Differences between the database and the code's tables; empty when they match."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from .schema import metadata, owned_by_metadata

    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True, "include_name": owned_by_metadata})
        return list(compare_metadata(context, metadata))


def ensure_schema(engine: Engine, *, auto_upgrade: bool = True, url: str = "") -> None:
    """Make sure the database is at head before a store uses it.

    Raises:
        SchemaTooNew: the database's revision is unknown to this code.
        SchemaOutOfDate: it is behind head and ``auto_upgrade`` is off.
    """
    if _stamped(engine) == HEAD:
        return
    target = head()
    found = current(engine)
    if found == target:
        return
    _refuse_unknown(found)
    if not auto_upgrade:
        where = f" --db {shlex.quote(_safe_url(url))}" if url else ""
        raise SchemaOutOfDate(
            f"database schema is at {found or 'nothing (empty database)'}, this turnstore needs {target}; "
            f"back up the database, then run: turnstore{where} db upgrade"
        )
    upgrade(engine)


def _stamped(engine: Engine) -> str | None:
    """The revision in ``alembic_version`` when it holds exactly one row, read without Alembic; else None.

    Read on the driver's connection, outside any transaction SQLAlchemy would
    begin: on SQLite that is schema work, which takes the write lock first, so
    opening a store at head would wait for (and fail behind) another writer.
    """
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            cursor.execute("SELECT version_num FROM alembic_version")
            rows = cursor.fetchall()
        except engine.dialect.loaded_dbapi.Error:  # no such table: an empty or foreign database
            connection.rollback()
            return None
        finally:
            cursor.close()
        connection.rollback()  # PostgreSQL's driver began a transaction for the read
    finally:
        connection.close()
    return str(rows[0][0]) if len(rows) == 1 else None


def _safe_url(url: str) -> str:
    """The URL with any password masked, for messages."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses; show it as given
        return url


def _serialize_schema_changes(connection: Connection) -> None:
    """Make concurrent upgrades from several processes run one after another.

    SQLite already holds the write lock (turnstore's engines begin with
    ``BEGIN IMMEDIATE``); PostgreSQL takes a transaction-scoped advisory lock.
    """
    if connection.dialect.name == "postgresql":
        connection.exec_driver_sql("SELECT pg_advisory_xact_lock(7303729461)")


def _refuse_unknown(revision: str | None) -> None:
    if revision is not None and revision not in known_revisions():
        raise SchemaTooNew(
            f"database schema is at revision {revision}, which this turnstore (head {head()}) does not know: "
            "it was written by a newer turnstore; upgrade turnstore to use it"
        )
