"""Alembic environment for turnstore.

Called two ways:

* from code (``turnstore.migrate``), which passes a live ``Connection`` (or an
  ``Engine``) in ``config.attributes["connection"]``; logging is left alone;
* from the command line at the repo root (``alembic upgrade head``), which
  reads the URL from ``$TURNSTORE_URL`` or ``alembic.ini``.
"""

from __future__ import annotations

import os
from logging.config import fileConfig

from alembic import context
from sqlalchemy.engine import Connection

from turnstore.schema import metadata, owned_by_metadata

config = context.config


def _configure_and_run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite alters tables by move-and-copy; named constraints make that safe.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        include_name=owned_by_metadata,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connectable = config.attributes.get("connection")
    if connectable is None:
        if config.config_file_name is not None:
            fileConfig(config.config_file_name)
        url = os.environ.get("TURNSTORE_URL") or config.get_main_option("sqlalchemy.url")
        from turnstore.engine import create_engine as turnstore_engine

        connectable = turnstore_engine(url)
    if isinstance(connectable, Connection):
        _configure_and_run(connectable)
    else:
        with connectable.connect() as connection:
            _configure_and_run(connection)
            connection.commit()


def run_migrations_offline() -> None:
    url = os.environ.get("TURNSTORE_URL") or config.get_main_option("sqlalchemy.url")
    context.configure(url=url, target_metadata=metadata, literal_binds=True, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
