"""The web dashboard: `/` and its static files under `/ui/`, with a strict CSP.

The dashboard is a single page of plain ES modules (api/static, no build step) that calls
the same REST API as any client, with the operator's bearer token. Two small JSON answers
help it start: `/ui/config` (is auth on?) so the login view need not provoke a 401, and
`/ui/whoami` (the token's name and scopes) so it offers only the pages the token may use.
None of these routes is part of the API's OpenAPI document.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Request, Security, status
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials

from api.auth import bearer, identify
from gateway.settings import Settings

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
ASSET_PREFIX = "/ui"

#: Everything comes from this origin; no inline script or style, no frames, no plugins.
#: 'self' in connect-src covers ws:// and wss:// to the same host and port (CSP 3).
CSP = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "manifest-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Opener-Policy": "same-origin",
    # Files are not fingerprinted: revalidate every time (the ETag makes that a 304).
    "Cache-Control": "no-cache",
}
#: The only kinds of file served, with their types (ES modules need a JavaScript type).
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}

router = APIRouter(include_in_schema=False)


def _etag(path: Path) -> str:
    stat = path.stat()
    digest = hashlib.md5(  # not for security: a cache validator
        f"{stat.st_mtime_ns}-{stat.st_size}".encode(), usedforsecurity=False
    ).hexdigest()
    return f'"{digest}"'


def _file(request: Request, path: Path) -> Response:
    etag = _etag(path)
    headers = {**SECURITY_HEADERS, "ETag": etag}
    if etag in request.headers.get("if-none-match", ""):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
    return FileResponse(path, media_type=MEDIA_TYPES[path.suffix], headers=headers)


def _not_found(what: str) -> JSONResponse:
    return JSONResponse(
        {"detail": f"{what} is not a file of the dashboard"},
        status_code=status.HTTP_404_NOT_FOUND,
        headers=SECURITY_HEADERS,
    )


@router.api_route("/", methods=["GET", "HEAD"], name="dashboard")
def dashboard(request: Request) -> Response:
    """The single page; its views are hash routes (#/sessions, #/tail...)."""
    index = STATIC_DIR / "index.html"
    if not index.is_file():
        return _not_found("index.html")
    return _file(request, index)


@router.get("/ui/config", name="dashboard_config")
def dashboard_config(request: Request) -> JSONResponse:
    """What the page needs before the login: whether auth is on. No secret is in here."""
    settings: Settings = request.app.state.settings
    body: dict[str, Any] = {
        "auth": settings.auth.mode,
        "public_metrics": settings.auth.public_metrics,
        "version": request.app.version,
        "stream_path": "/v1/stream",
    }
    return JSONResponse(body, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


@router.get("/ui/whoami", name="dashboard_whoami")
def dashboard_whoami(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> JSONResponse:
    """The caller's name and scopes: 401 for a missing or bad token, like the API (and
    429 after too many bad ones, so this is no faster an oracle for guessing secrets)."""
    settings: Settings = request.app.state.settings
    secret = credentials.credentials.strip() if credentials else None
    client = request.client.host if request.client else ""
    principal = identify(request.app.state, client, secret)
    body = {"name": principal.name, "scopes": sorted(principal.scopes), "auth": settings.auth.mode}
    return JSONResponse(body, headers={**SECURITY_HEADERS, "Cache-Control": "no-store"})


@router.api_route(ASSET_PREFIX + "/{path:path}", methods=["GET", "HEAD"], name="dashboard_asset")
def dashboard_asset(path: str, request: Request) -> Response:
    """A file under api/static: no folder listing, no dot-files, nothing outside it."""
    if not path or any(part.startswith(".") for part in path.split("/")):
        return _not_found(repr(path))
    root = STATIC_DIR.resolve()
    target = (root / path).resolve()
    if (
        not target.is_relative_to(root)
        or not target.is_file()
        or target.suffix not in MEDIA_TYPES
        or "node_modules" in target.relative_to(root).parts
        or target.name in ("package.json", "package-lock.json")
    ):
        return _not_found(repr(path))
    return _file(request, target)
