"""Bearer API tokens and scopes.

`admin` manages the host, ports, sessions and tokens; `consume` manages subscriptions and
reads streams. A token may carry both. Secrets are random, shown once, kept as SHA-256.
With auth.mode 'none' every caller is trusted, which is allowed only on loopback: the app
refuses to start on another address and answers only loopback clients.
"""

from __future__ import annotations

import ipaddress
import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import HTTPException, Request, Security, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from gateway.control import ControlPlane
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


LOCAL = Principal("local (auth off)", frozenset(SCOPES))


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
    """Refuse no-auth mode on a non-loopback address, or with any Host or any Origin let
    in (a DNS-rebinding or cross-site page would drive the API); warn loudly when it is on."""
    if settings.auth.mode != "none":
        return
    api = settings.api
    if not is_loopback(api.host):
        raise UnsafeSettingsError(
            f"auth.mode 'none' serves the API without authentication, so it may only bind "
            f"to a loopback address; api.host is {api.host!r}: use 127.0.0.1, or "
            "turn auth on (auth.mode 'token') and create a token with `wsgw token create`"
        )
    for name, values in (
        ("allowed_hosts", api.allowed_hosts),
        ("allowed_origins", api.allowed_origins),
        ("cors_origins", api.cors_origins),
    ):
        if "*" in values:
            raise UnsafeSettingsError(
                f"auth.mode 'none' with api.{name} ['*'] lets any web page a local browser "
                f"opens drive the API: list the {name.split('_')[1]} instead, or turn auth on"
            )
    log.warning(
        "AUTHENTICATION IS OFF (auth.mode=none): anyone on this machine can change the "
        "gateway; the API answers loopback clients only"
    )


class AuthFailed(HTTPException):
    """Authentication refused: 401 (no or a bad token), 403 (not allowed), 429 (too many
    failures from this address)."""


def _unauthorized(detail: str) -> AuthFailed:
    return AuthFailed(status.HTTP_401_UNAUTHORIZED, detail, headers={"WWW-Authenticate": "Bearer"})


class AuthFailureLimiter:
    """Failed authentications per client address, a token bucket: `limit` failures at once,
    refilled evenly over `window_s`. An empty bucket answers every failed token from that
    address with 429 and Retry-After until it refills. A valid token always passes: secrets
    are 256-bit random (nothing to guess at any speed), and clients behind one proxy share
    its address, so one client's stale token must not lock the others out. IPv6 clients
    count per /64 (RFC 4291 section 2.5.4: one host usually holds a whole /64).

    At most `max_clients` addresses are tracked; the least recently failing go first.
    Thread-safe: the sync dependencies run in the threadpool."""

    def __init__(
        self,
        limit: int,
        window_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_clients: int = 10_000,
    ) -> None:
        self.limit = limit
        self.rate = limit / window_s  # allowance regained per second
        self.clock = clock
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    @staticmethod
    def _key(client: str) -> str:
        if ":" not in client:
            return client
        try:
            return str(ipaddress.IPv6Network(f"{client}/64", strict=False).network_address)
        except ValueError:
            return client

    def _level(self, client: str, now: float) -> float:
        tokens, then = self._buckets.get(client, (self.limit, now))
        return min(float(self.limit), tokens + (now - then) * self.rate)

    def retry_after(self, client: str) -> float:
        """Seconds until `client` may try again; 0 when it may now."""
        with self._lock:
            level = self._level(self._key(client), self.clock())
        return 0.0 if level >= 1 else (1 - level) / self.rate

    def failed(self, client: str) -> None:
        client = self._key(client)
        with self._lock:
            now = self.clock()
            self._buckets[client] = (self._level(client, now) - 1, now)
            self._buckets.move_to_end(client)
            while len(self._buckets) > self.max_clients:
                self._buckets.popitem(last=False)


def bearer_secret(authorization: str | None) -> str | None:
    """The secret of an `Authorization: Bearer <secret>` header (RFC 6750 section 2.1)."""
    if authorization and authorization[:7].lower() == "bearer ":
        return authorization[7:].strip() or None
    return None


def identify(state: Any, client: str, secret: str | None) -> Principal:
    """Who is calling, from the app's state (settings, control plane, limiter), the client's
    address and the bearer secret; raises AuthFailed. Blocking (a database read, unless the
    token was verified within auth.token_cache_s: gateway.control.tokens)."""
    settings: Settings = state.settings
    if settings.auth.mode == "none":
        if not is_loopback(client):
            raise AuthFailed(
                status.HTTP_403_FORBIDDEN,
                "authentication is off (auth.mode=none), so only loopback clients are served",
            )
        return LOCAL
    if not secret:
        raise _unauthorized("missing bearer token: send 'Authorization: Bearer <token>'")
    control: ControlPlane = state.control
    token = control.tokens.verify(secret)
    if token is None:
        limiter: AuthFailureLimiter = state.auth_limiter
        wait = limiter.retry_after(client)
        if wait > 0:
            seconds = math.ceil(wait)
            raise AuthFailed(
                status.HTTP_429_TOO_MANY_REQUESTS,
                f"too many failed authentications from {client}: try again in {seconds} s",
                headers={"Retry-After": str(seconds)},
            )
        limiter.failed(client)
        log.info("failed authentication from %s", client)
        raise _unauthorized("invalid or revoked token")
    return Principal(token.name, token.scopes, token.id)


def known(state: Any, client: str, secret: str | None) -> Principal | None:
    """`identify` when it needs no database (auth off, or a token verified within
    auth.token_cache_s), else None; raises AuthFailed as identify does."""
    settings: Settings = state.settings
    if settings.auth.mode == "none" or not secret:
        return identify(state, client, secret)
    control: ControlPlane = state.control
    token = control.tokens.cached(secret)
    return None if token is None else Principal(token.name, token.scopes, token.id)


def _found(request: Request) -> Principal | None:
    """The principal the body guard found before the body was read (api.security)."""
    found = getattr(request.state, "principal", None)
    return found if isinstance(found, Principal) else None


def _client_and_secret(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> tuple[str, str | None]:
    client = request.client.host if request.client else ""
    return client, credentials.credentials.strip() if credentials else None


def _caller(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    """The request's principal: the one the body guard found, else identified now."""
    principal = _found(request)
    if principal is None:
        principal = identify(request.app.state, *_client_and_secret(request, credentials))
        request.state.principal = principal
    return principal


async def _caller_async(
    request: Request, credentials: HTTPAuthorizationCredentials | None
) -> Principal:
    """`_caller` on the event loop: a thread hop only when the database must be read."""
    principal = _found(request)
    if principal is None:
        client, secret = _client_and_secret(request, credentials)
        principal = known(request.app.state, client, secret)
        if principal is None:
            principal = await run_in_threadpool(identify, request.app.state, client, secret)
        request.state.principal = principal
    return principal


def require_scope(scope: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits a caller holding `scope` (401 without a token, 403 without
    the scope, 429 after too many failures)."""
    assert scope in SCOPES

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Principal:
        principal = await _caller_async(request, credentials)
        if scope not in principal.scopes:
            raise AuthFailed(
                status.HTTP_403_FORBIDDEN,
                f"this route needs the '{scope}' scope; token '{principal.name}' has "
                f"{', '.join(sorted(principal.scopes)) or 'none'}",
            )
        return principal

    dependency.__name__ = f"require_{scope}"
    return dependency


def may_use_subscription(principal: Principal, owner_token_id: int | None) -> bool:
    """The one ownership rule (REST, /v1/stream and the dashboard alike): an admin uses
    every subscription, any other caller those its own token created and the unowned ones
    (made without a token: auth off, the control plane's own callers, or before migration 0003,
    so that an upgrade takes no consumer's subscription away)."""
    if "admin" in principal.scopes or owner_token_id is None:
        return True
    return principal.token_id is not None and principal.token_id == owner_token_id


def check_subscription_owner(principal: Principal, subscription_id: int, owner: int | None) -> None:
    """403 unless `may_use_subscription`: a consume token cannot read, change, delete or
    stream another token's subscription."""
    if not may_use_subscription(principal, owner):
        raise AuthFailed(
            status.HTTP_403_FORBIDDEN,
            f"subscription {subscription_id} belongs to another token: token "
            f"'{principal.name}' may use only the subscriptions it created (an admin token "
            "may use every one)",
        )


def is_admin_or_anonymous(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> bool:
    """For routes open to all that say more to an admin: True for an admin, False without
    a token (or auth off and a client beyond loopback); a bad token is still refused."""
    settings: Settings = request.app.state.settings
    if credentials is None and settings.auth.mode != "none":
        return False
    try:
        return "admin" in _caller(request, credentials).scopes
    except AuthFailed as exc:
        if exc.status_code == status.HTTP_403_FORBIDDEN:
            return False
        raise


def require_any_scope(*scopes: str) -> Callable[..., Awaitable[Principal]]:
    """A dependency that admits a caller holding any of `scopes` (a route that answers each
    scope with what it may see, e.g. the sessions a consume token may subscribe to)."""
    assert scopes
    assert set(scopes) <= set(SCOPES)

    async def dependency(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> Principal:
        principal = await _caller_async(request, credentials)
        if not principal.scopes & set(scopes):
            raise AuthFailed(
                status.HTTP_403_FORBIDDEN,
                f"this route needs the '{scopes[0]}' scope (or {', '.join(scopes[1:])}); "
                f"token '{principal.name}' has {', '.join(sorted(principal.scopes)) or 'none'}",
            )
        return principal

    dependency.__name__ = f"require_any_of_{'_'.join(scopes)}"
    return dependency
