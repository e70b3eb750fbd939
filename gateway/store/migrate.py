"""Alembic, driven from code: `wsgw db upgrade`, `serve` on start, and the tests.

The migration environment (migrations/env.py) takes the connection handed over here, so the
URL never passes through alembic.ini (no '%' escaping, no password in a config object).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection

from gateway.store.db import Database

MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"


def alembic_config() -> Config:
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise FileNotFoundError(
            f"no Alembic environment at {MIGRATIONS_DIR}: the migrations/ folder ships with "
            "the source tree; install the package from it (pip install -e .)"
        )
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


class MigrationIntegrityError(RuntimeError):
    """A migration left rows whose foreign keys name nothing: it was rolled back."""


@contextmanager
def sqlite_foreign_keys_off(connection: Connection) -> Iterator[None]:
    """Foreign keys off around a SQLite migration, checked before it commits.

    Batch mode rebuilds a table by copy, drop and rename; with foreign keys on, the DROP
    is a DELETE that cascades to the children's rows. The pragma is a no-op inside a
    transaction (https://www.sqlite.org/foreignkeys.html, section 2), so it is set before
    the migration's transaction begins and set back after it ends: the connection goes
    back to the pool as the gateway's pragmas left it."""
    if connection.dialect.name != "sqlite":
        yield
        return
    connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
    connection.commit()
    try:
        yield
    finally:
        connection.exec_driver_sql("PRAGMA foreign_keys=ON")
        connection.commit()


def check_foreign_keys(connection: Connection) -> None:
    """Raise MigrationIntegrityError (inside the transaction: it rolls back) when a row
    names a parent that is not there (SQLite only: PostgreSQL never turns them off)."""
    if connection.dialect.name != "sqlite":
        return
    broken = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    if broken:
        shown = ", ".join(f"{row[0]} rowid {row[1]} -> {row[2]}" for row in broken[:5])
        raise MigrationIntegrityError(f"{len(broken)} row(s) with dangling foreign keys: {shown}")


def _run(db: Database, action: str, revision: str) -> None:
    config = alembic_config()
    with (
        db.engine.connect() as connection,
        sqlite_foreign_keys_off(connection),
        connection.begin(),
    ):
        config.attributes["connection"] = connection
        if action == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)
        check_foreign_keys(connection)


def upgrade(db: Database, revision: str = "head") -> None:
    _run(db, "upgrade", revision)


def downgrade(db: Database, revision: str) -> None:
    _run(db, "downgrade", revision)


def current(db: Database) -> str | None:
    """The revision the database is at (None: never migrated)."""
    with db.engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def head() -> str:
    revision = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert revision is not None
    return revision
