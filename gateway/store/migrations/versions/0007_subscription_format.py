"""Subscriptions choose raw or normalized messages (issue #21): `format` ("raw" or
"normalized") and the normalized events' `encoding` ("json" or "binary"). Rows from before
this revision are raw, JSON (server defaults), as they were delivered.
SQLite adds the CHECK constraints by rebuilding the table (batch mode), keeping AUTOINCREMENT
(revision 0002).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions", table_kwargs=_table_kwargs()) as batch:
        batch.add_column(sa.Column("format", sa.String(16), nullable=False, server_default="raw"))
        batch.add_column(
            sa.Column("encoding", sa.String(16), nullable=False, server_default="json")
        )
        batch.create_check_constraint(
            op.f("ck_subscriptions_format"), "format IN ('raw', 'normalized')"
        )
        batch.create_check_constraint(
            op.f("ck_subscriptions_encoding"), "encoding IN ('json', 'binary')"
        )


def downgrade() -> None:
    with op.batch_alter_table("subscriptions", table_kwargs=_table_kwargs()) as batch:
        batch.drop_constraint(op.f("ck_subscriptions_encoding"), type_="check")
        batch.drop_constraint(op.f("ck_subscriptions_format"), type_="check")
        batch.drop_column("encoding")
        batch.drop_column("format")


def _table_kwargs() -> dict[str, object]:
    """SQLite rebuilds the table: keep AUTOINCREMENT (0002) on the copy."""
    return {"sqlite_autoincrement": True} if op.get_bind().dialect.name == "sqlite" else {}
