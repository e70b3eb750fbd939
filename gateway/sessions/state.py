"""Session states, the transitions allowed between them, and the events that report them.

Every change of state goes through `StateMachine.move`, which refuses a transition the
table does not list (a bug, never an input error) and hands back the event to report, with
the reason: the control plane writes these to its session event log, so "why is this feed
in backoff" has an answer there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class State(StrEnum):
    NEW = "new"  # created, not started
    CONNECTING = "connecting"  # resolving, TCP, TLS, WebSocket handshake
    SUBSCRIBING = "subscribing"  # open; subscribe requests out, acks awaited
    STREAMING = "streaming"  # every subscribe request answered (or timed out)
    BACKOFF = "backoff"  # waiting before the next connection attempt
    STOPPING = "stopping"  # closing on request
    STOPPED = "stopped"
    FAILED = "failed"  # gave up (max attempts, bad configuration)


TERMINAL = frozenset({State.STOPPED, State.FAILED})

_ENDING = {State.STOPPING, State.FAILED}
TRANSITIONS: Mapping[State, frozenset[State]] = {
    State.NEW: frozenset({State.CONNECTING, State.STOPPED, *_ENDING}),
    State.CONNECTING: frozenset({State.SUBSCRIBING, State.BACKOFF, *_ENDING}),
    # An exchange's reconnect request goes straight back to connecting, without a wait.
    State.SUBSCRIBING: frozenset({State.STREAMING, State.BACKOFF, State.CONNECTING, *_ENDING}),
    State.STREAMING: frozenset({State.BACKOFF, State.CONNECTING, *_ENDING}),
    State.BACKOFF: frozenset({State.CONNECTING, *_ENDING}),
    State.STOPPING: frozenset({State.STOPPED}),
    State.STOPPED: frozenset(),
    State.FAILED: frozenset(),
}

#: How far along a connection is; a session with several connections reports the least.
PROGRESS: Mapping[State, int] = {
    State.BACKOFF: 0,
    State.NEW: 1,
    State.CONNECTING: 2,
    State.SUBSCRIBING: 3,
    State.STREAMING: 4,
}


class SessionStateError(RuntimeError):
    """A transition the state table does not allow: a bug in the session code."""


# ---- events ----------------------------------------------------------------------------
STATE = "state"  # a state transition; details: state, previous, connection
GAP = "gap"  # messages may have been lost (reconnect, sequence break); details: lost
SUBSCRIBE_ERROR = "subscribe_error"  # the exchange refused topics; details: topics, code
ERROR = "error"  # the exchange reported a problem that names no topic
NOTICE = "notice"  # the exchange asked us to reconnect, or an ack was late
UNPARSABLE_FRAMES = "unparsable"  # frames the dialect cannot parse began; details: sample


@dataclass(frozen=True)
class SessionEvent:
    """Something the control plane should log. `state` is the session's state after it;
    `connection` the index of the connection it concerns (None: the whole session)."""

    session_id: int
    kind: str
    reason: str
    state: State
    connection: int | None = None
    details: Mapping[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)


EventCallback = Callable[[SessionEvent], None]


class StateMachine:
    """One connection's state, moved only along TRANSITIONS."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self.state = State.NEW
        self.reason = "created"
        self.since = clock()
        self.history: list[tuple[State, str]] = []  # (state, reason), for tests and debugging

    def can_move(self, target: State) -> bool:
        return target in TRANSITIONS[self.state]

    def move(self, target: State, reason: str) -> State:
        """Go to target; returns the previous state. SessionStateError if not allowed."""
        if not self.can_move(target):
            raise SessionStateError(f"no transition {self.state} -> {target} ({reason})")
        previous = self.state
        self.state = target
        self.reason = reason
        self.since = self._clock()
        self.history.append((target, reason))
        del self.history[:-64]  # bounded: a session may flap for weeks
        return previous

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL
