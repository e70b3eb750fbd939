"""Alembic environment: the same settings and models as the gateway.

Run from code (gateway.store.migrate hands over a connection) or from the alembic command
line (URL from `-x url=...`, else the gateway's settings). SQLite gets batch mode, since it
cannot ALTER most things in place.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import Connection

from gateway.settings import Settings
from gateway.store.db import database_url
from gateway.store.migrate import checked_foreign_keys, migration_engine
from gateway.store.models import Base

config = context.config
target_metadata = Base.metadata

if config.config_file_name is not None and "connection" not in config.attributes:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    return context.get_x_argument(as_dictionary=True).get("url") or database_url(Settings())


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_offline() -> None:
    """Print the SQL instead of running it (`alembic upgrade head --sql`)."""
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _configure(connection)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = migration_engine(_url())  # SQLite: one transaction, DDL included
    try:
        # One transaction around every step: alembic's own would be one per migration on
        # SQLite (no transactional DDL there), committed before the check could refuse.
        with engine.connect() as conn, conn.begin():
            _configure(conn)
            with context.begin_transaction(), checked_foreign_keys(conn):
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
