"""The upstream session layer: exchange feeds held open over the kernel or DPDK transport.

`UpstreamSession` runs one feed (connect, subscribe, stream, reconnect with backoff) into a
`MessageSink` (the hub) and reports state changes as `SessionEvent`s; `SessionConfig` says
how. `gateway.runtime.LiveRuntime` runs sessions for the control plane.
"""

from gateway.sessions.backoff import Backoff
from gateway.sessions.config import (
    HeartbeatConfig,
    ReconnectPolicy,
    SessionConfig,
    SessionConfigError,
    TlsOptions,
)
from gateway.sessions.connect import recv_batch, system_resolve
from gateway.sessions.counters import SessionCounters
from gateway.sessions.liveness import Dead, Due, Liveness
from gateway.sessions.sequence import SequenceChecker, sequence_checker
from gateway.sessions.session import UpstreamSession, describe_failure
from gateway.sessions.sink import GapMark, MessageSink, NullSink, Published, RecordingSink
from gateway.sessions.state import (
    ERROR,
    GAP,
    NOTICE,
    STATE,
    SUBSCRIBE_ERROR,
    TRANSITIONS,
    UNPARSABLE_FRAMES,
    EventCallback,
    SessionEvent,
    SessionStateError,
    State,
    StateMachine,
)

__all__ = [
    "ERROR",
    "GAP",
    "NOTICE",
    "STATE",
    "SUBSCRIBE_ERROR",
    "TRANSITIONS",
    "UNPARSABLE_FRAMES",
    "Backoff",
    "Dead",
    "Due",
    "EventCallback",
    "GapMark",
    "HeartbeatConfig",
    "Liveness",
    "MessageSink",
    "NullSink",
    "Published",
    "ReconnectPolicy",
    "RecordingSink",
    "SequenceChecker",
    "SessionConfig",
    "SessionConfigError",
    "SessionCounters",
    "SessionEvent",
    "SessionStateError",
    "State",
    "StateMachine",
    "TlsOptions",
    "UpstreamSession",
    "describe_failure",
    "recv_batch",
    "sequence_checker",
    "system_resolve",
]
