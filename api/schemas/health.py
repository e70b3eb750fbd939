"""Liveness and readiness."""

from __future__ import annotations

from typing import Any, Literal

from api.schemas.common import PublicSchema


class HealthPublic(PublicSchema):
    status: str


class EnginePublic(PublicSchema):
    state: str
    reason: str | None
    details: dict[str, Any]


class ReadyStatusPublic(PublicSchema):
    """/readyz for anyone: ready or not, nothing about why (no database host, no driver
    error, no engine detail)."""

    status: Literal["ready", "not_ready"]


class ReadyPublic(ReadyStatusPublic):
    """/readyz for an admin: what is not ready, and why."""

    ready: bool
    database: str
    database_error: str | None
    engine: EnginePublic
