"""The database: engine from settings, sessions, a liveness probe.

SQLite (a file under state_dir) is the zero-set-up default; PostgreSQL is chosen by URL
(`postgresql+psycopg://...`). The schema comes from Alembic (gateway.store.migrate), never
from `create_all`, so a database made by one version upgrades in place.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url, text
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session, sessionmaker

from gateway.settings import Settings

#: What the database raises when it cannot answer now (server down or unreachable, file
#: locked or unreadable, no pooled connection free): the API answers 503, not 500.
DATABASE_UNAVAILABLE: tuple[type[Exception], ...] = (
    OperationalError,
    InterfaceError,
    PoolTimeoutError,
)


def database_url(settings: Settings) -> str:
    """The configured URL, or the SQLite file state_dir/wsgw.db."""
    if settings.db.url:
        return settings.db.url
    return f"sqlite:///{(settings.state_dir / 'wsgw.db').resolve()}"


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # Foreign keys are off by default in SQLite; WAL lets readers run beside a writer;
    # busy_timeout makes concurrent writers wait instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=5000")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.close()


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """An engine for `url`; for a SQLite file its folder is created first."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args={"check_same_thread": False})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, echo=echo, pool_pre_ping=True)


class Database:
    """Owns the engine and hands out ORM sessions (objects stay usable after commit)."""

    def __init__(self, url: str, *, echo: bool = False) -> None:
        self.url = url
        self.engine = make_engine(url, echo=echo)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)

    @classmethod
    def from_settings(cls, settings: Settings) -> Database:
        return cls(database_url(settings), echo=settings.db.echo)

    @property
    def backend(self) -> str:
        return self.engine.dialect.name

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A session in a transaction: committed on success, rolled back on an exception."""
        with self._sessions() as session, session.begin():
            yield session

    def ping(self) -> None:
        """Raise if the database cannot answer a trivial query."""
        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))

    def redacted_url(self) -> str:
        return make_url(self.url).render_as_string(hide_password=True)

    def close(self) -> None:
        self.engine.dispose()
