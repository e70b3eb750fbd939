"""The runtime of a control plane with no dataplane in its process (the default of
`create_app` and `GatewayService` when given none; the API tests): it remembers the wanted
state, so a restart can be checked, and reports every session as `configured` with the
reason "dataplane not attached" instead of inventing connection states or counters."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from gateway.runtime import protocol as rt


class DetachedRuntime:
    """The runtime of a control plane without a dataplane: remembers, never pretends.

    It keeps the ports, sessions and topics it was handed (so tests can check what a
    restart restored) and reports them as configured, with the reason "dataplane not
    attached". Its metrics snapshot is empty: there are no packets to count.
    """

    def __init__(self, dialects: Sequence[str] | None = None) -> None:
        self._lock = threading.Lock()
        self._dialects = tuple(dialects) if dialects is not None else rt.known_dialects()
        self._sink: rt.EventSink | None = None
        self.ports: dict[int, rt.PortSpec] = {}
        self.sessions: dict[int, rt.SessionSpec] = {}
        self.topics: dict[int, list[str]] = {}
        self._since: dict[int, float] = {}
        #: Every call, in order, as (method, argument): what the control plane asked.
        self.calls: list[tuple[str, object]] = []
        self.closed = False

    def engine_status(self) -> rt.EngineStatus:
        return rt.EngineStatus(rt.EngineState.DETACHED, rt.NOT_ATTACHED)

    def dialects(self) -> Sequence[str]:
        return self._dialects

    def set_event_sink(self, sink: rt.EventSink | None) -> None:
        self._sink = sink

    def port_up(self, port: rt.PortSpec) -> rt.PortStatus:
        with self._lock:
            self.calls.append(("port_up", port))
            self.ports[port.id] = port
        return rt.PortStatus(port.id, rt.PortState.CONFIGURED, rt.NOT_ATTACHED)

    def port_down(self, port_id: int) -> None:
        with self._lock:
            self.calls.append(("port_down", port_id))
            self.ports.pop(port_id, None)

    def port_counters(self, port_id: int) -> dict[str, Any] | None:
        return None  # no engine: nothing counts

    def port_status(self, port_id: int) -> rt.PortStatus:
        with self._lock:
            known = port_id in self.ports
        return rt.PortStatus(
            port_id, rt.PortState.CONFIGURED if known else rt.PortState.DOWN, rt.NOT_ATTACHED
        )

    def start_session(self, session: rt.SessionSpec) -> rt.SessionStatus:
        with self._lock:
            self.calls.append(("start_session", session))
            self.sessions[session.id] = session
            self._since[session.id] = time.time()
        self._emit(session.id)
        return self.session_status(session.id)

    def stop_session(self, session_id: int) -> rt.SessionStatus:
        with self._lock:
            self.calls.append(("stop_session", session_id))
            known = self.sessions.pop(session_id, None) is not None
            self._since[session_id] = time.time()
        if known:
            self._emit(session_id)
        return self.session_status(session_id)

    def session_status(self, session_id: int) -> rt.SessionStatus:
        with self._lock:
            return rt.SessionStatus(
                session_id,
                rt.SessionState.CONFIGURED,
                rt.NOT_ATTACHED,
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

    def metrics(self) -> rt.MetricsSnapshot:
        return rt.MetricsSnapshot(time.time())

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
            sink(rt.RuntimeEvent(session_id, "state", rt.NOT_ATTACHED, {"state": "configured"}))
