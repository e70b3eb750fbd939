"""Alembic up and down on SQLite and PostgreSQL, and no drift between models and migrations."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect

from gateway.store import migrate
from gateway.store.db import Database
from gateway.store.models import Base

TABLES = {"ports", "sessions", "subscriptions", "api_tokens", "session_events"}


def test_upgrade_creates_every_table_and_matches_the_models(db_url: str) -> None:
    db = Database(db_url)
    try:
        assert migrate.current(db) is None
        migrate.upgrade(db)
        assert migrate.current(db) == migrate.head()
        assert set(inspect(db.engine).get_table_names()) >= TABLES
        with db.engine.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        db.close()


def test_downgrade_to_base_drops_everything_and_upgrade_again(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate.upgrade(db)
        migrate.downgrade(db, "base")
        assert migrate.current(db) is None
        assert not TABLES & set(inspect(db.engine).get_table_names())
        migrate.upgrade(db)
        assert migrate.current(db) == migrate.head()
    finally:
        db.close()


def test_upgrade_twice_is_a_no_op(db_url: str) -> None:
    db = Database(db_url)
    try:
        migrate.upgrade(db)
        migrate.upgrade(db)
        assert migrate.current(db) == migrate.head()
    finally:
        db.close()
