"""The FastAPI app factory: one app per (settings, runtime), nothing global.

`create_app` wires the control plane (database + runtime), host management, auth, CORS,
metrics and the routers. The control plane starts in the app's lifespan (migrations, then
the restore of what was open) and shuts down with it (the runtime stops the sessions).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry
from starlette.concurrency import run_in_threadpool
from starlette.middleware.trustedhost import TrustedHostMiddleware

from api import errors
from api.auth import AuthFailureLimiter, check_auth_settings, require_scope
from api.history import History
from api.metrics import BooksCollector, GatewayCollector, HttpMetrics
from api.revocation import OpenStreams
from api.routes import dashboard, engine, health, ports, sessions, stream, subscriptions, tokens
from api.routes import groups as group_routes
from api.routes import host as host_routes
from api.routes.books import router as books_router
from api.routes.consumers import router as consumers_router
from api.routes.engine_ports import router as engine_ports_router
from api.routes.fleet import router as fleet_router
from api.routes.history import router as history_router
from api.security import BodyGuard, OriginGuard, install_log_redaction
from gateway.control import ControlPlane
from gateway.host import HostManager
from gateway.hub import Hub
from gateway.hub.metrics import HubCollector
from gateway.hub.sink import SINK_DEFAULT
from gateway.runtime import Runtime
from gateway.settings import Settings

log = logging.getLogger("wsgw.api")
VERSION = "0.1.0"


def _operation_id(route: APIRoute) -> str:
    # The function name: stable across refactors of paths and tags, readable in clients.
    return route.name


def create_app(
    settings: Settings,
    runtime: Runtime | None = None,
    *,
    host: HostManager | None = None,
    control: ControlPlane | None = None,
    hub: Hub | None = None,
) -> FastAPI:
    """The control plane's ASGI app. `runtime` defaults to DetachedRuntime (no dataplane);
    `host` to the real host under settings.host; tests pass their own of each. `hub`: the
    fan-out hub /v1/stream reads from (default: the runtime's `hub` attribute, if any)."""
    check_auth_settings(settings)
    control = control or ControlPlane(settings, runtime)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await run_in_threadpool(control.start)
        app.state.history.start()
        try:
            yield
        finally:
            await app.state.history.stop()
            await app.state.open_streams.close()
            await run_in_threadpool(control.shutdown)

    app = FastAPI(
        title="wsgw control plane",
        version=VERSION,
        description="Configure the host, DPDK ports, upstream sessions and subscriptions of "
        "a market-data WebSocket gateway.",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
    )
    app.state.settings = settings
    app.state.control = control
    app.state.auth_limiter = AuthFailureLimiter(
        settings.auth.failure_limit, settings.auth.failure_window_s
    )
    app.state.open_streams = OpenStreams(control.tokens)
    install_log_redaction()
    app.state.host = host or HostManager.from_settings(settings)
    registry = CollectorRegistry(auto_describe=True)
    registry.register(GatewayCollector(control))
    registry.register(BooksCollector(control))
    app.state.hub = hub
    app.state.stream_sink = settings.api.stream_sink and SINK_DEFAULT
    app.state.stream_sink_max = settings.api.stream_sink_max
    registry.register(HubCollector(lambda: stream.app_hub(app)))
    app.state.registry = registry
    app.state.history = History(control, registry)
    registry.register(app.state.history.collector)

    errors.install(app)
    for router in (
        health.router,
        engine.router,
        engine_ports_router,
        host_routes.router,
        ports.router,
        sessions.router,
        group_routes.router,
        subscriptions.router,
        tokens.router,
        fleet_router,
        books_router,
        stream.router,
        consumers_router,
        history_router,
        dashboard.router,
    ):
        app.include_router(router)
    metrics_deps = [] if settings.auth.public_metrics else [Depends(require_scope("admin"))]
    app.add_api_route(
        "/metrics",
        health.metrics_response,
        methods=["GET"],
        name="metrics",
        tags=["health"],
        dependencies=metrics_deps,
        summary="Prometheus metrics",
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
        response_model=None,
    )
    # Added innermost first. A request meets, in order: the metrics, the Host allow-list,
    # the Origin and Content-Type check, CORS, then authentication before its body and the
    # body's size limit (api.security).
    app.add_middleware(BodyGuard, state=app.state, max_bytes=settings.api.max_body_bytes)
    if settings.api.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.api.cors_origins,
            allow_credentials=settings.api.cors_allow_credentials,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type"],
        )
    app.add_middleware(
        OriginGuard, allowed_origins=[*settings.api.allowed_origins, *settings.api.cors_origins]
    )
    app.add_middleware(
        TrustedHostMiddleware, allowed_hosts=settings.api.trusted_hosts(), www_redirect=False
    )
    app.add_middleware(HttpMetrics, registry=registry)
    _customise_openapi(app, settings)
    return app


#: Answers the middleware gives to any route (api.security, the failed-auth limit): in the
#: document so that clients and schemathesis know them.
_GUARD_ANSWERS = {
    "413": "the body is larger than api.max_body_bytes",
    "415": "a body that is not application/json (a cross-site form cannot act)",
    "429": "too many failed authentications from this address: retry after Retry-After",
}
#: Routes open to all that say more to an admin: a token is optional (OpenAPI 3.1 section
#: 4.8.10: an empty requirement makes security optional).
_OPTIONAL_AUTH_PATHS = frozenset({"/readyz"})


def _customise_openapi(app: FastAPI, settings: Settings) -> None:
    """The OpenAPI document as the app really answers: the configured maximum page size,
    the guards' 413/415/429, and optional authentication where a token only adds detail."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title,
                version=app.version,
                description=app.description,
                routes=app.routes,
            )
            error_ref = {"$ref": "#/components/schemas/ErrorPublic"}
            for path_name, path in schema.get("paths", {}).items():
                for operation in path.values():
                    for param in operation.get("parameters", []):
                        if param.get("in") == "query" and param.get("name") == "limit":
                            inner = param.get("schema", {})
                            for option in inner.get("anyOf", [inner]):
                                if option.get("type") == "integer":
                                    option["maximum"] = settings.api.page_limit_max
                    answers = operation.setdefault("responses", {})
                    codes = []
                    if "security" in operation:
                        codes.append("429")
                    if "requestBody" in operation:
                        codes += ["413", "415"]
                    for code in codes:
                        answers.setdefault(
                            code,
                            {
                                "description": _GUARD_ANSWERS[code],
                                "content": {"application/json": {"schema": error_ref}},
                            },
                        )
                    if path_name in _OPTIONAL_AUTH_PATHS and "security" in operation:
                        operation["security"] = [{}, *operation["security"]]
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
