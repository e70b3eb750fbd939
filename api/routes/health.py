"""/healthz, /readyz, /metrics: for probes and scrapers."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from api.auth import is_admin_or_anonymous
from api.deps import ControlDep
from api.schemas.common import ErrorPublic
from api.schemas.health import EnginePublic, HealthPublic, ReadyPublic, ReadyStatusPublic

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthPublic)
def healthz() -> HealthPublic:
    """The process answers (liveness)."""
    return HealthPublic(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyPublic | ReadyStatusPublic,
    responses={
        401: {"model": ErrorPublic, "description": "a token was sent and is not valid"},
        503: {"model": ReadyPublic | ReadyStatusPublic, "description": "not ready"},
    },
)
def readyz(
    control: ControlDep, admin: Annotated[bool, Depends(is_admin_or_anonymous)]
) -> JSONResponse:
    """Ready when the database answers and the dataplane engine is not failed. Anyone gets
    {status}; an admin token (or auth off) also the database's and the engine's state and
    errors, which may name hosts and drivers."""
    state = control.readiness()
    code = status.HTTP_200_OK if state.ready else status.HTTP_503_SERVICE_UNAVAILABLE
    verdict: Literal["ready", "not_ready"] = "ready" if state.ready else "not_ready"
    if not admin:
        return JSONResponse(ReadyStatusPublic(status=verdict).model_dump(), status_code=code)
    body = ReadyPublic(
        status=verdict,
        ready=state.ready,
        database="ok" if state.database_ok else "unreachable",
        database_error=state.database_error,
        engine=EnginePublic(
            state=str(state.engine.state),
            reason=state.engine.reason,
            details=dict(state.engine.details),
        ),
    )
    return JSONResponse(body.model_dump(mode="json"), status_code=code)


def metrics_response(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
