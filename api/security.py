"""The API's doors: which requests reach a route at all, and what the logs may show.

Pure ASGI middleware (no BaseHTTPMiddleware: the body limit must hold while the body
streams in, and a WebSocket upgrade passes through the same checks):

- the Host allow-list is starlette's TrustedHostMiddleware over `api.trusted_hosts()`
  (DNS rebinding: a page on an attacker's name that resolves to us sends its own name);
- `OriginGuard`: a state-changing request (POST, PUT, PATCH, DELETE) or a WebSocket
  upgrade from a browser page of another origin gets 403 (RFC 6454 section 7: the Origin
  header names the page that made the request; RFC 6455 section 10.2 for WebSocket; none,
  as from curl or an SDK, passes);
  a state-changing request whose body is not JSON gets 415, so a cross-site "simple"
  request (text/plain, a form: no CORS preflight) cannot act even where no Origin is sent;
- `BodyGuard`: a body over api.max_body_bytes gets 413 before it is read (Content-Length)
  or as soon as the streamed bytes pass the limit; a request that carries a body must
  authenticate first (401/403/429 before a byte of it is read), since FastAPI reads and
  parses a body before it resolves a route's dependencies.

`redact_secrets` and `SecretRedactingFilter` keep bearer secrets out of every log line:
uvicorn's access log and its WebSocket log print the query string, where a stream's
`?token=` travels.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from email.message import Message as MimeMessage
from typing import Any
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.auth import AuthFailed, bearer_secret, identify

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

#: Query parameters (and `key=value` pairs anywhere in a line) whose value is a secret.
_SECRET_PARAM = re.compile(
    r"(?i)(\b(?:token|access_token|api_key|apikey|secret|password)=)[^&\s\"']+"
)
#: A wsgw token secret wherever it appears (gateway.control.tokens.TOKEN_PREFIX).
_SECRET_TOKEN = re.compile(r"\bwsgw_[A-Za-z0-9_-]{8,}")
REDACTED = "[redacted]"


def redact_secrets(text: str) -> str:
    """text with the values of secret-bearing parameters and any token secret replaced."""
    if "=" not in text and "wsgw_" not in text:
        return text
    return _SECRET_TOKEN.sub(REDACTED, _SECRET_PARAM.sub(r"\1" + REDACTED, text))


class SecretRedactingFilter(logging.Filter):
    """Redacts secrets in a record's message and its string arguments (kept in place, so
    uvicorn's AccessFormatter still finds its positional arguments)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_secrets(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(redact_secrets(a) if isinstance(a, str) else a for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {
                k: redact_secrets(v) if isinstance(v, str) else v for k, v in record.args.items()
            }
        return True


#: Loggers that print request URLs: uvicorn's access log, and its error log, where the
#: WebSocket protocols log each upgrade ('"WebSocket /v1/stream?token=..." [accepted]').
URL_LOGGERS = ("uvicorn.access", "uvicorn.error")


def install_log_redaction(*handlers: logging.Handler) -> None:
    """Put the redacting filter on the loggers that print URLs (records logged there
    directly), and on `handlers` (every record they write, from any logger). Idempotent."""
    targets: list[logging.Filterer] = [logging.getLogger(n) for n in URL_LOGGERS]
    for target in [*targets, *handlers]:
        if not any(isinstance(f, SecretRedactingFilter) for f in target.filters):
            target.addFilter(SecretRedactingFilter())


async def _refuse(
    scope: Scope,
    receive: Receive,
    send: Send,
    code: int,
    detail: str,
    headers: Mapping[str, str] | None = None,
) -> None:
    """Answer with {"detail": ...}; a WebSocket upgrade gets it as the HTTP answer to the
    handshake where the server can send one (the ASGI denial-response extension), else a
    close before accept, which servers answer with 403."""
    response = JSONResponse({"detail": detail}, status_code=code, headers=headers)
    if scope["type"] == "websocket" and "websocket.http.response" not in scope.get(
        "extensions", {}
    ):
        await send({"type": "websocket.close", "code": 1008, "reason": detail[:123]})
        return
    await response(scope, receive, send)


def is_json(content_type: str) -> bool:
    """application/json or any application/*+json (RFC 6839 section 3.1)."""
    mime = MimeMessage()
    mime["content-type"] = content_type
    if mime.get_content_maintype() != "application":
        return False
    subtype = mime.get_content_subtype()
    return subtype == "json" or subtype.endswith("+json")


class OriginGuard:
    """403 for a state-changing request or a WebSocket upgrade from another origin; 415
    for a state-changing request whose Content-Type is not JSON."""

    def __init__(self, app: ASGIApp, allowed_origins: list[str]) -> None:
        self.app = app
        self.allowed = frozenset(o.lower().rstrip("/") for o in allowed_origins)
        self.allow_any = "*" in self.allowed

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Same origin (the Origin's host:port is the request's Host) or listed."""
        origin = origin.lower()
        if self.allow_any or origin in self.allowed:
            return True
        parts = urlsplit(origin)
        return parts.scheme in ("http", "https") and bool(host) and parts.netloc == host.lower()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "websocket" or (kind == "http" and scope["method"] in STATE_CHANGING):
            headers = Headers(scope=scope)
            origin = headers.get("origin")
            if origin is not None and not self.origin_allowed(origin, headers.get("host", "")):
                what = "open a stream" if kind == "websocket" else "change state"
                await _refuse(
                    scope, receive, send, 403,
                    f"origin {origin!r} may not {what} here: only this API's own origin and "
                    "api.allowed_origins (or api.cors_origins) may",
                )  # fmt: skip
                return
            content_type = headers.get("content-type")
            if kind == "http" and content_type is not None and not is_json(content_type):
                await _refuse(
                    scope, receive, send, 415,
                    f"request bodies are JSON: send Content-Type application/json, "
                    f"not {content_type!r}",
                )  # fmt: skip
                return
        await self.app(scope, receive, send)


class BodyTooLarge(HTTPException):
    """The body passed api.max_body_bytes while it streamed in (FastAPI lets an
    HTTPException out of its body parsing as it is, so it answers 413 from there too)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, f"the request body exceeds the limit of {limit} bytes")


class BodyGuard:
    """Authentication before the body, and a body size limit while it is read."""

    def __init__(self, app: ASGIApp, state: Any, max_bytes: int) -> None:
        self.app = app
        self.state = state  # the app's state: settings, service, auth_limiter
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        declared = headers.get("content-length")
        try:
            length = int(declared) if declared is not None else None
        except ValueError:
            length = -1
        if length is not None and length < 0:
            await _refuse(scope, receive, send, 400, f"Content-Length {declared!r} is not a size")
            return
        if length is not None and length > self.max_bytes:
            too_large = BodyTooLarge(self.max_bytes)
            await _refuse(scope, receive, send, 413, too_large.detail)
            return
        if length or "transfer-encoding" in headers:
            client = scope["client"][0] if scope.get("client") else ""
            secret = bearer_secret(headers.get("authorization"))
            try:
                principal = await run_in_threadpool(identify, self.state, client, secret)
            except AuthFailed as exc:
                await _refuse(scope, receive, send, exc.status_code, exc.detail, exc.headers)
                return
            scope.setdefault("state", {})["principal"] = principal
        await self._limited(scope, receive, send)

    async def _limited(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise BodyTooLarge(self.max_bytes)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge as exc:
            if started:
                raise
            await _refuse(scope, receive, send, exc.status_code, exc.detail)
