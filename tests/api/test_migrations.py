"""Alembic up and down on SQLite and PostgreSQL, and no drift between models and migrations."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, MetaData, event, inspect, select, text

from gateway.store import migrate
from gateway.store.db import Database
from gateway.store.models import (
    Base,
    EventRow,
    PortRow,
    SessionRow,
    SubscriptionRow,
    TokenRow,
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
    """One row in every table (a session with a subscription and an event); their ids.
    Written through the tables as the database has them at its current revision (reflected),
    not through the models, which may have columns a later revision adds; the models'
    Python-side defaults fill the columns not given."""
    tag = uuid.uuid4().hex[:8]
    meta = MetaData()
    with db.engine.begin() as conn:
        meta.reflect(conn, only=sorted(TABLES))

        def add(model: type[Base], **values: Any) -> int:
            table = meta.tables[model.__tablename__]
            for column in table.columns:
                default = model.__table__.c[column.name].default
                if column.name in values or column.primary_key or default is None:
                    continue
                arg = default.arg  # type: ignore[attr-defined]
                values[column.name] = arg(None) if default.is_callable else arg
            got = conn.execute(table.insert().values(**values)).inserted_primary_key
            assert got is not None
            return int(got[0])

        port = add(
            PortRow, name=tag, device=f"net_null_{tag}", ipv4="198.18.0.2", netmask="255.255.255.0"
        )
        session = add(SessionRow, name=tag, url="ws://x/", dialect="generic", transport="kernel")
        return {
            "ports": port,
            "sessions": session,
            "subscriptions": add(SubscriptionRow, session_id=session, topics=["a"], consumer="c"),
            "session_events": add(EventRow, session_id=session, kind="created"),
            "api_tokens": add(
                TokenRow, name="t", scopes=["admin"], prefix="p", secret_hash=uuid.uuid4().hex
            ),
        }


def _delete_newest(db: Database) -> None:
    with db.session() as s:
        for model in (SubscriptionRow, EventRow, SessionRow, PortRow, TokenRow):
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


def _sqlite_file(url: str) -> str:
    return url.removeprefix("sqlite:///")


def _dump(url: str) -> list[str]:
    """Every table's schema and every row (sqlite_master and sqlite_sequence included)."""
    with closing(sqlite3.connect(_sqlite_file(url))) as conn:
        return list(conn.iterdump())


def _tables(url: str) -> set[str]:
    with closing(sqlite3.connect(_sqlite_file(url))) as conn:
        return {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}


def _orphan_subscription(url: str) -> None:
    """A subscription naming a session that is not there (foreign keys off to write it)."""
    with closing(sqlite3.connect(_sqlite_file(url))) as conn:
        conn.execute("PRAGMA foreign_keys=OFF")
        cursor = conn.execute("SELECT * FROM subscriptions ORDER BY id LIMIT 1")
        row = dict(zip([d[0] for d in cursor.description], cursor.fetchone(), strict=True))
        row.update(id=900, session_id=999)
        names = ", ".join(row)
        conn.execute(
            f"INSERT INTO subscriptions ({names}) VALUES ({', '.join('?' * len(row))})",
            list(row.values()),
        )
        conn.commit()


def _at_0001_with_rows(url: str) -> None:
    db = Database(url)
    try:
        migrate.upgrade(db, "0001")
        for _ in range(2):
            _add_rows(db)
    finally:
        db.close()


def _assert_untouched(url: str, before: list[str]) -> None:
    assert not {t for t in _tables(url) if t.startswith("_alembic_tmp_")}
    assert _dump(url) == before
    db = Database(url)
    try:
        assert migrate.current(db) == "0001"
    finally:
        db.close()


def test_sqlite_upgrade_refused_by_the_integrity_check_leaves_the_database_as_it_was(
    sqlite_url: str,
) -> None:
    """An orphan row (it predates the migration) fails the check: the whole migration rolls
    back, DDL included (no _alembic_tmp_* table left), and once the row is gone it runs."""
    _at_0001_with_rows(sqlite_url)
    _orphan_subscription(sqlite_url)
    before = _dump(sqlite_url)
    for _ in range(2):  # a second try meets the same database, not a leftover table
        db = Database(sqlite_url)
        try:
            with pytest.raises(migrate.MigrationIntegrityError, match="before the migration"):
                migrate.upgrade(db)
        finally:
            db.close()
        _assert_untouched(sqlite_url, before)
    with closing(sqlite3.connect(_sqlite_file(sqlite_url))) as conn:
        conn.execute("DELETE FROM subscriptions WHERE id = 900")
        conn.commit()
    db = Database(sqlite_url)
    try:
        migrate.upgrade(db)
        assert migrate.current(db) == migrate.head()
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA foreign_key_check").fetchall() == []
            assert conn.exec_driver_sql("SELECT count(*) FROM subscriptions").scalar() == 2
    finally:
        db.close()


def test_sqlite_upgrade_failing_mid_rebuild_leaves_the_database_as_it_was(
    sqlite_url: str,
) -> None:
    """A failure while copying the last table (four tables already rebuilt) rolls all of
    it back; the next upgrade runs from 0001 as if nothing had happened."""
    _at_0001_with_rows(sqlite_url)
    before = _dump(sqlite_url)

    def fail_copy(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("INSERT INTO _alembic_tmp_session_events"):
            raise RuntimeError("injected failure mid-rebuild")

    event.listen(Engine, "before_cursor_execute", fail_copy)
    try:
        db = Database(sqlite_url)
        try:
            with pytest.raises(RuntimeError, match="injected failure"):
                migrate.upgrade(db)
        finally:
            db.close()
    finally:
        event.remove(Engine, "before_cursor_execute", fail_copy)
    _assert_untouched(sqlite_url, before)
    db = Database(sqlite_url)
    try:
        migrate.upgrade(db)
        assert migrate.current(db) == migrate.head()
        with db.engine.connect() as conn:
            assert conn.exec_driver_sql("SELECT count(*) FROM session_events").scalar() == 2
    finally:
        db.close()
