"""Typed errors -> HTTP answers whose `detail` tells the caller what to fix.

404 and 409 carry a sentence; 422 keeps FastAPI's list shape (loc, msg, type) for every
validation failure, ours included, so a client parses one format. A database that cannot
answer is 503 (retry later), never 500; a method a path does not have is 405 with the
methods it has, and OPTIONS lists them (RFC 9110 sections 15.5.6 and 9.3.7).
"""

from __future__ import annotations

import logging
import math
from typing import Any

from fastapi import FastAPI, Request, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match

from gateway.host.errors import (
    HostError,
    HostInvalidError,
    HostNotFoundError,
    HostRefusedError,
)
from gateway.runtime import RuntimeRefusedError
from gateway.store.db import DATABASE_UNAVAILABLE
from gateway.store.errors import ConflictError, InvalidError, NotFoundError

log = logging.getLogger("wsgw.api")


def _detail(code: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=code)


def _invalid(message: str, loc: list[str | int]) -> JSONResponse:
    return JSONResponse(
        {"detail": [{"loc": loc, "msg": message, "type": "value_error"}]},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )


def _json_safe(value: Any) -> Any:
    """`value` with NaN and the infinities as text: JSON has no spelling for them, and the
    422 that echoes them back must still be JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


#: The methods an Allow header may name (RFC 9110 section 9): those a route can declare.
_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """The methods some route serves at the request's path, and OPTIONS (answered here):
    the value of Allow (RFC 9110 section 10.2.1). Asked of the router with each method, as
    routing itself would (routers included in the app are nested, not flat)."""
    methods = {"OPTIONS"}
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            methods.add(method)
    return sorted(methods)


def _database_unavailable(exc: Exception) -> JSONResponse:
    cause = str(getattr(exc, "orig", exc)).strip().splitlines()
    log.error("database unavailable: %s", cause[0] if cause else type(exc).__name__)
    busy = bool(cause) and "locked" in cause[0]
    message = (
        "the database is busy (locked by another writer): retry later"
        if busy
        else "the database is unavailable: retry later (the gateway's log has the cause)"
    )
    return _detail(status.HTTP_503_SERVICE_UNAVAILABLE, message)


def _clean(error: dict[str, Any]) -> dict[str, Any]:
    # pydantic prefixes our ValueError texts with "Value error, "; the text is the message.
    message = str(error.get("msg", ""))
    message = message.removeprefix("Value error, ")
    out: dict[str, Any] = {
        "loc": list(error.get("loc", ())),
        "msg": message,
        "type": error.get("type", "value_error"),
    }
    if "input" in error and error.get("type") != "missing":
        out["input"] = _json_safe(error["input"])
    return out


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_clean(e) for e in exc.errors()]
        return JSONResponse(
            jsonable_encoder({"detail": errors}, custom_encoder={bytes: lambda b: b.hex()}),
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if exc.status_code != status.HTTP_405_METHOD_NOT_ALLOWED:
            return await http_exception_handler(request, exc)
        allow = ", ".join(allowed_methods(request))
        if request.method == "OPTIONS":
            # RFC 9110 section 9.3.7: the methods, no body; nothing past routing runs, so
            # the answer is the same with or without a token and names no stored data.
            return Response(status_code=status.HTTP_204_NO_CONTENT, headers={"Allow": allow})
        return JSONResponse(
            {"detail": f"method {request.method} is not allowed here; allowed: {allow}"},
            status_code=status.HTTP_405_METHOD_NOT_ALLOWED,
            headers={"Allow": allow},
        )

    async def database_unavailable(_: Request, exc: Exception) -> JSONResponse:
        return _database_unavailable(exc)

    for kind in DATABASE_UNAVAILABLE:
        app.add_exception_handler(kind, database_unavailable)

    @app.exception_handler(NotFoundError)
    async def not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return _detail(status.HTTP_404_NOT_FOUND, str(exc))

    @app.exception_handler(ConflictError)
    async def conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return _detail(status.HTTP_409_CONFLICT, str(exc))

    @app.exception_handler(InvalidError)
    async def invalid(_: Request, exc: InvalidError) -> JSONResponse:
        return _invalid(str(exc), [exc.location, exc.field] if exc.field else [exc.location])

    @app.exception_handler(RuntimeRefusedError)
    async def refused(_: Request, exc: RuntimeRefusedError) -> JSONResponse:
        return _detail(status.HTTP_409_CONFLICT, f"the dataplane refused: {exc}")

    @app.exception_handler(HostError)
    async def host(_: Request, exc: HostError) -> JSONResponse:
        if isinstance(exc, HostNotFoundError):
            return _detail(status.HTTP_404_NOT_FOUND, str(exc))
        if isinstance(exc, HostInvalidError):
            return _invalid(str(exc), ["path"])
        if isinstance(exc, HostRefusedError):
            return _detail(status.HTTP_409_CONFLICT, str(exc))
        log.error("host error: %s", exc)
        return _detail(status.HTTP_409_CONFLICT, str(exc))
