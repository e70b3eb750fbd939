"""`wsgw db ...`: the control plane's database (Alembic migrations)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gateway.cli.common import load_settings

if TYPE_CHECKING:
    from gateway.store.db import Database

app = typer.Typer(help="The control plane's database (Alembic migrations)", no_args_is_help=True)


def _database() -> Database:
    from gateway.store.db import Database

    return Database.from_settings(load_settings())


@app.command("upgrade")
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


@app.command("downgrade")
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


@app.command("current")
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
