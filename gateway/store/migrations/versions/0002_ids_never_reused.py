"""Ids are never reused: AUTOINCREMENT on SQLite for every table whose ids the API shows.

SQLite's plain INTEGER PRIMARY KEY hands out max(id) + 1, so deleting the newest session
and creating another gave the new one the old one's id: its runtime status, its late events
and its stream consumers' gaps. AUTOINCREMENT keeps the highest id ever used in
sqlite_sequence (https://www.sqlite.org/autoinc.html). SQLite cannot add it in place, so
each table is rebuilt (batch mode, copying the rows and their ids). PostgreSQL's SERIAL
columns draw from sequences, which never hand a number out twice: nothing to do there
(tests/api/test_migrations.py checks both).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Parents before children, so every copy finds the rows its foreign keys name.
TABLES = ("ports", "sessions", "subscriptions", "api_tokens", "session_events")


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(
            table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
        ):
            pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
