"""What the control plane asks of the dataplane, and an honest stand-in for when none is there.

The API never touches stack state (it runs on other threads than the engines). It hands
the runtime plain, frozen specs of what the operator wants (ports, sessions, topics) and
reads back statuses and a metrics snapshot. `LiveRuntime` (gateway.runtime_live) implements
`Runtime` over the engines, sessions and hub; `DetachedRuntime` implements it for a control
plane with no dataplane: it remembers the wanted state, so a restart can be checked, and
reports every session as `configured` with the reason "dataplane not attached" instead of
inventing connection states or counters.

Contract for implementers:
- Calls come from the API's worker threads and from the service at start/stop; they must be
  thread-safe and return quickly (enqueue a command, do not wait for a TCP handshake).
- Topics are part of a session's wanted state: `subscribe` is valid for a session that is not
  started; the runtime sends the topics upstream whenever that session is connected.
- A request the runtime will not carry out (an unsafe interface, no free lcore, an unknown
  port) raises `RuntimeRefusedError` with a message an operator can act on; the API turns it
  into 409.
- State changes worth keeping (connected, disconnected with a reason, gap counts) go to the
  sink given by `set_event_sink`; the service writes them to the session event log.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

NOT_ATTACHED = "dataplane not attached"
#: A session's `receiving_unparsable` clears after this long without an unparsable frame.
UNPARSABLE_QUIET_S = 60.0


class EngineState(StrEnum):
    """Where the dataplane engine is in its life."""

    DETACHED = "detached"  # no dataplane in this process: the control plane only
    STARTING = "starting"
    RUNNING = "running"
    STOPPING = "stopping"
    FAILED = "failed"


class PortState(StrEnum):
    CONFIGURED = "configured"  # wanted, not opened (no dataplane)
    UP = "up"
    DOWN = "down"
    FAILED = "failed"


class SessionState(StrEnum):
    """A session's state as the runtime sees it (the wanted state lives in the store)."""

    CONFIGURED = "configured"  # known to the runtime, nothing is being done with it
    STOPPED = "stopped"
    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    STOPPING = "stopping"
    FAILED = "failed"


class RuntimeRefusedError(Exception):
    """The runtime will not do what was asked; the message says why and what to change."""


@dataclass(frozen=True)
class PortSpec:
    """A DPDK port as the operator configured it."""

    id: int
    name: str
    device: str  # PCI address or vdev string with its devargs
    ipv4: str
    netmask: str
    gateway: str | None
    mtu: int


@dataclass(frozen=True)
class TlsSpec:
    verify: bool = True
    ca_file: str | None = None
    server_name: str | None = None


@dataclass(frozen=True)
class HeartbeatSpec:
    interval_s: float = 15.0  # WebSocket ping period
    timeout_s: float = 30.0  # no frame for this long: the connection is dead


@dataclass(frozen=True)
class ReconnectSpec:
    initial_delay_s: float = 0.5
    max_delay_s: float = 30.0
    multiplier: float = 2.0
    jitter: float = 0.2  # fraction of the delay drawn at random
    max_attempts: int | None = None  # None: forever


@dataclass(frozen=True)
class SessionSpec:
    """An upstream WebSocket session as the operator configured it."""

    id: int
    name: str
    url: str
    dialect: str
    transport: str  # "dpdk" | "kernel"
    port_id: int | None
    tls: TlsSpec = field(default_factory=TlsSpec)
    heartbeat: HeartbeatSpec = field(default_factory=HeartbeatSpec)
    reconnect: ReconnectSpec = field(default_factory=ReconnectSpec)


@dataclass(frozen=True)
class EngineStatus:
    state: EngineState
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        """False only when the engine is broken; a detached control plane is healthy."""
        return self.state is not EngineState.FAILED


@dataclass(frozen=True)
class PortStatus:
    port_id: int
    state: PortState
    reason: str | None = None


@dataclass(frozen=True)
class SessionStatus:
    session_id: int
    state: SessionState
    reason: str | None = None
    since: float | None = None  # time.time() of the last state change, when known
    topics: tuple[str, ...] = ()  # topics the runtime holds for this session
    #: The upstream sends frames the dialect cannot parse (dropped, counted); clears after
    #: UNPARSABLE_QUIET_S without one.
    receiving_unparsable: bool = False


@dataclass(frozen=True)
class Metric:
    """One sample of the runtime's metrics: exported as wsgw_dataplane_<name>."""

    name: str
    kind: str  # "counter" | "gauge"
    value: float
    help: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class MetricsSnapshot:
    taken_at: float
    metrics: tuple[Metric, ...] = ()


@dataclass(frozen=True)
class RuntimeEvent:
    """A session state change reported by the runtime, for the session event log."""

    session_id: int
    kind: str  # e.g. "state", "gap", "error"
    reason: str | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)


EventSink = Callable[[RuntimeEvent], None]


@runtime_checkable
class Runtime(Protocol):
    """What the API and the service ask of the dataplane."""

    def engine_status(self) -> EngineStatus: ...

    def dialects(self) -> Sequence[str]:
        """Names of the exchange dialects sessions may use."""
        ...

    def set_event_sink(self, sink: EventSink | None) -> None: ...

    def port_up(self, port: PortSpec) -> PortStatus: ...

    def port_down(self, port_id: int) -> None: ...

    def port_status(self, port_id: int) -> PortStatus: ...

    def start_session(self, session: SessionSpec) -> SessionStatus: ...

    def stop_session(self, session_id: int) -> SessionStatus: ...

    def session_status(self, session_id: int) -> SessionStatus: ...

    def remove_session(self, session_id: int) -> None:
        """The session is being deleted: stop it if it runs, wait (bounded) until it has
        stopped, then forget it (status, topics, the hub's state of it); its late events
        are dropped. RuntimeRefusedError, forgetting nothing, when it did not stop in time."""
        ...

    def subscribe(self, session_id: int, topics: Sequence[str]) -> None: ...

    def unsubscribe(self, session_id: int, topics: Sequence[str]) -> None: ...

    def metrics(self) -> MetricsSnapshot: ...

    def close(self) -> None:
        """Stop every session and port (graceful shutdown); the stored wanted state stays."""
        ...


def known_dialects() -> tuple[str, ...]:
    """The names in the dialect registry (gateway.dialects.DIALECTS)."""
    try:
        from gateway.dialects import DIALECTS
    except ImportError:  # a control plane installed without the dialects package
        return ("generic",)
    return tuple(DIALECTS)


class DetachedRuntime:
    """The runtime of a control plane without a dataplane: remembers, never pretends.

    It keeps the ports, sessions and topics it was handed (so tests can check what a
    restart restored) and reports them as configured, with the reason "dataplane not
    attached". Its metrics snapshot is empty: there are no packets to count.
    """

    def __init__(self, dialects: Sequence[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._dialects = tuple(dialects) if dialects is not None else known_dialects()
        self._sink: EventSink | None = None
        self.ports: dict[int, PortSpec] = {}
        self.sessions: dict[int, SessionSpec] = {}
        self.topics: dict[int, list[str]] = {}
        self._since: dict[int, float] = {}
        #: Every call, in order, as (method, argument): what the control plane asked.
        self.calls: list[tuple[str, object]] = []
        self.closed = False

    def engine_status(self) -> EngineStatus:
        return EngineStatus(EngineState.DETACHED, NOT_ATTACHED)

    def dialects(self) -> Sequence[str]:
        return self._dialects

    def set_event_sink(self, sink: EventSink | None) -> None:
        self._sink = sink

    def port_up(self, port: PortSpec) -> PortStatus:
        with self._lock:
            self.calls.append(("port_up", port))
            self.ports[port.id] = port
        return PortStatus(port.id, PortState.CONFIGURED, NOT_ATTACHED)

    def port_down(self, port_id: int) -> None:
        with self._lock:
            self.calls.append(("port_down", port_id))
            self.ports.pop(port_id, None)

    def port_status(self, port_id: int) -> PortStatus:
        with self._lock:
            known = port_id in self.ports
        return PortStatus(port_id, PortState.CONFIGURED if known else PortState.DOWN, NOT_ATTACHED)

    def start_session(self, session: SessionSpec) -> SessionStatus:
        with self._lock:
            self.calls.append(("start_session", session))
            self.sessions[session.id] = session
            self._since[session.id] = time.time()
        self._emit(session.id)
        return self.session_status(session.id)

    def stop_session(self, session_id: int) -> SessionStatus:
        with self._lock:
            self.calls.append(("stop_session", session_id))
            known = self.sessions.pop(session_id, None) is not None
            self._since[session_id] = time.time()
        if known:
            self._emit(session_id)
        return self.session_status(session_id)

    def session_status(self, session_id: int) -> SessionStatus:
        with self._lock:
            return SessionStatus(
                session_id,
                SessionState.CONFIGURED,
                NOT_ATTACHED,
                self._since.get(session_id),
                tuple(self.topics.get(session_id, ())),
            )

    def remove_session(self, session_id: int) -> None:
        with self._lock:
            self.calls.append(("remove_session", session_id))
            self.sessions.pop(session_id, None)
            self.topics.pop(session_id, None)
            self._since.pop(session_id, None)

    def subscribe(self, session_id: int, topics: Sequence[str]) -> None:
        with self._lock:
            self.calls.append(("subscribe", (session_id, tuple(topics))))
            held = self.topics.setdefault(session_id, [])
            held.extend(t for t in topics if t not in held)

    def unsubscribe(self, session_id: int, topics: Sequence[str]) -> None:
        with self._lock:
            self.calls.append(("unsubscribe", (session_id, tuple(topics))))
            held = self.topics.get(session_id, [])
            self.topics[session_id] = [t for t in held if t not in set(topics)]
            if not self.topics[session_id]:
                del self.topics[session_id]

    def metrics(self) -> MetricsSnapshot:
        return MetricsSnapshot(time.time())

    def close(self) -> None:
        with self._lock:
            self.calls.append(("close", None))
            running = list(self.sessions)
        for session_id in running:
            self.stop_session(session_id)
        with self._lock:
            self.ports.clear()
            self.closed = True

    def _emit(self, session_id: int) -> None:
        sink = self._sink
        if sink is not None:
            sink(RuntimeEvent(session_id, "state", NOT_ATTACHED, {"state": "configured"}))
