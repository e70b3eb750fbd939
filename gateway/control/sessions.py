"""Upstream sessions: their rows, the rules a configuration must meet, and starting and
stopping them in the runtime.

A session's wanted state (`desired_state`) is stored, so a restart restores it
(gateway.control.restore); what it connects to is fixed while it runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from gateway.control.events import EventWriter
from gateway.control.ports import route_problem
from gateway.control.subscriptions import dialect_topics
from gateway.control.transactions import RowService, Transactions
from gateway.runtime import (
    Runtime,
    SessionSpec,
    SessionStatus,
    known_dialects,
)
from gateway.sessions.config import (
    HeartbeatConfig,
    ReconnectPolicy,
    SessionConfig,
    SessionConfigError,
    TlsOptions,
)
from gateway.sessions.connect import tls_context
from gateway.store.errors import ConflictError, InvalidError
from gateway.store.models import EventRow, SessionRow, with_defaults
from gateway.store.repository import (
    EventRepository,
    Page,
    PortRepository,
    SessionRepository,
    SubscriptionRepository,
)

log = logging.getLogger("wsgw.control")

#: Session fields that change what the runtime connects to: fixed while it runs.
SESSION_CONNECTION_FIELDS = frozenset(
    {
        "url",
        "dialect",
        "transport",
        "port_id",
        "tls_verify",
        "tls_ca_file",
        "tls_server_name",
        "heartbeat_interval_s",
        "heartbeat_timeout_s",
        "reconnect_initial_delay_s",
        "reconnect_max_delay_s",
        "reconnect_multiplier",
        "reconnect_jitter",
        "reconnect_max_attempts",
    }
)
#: SessionConfig's names of the settings an API session field becomes (SessionConfig.from_spec).
CONFIG_FIELDS = {
    "url": "url",
    "dialect": "dialect",
    "transport": "transport",
    "tls.ca_file": "tls_ca_file",
    "tls.server_name": "tls_server_name",
    "heartbeat.ping_interval_s": "heartbeat_interval_s",
    "heartbeat.ping_timeout_s": "heartbeat_timeout_s",
    "heartbeat.dead_feed_timeout_s": "heartbeat_timeout_s",
    "reconnect.initial_delay_s": "reconnect_initial_delay_s",
    "reconnect.max_delay_s": "reconnect_max_delay_s",
    "reconnect.multiplier": "reconnect_multiplier",
    "reconnect.jitter": "reconnect_jitter",
    "reconnect.max_attempts": "reconnect_max_attempts",
}


def session_spec(row: SessionRow) -> SessionSpec:
    return SessionSpec(
        id=row.id,
        name=row.name,
        url=row.url,
        dialect=row.dialect,
        transport=row.transport,
        port_id=row.port_id,
        tls=TlsOptions(row.tls_verify, row.tls_ca_file, row.tls_server_name),
        heartbeat=HeartbeatConfig(
            ping_interval_s=row.heartbeat_interval_s,
            ping_timeout_s=row.heartbeat_timeout_s,
            dead_feed_timeout_s=row.heartbeat_timeout_s,
        ),
        reconnect=ReconnectPolicy(
            initial_delay_s=row.reconnect_initial_delay_s,
            max_delay_s=row.reconnect_max_delay_s,
            multiplier=row.reconnect_multiplier,
            jitter=row.reconnect_jitter,
            max_attempts=row.reconnect_max_attempts,
        ),
    )


def _is_file(path: str) -> bool:
    """Path.is_file, but False for a path the OS refuses outright (too long: ENAMETOOLONG)."""
    try:
        return Path(path).is_file()
    except OSError:
        return False


class SessionService(RowService[SessionRow]):
    """Configure, start, stop and delete sessions; their event log."""

    def __init__(self, tx: Transactions, runtime: Runtime, writer: EventWriter) -> None:
        super().__init__(tx, SessionRepository)
        self.runtime = runtime
        self.writer = writer
        #: Called with the id of each deleted session (the books forget theirs).
        self.on_delete: list[Callable[[int], None]] = []

    def status(self, session_id: int) -> SessionStatus:
        return self.runtime.session_status(session_id)

    def create(self, values: Mapping[str, Any]) -> SessionRow:
        with self.tx.write() as s:
            sessions = SessionRepository(s)
            if other := sessions.by_name(values["name"]):
                raise ConflictError(
                    f"session name {values['name']!r} is taken by session {other.id}"
                )
            row = SessionRow(**with_defaults(SessionRow, values))
            row.desired_state = "stopped"
            self._check(s, row)
            sessions.add(row)
            EventRepository(s).record(row.id, "created", "session configured")
            return row

    def update(self, session_id: int, values: Mapping[str, Any]) -> SessionRow:
        with self.tx.write() as s:
            sessions = SessionRepository(s)
            row = sessions.get(session_id)
            changed = {k: v for k, v in values.items() if getattr(row, k) != v}
            if not changed:
                return row
            if "name" in changed and (other := sessions.by_name(changed["name"])):
                raise ConflictError(
                    f"session name {changed['name']!r} is taken by session {other.id}"
                )
            fixed = sorted(SESSION_CONNECTION_FIELDS & changed.keys())
            if fixed and row.desired_state == "running":
                raise ConflictError(
                    f"session {session_id} is running: stop it (POST /v1/sessions/"
                    f"{session_id}/stop) before changing {', '.join(fixed)}"
                )
            for key, value in changed.items():
                setattr(row, key, value)
            self._check(s, row)
            if "dialect" in changed:
                self._check_subscribed_topics(s, row)
            EventRepository(s).record(
                session_id, "updated", "configuration changed", {"fields": sorted(changed)}
            )
            return row

    def delete(self, session_id: int) -> None:
        """Stop the session if it runs, wait until the runtime has stopped and forgotten it
        (bounded: RuntimeRefusedError, a 409, leaves the row, stopped), then delete it with
        its subscriptions and events. Held under the lock throughout, so nobody starts it
        in between."""
        with self.tx.lock:
            row = self.get(session_id)
            if row.desired_state == "running":
                self.stop(session_id)
            self.runtime.remove_session(session_id)
            self.writer.flush()  # its queued events are written now, and deleted with it
            try:
                with self.tx.write() as s:
                    row = SessionRepository(s).get(session_id)
                    subs = SubscriptionRepository(s)
                    for sub in subs.of_session(session_id):
                        subs.delete(sub)
                    s.delete(row)
            except Exception:
                # The row stays (stopped): give the runtime its topics back, as restore does,
                # so starting it again subscribes them upstream.
                self._reregister_topics(session_id)
                raise
            for hook in self.on_delete:
                hook(session_id)

    def _reregister_topics(self, session_id: int) -> None:
        try:
            topics = self.tx.read(
                lambda s: list(SubscriptionRepository(s).topic_counts(session_id))
            )
            if topics:
                self.runtime.subscribe(session_id, topics)
        except Exception:  # the database is still down: restore does it on the next start
            log.exception("session %d: topics not re-registered after a failed delete", session_id)

    def start(self, session_id: int) -> tuple[SessionRow, SessionStatus]:
        with self.tx.write() as s:
            row = SessionRepository(s).get(session_id)
            if row.transport == "dpdk" and row.port_id is not None:
                port = PortRepository(s).get(row.port_id)
                if not port.enabled:
                    raise ConflictError(
                        f"port {port.id} ({port.name}) is disabled: enable it "
                        f"(PATCH /v1/ports/{port.id} enabled=true) before starting session "
                        f"{session_id}"
                    )
            row.desired_state = "running"
            EventRepository(s).record(session_id, "start_requested", "operator asked to start")
            s.flush()
            status = self.runtime.start_session(session_spec(row))
            return row, status

    def stop(self, session_id: int) -> tuple[SessionRow, SessionStatus]:
        with self.tx.write() as s:
            row = SessionRepository(s).get(session_id)
            row.desired_state = "stopped"
            EventRepository(s).record(session_id, "stop_requested", "operator asked to stop")
            s.flush()
            status = self.runtime.stop_session(session_id)
            return row, status

    def events(self, session_id: int, offset: int, limit: int) -> Page[EventRow]:
        """The session's event log, newest first, with every event reported so far."""
        self.writer.flush()

        def read(s: Session) -> Page[EventRow]:
            SessionRepository(s).get(session_id)
            return EventRepository(s).of_session(session_id, offset, limit)

        return self.tx.read(read)

    def count_by_state(self) -> dict[tuple[str, str], int]:
        """(runtime state, wanted state) -> count, for the metrics."""
        counts: dict[tuple[str, str], int] = {}
        for row in self.tx.read(lambda s: SessionRepository(s).all()):
            key = (str(self.runtime.session_status(row.id).state), row.desired_state)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def _check(self, s: Session, row: SessionRow) -> None:
        dialects = list(self.runtime.dialects())
        if row.dialect not in dialects:
            raise InvalidError(
                f"unknown dialect {row.dialect!r}; known dialects: {', '.join(dialects)}",
                "dialect",
            )
        if row.transport == "dpdk" and row.port_id is None:
            raise InvalidError(
                "transport 'dpdk' needs port_id: the DPDK port the session connects through "
                "(or use transport 'kernel')",
                "port_id",
            )
        if row.transport == "kernel" and row.port_id is not None:
            raise InvalidError(
                "transport 'kernel' uses the host's own sockets and takes no port_id: "
                "leave it out or use transport 'dpdk'",
                "port_id",
            )
        if row.port_id is not None:
            port = PortRepository(s).get(row.port_id)
            if problem := route_problem(port, row.url):
                raise InvalidError(problem, "url")
        if not row.url.startswith("wss://") and (row.tls_ca_file or row.tls_server_name):
            raise InvalidError(
                "tls_ca_file and tls_server_name apply only to wss:// URLs", "tls_ca_file"
            )
        if row.tls_ca_file and not _is_file(row.tls_ca_file):
            raise InvalidError(
                f"tls_ca_file {row.tls_ca_file} is not a readable file on the gateway host",
                "tls_ca_file",
            )
        if row.heartbeat_timeout_s <= row.heartbeat_interval_s:
            raise InvalidError(
                f"heartbeat_timeout_s ({row.heartbeat_timeout_s}) must exceed "
                f"heartbeat_interval_s ({row.heartbeat_interval_s}): a ping must have time "
                "to be answered",
                "heartbeat_timeout_s",
            )
        if row.reconnect_max_delay_s < row.reconnect_initial_delay_s:
            raise InvalidError(
                f"reconnect_max_delay_s ({row.reconnect_max_delay_s}) is below "
                f"reconnect_initial_delay_s ({row.reconnect_initial_delay_s})",
                "reconnect_max_delay_s",
            )
        if row.dialect in known_dialects():
            # What the session will be told when it starts, checked now with the same code
            # (the rules above only give clearer messages): a session accepted here starts.
            try:
                config = SessionConfig.from_spec(session_spec(row))
                tls_context(config)  # loads tls_ca_file as every connect will
            except SessionConfigError as exc:
                raise InvalidError(str(exc), CONFIG_FIELDS.get(exc.field or "")) from None

    def _check_subscribed_topics(self, s: Session, row: SessionRow) -> None:
        """A new dialect must accept, as they are spelled, the topics the session's
        subscriptions hold: consumers filter the ring by that spelling."""
        for sub in SubscriptionRepository(s).of_session(row.id):
            try:
                spelled = dialect_topics(row.dialect, list(sub.topics), "dialect")
            except InvalidError as exc:
                raise InvalidError(
                    f"subscription {sub.id}: {exc}; change or delete it first", "dialect"
                ) from None
            for before, after in zip(sub.topics, spelled, strict=True):
                if before != after:
                    raise InvalidError(
                        f"dialect {row.dialect} spells topic {before!r} of subscription "
                        f"{sub.id} as {after!r}: change the subscription's topics first",
                        "dialect",
                    )
