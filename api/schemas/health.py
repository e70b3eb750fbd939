"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from api.schemas.common import PublicSchema


class HealthPublic(PublicSchema):
    status: str


class EnginePublic(PublicSchema):
    state: str
    reason: str | None
    details: dict[str, Any]


class ReadyPublic(PublicSchema):
    ready: bool
    database: str
    database_error: str | None
    engine: EnginePublic
