"""`wsgw serve`, `wsgw db ...` and `wsgw token ...`: the control plane's command line.

Registered in gateway/cli.py with `register(app)`. Settings come from pydantic-settings
(WSGW_* variables, wsgw.toml); options given here override them. `serve` runs uvicorn with
the app; SIGINT/SIGTERM shut it down gracefully: the runtime is asked to stop the
sessions (their wanted state stays stored, so the next start restores them), then it exits.
"""

from __future__ import annotations

import json
import logging
import signal
import sys
from datetime import datetime
from typing import Annotated, Any

import typer

from gateway.runtime import Runtime
from gateway.settings import Settings

db_app = typer.Typer(help="The control plane's database (Alembic migrations)", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (bearer secrets, stored hashed)", no_args_is_help=True)
log = logging.getLogger("wsgw.serve")


def register(app: typer.Typer) -> None:
    """Add `serve`, `db` and `token` to the main `wsgw` command."""
    app.command("serve", help="Run the REST control plane (uvicorn)")(serve)
    app.add_typer(db_app, name="db")
    app.add_typer(token_app, name="token")


def _fail(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


def _settings(**overrides: Any) -> Settings:
    try:
        return Settings(**{k: v for k, v in overrides.items() if v})
    except ValueError as exc:
        _fail(f"invalid settings: {exc}", 2)
        raise


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


def build_runtime(settings: Settings) -> Runtime:
    """The live runtime: upstream sessions on their own loop thread, messages into the
    fan-out hub (shared-memory ring, /v1/stream, NATS), DPDK ports and their engines opened
    on demand. The hub is reachable as `runtime.hub` (what /v1/stream reads)."""
    from gateway.engines import DpdkEngines
    from gateway.hub.config import HubConfig, create_hub
    from gateway.hub.nats import NatsConfig
    from gateway.runtime_live import LiveRuntime

    h = settings.hub
    nats = (
        NatsConfig(servers=tuple(h.nats.servers), subject_prefix=h.nats.subject_prefix)
        if h.nats is not None
        else None
    )
    hub = create_hub(
        HubConfig(
            gateway=h.gateway,
            ring=h.ring,
            ring_capacity=h.ring_capacity,
            handoff_limit=h.handoff_limit,
            nats=nats,
            reader_wait=h.reader_wait,
        )
    )
    return LiveRuntime(hub, engine_factory=lambda: DpdkEngines(settings), hub=hub)


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
    settings = _settings(api=api, auth={"mode": "none"} if no_auth else None)
    setup_logging(settings.api.log_level, settings.api.json_logs)
    try:
        app = create_app(settings, build_runtime(settings))
    except UnsafeSettingsError as exc:
        _fail(str(exc), 2)
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
        _fail("the control plane did not start (see the log above)", 3)
    log.info("control plane stopped")


def _database() -> Any:
    from gateway.store.db import Database

    return Database.from_settings(_settings())


@db_app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="target revision")] = "head",
) -> None:
    """Migrate the database up to a revision (default: the newest)."""
    from gateway.store import migrate

    db = _database()
    try:
        before = migrate.current(db)
        migrate.upgrade(db, revision)
        print(f"{db.redacted_url()}: {before or 'empty'} -> {migrate.current(db)}")
    finally:
        db.close()


@db_app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="target revision: an id, -1, or base")],
) -> None:
    """Migrate the database down (base drops every table: all stored state is lost)."""
    from gateway.store import migrate

    db = _database()
    try:
        before = migrate.current(db)
        migrate.downgrade(db, revision)
        print(f"{db.redacted_url()}: {before or 'empty'} -> {migrate.current(db) or 'empty'}")
    finally:
        db.close()


@db_app.command("current")
def db_current() -> None:
    """Print the database's revision and the newest one this code knows."""
    from gateway.store import migrate

    db = _database()
    try:
        now, head = migrate.current(db), migrate.head()
        state = "up to date" if now == head else "needs `wsgw db upgrade`"
        print(f"{db.redacted_url()}: revision {now or 'none (empty)'}, head {head} ({state})")
    finally:
        db.close()


def _service() -> Any:
    """A service on the configured database, migrated as serve would (or checked)."""
    from gateway.control import ControlPlane
    from gateway.store import migrate

    settings = _settings()
    service = ControlPlane(settings)
    if settings.db.upgrade_on_start:
        migrate.upgrade(service.db)
    elif migrate.current(service.db) != migrate.head():
        _fail("the database is not at the newest revision: run `wsgw db upgrade` first")
    return service


@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Option("--name", "-n", help="who or what uses the token")],
    scope: Annotated[
        list[str], typer.Option("--scope", "-s", help="admin and/or consume (repeatable)")
    ],
) -> None:
    """Create a token and print its secret (on stdout, once: it is stored only hashed)."""
    from gateway.store.errors import StoreError
    from gateway.store.validate import check_name

    try:
        check_name(name, "token name")
    except ValueError as exc:
        _fail(str(exc), 2)
    service = _service()
    try:
        token, secret = service.tokens.create(name, scope)
    except StoreError as exc:
        _fail(str(exc), 2)
        raise
    finally:
        service.db.close()
    typer.echo(
        f"token {token.id} '{token.name}' ({', '.join(token.scopes)}) created; its secret "
        "follows, shown this once:",
        err=True,
    )
    print(secret)


@token_app.command("list")
def token_list(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """List tokens (never their secrets)."""
    service = _service()
    try:
        tokens = service.tokens.page(0, 1 << 30).items
    finally:
        service.db.close()
    rows = [
        {
            "id": t.id,
            "name": t.name,
            "scopes": t.scopes,
            "prefix": t.prefix,
            "created_at": t.created_at.isoformat(timespec="seconds"),
            "last_used_at": t.last_used_at.isoformat(timespec="seconds")
            if t.last_used_at
            else None,
            "revoked_at": t.revoked_at.isoformat(timespec="seconds") if t.revoked_at else None,
        }
        for t in tokens
    ]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'ID':>4}  {'NAME':<20} {'SCOPES':<15} {'PREFIX':<10} {'LAST USED':<20} STATE")
    for r in rows:
        state = f"revoked {r['revoked_at']}" if r["revoked_at"] else "live"
        print(
            f"{r['id']:>4}  {r['name']:<20} {','.join(r['scopes']):<15} {r['prefix']:<10} "
            f"{r['last_used_at'] or 'never':<20} {state}"
        )


@token_app.command("revoke")
def token_revoke(
    token: Annotated[str, typer.Argument(help="token id, or name when it is unique")],
) -> None:
    """Revoke a token: requests carrying it get 401 from now on."""
    from gateway.store.errors import StoreError

    service = _service()
    try:
        found = service.tokens.find(token)
        revoked = service.tokens.revoke(found.id)
    except StoreError as exc:
        _fail(str(exc), 1)
        raise
    finally:
        service.db.close()
    print(f"token {revoked.id} '{revoked.name}' revoked")
