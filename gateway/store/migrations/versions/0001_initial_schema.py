"""Initial schema: ports, sessions, subscriptions, API tokens, session events.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Frozen copies of the column types: a migration must not change when the models do.
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIME = sa.DateTime(timezone=True)


def _timestamps() -> list[sa.Column[object]]:
    return [
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("updated_at", TIME, nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "ports",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("device", sa.String(512), nullable=False),
        sa.Column("ipv4", sa.String(15), nullable=False),
        sa.Column("netmask", sa.String(15), nullable=False),
        sa.Column("gateway", sa.String(15), nullable=True),
        sa.Column("mtu", sa.Integer(), nullable=False),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        *_timestamps(),
        sa.CheckConstraint("mtu >= 576 AND mtu <= 9600", name=op.f("ck_ports_mtu_range")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ports")),
        sa.UniqueConstraint("device", name=op.f("uq_ports_device")),
        sa.UniqueConstraint("name", name=op.f("uq_ports_name")),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("url", sa.String(2048), nullable=False),
        sa.Column("dialect", sa.String(64), nullable=False),
        sa.Column("transport", sa.String(16), nullable=False),
        sa.Column("port_id", sa.Integer(), nullable=True),
        sa.Column("tls_verify", sa.Boolean(), nullable=False),
        sa.Column("tls_ca_file", sa.String(1024), nullable=True),
        sa.Column("tls_server_name", sa.String(255), nullable=True),
        sa.Column("heartbeat_interval_s", sa.Float(), nullable=False),
        sa.Column("heartbeat_timeout_s", sa.Float(), nullable=False),
        sa.Column("reconnect_initial_delay_s", sa.Float(), nullable=False),
        sa.Column("reconnect_max_delay_s", sa.Float(), nullable=False),
        sa.Column("reconnect_multiplier", sa.Float(), nullable=False),
        sa.Column("reconnect_jitter", sa.Float(), nullable=False),
        sa.Column("reconnect_max_attempts", sa.Integer(), nullable=True),
        sa.Column("desired_state", sa.String(16), nullable=False),
        *_timestamps(),
        sa.CheckConstraint(
            "desired_state IN ('running', 'stopped')", name=op.f("ck_sessions_desired_state")
        ),
        sa.CheckConstraint("transport IN ('dpdk', 'kernel')", name=op.f("ck_sessions_transport")),
        sa.ForeignKeyConstraint(
            ["port_id"],
            ["ports.id"],
            name=op.f("fk_sessions_port_id_ports"),
            ondelete="RESTRICT",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sessions")),
        sa.UniqueConstraint("name", name=op.f("uq_sessions_name")),
    )
    op.create_index(op.f("ix_sessions_port_id"), "sessions", ["port_id"])
    op.create_table(
        "subscriptions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("topics", JSON, nullable=False),
        sa.Column("consumer", sa.String(128), nullable=False),
        sa.Column("queue_size", sa.Integer(), nullable=False),
        sa.Column("overflow", sa.String(16), nullable=False),
        sa.Column("conflation_ms", sa.Integer(), nullable=False),
        *_timestamps(),
        sa.CheckConstraint(
            "overflow IN ('disconnect', 'drop_oldest')", name=op.f("ck_subscriptions_overflow")
        ),
        sa.CheckConstraint(
            "conflation_ms >= 0", name=op.f("ck_subscriptions_conflation_nonnegative")
        ),
        sa.CheckConstraint("queue_size >= 1", name=op.f("ck_subscriptions_queue_size_positive")),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_subscriptions_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_subscriptions")),
    )
    op.create_index(op.f("ix_subscriptions_session_id"), "subscriptions", ["session_id"])
    op.create_table(
        "api_tokens",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("scopes", JSON, nullable=False),
        sa.Column("prefix", sa.String(16), nullable=False),
        sa.Column("secret_hash", sa.String(64), nullable=False),
        sa.Column("created_at", TIME, nullable=False),
        sa.Column("last_used_at", TIME, nullable=True),
        sa.Column("revoked_at", TIME, nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_tokens")),
        sa.UniqueConstraint("secret_hash", name=op.f("uq_api_tokens_secret_hash")),
    )
    op.create_table(
        "session_events",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("session_id", sa.Integer(), nullable=False),
        sa.Column("at", TIME, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("details", JSON, nullable=False),
        sa.ForeignKeyConstraint(
            ["session_id"],
            ["sessions.id"],
            name=op.f("fk_session_events_session_id_sessions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_session_events")),
    )
    op.create_index("ix_session_events_session_id_at", "session_events", ["session_id", "at"])


def downgrade() -> None:
    op.drop_index("ix_session_events_session_id_at", table_name="session_events")
    op.drop_table("session_events")
    op.drop_table("api_tokens")
    op.drop_index(op.f("ix_subscriptions_session_id"), table_name="subscriptions")
    op.drop_table("subscriptions")
    op.drop_index(op.f("ix_sessions_port_id"), table_name="sessions")
    op.drop_table("sessions")
    op.drop_table("ports")
