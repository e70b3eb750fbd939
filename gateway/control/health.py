"""Readiness: the database answers and the engine is healthy."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.runtime import EngineStatus, Runtime
from gateway.store.db import Database


@dataclass(frozen=True)
class Readiness:
    database_ok: bool
    database_error: str | None
    engine: EngineStatus

    @property
    def ready(self) -> bool:
        return self.database_ok and self.engine.healthy


def readiness(db: Database, runtime: Runtime) -> Readiness:
    try:
        db.ping()
        ok, error = True, None
    except Exception as exc:  # any driver error means "not ready", with its text
        ok, error = False, f"{type(exc).__name__}: {exc}"
    return Readiness(ok, error, runtime.engine_status())
