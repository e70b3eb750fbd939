"""Bearer API tokens and scopes.

`admin` manages the host, ports, sessions and tokens; `consume` manages subscriptions and
reads streams. A token may carry both. Secrets are random, shown once, kept as SHA-256.
With auth.mode 'none' every caller is trusted, which is allowed only on loopback: the app
refuses to start on another address and answers only loopback clients.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gateway.service import GatewayService
from gateway.settings import Settings
from gateway.store.models import SCOPES

log = logging.getLogger("wsgw.api.auth")

bearer = HTTPBearer(
    auto_error=False,
    description="an API token (`wsgw token create --name N --scope admin`)",
)


@dataclass(frozen=True)
class Principal:
    """Who is calling: a token (id, name, scopes) or the no-auth local user."""

    name: str
    scopes: frozenset[str]
    token_id: int | None = None


class UnsafeSettingsError(ValueError):
    """The settings would expose an unauthenticated API beyond this machine."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_auth_settings(settings: Settings) -> None:
    """Refuse no-auth mode on a non-loopback address; warn loudly when it is on."""
    if settings.auth.mode != "none":
        return
    if not is_loopback(settings.api.host):
        raise UnsafeSettingsError(
            f"auth.mode 'none' serves the API without authentication, so it may only bind "
            f"to a loopback address; api.host is {settings.api.host!r}: use 127.0.0.1, or "
            "turn auth on (auth.mode 'token') and create a token with `wsgw token create`"
        )
    log.warning(
        "AUTHENTICATION IS OFF (auth.mode=none): anyone on this machine can change the "
        "gateway; the API answers loopback clients only"
    )


def _unauthorized(detail: str) -> HTTPException:
    return HTTPException(
        status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"}
    )


def require_scope(scope: str) -> Callable[..., Principal]:
    """A dependency that admits a caller holding `scope` (401 without a token, 403 without
    the scope)."""
    assert scope in SCOPES

    def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Principal:
        settings: Settings = request.app.state.settings
        if settings.auth.mode == "none":
            client = request.client.host if request.client else ""
            if not is_loopback(client):
                raise HTTPException(
                    status.HTTP_403_FORBIDDEN,
                    "authentication is off (auth.mode=none), so only loopback clients are served",
                )
            return Principal("local (auth off)", frozenset(SCOPES))
        if credentials is None or not credentials.credentials.strip():
            raise _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
        service: GatewayService = request.app.state.service
        token = service.authenticate(credentials.credentials.strip())
        if token is None:
            raise _unauthorized("invalid or revoked token")
        principal = Principal(token.name, frozenset(token.scopes), token.id)
        if scope not in principal.scopes:
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"this route needs the '{scope}' scope; token '{token.name}' has "
                f"{', '.join(sorted(principal.scopes)) or 'none'}",
            )
        request.state.principal = principal
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency
