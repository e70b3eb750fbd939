"""`wsgw serve`: the REST control plane with the live runtime (gateway.runtime.build_runtime).

Settings come from pydantic-settings (WSGW_* variables, wsgw.toml); options given here
override them. `serve` runs uvicorn with the app; SIGINT/SIGTERM shut it down gracefully:
the runtime is asked to stop the sessions (their wanted state stays stored, so the next
start restores them), then it exits.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from datetime import datetime
from typing import Annotated, Any

import typer

from gateway.cli.common import fail, load_settings

log = logging.getLogger("wsgw.serve")


class JsonFormatter(logging.Formatter):
    """One JSON object per line, for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created).astimezone().isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def setup_logging(level: str, json_logs: bool) -> None:
    """One stderr handler for everything (uvicorn's loggers too), which never writes a
    bearer secret (api.security.SecretRedactingFilter)."""
    from api.security import install_log_redaction

    handler = logging.StreamHandler(sys.stderr)
    install_log_redaction(handler)
    handler.setFormatter(
        JsonFormatter()
        if json_logs
        else logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_requested(signum: int, _frame: object) -> None:
    log.info("stop requested (%s)", signal.Signals(signum).name)


def serve(
    host: Annotated[str | None, typer.Option(help="address to bind (api.host)")] = None,
    port: Annotated[int | None, typer.Option(help="TCP port (api.port)")] = None,
    json_logs: Annotated[
        bool | None, typer.Option("--json-logs/--text-logs", help="log format (api.json_logs)")
    ] = None,
    log_level: Annotated[str | None, typer.Option(help="debug|info|warning|error")] = None,
    no_auth: Annotated[
        bool, typer.Option("--no-auth", help="no authentication; loopback addresses only")
    ] = False,
) -> None:
    """Run the REST control plane: migrate the database, restore what was open, serve."""
    import uvicorn

    from api.app import create_app
    from api.auth import UnsafeSettingsError
    from gateway.runtime import build_runtime

    api: dict[str, Any] = {
        k: v
        for k, v in {
            "host": host,
            "port": port,
            "json_logs": json_logs,
            "log_level": log_level,
        }.items()
        if v is not None
    }
    settings = load_settings(api=api, auth={"mode": "none"} if no_auth else None)
    setup_logging(settings.api.log_level, settings.api.json_logs)
    try:
        app = create_app(settings, build_runtime(settings))
    except UnsafeSettingsError as exc:
        fail(str(exc), 2)
    config = uvicorn.Config(
        app,
        host=settings.api.host,
        port=settings.api.port,
        log_config=None,
        log_level=settings.api.log_level,
        timeout_graceful_shutdown=int(settings.api.shutdown_timeout_s),
        lifespan="on",
        server_header=False,
    )
    server = uvicorn.Server(config)
    log.info("serving the control plane on http://%s:%d", settings.api.host, settings.api.port)
    # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal to the
    # handler that was there before it: make that one a no-op, so a requested stop after a
    # clean shutdown exits 0 instead of dying by the signal.
    previous = {sig: signal.signal(sig, _stop_requested) for sig in STOP_SIGNALS}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if not server.started:
        fail("the control plane did not start (see the log above)", 3)
    log.info("control plane stopped")
