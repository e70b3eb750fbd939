"""Alembic up and down on SQLite and PostgreSQL, and no drift between models and migrations."""

from __future__ import annotations

import uuid

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, select, text

from gateway.store import migrate
from gateway.store.db import Database
from gateway.store.models import (
    ApiToken,
    Base,
    Port,
    SessionEvent,
    Subscription,
    UpstreamSession,
)

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


def _add_rows(db: Database) -> dict[str, int]:
    """One row in every table (a session with a subscription and an event); their ids."""
    with db.session() as s:
        tag = uuid.uuid4().hex[:8]
        port = Port(name=tag, device=f"net_null_{tag}", ipv4="198.18.0.2", netmask="255.255.255.0")
        s.add(port)
        s.flush()
        session = UpstreamSession(name=tag, url="ws://x/", dialect="generic", transport="kernel")
        s.add(session)
        s.flush()
        sub = Subscription(session_id=session.id, topics=["a"], consumer="c")
        event = SessionEvent(session_id=session.id, kind="created")
        token = ApiToken(name="t", scopes=["admin"], prefix="p", secret_hash=uuid.uuid4().hex)
        s.add_all([sub, event, token])
        s.flush()
        return {
            "ports": port.id,
            "sessions": session.id,
            "subscriptions": sub.id,
            "session_events": event.id,
            "api_tokens": token.id,
        }


def _delete_newest(db: Database) -> None:
    with db.session() as s:
        for model in (Subscription, SessionEvent, UpstreamSession, Port, ApiToken):
            newest = s.scalars(select(model).order_by(model.id.desc()).limit(1)).one()
            s.delete(newest)
            s.flush()


def test_a_deleted_rows_id_is_never_handed_out_again(db_url: str) -> None:
    """SQLite gave max(id) + 1: the newest session deleted, the next one got its id (and
    its late events and status). AUTOINCREMENT on SQLite, sequences on PostgreSQL."""
    db = Database(db_url)
    try:
        migrate.upgrade(db)
        first = _add_rows(db)
        _delete_newest(db)
        second = _add_rows(db)
        for table, ident in first.items():
            assert second[table] > ident, table
    finally:
        db.close()


def test_upgrade_to_never_reused_ids_keeps_every_row(db_url: str) -> None:
    """0001 -> head rebuilds the SQLite tables: rows, ids and children survive (foreign
    keys off for the rebuild, on again after it); downgrade and upgrade again too."""
    db = Database(db_url)
    try:
        migrate.upgrade(db, "0001")
        ids = [_add_rows(db) for _ in range(3)]
        migrate.upgrade(db)
        with db.engine.connect() as conn:
            for table in TABLES:
                got = conn.execute(text(f"SELECT id FROM {table} ORDER BY id")).scalars().all()
                assert got == [row[table] for row in ids], table
            if conn.dialect.name == "sqlite":
                assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
                ddl = conn.exec_driver_sql(
                    "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'sessions'"
                ).scalar()
                assert "AUTOINCREMENT" in ddl
                assert "CHECK (desired_state IN ('running', 'stopped'))" in ddl
        _delete_newest(db)
        assert _add_rows(db)["sessions"] > ids[-1]["sessions"]
        migrate.downgrade(db, "0001")
        migrate.upgrade(db)
        with db.engine.connect() as conn:
            total = conn.execute(text("SELECT count(*) FROM session_events")).scalar()
            assert total == 3  # 3 added, the newest deleted, 1 added
    finally:
        db.close()
