"""/v1/history: the recent points of the dashboard's charts and the engines' load (admin),
from the in-memory ring api.history.History fills every 5 s for an hour."""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, Field

from api.deps import AdminDep, KnownQuery
from api.history import History
from api.schemas.common import responses

router = APIRouter(
    prefix="/v1/history",
    tags=["history"],
    responses=responses(400, 401, 403),
    dependencies=[KnownQuery],
)


class HistoryPublic(BaseModel):
    source: str = Field(description="memory: this process's ring (empty after a restart)")
    interval_s: float
    retention_s: float
    since: float = Field(description="the range asked, Unix seconds")
    until: float
    points: list[dict[str, Any]] = Field(
        description="oldest first: {t (Unix ms), msgRate, hubRate, deliveredRate, httpRate "
        "(per second), lat50, lat90, lat99, hubPublishMean, httpP50, httpP99 (seconds), "
        "engines: {port id: {name, cpu, busy (0..1)}}}; a figure not reported is left out"
    )


Seconds = Annotated[float | None, Query(ge=0, le=1e11, description="Unix seconds")]


@router.get("", response_model=HistoryPublic)
async def read_history(
    request: Request, _: AdminDep, since: Seconds = None, until: Seconds = None
) -> HistoryPublic:
    """The points from `since` (default: an hour ago) to `until` (default: now)."""
    history: History = request.app.state.history
    now = time.time()
    until_s = now if until is None else until
    since_s = until_s - history.retention_s if since is None else since
    return HistoryPublic(
        source="memory",
        interval_s=history.interval_s,
        retention_s=history.retention_s,
        since=since_s,
        until=until_s,
        points=history.between(since_s * 1000, until_s * 1000),
    )
