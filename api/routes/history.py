"""/v1/history: the points of the dashboard's charts and the engines' load (admin) over a time
range: from Prometheus when `api.prometheus_url` names one that scrapes this gateway (any
range, at a step), else, or when it cannot answer, from the in-memory ring
api.history.History fills every 5 s for an hour (the answer says which, and why)."""

from __future__ import annotations

import logging
import math
import time
from typing import Annotated, Any, Literal

from fastapi import Query, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.deps import AdminDep
from api.history import MAX_POINTS, History, PrometheusError, PrometheusHistory, default_step
from api.routes import resource_router
from gateway.store.errors import InvalidError

log = logging.getLogger("wsgw.api.history")

router = resource_router("/v1/history", "history")


class HistoryPublic(BaseModel):
    source: Literal["prometheus", "memory"] = Field(
        description="prometheus: asked of api.prometheus_url; memory: this process's ring "
        "(empty after a restart)"
    )
    fallback: str | None = Field(
        default=None,
        description="why the ring answered although a Prometheus is configured (its error)",
    )
    interval_s: float = Field(description="seconds between points (Prometheus: the step)")
    retention_s: float | None = Field(
        description="how far back the source keeps points (null: Prometheus's own retention)"
    )
    since: float = Field(description="the range asked, Unix seconds")
    until: float
    points: list[dict[str, Any]] = Field(
        description="oldest first: {t (Unix ms), msgRate, hubRate, deliveredRate, httpRate "
        "(per second), lat50, lat90, lat99, hubPublishMean, httpP50, httpP99 (seconds), "
        "engines: {port id: {name, cpu, busy (0..1)}}}; a figure not reported is left out"
    )


Seconds = Annotated[float | None, Query(ge=0, le=1e11, description="Unix seconds")]
Step = Annotated[
    float | None,
    Query(
        ge=1,
        le=86400,
        description="seconds between points (Prometheus only; default: "
        "about 360 points over the range)",
    ),
]


@router.get("", response_model=HistoryPublic)
async def read_history(
    request: Request,
    _: AdminDep,
    since: Seconds = None,
    until: Seconds = None,
    step: Step = None,
) -> HistoryPublic:
    """The points from `since` (default: an hour before `until`) to `until` (default: now)."""
    history: History = request.app.state.history
    until_s = time.time() if until is None else until
    since_s = until_s - history.retention_s if since is None else since
    if until is not None and since_s >= until_s:
        raise InvalidError(
            f"since ({since_s:.0f}) must be before until ({until_s:.0f})", "since", "query"
        )
    api_settings = request.app.state.settings.api
    fallback = None
    if api_settings.prometheus_url and since_s < until_s:
        prometheus = PrometheusHistory(
            api_settings.prometheus_url, api_settings.prometheus_selector
        )
        step_s = step or default_step(since_s, until_s, history.interval_s)
        step_s = max(step_s, math.ceil((until_s - since_s) / MAX_POINTS))  # Prometheus's cap
        try:
            points = await run_in_threadpool(prometheus.query_range, since_s, until_s, step_s)
        except PrometheusError as exc:
            log.warning("history: Prometheus did not answer, the ring does: %s", exc)
            fallback = f"Prometheus at {exc}"
        else:
            return HistoryPublic(
                source="prometheus",
                interval_s=step_s,
                retention_s=None,
                since=since_s,
                until=until_s,
                points=points,
            )
    return HistoryPublic(
        source="memory",
        fallback=fallback,
        interval_s=history.interval_s,
        retention_s=history.retention_s,
        since=since_s,
        until=until_s,
        points=history.between(since_s * 1000, until_s * 1000),
    )
