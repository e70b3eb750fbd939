"""What the control plane asks of the dataplane: the `Runtime` protocol and its specs and statuses.

The API never touches stack state (it runs on other threads than the engines). It hands
the runtime plain, frozen specs of what the operator wants (ports, sessions, topics) and
reads back statuses and a metrics snapshot. `LiveRuntime` (gateway.runtime.live) implements
`Runtime` over the engines, sessions and hub; `DetachedRuntime` (gateway.runtime.detached)
implements it for a control plane with no dataplane.

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

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from gateway.sessions.config import (
    HeartbeatConfig,
    ReconnectPolicy,
    TlsOptions,
)

NOT_ATTACHED = "dataplane not attached"


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
class SessionSpec:
    """An upstream WebSocket session as the operator configured it (the stored row's
    heartbeat_timeout_s is both the ping and the dead-feed timeout)."""

    id: int
    name: str
    url: str
    dialect: str
    transport: str  # "dpdk" | "kernel"
    port_id: int | None
    tls: TlsOptions = field(default_factory=TlsOptions)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)


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
    #: UNPARSABLE_QUIET_S (gateway.sessions.config) without one.
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

    def port_counters(self, port_id: int) -> dict[str, Any] | None:
        """A port's live counters, for the dashboard: `engine` (its loop's and the C fast
        path's counters), `cpu_seconds` (the engine thread's), `nic` (rte_eth_stats) and
        `link`, each left out when its source is missing; None: no engine on the port (no
        DPDK in this runtime, or the port is not up)."""
        ...

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
