"""/healthz, /readyz, /metrics: for probes and scrapers."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from api.deps import ServiceDep
from api.schemas.health import EnginePublic, HealthPublic, ReadyPublic

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthPublic)
def healthz() -> HealthPublic:
    """The process answers (liveness)."""
    return HealthPublic(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyPublic,
    responses={503: {"model": ReadyPublic, "description": "database or engine not ready"}},
)
def readyz(service: ServiceDep) -> JSONResponse:
    """Ready when the database answers and the dataplane engine is not failed."""
    state = service.readiness()
    body = ReadyPublic(
        ready=state.ready,
        database="ok" if state.database_ok else "unreachable",
        database_error=state.database_error,
        engine=EnginePublic(
            state=str(state.engine.state),
            reason=state.engine.reason,
            details=dict(state.engine.details),
        ),
    )
    code = status.HTTP_200_OK if state.ready else status.HTTP_503_SERVICE_UNAVAILABLE
    return JSONResponse(body.model_dump(mode="json"), status_code=code)


def metrics_response(request: Request) -> Response:
    registry: CollectorRegistry = request.app.state.registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
