"""Sessions carry a placement rule: the labels a fleet node must have to run them.

`placement` is a JSON object of label -> value (`{"venue": "binance"}`); `{}` (every row from
before this revision) runs on any node. A single gateway ignores it (gateway.fleet.placement).
SQLite adds the column by rebuilding the table (batch mode), keeping AUTOINCREMENT (0002).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the models define it at this revision (a revision never imports the models).
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    with op.batch_alter_table("sessions", table_kwargs=_table_kwargs()) as batch:
        batch.add_column(
            sa.Column("placement", JSON, nullable=False, server_default=sa.text("'{}'"))
        )


def downgrade() -> None:
    with op.batch_alter_table("sessions", table_kwargs=_table_kwargs()) as batch:
        batch.drop_column("placement")


def _table_kwargs() -> dict[str, object]:
    """SQLite rebuilds the table: keep AUTOINCREMENT (0002) on the copy."""
    return {"sqlite_autoincrement": True} if op.get_bind().dialect.name == "sqlite" else {}
