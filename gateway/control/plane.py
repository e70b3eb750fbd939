"""ControlPlane: settings -> store -> runtime, and the entity services built on them.

On `start()` it migrates the database (when configured) and restores what was open before
(gateway.control.restore); on `shutdown()` the runtime stops the sessions, but their
wanted state stays in the store, so the next start restores them.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from gateway.books.manager import BookManager, BooksConfig
from gateway.control.books import BookSnapshotService
from gateway.control.events import EventWriter
from gateway.control.groups import GroupService
from gateway.control.health import Readiness, readiness
from gateway.control.ports import PortService
from gateway.control.restore import RestoreReport, restore
from gateway.control.sessions import SessionService
from gateway.control.subscriptions import SubscriptionService
from gateway.control.tokens import TokenService
from gateway.control.transactions import Transactions
from gateway.runtime import DetachedRuntime, Runtime
from gateway.settings import Settings
from gateway.store import migrate
from gateway.store.db import Database

log = logging.getLogger("wsgw.control")


class ControlPlane:
    """One database and one runtime, shared by the services of each entity:
    `control.ports`, `control.sessions`, `control.subscriptions`, `control.tokens`."""

    def __init__(
        self,
        settings: Settings,
        runtime: Runtime | None = None,
        *,
        database: Database | None = None,
    ) -> None:
        self.settings = settings
        self.db = database or Database.from_settings(settings)
        self.runtime: Runtime = runtime if runtime is not None else DetachedRuntime()
        self.tx = Transactions(self.db)
        self.events = EventWriter(self.db)
        self.ports = PortService(self.tx, self.runtime)
        self.sessions = SessionService(self.tx, self.runtime, self.events)
        #: The normalizer and local books: they follow the runtime's hub ring, if it has one.
        self.books = BookManager(
            getattr(self.runtime, "hub", None),
            self.runtime,
            BooksConfig(**settings.books.model_dump()),
        )
        self.subscriptions = SubscriptionService(
            self.tx, self.runtime, settings.hub.gateway, self.books
        )
        self.sessions.on_delete.append(self.books.forget_session)
        self.book_snapshots = BookSnapshotService(self.tx, self.books)
        self.groups = GroupService(self.tx, self.runtime)
        self.groups.on_legs_change.append(self.subscriptions.retell_books)
        self.tokens = TokenService(
            self.tx,
            timedelta(seconds=settings.auth.last_used_resolution_s),
            settings.auth.token_cache_s,
        )
        self.started = False
        self.restored: RestoreReport | None = None

    def start(self) -> RestoreReport:
        """Migrate (when configured), then restore what was open: the restart guarantee."""
        if self.settings.db.upgrade_on_start:
            log.info("database %s: upgrading to %s", self.db.redacted_url(), migrate.head())
            migrate.upgrade(self.db)
        self.events.start()
        self.runtime.set_event_sink(self.events.put)
        self.groups.restore()  # before the sessions: legs publish through their group
        self.subscriptions.restore_books()  # before the topics: no first snapshot is missed
        self.book_snapshots.restore()
        self.restored = restore(self.tx, self.runtime)
        self.started = True
        return self.restored

    def shutdown(self) -> None:
        """Ask the runtime to stop every session and port; the wanted state is kept."""
        log.info("shutting down: stopping sessions")
        self.books.close()
        try:
            self.runtime.close()
        finally:
            self.runtime.set_event_sink(None)
            self.events.stop()
            self.db.close()
            self.started = False

    def readiness(self) -> Readiness:
        return readiness(self.db, self.runtime)
