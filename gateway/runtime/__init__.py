"""The runtime: what the control plane asks of the dataplane, and what answers.

- protocol: the `Runtime` protocol, the specs the control plane hands it (ports, sessions)
  and the statuses and metrics it reads back;
- detached: `DetachedRuntime`, for a control plane with no dataplane in its process;
- live: `LiveRuntime`, upstream sessions on a loop thread, DPDK engines plugged in through
  its `EngineHook`;
- engines: `DpdkEngines`, that hook over the EAL, the ports and one engine per port;
- compose: `build_runtime`, the composition root `wsgw serve`, the demo and the tests use.
"""

from gateway.runtime.compose import build_runtime
from gateway.runtime.detached import DetachedRuntime
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import EngineHook, LiveRuntime
from gateway.runtime.protocol import (
    NOT_ATTACHED,
    EngineState,
    EngineStatus,
    EventSink,
    Metric,
    MetricsSnapshot,
    PortSpec,
    PortState,
    PortStatus,
    Runtime,
    RuntimeEvent,
    RuntimeRefusedError,
    SessionSpec,
    SessionState,
    SessionStatus,
    known_dialects,
)

__all__ = [
    "NOT_ATTACHED",
    "DetachedRuntime",
    "DpdkEngines",
    "EngineHook",
    "EngineState",
    "EngineStatus",
    "EventSink",
    "LiveRuntime",
    "Metric",
    "MetricsSnapshot",
    "PortSpec",
    "PortState",
    "PortStatus",
    "Runtime",
    "RuntimeEvent",
    "RuntimeRefusedError",
    "SessionSpec",
    "SessionState",
    "SessionStatus",
    "build_runtime",
    "known_dialects",
]
