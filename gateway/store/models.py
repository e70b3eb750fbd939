"""The persisted state: ports, upstream sessions, subscriptions, API tokens, session events.

Tables change only through Alembic revisions in migrations/ (next to this module); a test
compares these models with the migrated schema on SQLite and PostgreSQL, so the two cannot
drift apart.
Enumerations are strings with CHECK constraints (portable, readable in a SQL shell).
Classes are named `*Row` (`SessionRow`, `EventRow`): the live objects of the same entities
(gateway.sessions' `UpstreamSession`, `SessionEvent`) keep the plain names.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    CheckConstraint,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    TypeDecorator,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

#: Named constraints, so SQLite batch migrations and downgrades can find them by name.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

TRANSPORTS = ("dpdk", "kernel")
DESIRED_STATES = ("running", "stopped")
OVERFLOW_POLICIES = ("disconnect", "drop_oldest")
#: What a subscription delivers: the upstream's messages as received, or normalized events
#: (gateway.normalize) in one of ENCODINGS.
FORMATS = ("raw", "normalized")
ENCODINGS = ("json", "binary")
SCOPES = ("admin", "consume")


def utcnow() -> datetime:
    return datetime.now(UTC)


def with_defaults(model: type[Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` plus the model's scalar column defaults, so rules can check a new row before
    it is flushed (SQLAlchemy applies column defaults only at INSERT)."""
    defaults = {
        column.key: column.default.arg
        for column in model.__table__.columns
        if column.default is not None
        and column.default.is_scalar
        and column.key not in ("created_at", "updated_at")
    }
    return {**defaults, **values}


class UtcDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores no zone)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


#: JSON on SQLite, JSONB on PostgreSQL.
JsonType = JSON().with_variant(JSONB(), "postgresql")


def _in(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


#: Ids the API shows are never handed out twice (SQLite AUTOINCREMENT; PostgreSQL's
#: sequences never reuse a number): a deleted session's late events, status and stream
#: gaps must not land on a new one (migration 0002).
NEVER_REUSE_IDS = {"sqlite_autoincrement": True}


class Timestamped:
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, onupdate=utcnow)


class PortRow(Timestamped, Base):
    """A DPDK port: the device it opens and the IPv4 identity the stack gives it."""

    __tablename__ = "ports"
    __table_args__ = (
        CheckConstraint("mtu >= 576 AND mtu <= 9600", name="mtu_range"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    device: Mapped[str] = mapped_column(String(512), unique=True)
    ipv4: Mapped[str] = mapped_column(String(15))
    netmask: Mapped[str] = mapped_column(String(15))
    gateway: Mapped[str | None] = mapped_column(String(15))
    mtu: Mapped[int] = mapped_column(Integer, default=1500)
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)


class SessionRow(Timestamped, Base):
    """An upstream WebSocket session to an exchange feed and how it is kept alive."""

    __tablename__ = "sessions"
    __table_args__ = (
        CheckConstraint(_in("transport", TRANSPORTS), name="transport"),
        CheckConstraint(_in("desired_state", DESIRED_STATES), name="desired_state"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    url: Mapped[str] = mapped_column(String(2048))
    dialect: Mapped[str] = mapped_column(String(64))
    transport: Mapped[str] = mapped_column(String(16), default="dpdk")
    port_id: Mapped[int | None] = mapped_column(
        ForeignKey("ports.id", ondelete="RESTRICT"), index=True
    )
    tls_verify: Mapped[bool] = mapped_column(Boolean, default=True)
    tls_ca_file: Mapped[str | None] = mapped_column(String(1024))
    tls_server_name: Mapped[str | None] = mapped_column(String(255))
    heartbeat_interval_s: Mapped[float] = mapped_column(Float, default=15.0)
    heartbeat_timeout_s: Mapped[float] = mapped_column(Float, default=30.0)
    reconnect_initial_delay_s: Mapped[float] = mapped_column(Float, default=0.5)
    reconnect_max_delay_s: Mapped[float] = mapped_column(Float, default=30.0)
    reconnect_multiplier: Mapped[float] = mapped_column(Float, default=2.0)
    reconnect_jitter: Mapped[float] = mapped_column(Float, default=0.2)
    reconnect_max_attempts: Mapped[int | None] = mapped_column(Integer)
    desired_state: Mapped[str] = mapped_column(String(16), default="stopped")
    #: The labels a fleet node must carry to run it (gateway.fleet.placement); {}: any node.
    placement: Mapped[dict[str, str]] = mapped_column(
        JsonType, default=dict, server_default=text("'{}'")
    )

    port: Mapped[PortRow | None] = relationship(lazy="raise")


class SubscriptionRow(Timestamped, Base):
    """A consumer's interest in topics of one session, with its delivery options."""

    __tablename__ = "subscriptions"
    __table_args__ = (
        CheckConstraint(_in("overflow", OVERFLOW_POLICIES), name="overflow"),
        CheckConstraint(_in("format", FORMATS), name="format"),
        CheckConstraint(_in("encoding", ENCODINGS), name="encoding"),
        CheckConstraint("queue_size >= 1", name="queue_size_positive"),
        CheckConstraint("conflation_ms >= 0", name="conflation_nonnegative"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), index=True
    )
    topics: Mapped[list[str]] = mapped_column(JsonType)
    consumer: Mapped[str] = mapped_column(String(128))
    queue_size: Mapped[int] = mapped_column(Integer, default=4096)
    overflow: Mapped[str] = mapped_column(String(16), default="disconnect")
    conflation_ms: Mapped[int] = mapped_column(Integer, default=0)
    #: "raw" or "normalized" (migration 0007; rows from before are raw).
    format: Mapped[str] = mapped_column(String(16), default="raw", server_default="raw")
    #: The normalized events' encoding, "json" or "binary" (a raw subscription ignores it).
    encoding: Mapped[str] = mapped_column(String(16), default="json", server_default="json")
    #: The token that created it: another consume-only token may not read or change it
    #: (api.auth.may_use_subscription). None: created without a token (auth off, the
    #: service's own callers, or before migration 0003): usable by every consume token.
    owner_token_id: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="SET NULL"), index=True
    )


class TokenRow(Base):
    """A bearer token: only the SHA-256 of its secret is kept (the secret is shown once)."""

    __tablename__ = "api_tokens"
    __table_args__ = NEVER_REUSE_IDS

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[list[str]] = mapped_column(JsonType)
    prefix: Mapped[str] = mapped_column(String(16))
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UtcDateTime())


class EventRow(Base):
    """One entry in a session's history: what was asked, what the dataplane reported."""

    __tablename__ = "session_events"
    __table_args__ = (
        Index("ix_session_events_session_id_at", "session_id", "at"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    session_id: Mapped[int] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow)
    kind: Mapped[str] = mapped_column(String(32))
    reason: Mapped[str | None] = mapped_column(Text)
    details: Mapped[dict[str, Any]] = mapped_column(JsonType, default=dict)


class NodeRow(Base):
    """A gateway of a fleet (gateway.fleet): its labels and its last heartbeat, in the
    database's time, so that the nodes' own clocks never decide who is alive."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(63), primary_key=True)
    labels: Mapped[dict[str, str]] = mapped_column(JsonType)
    api_url: Mapped[str | None] = mapped_column(String(512))
    started_at: Mapped[datetime] = mapped_column(UtcDateTime())
    heartbeat_at: Mapped[datetime] = mapped_column(UtcDateTime())
    draining: Mapped[bool] = mapped_column(Boolean, default=False)


class LeaseRow(Base):
    """Who runs a session: one node, until expires_at (database time). generation grows by
    one at every change of owner; what an owner publishes carries it (fencing)."""

    __tablename__ = "session_leases"
    __table_args__ = (CheckConstraint("generation >= 1", name="generation_positive"),)

    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    node: Mapped[str] = mapped_column(String(63), index=True)
    generation: Mapped[int] = mapped_column(Integer)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime())
    #: The node the owner hands the session to (make-before-break, gateway.fleet.leases).
    successor: Mapped[str | None] = mapped_column(String(63), nullable=True, default=None)


class FeedGroupRow(Timestamped, Base):
    """A feed group (issue #19): sessions carrying the same stream, arbitrated into one; its
    legs are rows of `feed_group_legs`, in order (leg 0 first)."""

    __tablename__ = "feed_groups"
    __table_args__ = (
        CheckConstraint("hold_ms >= 0", name="hold_ms_nonnegative"),
        NEVER_REUSE_IDS,
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)
    hold_ms: Mapped[int] = mapped_column(Integer, default=20)

    legs: Mapped[list[FeedGroupLegRow]] = relationship(
        order_by="FeedGroupLegRow.position",
        cascade="all, delete-orphan",
        lazy="selectin",
    )


class FeedGroupLegRow(Base):
    """A session as a leg of one group: a session is a leg of one group at most (unique)."""

    __tablename__ = "feed_group_legs"

    group_id: Mapped[int] = mapped_column(
        ForeignKey("feed_groups.id", ondelete="CASCADE"), primary_key=True
    )
    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True, unique=True
    )
    position: Mapped[int] = mapped_column(Integer)


class BookSnapshotsRow(Base):
    """A session's own periodic book snapshots (PUT /v1/books/{session}/snapshots), handed
    back to the books at start (gateway.control.books); none: the gateway's default."""

    __tablename__ = "book_snapshot_settings"
    __table_args__ = (
        CheckConstraint("interval_ms >= 100", name="interval_ms_min"),
        CheckConstraint("depth IS NULL OR depth >= 1", name="depth_positive"),
    )

    session_id: Mapped[int] = mapped_column(
        ForeignKey("sessions.id", ondelete="CASCADE"), primary_key=True
    )
    interval_ms: Mapped[int] = mapped_column(Integer)
    depth: Mapped[int | None] = mapped_column(Integer, nullable=True, default=None)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime(), default=utcnow, onupdate=utcnow)
