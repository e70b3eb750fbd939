"""Typed errors -> HTTP answers whose `detail` tells the caller what to fix.

404 and 409 carry a sentence; 422 keeps FastAPI's list shape (loc, msg, type) for every
validation failure, ours included, so a client parses one format.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from gateway.host.errors import (
    HostError,
    HostInvalidError,
    HostNotFoundError,
    HostRefusedError,
)
from gateway.runtime import RuntimeRefusedError
from gateway.store.errors import ConflictError, InvalidError, NotFoundError

log = logging.getLogger("wsgw.api")


def _detail(code: int, message: str) -> JSONResponse:
    return JSONResponse({"detail": message}, status_code=code)


def _invalid(message: str, loc: list[str | int]) -> JSONResponse:
    return JSONResponse(
        {"detail": [{"loc": loc, "msg": message, "type": "value_error"}]},
        status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
    )


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
        out["input"] = error["input"]
    return out


def install(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_clean(e) for e in exc.errors()]
        return JSONResponse(
            jsonable_encoder({"detail": errors}, custom_encoder={bytes: lambda b: b.hex()}),
            status_code=status.HTTP_422_UNPROCESSABLE_CONTENT,
        )

    @app.exception_handler(NotFoundError)
    async def not_found(_: Request, exc: NotFoundError) -> JSONResponse:
        return _detail(status.HTTP_404_NOT_FOUND, str(exc))

    @app.exception_handler(ConflictError)
    async def conflict(_: Request, exc: ConflictError) -> JSONResponse:
        return _detail(status.HTTP_409_CONFLICT, str(exc))

    @app.exception_handler(InvalidError)
    async def invalid(_: Request, exc: InvalidError) -> JSONResponse:
        return _invalid(str(exc), ["body", exc.field] if exc.field else ["body"])

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
