"""Runtime events (state changes the dataplane reports) written to the session event log."""

from __future__ import annotations

import logging
import queue
import threading
from datetime import UTC, datetime

from sqlalchemy.exc import IntegrityError

from gateway.runtime import RuntimeEvent
from gateway.store.db import Database
from gateway.store.repository import EventRepository

log = logging.getLogger("wsgw.control")


class EventWriter:
    """Writes runtime events to the store from a thread of its own.

    The runtime may report from inside a call the control plane made while it holds a write
    transaction (SQLite allows one writer), and from the engine thread, which must never
    wait on the database: so reports are queued and written here, in order.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        self._queue: queue.Queue[RuntimeEvent | None] = queue.Queue()
        self._thread: threading.Thread | None = None

    def put(self, event: RuntimeEvent) -> None:
        self._queue.put(event)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="wsgw-events", daemon=True)
            self._thread.start()

    def flush(self) -> None:
        """Wait until every queued event is written (read-your-writes for the API)."""
        if self._thread is not None:
            self._queue.join()

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        while True:
            event = self._queue.get()
            try:
                if event is None:
                    return
                self._write(event)
            except Exception:  # a lost report must not kill the writer
                log.exception("could not record runtime event %s", event)
            finally:
                self._queue.task_done()

    def _write(self, event: RuntimeEvent) -> None:
        try:
            with self.db.session() as s:
                EventRepository(s).record(
                    event.session_id,
                    event.kind,
                    event.reason,
                    dict(event.details),
                    datetime.fromtimestamp(event.at, UTC),
                )
        except IntegrityError:
            log.debug("event for deleted session %s dropped", event.session_id)
