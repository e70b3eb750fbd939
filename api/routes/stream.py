"""/v1/stream: the downstream WebSocket a consumer reads a subscription from (consume).

The fan-out hub that feeds it is not attached yet, so after checking the token and the
subscription the stream closes with 1013 (try again later) and says why, rather than
staying open and silent. Close codes 4401/4403/4404 mirror HTTP 401/403/404.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, WebSocket
from starlette.concurrency import run_in_threadpool

from api.auth import is_loopback
from api.schemas.common import ID_MAX
from gateway.service import GatewayService
from gateway.settings import Settings
from gateway.store.errors import NotFoundError

router = APIRouter(tags=["stream"])
TRY_AGAIN_LATER = 1013


@router.websocket("/v1/stream")
async def stream(
    websocket: WebSocket,
    subscription: Annotated[int, Query(ge=1, le=ID_MAX)],
    token: Annotated[
        str | None, Query(description="for browsers, which cannot set headers")
    ] = None,
) -> None:
    settings: Settings = websocket.app.state.settings
    service: GatewayService = websocket.app.state.service
    await websocket.accept()
    if settings.auth.mode == "none":
        if not is_loopback(websocket.client.host if websocket.client else ""):
            await websocket.close(4403, "auth is off: loopback clients only")
            return
    else:
        header = websocket.headers.get("authorization", "")
        secret = header[7:].strip() if header.lower().startswith("bearer ") else token
        found = await run_in_threadpool(service.authenticate, secret) if secret else None
        if found is None:
            await websocket.close(4401, "missing, invalid or revoked token")
            return
        if "consume" not in found.scopes:
            await websocket.close(4403, "the stream needs the 'consume' scope")
            return
    try:
        await run_in_threadpool(service.get_subscription, subscription)
    except NotFoundError as exc:
        await websocket.close(4404, str(exc))
        return
    await websocket.close(TRY_AGAIN_LATER, "no fan-out hub is attached to this control plane yet")
