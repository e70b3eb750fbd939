"""The control plane's composition: settings -> store -> runtime, and the rules between them.

`GatewayService` owns the database and the runtime. On `start()` it migrates the database
and hands the runtime everything that was open before (the restart guarantee): every
enabled port, the topics of every session's subscriptions, then every session whose wanted
state is running. On `shutdown()` the runtime stops the sessions, but their wanted state
stays in the store, so the next start restores them.

The API calls the operations here and never the runtime directly, so a rule (a port in use
cannot be deleted, the first subscription of a topic subscribes upstream, the last one
unsubscribes) holds for every caller, the CLI included. Mutations are serialised by one
lock: the control plane sees a few requests a second, and ref-counts must not race.
"""

from __future__ import annotations

import ipaddress
import logging
import queue
import secrets
import threading
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dataplane.transports.base import parse_ws_url
from dataplane.ws.errors import LocalProtocolError
from gateway.runtime import (
    DetachedRuntime,
    EngineStatus,
    PortSpec,
    Runtime,
    RuntimeEvent,
    RuntimeRefusedError,
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
from gateway.settings import Settings
from gateway.store import migrate
from gateway.store.db import Database
from gateway.store.errors import ConflictError, InvalidError, NotFoundError
from gateway.store.models import SCOPES, ApiToken, Port, SessionEvent, Subscription, UpstreamSession
from gateway.store.repository import (
    EventRepository,
    Page,
    PortRepository,
    SessionRepository,
    SubscriptionRepository,
    TokenRepository,
    hash_secret,
)
from gateway.store.validate import FieldError, check_port_network, device_claims

log = logging.getLogger("wsgw.service")

T = TypeVar("T")
TOKEN_PREFIX = "wsgw_"  # noqa: S105 (a marker that makes leaked secrets greppable)
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
PORT_RUNTIME_FIELDS = frozenset({"device", "ipv4", "netmask", "gateway", "mtu"})
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
#: The gap a session restored at start publishes when it reconnects upstream.
RESTART_GAP_REASON = "restart: the gateway was down; messages published meanwhile were missed"


def with_defaults(model: type[Any], values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` plus the model's scalar column defaults, so rules can check a new row before
    it is flushed (SQLAlchemy applies column defaults only at INSERT)."""
    defaults = {
        column.key: column.default.arg
        for column in model.__table__.columns
        if column.default is not None
        and column.default.is_scalar
        and column.key not in ("created_at", "updated_at")
    }
    return {**defaults, **values}


def port_spec(port: Port) -> PortSpec:
    return PortSpec(
        id=port.id,
        name=port.name,
        device=port.device,
        ipv4=port.ipv4,
        netmask=port.netmask,
        gateway=port.gateway,
        mtu=port.mtu,
    )


def session_spec(row: UpstreamSession) -> SessionSpec:
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


def _check_network(ipv4: str, netmask: str, gateway: str | None) -> None:
    try:
        check_port_network(ipv4, netmask, gateway)
    except FieldError as exc:
        raise InvalidError(str(exc), exc.field) from None


def route_problem(port: Port, url: str) -> str | None:
    """Why a dpdk session to `url` through `port` cannot connect, for a URL whose host is
    an IPv4 address (a name is resolved at connect): the stack's connect refuses its own
    address and martians, and an off-subnet host without a gateway has no route."""
    try:
        host = parse_ws_url(url).host
    except LocalProtocolError:
        return None
    if ":" in host:
        return f"url host {host} is an IPv6 address: the DPDK stack speaks IPv4 only"
    try:
        address = ipaddress.IPv4Address(host)
    except ValueError:
        return None
    network = ipaddress.IPv4Interface(f"{port.ipv4}/{port.netmask}").network
    if address == ipaddress.IPv4Address(port.ipv4):
        return f"url host {address} is port {port.id}'s own address"
    if address.is_loopback or address.is_multicast or address.is_unspecified:
        return f"url host {address} is not a unicast address the stack can connect to"
    if address not in network and port.gateway is None:
        return (
            f"url host {address} is outside port {port.id}'s subnet {network} and the port "
            "has no gateway: give the port a gateway or use a host of its subnet"
        )
    return None


def dialect_topics(dialect: str, topics: list[str], field: str = "topics") -> list[str]:
    """`topics` as the session's dialect spells them (binance: btcusdt@trade), which is
    how the session subscribes and publishes them; InvalidError when the dialect cannot
    spell one (dialect.normalize is the check the session makes when it subscribes)."""
    from gateway.dialects import DIALECTS, DialectError, make_dialect

    if dialect not in DIALECTS:
        return topics
    proto = make_dialect(dialect)
    spelled: list[str] = []
    for topic in topics:
        try:
            name = proto.normalize(topic)
        except DialectError as exc:
            raise InvalidError(
                f"topic {topic!r} is refused by the session's dialect: {exc}", field
            ) from None
        if name in spelled:
            raise InvalidError(
                f"topic {topic!r} is {name!r} in dialect {dialect}, which is listed already", field
            )
        spelled.append(name)
    return spelled


@dataclass
class RestoreReport:
    """What a start handed back to the runtime, and what it refused."""

    ports: list[int] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    topics: dict[int, list[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SubscriptionChange:
    """A subscription with the topics it made the runtime subscribe or unsubscribe."""

    subscription: Subscription
    subscribed: list[str]
    unsubscribed: list[str]


@dataclass(frozen=True)
class Readiness:
    database_ok: bool
    database_error: str | None
    engine: EngineStatus

    @property
    def ready(self) -> bool:
        return self.database_ok and self.engine.healthy


class EventWriter:
    """Writes runtime events to the store from a thread of its own.

    The runtime may report from inside a call the service made while it holds a write
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


class GatewayService:
    """Settings -> database -> runtime, and every operation the API offers."""

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
        self._lock = threading.RLock()
        self.events = EventWriter(self.db)
        self.started = False
        self.restored: RestoreReport | None = None

    # -- life cycle -----------------------------------------------------------------------

    def start(self) -> RestoreReport:
        """Migrate (when configured), then restore what was open: the restart guarantee."""
        if self.settings.db.upgrade_on_start:
            log.info("database %s: upgrading to %s", self.db.redacted_url(), migrate.head())
            migrate.upgrade(self.db)
        self.events.start()
        self.runtime.set_event_sink(self.events.put)
        self.restored = self.restore()
        self.started = True
        return self.restored

    def restore(self) -> RestoreReport:
        """Enabled ports up; topics of every session re-registered; running sessions started.

        Topics go first so a session subscribes all of them as soon as it connects. A
        refusal is logged and written to the session's events; the rest still restores.
        """
        report = RestoreReport()
        with self._lock, self.db.session() as s:
            for port in PortRepository(s).enabled():
                try:
                    self.runtime.port_up(port_spec(port))
                    report.ports.append(port.id)
                except RuntimeRefusedError as exc:
                    report.failures.append(f"port {port.id}: {exc}")
                    log.error("restore: port %s (%s) refused: %s", port.id, port.name, exc)
            subs = SubscriptionRepository(s)
            sessions = SessionRepository(s)
            for row in sessions.all():
                topics = list(subs.topic_counts(row.id))
                if topics:
                    self.runtime.subscribe(row.id, topics)
                    report.topics[row.id] = topics
            events = EventRepository(s)
            # The feed went on while the gateway was down: a runtime that can tell its
            # consumers so (LiveRuntime) publishes a gap when the session reconnects.
            mark_resumed = getattr(self.runtime, "mark_resumed", None)
            for row in sessions.wanted_running():
                try:
                    if callable(mark_resumed):
                        mark_resumed(row.id, RESTART_GAP_REASON)
                    self.runtime.start_session(session_spec(row))
                    report.sessions.append(row.id)
                    events.record(row.id, "restored", "gateway started: session restored")
                except RuntimeRefusedError as exc:
                    report.failures.append(f"session {row.id}: {exc}")
                    events.record(row.id, "restore_failed", str(exc))
                    log.error("restore: session %s (%s) refused: %s", row.id, row.name, exc)
        log.info(
            "restored %d port(s), %d session(s), topics of %d session(s)%s",
            len(report.ports),
            len(report.sessions),
            len(report.topics),
            f"; {len(report.failures)} refused" if report.failures else "",
        )
        return report

    def shutdown(self) -> None:
        """Ask the runtime to stop every session and port; the wanted state is kept."""
        log.info("shutting down: stopping sessions")
        try:
            self.runtime.close()
        finally:
            self.runtime.set_event_sink(None)
            self.events.stop()
            self.db.close()
            self.started = False

    def readiness(self) -> Readiness:
        try:
            self.db.ping()
            ok, error = True, None
        except Exception as exc:  # any driver error means "not ready", with its text
            ok, error = False, f"{type(exc).__name__}: {exc}"
        return Readiness(ok, error, self.runtime.engine_status())

    @contextmanager
    def _tx(self) -> Iterator[Session]:
        """One locked transaction; a unique-constraint race becomes a 409."""
        with self._lock:
            try:
                with self.db.session() as s:
                    yield s
            except IntegrityError as exc:
                raise ConflictError(f"the change conflicts with stored data: {exc.orig}") from exc

    def _read(self, fn: Callable[[Session], T]) -> T:
        with self.db.session() as s:
            return fn(s)

    # -- ports ----------------------------------------------------------------------------

    def list_ports(self, offset: int, limit: int) -> Page[Port]:
        return self._read(lambda s: PortRepository(s).page(offset, limit))

    def get_port(self, port_id: int) -> Port:
        return self._read(lambda s: PortRepository(s).get(port_id))

    def create_port(self, values: Mapping[str, Any]) -> Port:
        _check_network(values["ipv4"], values["netmask"], values.get("gateway"))
        with self._tx() as s:
            ports = PortRepository(s)
            self._port_unique(ports, values["name"], values["device"], None)
            port = ports.add(Port(**with_defaults(Port, values)))
            if port.enabled:
                self.runtime.port_up(port_spec(port))
            return port

    def update_port(self, port_id: int, values: Mapping[str, Any]) -> Port:
        with self._tx() as s:
            ports = PortRepository(s)
            port = ports.get(port_id)
            changed = {k: v for k, v in values.items() if getattr(port, k) != v}
            if not changed:
                return port
            self._port_unique(ports, changed.get("name"), changed.get("device"), port_id)
            was_enabled = port.enabled
            before = port_spec(port)
            for key, value in changed.items():
                setattr(port, key, value)
            _check_network(port.ipv4, port.netmask, port.gateway)
            for user in SessionRepository(s).on_port(port_id):
                if problem := route_problem(port, user.url):
                    field = "gateway" if "gateway" in changed else "ipv4"
                    raise InvalidError(f"session {user.id} ({user.name}): {problem}", field)
            affects_runtime = was_enabled and (
                not port.enabled or bool(PORT_RUNTIME_FIELDS & changed.keys())
            )
            if affects_runtime:
                self._refuse_running_sessions(s, port_id, "change or disable it")
                self.runtime.port_down(port_id)
            s.flush()
            if port.enabled and (affects_runtime or not was_enabled):
                try:
                    self.runtime.port_up(port_spec(port))
                except RuntimeRefusedError:
                    if affects_runtime:  # the change is rolled back: so is the runtime
                        self.runtime.port_up(before)
                    raise
            return port

    def delete_port(self, port_id: int) -> None:
        with self._tx() as s:
            ports = PortRepository(s)
            port = ports.get(port_id)
            users = SessionRepository(s).on_port(port_id)
            if users:
                names = ", ".join(f"{u.id} ({u.name})" for u in users)
                raise ConflictError(
                    f"port {port_id} is used by session(s) {names}: delete them or move "
                    "them to another port first"
                )
            if port.enabled:
                self.runtime.port_down(port_id)
            ports.delete(port)

    def _port_unique(
        self, ports: PortRepository, name: str | None, device: str | None, own: int | None
    ) -> None:
        if name is not None and (other := ports.by_name(name)) and other.id != own:
            raise ConflictError(f"port name {name!r} is taken by port {other.id}")
        if device is None:
            return
        if (other := ports.by_device(device)) and other.id != own:
            raise ConflictError(f"device {device!r} is already port {other.id} ({other.name})")
        # One port per PCI address, vdev name and host interface: the second would be
        # accepted here and fail when the dataplane opens it (or steal the first's frames).
        claims = device_claims(device)
        for other in ports.all():
            if other.id == own:
                continue
            for kind, value in device_claims(other.device).items():
                if claims.get(kind) == value:
                    raise ConflictError(
                        f"device {device!r}: {kind} {value} is already used by port {other.id} "
                        f"({other.name}, {other.device}): one port per {kind}"
                    )

    def _refuse_running_sessions(self, s: Session, port_id: int, action: str) -> None:
        running = [u for u in SessionRepository(s).on_port(port_id) if u.desired_state == "running"]
        if running:
            ids = ", ".join(str(u.id) for u in running)
            raise ConflictError(
                f"port {port_id} carries running session(s) {ids}: stop them before you {action}"
            )

    # -- sessions -------------------------------------------------------------------------

    def list_sessions(self, offset: int, limit: int) -> Page[UpstreamSession]:
        return self._read(lambda s: SessionRepository(s).page(offset, limit))

    def get_session(self, session_id: int) -> UpstreamSession:
        return self._read(lambda s: SessionRepository(s).get(session_id))

    def session_status(self, session_id: int) -> SessionStatus:
        return self.runtime.session_status(session_id)

    def create_session(self, values: Mapping[str, Any]) -> UpstreamSession:
        with self._tx() as s:
            sessions = SessionRepository(s)
            if other := sessions.by_name(values["name"]):
                raise ConflictError(
                    f"session name {values['name']!r} is taken by session {other.id}"
                )
            row = UpstreamSession(**with_defaults(UpstreamSession, values))
            row.desired_state = "stopped"
            self._check_session(s, row)
            sessions.add(row)
            EventRepository(s).record(row.id, "created", "session configured")
            return row

    def update_session(self, session_id: int, values: Mapping[str, Any]) -> UpstreamSession:
        with self._tx() as s:
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
            self._check_session(s, row)
            if "dialect" in changed:
                self._check_subscribed_topics(s, row)
            EventRepository(s).record(
                session_id, "updated", "configuration changed", {"fields": sorted(changed)}
            )
            return row

    def delete_session(self, session_id: int) -> None:
        """Stop the session if it runs, wait until the runtime has stopped and forgotten it
        (bounded: RuntimeRefusedError, a 409, leaves the row, stopped), then delete it with
        its subscriptions and events. Held under the lock throughout, so nobody starts it
        in between."""
        with self._lock:
            row = self.get_session(session_id)
            if row.desired_state == "running":
                self.stop_session(session_id)
            self.runtime.remove_session(session_id)
            self.events.flush()  # its queued events are written now, and deleted with it
            try:
                with self._tx() as s:
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

    def _reregister_topics(self, session_id: int) -> None:
        try:
            topics = self._read(lambda s: list(SubscriptionRepository(s).topic_counts(session_id)))
            if topics:
                self.runtime.subscribe(session_id, topics)
        except Exception:  # the database is still down: restore does it on the next start
            log.exception("session %d: topics not re-registered after a failed delete", session_id)

    def start_session(self, session_id: int) -> tuple[UpstreamSession, SessionStatus]:
        with self._tx() as s:
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

    def stop_session(self, session_id: int) -> tuple[UpstreamSession, SessionStatus]:
        with self._tx() as s:
            row = SessionRepository(s).get(session_id)
            row.desired_state = "stopped"
            EventRepository(s).record(session_id, "stop_requested", "operator asked to stop")
            s.flush()
            status = self.runtime.stop_session(session_id)
            return row, status

    def session_events(self, session_id: int, offset: int, limit: int) -> Page[SessionEvent]:
        self.events.flush()

        def read(s: Session) -> Page[SessionEvent]:
            SessionRepository(s).get(session_id)
            return EventRepository(s).of_session(session_id, offset, limit)

        return self._read(read)

    def sessions_by_state(self) -> dict[tuple[str, str], int]:
        """(runtime state, wanted state) -> count, for the metrics."""
        counts: dict[tuple[str, str], int] = {}
        for row in self._read(lambda s: SessionRepository(s).all()):
            key = (str(self.runtime.session_status(row.id).state), row.desired_state)
            counts[key] = counts.get(key, 0) + 1
        return counts

    def _check_session(self, s: Session, row: UpstreamSession) -> None:
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

    def _check_subscribed_topics(self, s: Session, row: UpstreamSession) -> None:
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

    # -- subscriptions --------------------------------------------------------------------

    def list_subscriptions(
        self,
        offset: int,
        limit: int,
        session_id: int | None = None,
        owner_token_id: int | None = None,
    ) -> Page[Subscription]:
        return self._read(
            lambda s: SubscriptionRepository(s).page_filtered(
                offset, limit, session_id, owner_token_id
            )
        )

    def get_subscription(self, subscription_id: int) -> Subscription:
        return self._read(lambda s: SubscriptionRepository(s).get(subscription_id))

    def create_subscription(self, values: Mapping[str, Any]) -> SubscriptionChange:
        with self._tx() as s:
            session_id = values["session_id"]
            session = SessionRepository(s).get(session_id)
            values = {**values, "topics": dialect_topics(session.dialect, values["topics"])}
            subs = SubscriptionRepository(s)
            held = subs.topic_counts(session_id)
            sub = subs.add(Subscription(**with_defaults(Subscription, values)))
            new = [t for t in sub.topics if t not in held]
            if new:
                self.runtime.subscribe(session_id, new)
            return SubscriptionChange(sub, new, [])

    def update_subscription(
        self, subscription_id: int, values: Mapping[str, Any]
    ) -> SubscriptionChange:
        with self._tx() as s:
            subs = SubscriptionRepository(s)
            sub = subs.get(subscription_id)
            before = list(sub.topics)
            if "topics" in values:
                dialect = SessionRepository(s).get(sub.session_id).dialect
                values = {**values, "topics": dialect_topics(dialect, values["topics"])}
            for key, value in values.items():
                setattr(sub, key, value)
            s.flush()
            others = subs.topic_counts(sub.session_id, exclude=sub.id)
            added = [t for t in sub.topics if t not in before and t not in others]
            removed = [t for t in before if t not in sub.topics and t not in others]
            if added:
                self.runtime.subscribe(sub.session_id, added)
            if removed:
                self.runtime.unsubscribe(sub.session_id, removed)
            return SubscriptionChange(sub, added, removed)

    def delete_subscription(self, subscription_id: int) -> SubscriptionChange:
        with self._tx() as s:
            subs = SubscriptionRepository(s)
            sub = subs.get(subscription_id)
            others = subs.topic_counts(sub.session_id, exclude=sub.id)
            removed = [t for t in sub.topics if t not in others]
            subs.delete(sub)
            if removed:
                self.runtime.unsubscribe(sub.session_id, removed)
            return SubscriptionChange(sub, [], removed)

    def ring_name(self, sub: Subscription) -> str:
        """The gateway's one shared-memory ring (the hub writes every message there); a
        consumer filters it by the subscription's topics, `<session>:<topic>` each."""
        from dataplane.ring import ring_name

        return ring_name(self.settings.hub.gateway, "messages")

    # -- tokens ---------------------------------------------------------------------------

    def create_token(self, name: str, scopes: list[str]) -> tuple[ApiToken, str]:
        """A new token and its secret: the only time the secret exists outside the caller."""
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise InvalidError(
                f"scopes must be a non-empty subset of {', '.join(SCOPES)} (got {scopes})", "scopes"
            )
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self._tx() as s:
            token = TokenRepository(s).add(
                ApiToken(
                    name=name,
                    scopes=sorted(set(scopes)),
                    prefix=secret[: len(TOKEN_PREFIX) + 4],
                    secret_hash=hash_secret(secret),
                )
            )
            return token, secret

    def list_tokens(self, offset: int, limit: int) -> Page[ApiToken]:
        return self._read(lambda s: TokenRepository(s).page(offset, limit))

    def get_token(self, token_id: int) -> ApiToken:
        return self._read(lambda s: TokenRepository(s).get(token_id))

    def find_token(self, ident: str) -> ApiToken:
        """A token by id, or by name when one live token has it (for the CLI)."""
        if ident.isdigit():
            return self.get_token(int(ident))

        def read(s: Session) -> ApiToken:
            tokens = [t for t in TokenRepository(s).named(ident) if t.revoked_at is None]
            if not tokens:
                raise NotFoundError("token", repr(ident))
            if len(tokens) > 1:
                raise ConflictError(
                    f"{len(tokens)} live tokens are named {ident!r}: give the id instead"
                )
            return tokens[0]

        return self._read(read)

    def revoke_token(self, token_id: int) -> ApiToken:
        with self._tx() as s:
            token = TokenRepository(s).get(token_id)
            if token.revoked_at is None:
                token.revoked_at = datetime.now(UTC)
            return token

    def revoked_tokens(self, token_ids: Collection[int]) -> set[int]:
        """Those of token_ids revoked (or deleted) by now, by this process or another."""
        with self.db.session() as s:
            return set(token_ids) - TokenRepository(s).live_ids(token_ids)

    def authenticate(self, secret: str) -> ApiToken | None:
        """The live token with this secret, its last use noted (at most once a resolution)."""
        if not secret.startswith(TOKEN_PREFIX):
            return None
        with self.db.session() as s:
            token = TokenRepository(s).by_secret(secret)
            if token is None or token.revoked_at is not None:
                return None
            now = datetime.now(UTC)
            resolution = timedelta(seconds=self.settings.auth.last_used_resolution_s)
            if token.last_used_at is None or now - token.last_used_at >= resolution:
                token.last_used_at = now
            return token


def _is_file(path: str) -> bool:
    """Path.is_file, but False for a path the OS refuses outright (too long: ENAMETOOLONG)."""
    try:
        return Path(path).is_file()
    except OSError:
        return False
