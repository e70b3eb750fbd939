"""Alembic, driven from code: `wsgw db upgrade`, `serve` on start, and the tests.

The migration environment (migrations/env.py) takes the connection handed over here, so the
URL never passes through alembic.ini (no '%' escaping, no password in a config object).
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

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


def _run(db: Database, action: str, revision: str) -> None:
    config = alembic_config()
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        if action == "upgrade":
            command.upgrade(config, revision)
        else:
            command.downgrade(config, revision)


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
