"""The fleet's tables: nodes (heartbeats) and session leases (owner, generation, expiry).

A gateway of a fleet registers in `nodes` and owns each session it runs through a row of
`session_leases` (gateway.fleet.leases). Both are empty and unused on a single gateway.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# As the models define them at this revision (a revision never imports the models).
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(63), nullable=False),
        sa.Column("labels", JSON, nullable=False),
        sa.Column("api_url", sa.String(512), nullable=True),
        sa.Column("started_at", TIME, nullable=False),
        sa.Column("heartbeat_at", TIME, nullable=False),
        sa.Column("draining", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "session_leases",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("node", sa.String(63), nullable=False),
        sa.Column("generation", sa.Integer(), nullable=False),
        sa.Column("expires_at", TIME, nullable=False),
        sa.CheckConstraint("generation >= 1", name=op.f("ck_session_leases_generation_positive")),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_session_leases_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_session_leases")),
    )
    op.create_index(op.f("ix_session_leases_node"), "session_leases", ["node"])


def downgrade() -> None:
    op.drop_index(op.f("ix_session_leases_node"), table_name="session_leases")
    op.drop_table("session_leases")
    op.drop_table("nodes")
