"""Subscriptions remember the token that created them (owner_token_id).

A consume-only token may not read, change or stream another token's subscriptions; an admin
token manages every one (api.auth.may_use_subscription). Rows from before this revision have
no owner and stay usable by every consume token, as before. The foreign key sets the owner
to NULL if a token row goes.
SQLite adds the column and its foreign key by rebuilding the table (batch mode), keeping
AUTOINCREMENT (revision 0002).

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("subscriptions", table_kwargs=_table_kwargs()) as batch:
        batch.add_column(sa.Column("owner_token_id", sa.Integer(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_subscriptions_owner_token_id_api_tokens"),
            "api_tokens",
            ["owner_token_id"],
            ["id"],
            ondelete="SET NULL",
        )
        batch.create_index(op.f("ix_subscriptions_owner_token_id"), ["owner_token_id"])


def downgrade() -> None:
    with op.batch_alter_table("subscriptions", table_kwargs=_table_kwargs()) as batch:
        batch.drop_index(op.f("ix_subscriptions_owner_token_id"))
        batch.drop_constraint(
            op.f("fk_subscriptions_owner_token_id_api_tokens"), type_="foreignkey"
        )
        batch.drop_column("owner_token_id")


def _table_kwargs() -> dict[str, object]:
    """SQLite rebuilds the table: keep AUTOINCREMENT (0002) on the copy."""
    return {"sqlite_autoincrement": True} if op.get_bind().dialect.name == "sqlite" else {}
