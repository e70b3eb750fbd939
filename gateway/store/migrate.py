"""Alembic, driven from code: `wsgw db upgrade`, `serve` on start, and the tests.

The migration environment (migrations/env.py, next to this module) takes the connection
handed over here, so the URL never passes through alembic.ini (no '%' escaping, no
password in a config object).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, event, make_url

from gateway.store.db import Database, make_engine

#: The Alembic environment, package data of gateway.store: an installed wheel has it too.
MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"


def alembic_config() -> Config:
    if not (MIGRATIONS_DIR / "env.py").exists():
        raise FileNotFoundError(
            f"no Alembic environment at {MIGRATIONS_DIR}: the package was installed without "
            "its data files (gateway/store/migrations ships as package data)"
        )
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    return config


class MigrationIntegrityError(RuntimeError):
    """A migration would leave rows whose foreign keys name nothing: it was rolled back."""


def _sqlite_migration_connection(dbapi_connection: Any, _record: Any) -> None:
    # After the gateway's pragmas (make_engine's listener runs first). Foreign keys off:
    # batch mode rebuilds a table by copy, drop and rename, and with them on the DROP is a
    # DELETE that cascades to the children's rows; the pragma is a no-op inside a
    # transaction (https://www.sqlite.org/foreignkeys.html, section 2), so it is set here,
    # before any. isolation_level None: pysqlite opens no transaction of its own (its
    # default opens one only before DML, so the first CREATE TABLE committed by itself);
    # the "begin" listener below emits BEGIN instead, so DDL is inside the transaction.
    # This is SQLAlchemy's recipe for pysqlite (docs: dialects/sqlite, "Serializable
    # isolation / Savepoints / Transactional DDL"), on the migration's own engine only.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=OFF")
    cursor.close()
    dbapi_connection.isolation_level = None


def _sqlite_begin(connection: Connection) -> None:
    connection.exec_driver_sql("BEGIN")


def migration_engine(url: str) -> Engine:
    """An engine for migrations only, disposed after them: on SQLite every migration runs in
    one real transaction, DDL included (a failure rolls all of it back), with foreign keys
    off. The gateway's own engine, sessions and pooled connections are left as they are."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite" and parsed.database in (None, "", ":memory:"):
        raise ValueError("migrations need a SQLite file: an in-memory database is per engine")
    engine = make_engine(url)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_migration_connection)
        event.listen(engine, "begin", _sqlite_begin)
    return engine


def _dangling(connection: Connection) -> list[str]:
    rows = connection.exec_driver_sql("PRAGMA foreign_key_check").fetchall()
    return [f"{row[0]} rowid {row[1]} -> {row[2]}" for row in rows]


@contextmanager
def checked_foreign_keys(connection: Connection) -> Iterator[None]:
    """Around a migration inside its transaction (SQLite only: PostgreSQL never turns them
    off): raise MigrationIntegrityError, so it all rolls back, when the migration changed
    the revision and the database has rows naming a parent that is not there.

    Rows that dangled before the migration refuse it too, reported as such: they are not
    the migration's doing, but the gateway writes none (foreign keys are on in every
    session), so they mean hand edits or damage someone should look at; and a
    before/after diff could not tell them from new ones with certainty (a rebuild may
    give rows new rowids). The refusal changes nothing, and the error names the rows."""
    if connection.dialect.name != "sqlite":
        yield
        return
    revision = MigrationContext.configure(connection).get_current_heads()
    before = _dangling(connection)
    yield
    if MigrationContext.configure(connection).get_current_heads() == revision:
        return  # nothing migrated: not this check's business
    if before:
        raise MigrationIntegrityError(
            f"{len(before)} row(s) with dangling foreign keys before the migration (not "
            f"made by it; delete or repair them, then upgrade again): {', '.join(before[:5])}"
        )
    after = _dangling(connection)
    if after:
        raise MigrationIntegrityError(
            f"the migration left {len(after)} row(s) with dangling foreign keys: "
            + ", ".join(after[:5])
        )


def _run(db: Database, action: str, revision: str) -> None:
    config = alembic_config()
    engine = migration_engine(db.url)
    try:
        with (
            engine.connect() as connection,
            connection.begin(),
            checked_foreign_keys(connection),
        ):
            config.attributes["connection"] = connection
            if action == "upgrade":
                command.upgrade(config, revision)
            else:
                command.downgrade(config, revision)
    finally:
        engine.dispose()


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
