"""A session's periodic book snapshots (issue #21) are stored, so that a PUT
/v1/books/{session}/snapshots survives a restart (gateway.control.books restores them).
Deleting a session deletes its setting.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "book_snapshot_settings",
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("interval_ms", sa.Integer(), nullable=False),
        sa.Column("depth", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "interval_ms >= 100", name=op.f("ck_book_snapshot_settings_interval_ms_min")
        ),
        sa.CheckConstraint(
            "depth IS NULL OR depth >= 1", name=op.f("ck_book_snapshot_settings_depth_positive")
        ),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_book_snapshot_settings_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("session_id", name=op.f("pk_book_snapshot_settings")),
    )


def downgrade() -> None:
    op.drop_table("book_snapshot_settings")
