"""Make-before-break hand-over (issue #20): a lease names the node its owner hands the
session to (`successor`); that node connects first and takes the lease once it streams
(gateway.fleet.leases). Null: no hand-over under way (every row before this revision).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("session_leases") as batch:
        batch.add_column(sa.Column("successor", sa.String(63), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("session_leases") as batch:
        batch.drop_column("successor")
