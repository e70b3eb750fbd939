"""`wsgw token ...`: API tokens (bearer secrets, stored hashed)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gateway.cli.common import fail, load_settings

if TYPE_CHECKING:
    from gateway.control.tokens import TokenService
    from gateway.store import Database

app = typer.Typer(help="API tokens (bearer secrets, stored hashed)", no_args_is_help=True)


def _tokens() -> tuple[Database, TokenService]:
    """The token service on the configured database, migrated as serve would (or checked)."""
    from datetime import timedelta

    from gateway.control.tokens import TokenService
    from gateway.control.transactions import Transactions
    from gateway.store import Database, migrate

    settings = load_settings()
    db = Database.from_settings(settings)
    if settings.db.upgrade_on_start:
        migrate.upgrade(db)
    elif migrate.current(db) != migrate.head():
        fail("the database is not at the newest revision: run `wsgw db upgrade` first")
    resolution = timedelta(seconds=settings.auth.last_used_resolution_s)
    return db, TokenService(Transactions(db), resolution)


@app.command("create")
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
        fail(str(exc), 2)
    db, tokens = _tokens()
    try:
        token, secret = tokens.create(name, scope)
    except StoreError as exc:
        fail(str(exc), 2)
        raise
    finally:
        db.close()
    typer.echo(
        f"token {token.id} '{token.name}' ({', '.join(token.scopes)}) created; its secret "
        "follows, shown this once:",
        err=True,
    )
    print(secret)


@app.command("list")
def token_list(
    as_json: Annotated[bool, typer.Option("--json", help="JSON instead of a table")] = False,
) -> None:
    """List tokens (never their secrets)."""
    db, service = _tokens()
    try:
        tokens = service.page(0, 1 << 30).items
    finally:
        db.close()
    rows: list[dict[str, Any]] = [
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


@app.command("revoke")
def token_revoke(
    token: Annotated[str, typer.Argument(help="token id, or name when it is unique")],
) -> None:
    """Revoke a token: requests carrying it get 401 from now on."""
    from gateway.store.errors import StoreError

    db, tokens = _tokens()
    try:
        found = tokens.find(token)
        revoked = tokens.revoke(found.id)
    except StoreError as exc:
        fail(str(exc), 1)
        raise
    finally:
        db.close()
    print(f"token {revoked.id} '{revoked.name}' revoked")
