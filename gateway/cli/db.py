"""`wsgw db ...`: the control plane's database (Alembic migrations)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Literal

import typer

from gateway.cli.common import load_settings

if TYPE_CHECKING:
    from gateway.store.db import Database

app = typer.Typer(help="The control plane's database (Alembic migrations)", no_args_is_help=True)


@contextmanager
def _database() -> Iterator[Database]:
    from gateway.store.db import Database

    db = Database.from_settings(load_settings())
    try:
        yield db
    finally:
        db.close()


def _migrate(direction: Literal["upgrade", "downgrade"], revision: str) -> None:
    """Move the database to `revision` and print the revision it was at and the one it is at."""
    from gateway.store import migrate

    step = migrate.upgrade if direction == "upgrade" else migrate.downgrade
    with _database() as db:
        before = migrate.current(db)
        step(db, revision)
        print(f"{db.redacted_url()}: {before or 'empty'} -> {migrate.current(db) or 'empty'}")


@app.command("upgrade")
def db_upgrade(
    revision: Annotated[str, typer.Argument(help="target revision")] = "head",
) -> None:
    """Migrate the database up to a revision (default: the newest)."""
    _migrate("upgrade", revision)


@app.command("downgrade")
def db_downgrade(
    revision: Annotated[str, typer.Argument(help="target revision: an id, -1, or base")],
) -> None:
    """Migrate the database down (base drops every table: all stored state is lost)."""
    _migrate("downgrade", revision)


@app.command("current")
def db_current() -> None:
    """Print the database's revision and the newest one this code knows."""
    from gateway.store import migrate

    with _database() as db:
        now, head = migrate.current(db), migrate.head()
        state = "up to date" if now == head else "needs `wsgw db upgrade`"
        print(f"{db.redacted_url()}: revision {now or 'none (empty)'}, head {head} ({state})")
