"""Feed groups (issue #19): a group's name and hold time, and its legs (sessions, in order;
a session is a leg of one group at most). Deleting a session removes it from its group.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TIME = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "feed_groups",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("hold_ms", sa.Integer(), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
        sa.CheckConstraint("hold_ms >= 0", name=op.f("ck_feed_groups_hold_ms_nonnegative")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_feed_groups")),
        sa.UniqueConstraint("name", name=op.f("uq_feed_groups_name")),
        sqlite_autoincrement=True,
    )
    op.create_table(
        "feed_group_legs",
        sa.Column("group_id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["group_id"],
            ["feed_groups.id"],
            name=op.f("fk_feed_group_legs_group_id_feed_groups"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_feed_group_legs_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("group_id", "session_id", name=op.f("pk_feed_group_legs")),
        sa.UniqueConstraint("session_id", name=op.f("uq_feed_group_legs_session_id")),
    )


def downgrade() -> None:
    op.drop_table("feed_group_legs")
    op.drop_table("feed_groups")
