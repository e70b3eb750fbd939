"""LiveRuntime: the Runtime (gateway.runtime.protocol) that really runs upstream sessions.

Sessions run on an asyncio loop in a thread of their own ("wsgw-sessions"). The API's
threads never wait on it: start/stop/subscribe/unsubscribe hand a coroutine to that loop
(`run_coroutine_threadsafe`) and return; status and metrics are read from a table the
loops keep up to date under a lock. A session with transport "dpdk" and DPDK ports need
the engine, which plugs in through `engine_factory` (see `EngineHook`), so this runtime
refuses them (409) until one is given. When the engine runs an event loop on its own
thread (`EngineHook.loop_for`), the port's dpdk sessions run on that loop instead: the
stack, the WebSocket and the session share one thread. Commands still all go to the
runtime's loop, one at a time per session in the order the API made them, and reach a
session on its own loop from there (`_on`).

    runtime = LiveRuntime(hub)                 # hub: publish_batch / publish_gap
    control = ControlPlane(settings, runtime=runtime)
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, TypeVar
from urllib.parse import urlsplit

from dataplane.transports.base import parse_ws_url
from dataplane.transports.http import get_threadsafe
from gateway.groups.feed import GroupRouter, GroupSpec
from gateway.runtime import protocol as rt
from gateway.sessions import (
    STATE,
    MessageSink,
    NullSink,
    SessionConfig,
    SessionConfigError,
    SessionEvent,
    State,
    UpstreamSession,
)

if TYPE_CHECKING:
    from dataplane.engine import Engine

log = logging.getLogger("wsgw.runtime")
T = TypeVar("T")

NO_ENGINE = "dpdk ports need the engine; run with an engine"
#: How long a command waits for an engine loop to run its part before giving up on it.
UNRESPONSIVE_S = 30.0
LOOP_GONE = "the engine loop of its port is gone (the port went down or its thread stopped)"
NO_ENGINE_SESSION = "dpdk sessions need the engine; run with an engine, or use the kernel transport"
STOPPED_GAP_REASON = (
    "stopped: the session was not connected; messages published meanwhile were missed"
)

#: A session's own state -> the control plane's coarser one (the fine state is in reason).
RUNTIME_STATE: dict[State, rt.SessionState] = {
    State.NEW: rt.SessionState.CONNECTING,
    State.CONNECTING: rt.SessionState.CONNECTING,
    State.SUBSCRIBING: rt.SessionState.CONNECTED,
    State.STREAMING: rt.SessionState.CONNECTED,
    State.BACKOFF: rt.SessionState.RECONNECTING,
    State.STOPPING: rt.SessionState.STOPPING,
    State.STOPPED: rt.SessionState.STOPPED,
    State.FAILED: rt.SessionState.FAILED,
}

#: Counters exported per session: (counter name, metric kind, help).
_COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("messages", "counter", "Data messages received and handed to the hub"),
    ("bytes", "counter", "Payload bytes of every message received"),
    ("control_messages", "counter", "Acks, errors, heartbeats and notices received"),
    ("batches", "counter", "Bursts read from the connection"),
    ("gaps", "counter", "Gap events (reconnects, sequence breaks)"),
    ("reconnects", "counter", "Established connections lost and re-opened"),
    ("connects", "counter", "Successful opening handshakes"),
    ("connect_failures", "counter", "Connection attempts that failed"),
    ("subscribe_requests", "counter", "Subscribe and unsubscribe requests sent"),
    ("subscribe_errors", "counter", "Subscribe requests the exchange refused"),
    ("heartbeats", "counter", "Exchange heartbeats and keepalive answers"),
    ("pings_sent", "counter", "WebSocket pings sent"),
    ("sequence_gaps", "counter", "Breaks in the exchange's sequence numbers"),
    ("fed_messages", "counter", "Data messages the C feed path wrote to the ring (of messages)"),
    ("feed_stops", "counter", "Times the C feed path handed the stream back to Python"),
    ("unparsable", "counter", "Frames the session's dialect could not parse (dropped)"),
    ("sink_refused", "counter", "Data messages the hub raised on (lost, told as a gap)"),
)


class EngineHook(Protocol):
    """What LiveRuntime needs from the DPDK side; whoever owns the engine implements it
    and passes a factory (called once, on the first port or dpdk session)."""

    def status(self) -> rt.EngineStatus: ...

    def port_up(self, port: rt.PortSpec) -> rt.PortStatus: ...

    def port_down(self, port_id: int) -> None: ...

    def port_status(self, port_id: int) -> rt.PortStatus: ...

    def engine_for(self, port_id: int | None) -> Engine:
        """The engine `connect_dpdk(url, engine=...)` takes, for a session that
        leaves through port_id; RuntimeRefusedError when that port is not up."""
        ...

    def loop_for(self, port_id: int | None) -> asyncio.AbstractEventLoop | None:
        """The event loop such a session must run on (the engine's own), or None: the
        runtime's loop (the engine polls on a thread of its own and hands over)."""
        ...

    def close(self) -> None: ...


EngineFactory = Callable[[], EngineHook]
ConfigFactory = Callable[[rt.SessionSpec], SessionConfig]


class LiveRuntime:
    """Upstream sessions on a loop thread, behind the thread-safe Runtime interface."""

    def __init__(
        self,
        sink: MessageSink | None = None,
        *,
        engine_factory: EngineFactory | None = None,
        session_config: ConfigFactory | None = None,
        dialects: Sequence[str] | None = None,
        stop_timeout_s: float = 5.0,
        per_topic_metrics: bool = True,
        hub: Any = None,
        groups_in_c: bool = True,
    ) -> None:
        """sink: the hub. session_config: SessionSpec -> SessionConfig (default
        `SessionConfig.from_spec`; tests shorten timeouts here). per_topic_metrics: one
        series per (session, topic); turn off for sessions with thousands of topics.
        groups_in_c: feed groups arbitrated in C where they can be (gateway.groups.cgroup);
        False keeps every group on the Python path (the reference)."""
        self._sink: MessageSink = sink if sink is not None else NullSink()
        #: The fan-out hub /v1/stream reads (closed with the runtime: streams end with 1001).
        self.hub = hub
        self._engine_factory = engine_factory
        self._engine: EngineHook | None = None
        self._session_config: ConfigFactory = session_config or SessionConfig.from_spec
        self._dialects = tuple(dialects) if dialects is not None else rt.known_dialects()
        self._stop_timeout = stop_timeout_s
        self._per_topic = per_topic_metrics
        self._lock = threading.Lock()
        self._event_sink: rt.EventSink | None = None
        self._running: set[int] = set()  # started and not stopped (the wanted state)
        self._topics: dict[int, dict[str, None]] = {}
        self._status: dict[int, rt.SessionStatus] = {}
        self._sessions: dict[int, UpstreamSession] = {}  # written on the loop, under the lock
        self._live_on: dict[UpstreamSession, asyncio.AbstractEventLoop] = {}  # with _sessions
        # One lock per session, on the runtime's loop: its commands run in the API's order.
        self._command_locks: dict[int, asyncio.Lock] = {}
        self._closing: set[asyncio.Task[None]] = set()  # stops nobody awaits (kept alive)
        self._resume_gaps: dict[int, str] = {}  # session -> gap reason for its next start
        # Deleted sessions: their late events are dropped (ids are never reused).
        self._removed: set[int] = set()
        self._closed = False
        self._loop = asyncio.new_event_loop()
        self._loop_ready = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, name="wsgw-sessions", daemon=True)
        self._thread.start()
        self._loop_ready.wait()
        # Feed groups: their legs publish through the group's arbiter (gateway.groups.feed).
        self._groups = GroupRouter(self._sink, self._loop, c_path=groups_in_c)

    # ---- Runtime: engine and ports ------------------------------------------------------
    def engine_status(self) -> rt.EngineStatus:
        if self._closed:
            return rt.EngineStatus(rt.EngineState.DETACHED, "runtime closed")
        if not self._thread.is_alive():
            return rt.EngineStatus(rt.EngineState.FAILED, "the session loop thread died")
        with self._lock:
            details: dict[str, Any] = {"sessions": len(self._sessions), "loop": "running"}
            engine = self._engine
        if engine is not None:
            status = engine.status()
            return rt.EngineStatus(status.state, status.reason, {**details, **status.details})
        reason = "kernel transport only: no DPDK engine"
        return rt.EngineStatus(rt.EngineState.RUNNING, reason, {**details, "dpdk": False})

    def dialects(self) -> Sequence[str]:
        return self._dialects

    def set_event_sink(self, sink: rt.EventSink | None) -> None:
        self._event_sink = sink

    def port_up(self, port: rt.PortSpec) -> rt.PortStatus:
        status = self._engine_hook(NO_ENGINE).port_up(port)
        self._publish_engine_cpu()
        return status

    def port_down(self, port_id: int) -> None:
        if self._engine is not None:
            self._engine.port_down(port_id)
            self._publish_engine_cpu()
            # Sessions that ran on that port's engine loop went with it: say so.
            self._reap_if_any_loop_closed(wait=self._stop_timeout)

    def port_status(self, port_id: int) -> rt.PortStatus:
        if self._engine is None:
            return rt.PortStatus(port_id, rt.PortState.DOWN, "no DPDK engine in this runtime")
        return self._engine.port_status(port_id)

    def port_counters(self, port_id: int) -> dict[str, Any] | None:
        if self._engine is None:
            return None
        try:
            engine = self._engine.engine_for(port_id)
        except rt.RuntimeRefusedError:  # the port is not up
            return None
        out: dict[str, Any] = {"cpu_seconds": engine.cpu_seconds()}
        counters = {
            k: v
            for k, v in engine.snapshot().items()
            if isinstance(v, int | float) and not isinstance(v, bool) and k != "at"
        }
        if counters:  # {} until the engine loop's first pass
            out["engine"] = counters
        port = engine.port
        if port is not None:
            try:
                out["nic"] = dict(port.stats())
                out["link"] = dict(port.link())
            except Exception as exc:  # closed under us (the port going down)
                log.debug("port %s: NIC counters not read: %s", port_id, exc)
        return out

    def _publish_engine_cpu(self) -> None:
        """Write the CPU the feed's engine is pinned to into the ring's header, so a reader
        can sleep where the writer runs (Client.attach(cpu="engine"): a wake-up there is a
        context switch, not an IPI to another vCPU). Engines that are not DpdkEngines (test
        doubles) publish nothing."""
        ring = getattr(self.hub, "ring", None)
        pinned = getattr(self._engine, "pinned_cpu", None)
        if ring is not None and pinned is not None and not ring.closed:
            ring.set_writer_cpu(pinned())

    def _engine_hook(self, refusal: str) -> EngineHook:
        """The DPDK engine, made on first use. Hook for the engine owner: pass
        engine_factory=lambda: MyEngineHook(...) to LiveRuntime."""
        self._check_open()
        with self._lock:
            if self._engine is not None:
                return self._engine
            if self._engine_factory is None:
                raise rt.RuntimeRefusedError(refusal)
            try:
                self._engine = self._engine_factory()
            except rt.RuntimeRefusedError:
                raise
            except Exception as exc:
                raise rt.RuntimeRefusedError(f"the DPDK engine did not start: {exc}") from exc
            return self._engine

    # ---- Runtime: sessions --------------------------------------------------------------
    def start_session(self, session: rt.SessionSpec) -> rt.SessionStatus:
        """Validate now (RuntimeRefusedError for what cannot work), connect in the
        background; starting a running session returns its status."""
        self._check_open()
        try:
            config = self._session_config(session)
        except (SessionConfigError, ValueError) as exc:
            raise rt.RuntimeRefusedError(f"session {session.name or session.id}: {exc}") from None
        engine: Engine | None = None
        loop = self._loop
        if config.transport == "dpdk":
            hook = self._engine_hook(NO_ENGINE_SESSION)
            engine = hook.engine_for(session.port_id)
            loop = hook.loop_for(session.port_id) or self._loop
        sid = session.id
        self._reap_if_any_loop_closed(wait=self._stop_timeout)
        with self._lock:
            self._check_open()  # under the lock: close() clears _running under it too
            if sid in self._running and sid in self._status:
                return self._status[sid]
            before = self._status.get(sid)
            # Started again after remove_session: the delete's database step failed and
            # the row is still there (stopped), so this is a live session again, whose
            # events must reach the store and whose streams the hub must serve.
            revived = sid in self._removed
            self._removed.discard(sid)
            self._running.add(sid)
            status = rt.SessionStatus(
                sid, rt.SessionState.CONNECTING, "starting", time.time(), self._held(sid)
            )
            self._status[sid] = status
        if revived:
            for hub in {id(h): h for h in (self.hub, self._sink) if h is not None}.values():
                revive = getattr(hub, "revive_session", None)
                if callable(revive):
                    revive(sid)
        try:
            self._submit(self._start(sid, config, engine, loop))
        except rt.RuntimeRefusedError:
            with self._lock:  # closed meanwhile: nothing started
                self._running.discard(sid)
                if self._status.get(sid) is status:
                    if before is None:
                        del self._status[sid]
                    else:
                        self._status[sid] = before
            raise
        return status

    def mark_resumed(self, session_id: int, reason: str) -> None:
        """The next start of this session resumes a feed the gateway lost (a restore after
        a restart): its first connection publishes a gap with this reason, so consumers
        learn that what was published while the gateway was down is missing."""
        with self._lock:
            self._resume_gaps[session_id] = reason

    def stop_session(self, session_id: int) -> rt.SessionStatus:
        """Ask the session to close (1000) and return; its topics are kept."""
        self._check_open()
        with self._lock:
            if session_id not in self._running:
                return self._status_locked(session_id)
            self._running.discard(session_id)
            status = rt.SessionStatus(
                session_id,
                rt.SessionState.STOPPING,
                "stop requested",
                time.time(),
                self._held(session_id),
            )
            self._status[session_id] = status
        self._submit(self._stop(session_id))
        return status

    def remove_session(self, session_id: int) -> None:
        """Stop the session (if it runs), wait up to stop_timeout_s for it to have stopped,
        then forget it here and in the hub. When it does not stop in time, nothing is
        forgotten (it goes on stopping) and RuntimeRefusedError says so."""
        self._check_open()
        with self._lock:
            self._running.discard(session_id)
            if session_id in self._status:
                status = self._status[session_id]
                if status.state not in (rt.SessionState.STOPPED, rt.SessionState.FAILED):
                    self._status[session_id] = rt.SessionStatus(
                        session_id,
                        rt.SessionState.STOPPING,
                        "stopping: the session is being deleted",
                        time.time(),
                        self._held(session_id),
                    )
        given_up = threading.Event()
        future = self._submit(self._remove(session_id, given_up))
        try:
            future.result(timeout=self._stop_timeout)
            return
        except concurrent.futures.TimeoutError:
            pass
        with self._lock:  # _remove forgets under this lock only when not given up
            given_up.set()
            if session_id in self._removed:
                return
        raise rt.RuntimeRefusedError(
            f"session {session_id} did not stop within {self._stop_timeout:g} s: it is "
            "still stopping; delete it again once it has stopped"
        )

    def session_status(self, session_id: int) -> rt.SessionStatus:
        self._reap_if_any_loop_closed(wait=1.0)
        with self._lock:
            return self._status_locked(session_id)

    def subscribe(self, session_id: int, topics: Sequence[str]) -> None:
        """Hold topics for the session (started or not); a running one subscribes now."""
        self._check_open()
        with self._lock:
            held = self._topics.setdefault(session_id, {})
            held.update(dict.fromkeys(topics))
            running = session_id in self._running
        if running and topics:
            self._submit(self._apply(session_id, "subscribe", list(topics)))

    def unsubscribe(self, session_id: int, topics: Sequence[str]) -> None:
        self._check_open()
        with self._lock:
            held = self._topics.get(session_id, {})
            for topic in topics:
                held.pop(topic, None)
            if not held:
                self._topics.pop(session_id, None)
            running = session_id in self._running
        if running and topics:
            self._submit(self._apply(session_id, "unsubscribe", list(topics)))

    def resync_group_topic(self, session_id: int, topic: str) -> int:
        """A book of a session's topic resubscribes: the session to resubscribe, after its
        feed group (if it is a leg) made ready for the snapshot (GroupRouter.resync; the
        book manager, issue #21)."""
        with self._lock:
            return self._groups.resync(session_id, topic)

    def snapshot_fetcher(self, session_id: int) -> Callable[[str, float], bytes] | None:
        """fetch(url, timeout) -> body for the REST book snapshots of a running dpdk
        session: over the session's own engine, on its loop (issue #21: a venue the gateway
        reaches only through the DPDK port); None for the others, whose snapshots the book
        manager fetches through the kernel. The session's TLS settings (tls_ca_file,
        tls_verify, tls_server_name) apply to a snapshot from its own host; another host's
        certificate is checked against the system's CAs."""
        with self._lock:
            session = self._sessions.get(session_id)
            loop = self._live_on.get(session) if session is not None else None
        engine = session.engine if session is not None else None
        if session is None or loop is None or engine is None:
            return None
        tls = session.config.tls
        own_host = parse_ws_url(session.config.url).host

        def fetch(url: str, timeout: float) -> bytes:
            if urlsplit(url).hostname != own_host:
                return get_threadsafe(loop, url, timeout, engine=engine)
            return get_threadsafe(loop, url, timeout, engine=engine, ca_file=tls.ca_file,
                                  verify=tls.verify, server_hostname=tls.server_name)  # fmt: skip

        return fetch

    def metrics(self) -> rt.MetricsSnapshot:
        """Per-session counters (wsgw_dataplane_session_*{session=...}), read without
        waiting on the loop: counters are copied atomically (SessionCounters.snapshot)."""
        self._reap_if_any_loop_closed(wait=1.0)
        with self._lock:
            sessions = list(self._sessions.items())
        out: list[rt.Metric] = [
            rt.Metric("sessions_live", "gauge", float(len(sessions)), "Sessions with a task")
        ]
        for sid, session in sessions:
            labels = {"session": str(sid)}
            counters = session.counters.snapshot()
            for name, kind, text in _COUNTERS:
                out.append(rt.Metric(f"session_{name}", kind, float(counters[name]), text, labels))
            text = "Failed opens and lost connections, by kind (refused, reset, timeout, ...)"
            for kind, count in counters["failures"].items():
                kind_labels = {"session": str(sid), "kind": kind}
                out.append(
                    rt.Metric("session_failures", "counter", float(count), text, kind_labels)
                )
            rtt = counters["last_rtt_s"]
            if rtt is not None:
                text = "Round trip of the last answered WebSocket ping"
                out.append(rt.Metric("session_rtt_seconds", "gauge", float(rtt), text, labels))
            if self._per_topic:
                text = "Data messages received per topic"
                for topic, count in counters["topic_messages"].items():
                    topic_labels = {"session": str(sid), "topic": topic}
                    out.append(
                        rt.Metric(
                            "session_topic_messages", "counter", float(count), text, topic_labels
                        )
                    )
        samples = sorted(v for _, session in sessions for v in list(session.latency_ns))
        if samples:
            text = "In-gateway latency per burst: read from the upstream to handed to the hub"
            for q in (0.5, 0.9, 0.99):
                value = samples[min(int(q * len(samples)), len(samples) - 1)] / 1e9
                out.append(
                    rt.Metric("message_latency_seconds", "gauge", value, text, {"quantile": str(q)})
                )
        out += self._group_metrics()
        return rt.MetricsSnapshot(time.time(), tuple(out))

    # ---- feed groups (gateway.groups.feed) ---------------------------------------------
    def set_group(self, spec: GroupSpec) -> None:
        """Run a feed group (or run it anew, with a fresh arbiter, after a change). Legs
        started before take the group's path at their next batch; a running DPDK leg on
        the C feed path keeps it until its next start (the control plane restarts it)."""
        self._check_open()
        with self._lock:
            self._groups.set_group(spec)

    def remove_group(self, group_id: int) -> None:
        with self._lock:
            self._groups.remove_group(group_id)

    def group_figures(self, group_id: int) -> dict[str, Any] | None:
        """Per-leg figures of a running group (won, late, lag, live, state), None if none."""
        group = self._groups.groups.get(group_id)
        if group is None:
            return None
        return group.figures(self._leg_state)

    def _leg_state(self, sid: int) -> str:
        with self._lock:
            status = self._status.get(sid)
        return str(status.state) if status is not None else "stopped"

    def _group_metrics(self) -> list[rt.Metric]:
        out: list[rt.Metric] = []
        for group_id in list(self._groups.groups):
            figures = self.group_figures(group_id)
            if figures is None:
                continue
            labels = {"group": str(group_id)}
            for name, text in (
                ("delivered", "Messages the group published (first copies)"),
                ("gaps", "Gaps of the group: messages every leg missed"),
                ("lost", "Messages every leg missed (where the exchange's ids tell)"),
                ("duplicates", "Copies dropped: a leg brought a message another leg won"),
            ):
                out.append(
                    rt.Metric(f"group_{name}", "counter", float(figures[name]), text, labels)
                )
            cost = figures.get("arbitration_ns_per_frame")
            if cost is not None:  # a group arbitrated in C on the engine's path
                text = "Median cost of a frame on the engine's path (C identity, arbiter, staging)"
                out.append(
                    rt.Metric("group_arbitration_seconds", "gauge", cost / 1e9, text, labels)
                )
            for leg in figures["legs"]:
                leg_labels = {"group": str(group_id), "session": str(leg["session_id"])}
                text = "Messages this leg brought first"
                out.append(
                    rt.Metric("group_leg_won", "counter", float(leg["won"]), text, leg_labels)
                )
                text = "Copies this leg brought after another leg"
                out.append(
                    rt.Metric("group_leg_late", "counter", float(leg["late"]), text, leg_labels)
                )
                text = "Lag of the leg's late copies behind the winner"
                for q, key in (("0.5", "lag_p50_ns"), ("0.99", "lag_p99_ns")):
                    if leg[key] is not None:
                        out.append(
                            rt.Metric(
                                "group_leg_lag_seconds",
                                "gauge",
                                leg[key] / 1e9,
                                text,
                                {**leg_labels, "quantile": q},
                            )
                        )
                text = "1 while the arbiter waits for this leg (it is live), else 0"
                value = 1.0 if leg["live"] else 0.0
                out.append(rt.Metric("group_leg_live", "gauge", value, text, leg_labels))
                text = "The leg session's state (label), always 1"
                state_labels = {**leg_labels, "state": str(leg["state"])}
                out.append(rt.Metric("group_leg_state", "gauge", 1.0, text, state_labels))
        return out

    def sessions_snapshot(self) -> dict[int, dict[str, Any]]:
        """Each live session's full snapshot (state, connections, counters), taken on the
        loop it runs on; waits at most a second (for dashboards and debugging, not the hot
        API)."""
        try:
            future = self._submit(self._snapshots())
            result: dict[int, dict[str, Any]] = future.result(timeout=1.0)
        except (concurrent.futures.TimeoutError, RuntimeError, rt.RuntimeRefusedError):
            return {}
        return result

    def close(self) -> None:
        """Stop every session (close frames, bounded wait), then the loop and the engine."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._running.clear()
        future = asyncio.run_coroutine_threadsafe(self._stop_all(), self._loop)
        try:
            future.result(timeout=self._stop_timeout)
        except (concurrent.futures.TimeoutError, Exception):
            log.warning("sessions did not all stop within %.1f s", self._stop_timeout)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=self._stop_timeout)
        engine = self._engine
        if engine is not None:
            engine.close()
        if self.hub is not None:
            self.hub.close()

    # ---- internals (API side) -----------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise rt.RuntimeRefusedError("the runtime is closed")

    def _held(self, session_id: int) -> tuple[str, ...]:
        return tuple(self._topics.get(session_id, ()))

    def _status_locked(self, session_id: int) -> rt.SessionStatus:
        status = self._status.get(session_id)
        if status is None:
            return rt.SessionStatus(
                session_id, rt.SessionState.STOPPED, "not started", None, self._held(session_id)
            )
        session = self._sessions.get(session_id)
        return rt.SessionStatus(
            status.session_id,
            status.state,
            status.reason,
            status.since,
            self._held(session_id),
            session is not None and session.receiving_unparsable,
        )

    def _reap_if_any_loop_closed(self, *, wait: float) -> None:
        """A session whose loop closed (its port went down, its engine loop's thread
        died) is failed and forgotten on the runtime's loop (`_reap`), waiting up to
        `wait` seconds for that (a command in progress on it goes first)."""
        with self._lock:
            if not any(loop.is_closed() for loop in self._live_on.values()):
                return
        try:
            self._submit(self._reap()).result(timeout=wait)
        except (concurrent.futures.TimeoutError, rt.RuntimeRefusedError):
            log.warning("sessions of a closed engine loop not settled yet")

    def _submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the loop is closed
            coro.close()
            raise rt.RuntimeRefusedError("the runtime is closed") from None
        future.add_done_callback(_log_failure)
        return future

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._loop_ready.set)
        try:
            self._loop.run_forever()
        finally:
            self._finish_loop()

    def _finish_loop(self) -> None:
        loop = self._loop
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        loop.close()

    # ---- internals (the runtime's loop) ---------------------------------------------------
    def _command_lock(self, sid: int) -> asyncio.Lock:
        lock = self._command_locks.get(sid)
        if lock is None:
            lock = self._command_locks[sid] = asyncio.Lock()
        return lock

    async def _on(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, T],
        timeout: float = UNRESPONSIVE_S,
    ) -> T:
        """coro on `loop` (a session's own), awaited here; _LoopGone when that loop closed
        (its port went down) before or while it ran, or did not answer within `timeout`
        (blocked: coro stays queued there and runs if it ever wakes)."""
        if loop is self._loop:
            return await coro
        try:
            future = asyncio.run_coroutine_threadsafe(coro, loop)
        except RuntimeError:  # closed
            coro.close()
            raise _LoopGone from None
        waiting = asyncio.wrap_future(future)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            done, _ = await asyncio.wait({waiting}, timeout=min(1.0, max(left, 0.0)))
            if done:
                break
            if loop.is_closed():  # it went before it ran coro: nobody will answer
                future.cancel()
                if inspect.getcoroutinestate(coro) == inspect.CORO_CREATED:
                    coro.close()  # never started, never will: no "never awaited" warning
                raise _LoopGone
            if left <= 0:
                log.error("an engine loop did not answer within %.0f s", timeout)
                raise _LoopGone
        if future.cancelled():  # cancelled with its loop
            raise _LoopGone
        return future.result()

    async def _start(
        self,
        sid: int,
        config: SessionConfig,
        engine: Engine | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        async with self._command_lock(sid):
            with self._lock:
                if sid not in self._running or self._closed:
                    return  # stopped again before this ran; _stop settles the status
            try:
                await self._end_current(sid, "restarted")  # a restart: the old one first
                with self._lock:
                    if sid not in self._running or self._closed:
                        return
                    topics = list(self._topics.get(sid, ()))
                    # Taken after the old object ended: its end may have left one.
                    resume_gap = self._resume_gaps.pop(sid, None)
                await self._on(loop, self._create(sid, config, engine, resume_gap, topics))
            except _LoopGone:
                self._fail_start(sid, LOOP_GONE)
            except Exception as exc:  # a bug below: say so, never leave it "starting"
                log.exception("session %d did not start", sid)
                self._fail_start(sid, f"internal error: {exc!r}")

    def _fail_start(self, sid: int, reason: str) -> None:
        with self._lock:
            session = self._sessions.get(sid)
            if session is not None:
                self._forget_locked(sid, session)
            self._running.discard(sid)
            self._settle_locked(sid, rt.SessionState.FAILED, f"failed: {reason}")

    async def _create(
        self,
        sid: int,
        config: SessionConfig,
        engine: Engine | None,
        resume_gap: str | None,
        topics: list[str],
    ) -> None:
        """On the loop the session will run on: make it, register it, start it."""
        try:
            # A group's leg publishes through its arbiter: on the C feed path only where the
            # group is arbitrated in C (its feed joins the group: GroupRouter.feed_group).
            leg = self._groups.is_leg(sid) and not self._groups.is_c_leg(sid)
            session = UpstreamSession(
                sid,
                config,
                self._groups,
                engine=engine,
                resume_gap=resume_gap,
                feed_path="python" if leg else None,
            )
        except (SessionConfigError, ValueError) as exc:
            self._settle(sid, rt.SessionState.FAILED, f"failed: {exc}")
            self._forward(rt.RuntimeEvent(sid, STATE, str(exc), {"state": str(State.FAILED)}))
            return
        session.on_event = partial(self._on_event, session)
        with self._lock:
            self._sessions[sid] = session
            self._live_on[session] = asyncio.get_running_loop()
        try:
            session.subscribe(topics)
            session.start()
        except Exception:
            with self._lock:
                self._forget_locked(sid, session)
            # What it opened before failing closes (its own loop; nobody waits for it).
            task = asyncio.get_running_loop().create_task(session.stop("failed to start"))
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            raise

    async def _end_current(self, sid: int, reason: str) -> None:
        """The session's current object, if any, stops on its loop and is forgotten."""
        session = self._sessions.get(sid)
        if session is None:
            return
        try:
            loop = self._live_on.get(session)
            if loop is not None:
                await self._on(loop, session.stop(reason))
        except _LoopGone:
            pass  # its loop went (and its connections with it)
        finally:
            with self._lock:
                self._forget_locked(sid, session)

    async def _stop(self, sid: int) -> None:
        async with self._command_lock(sid):
            try:
                await self._end_current(sid, "stopped by the control plane")
            finally:
                with self._lock:
                    if sid not in self._running:
                        self._settle_locked(
                            sid, rt.SessionState.STOPPED, "stopped: stopped by request"
                        )

    async def _remove(self, sid: int, given_up: threading.Event) -> None:
        """Stop the session's current object (after any command in progress), then forget
        every trace of it, unless remove_session gave up waiting meanwhile."""
        async with self._command_lock(sid):
            await self._end_current(sid, "the session is being deleted")
            with self._lock:
                if given_up.is_set():
                    self._settle_locked(sid, rt.SessionState.STOPPED, "stopped: delete timed out")
                    return
                self._removed.add(sid)
                self._running.discard(sid)
                self._status.pop(sid, None)
                self._topics.pop(sid, None)
                self._resume_gaps.pop(sid, None)
                self._command_locks.pop(sid, None)
        for hub in {id(h): h for h in (self.hub, self._sink) if h is not None}.values():
            forget = getattr(hub, "forget_session", None)
            if callable(forget):
                forget(sid)

    async def _apply(self, sid: int, op: str, topics: list[str]) -> None:
        async with self._command_lock(sid):
            session = self._sessions.get(sid)
            loop = self._live_on.get(session) if session is not None else None
            if session is None or loop is None:
                return  # not connected yet: _start subscribes everything held
            with contextlib.suppress(_LoopGone):
                await self._on(
                    loop,
                    _call(session.subscribe if op == "subscribe" else session.unsubscribe, topics),
                )

    async def _stop_all(self) -> None:
        """Every session stops (the runtime is closing: nothing is wanted any more, so a
        command still queued finds nothing to do)."""

        async def end(sid: int) -> None:
            async with self._command_lock(sid):
                await self._end_current(sid, "runtime shutting down")

        sids = set(self._sessions) | set(self._command_locks)
        await asyncio.gather(*(end(sid) for sid in sids), return_exceptions=True)

    async def _snapshots(self) -> dict[int, dict[str, Any]]:
        with self._lock:
            live = [(sid, s, self._live_on.get(s)) for sid, s in self._sessions.items()]
        out: dict[int, dict[str, Any]] = {}
        for sid, session, loop in live:
            if loop is not None:
                with contextlib.suppress(_LoopGone):
                    out[sid] = await self._on(loop, _call(session.snapshot), timeout=1.0)
        return out

    async def _reap(self) -> None:
        """Sessions whose loop closed (their port went down) are forgotten; one still
        wanted is failed with the reason."""
        with self._lock:
            gone = [
                (sid, s)
                for sid, s in self._sessions.items()
                if self._live_on.get(s, self._loop).is_closed()
            ]
        for sid, session in gone:
            async with self._command_lock(sid):
                with self._lock:
                    if self._sessions.get(sid) is not session:
                        continue  # replaced meanwhile (its stop went through): not ours
                    self._forget_locked(sid, session)
                    if sid in self._running:
                        self._running.discard(sid)
                        self._settle_locked(sid, rt.SessionState.FAILED, f"failed: {LOOP_GONE}")

    def _forget_locked(self, sid: int, session: UpstreamSession) -> None:
        if self._sessions.get(sid) is session:
            del self._sessions[sid]
            owed = session.owed_gap
            if owed is not None:
                # It ended before a connection published its resume gap (a start that
                # never connected): the next start owes that one, whatever its reason.
                self._resume_gaps.setdefault(sid, owed)
            elif session.counters.connects:
                # Its feed ends here (stopped, failed, restarted): what the exchange sends
                # until the next start connects is missed, so that start publishes a gap, as
                # a reconnect does. A reason set already (a restore's, a takeover's) stays.
                self._resume_gaps.setdefault(sid, STOPPED_GAP_REASON)
        self._live_on.pop(session, None)

    def _on_event(self, session: UpstreamSession, event: SessionEvent) -> None:
        """A session's event: the status table (state events of the current session) and
        the control plane's sink, with the fine state and connection in the details."""
        sid = event.session_id
        if event.kind == STATE and event.state is not State.STREAMING:
            stopped = event.state in (State.STOPPING, State.STOPPED)
            self._groups.leg_down(sid, f"{event.state}: {event.reason}", stopped=stopped)
        if event.kind == STATE:
            with self._lock:
                current = self._sessions.get(sid) is session
                if current and (
                    sid in self._running or event.state in (State.STOPPING, State.STOPPED)
                ):
                    self._settle_locked(
                        sid, RUNTIME_STATE[event.state], f"{event.state}: {event.reason}"
                    )
                if current and event.state is State.FAILED:
                    self._running.discard(sid)
        details = {
            **event.details,
            "session_state": str(event.state),
            "connection": event.connection,
        }
        self._forward(rt.RuntimeEvent(sid, event.kind, event.reason, details, event.at))

    def _settle(self, sid: int, state: rt.SessionState, reason: str) -> None:
        with self._lock:
            self._settle_locked(sid, state, reason)

    def _settle_locked(self, sid: int, state: rt.SessionState, reason: str) -> None:
        self._status[sid] = rt.SessionStatus(sid, state, reason, time.time(), self._held(sid))
        if state is rt.SessionState.FAILED:
            self._running.discard(sid)

    def _forward(self, event: rt.RuntimeEvent) -> None:
        sink = self._event_sink
        if sink is None or event.session_id in self._removed:
            return  # a deleted session's late event belongs to no session
        try:
            sink(event)
        except Exception:
            log.exception("the event sink failed on %s", event)


def _log_failure(future: concurrent.futures.Future[Any]) -> None:
    if future.cancelled():
        return
    exc = future.exception()
    if exc is not None:
        log.error("session command failed: %r", exc, exc_info=exc)


__all__ = [
    "NO_ENGINE",
    "RUNTIME_STATE",
    "ConfigFactory",
    "EngineFactory",
    "EngineHook",
    "LiveRuntime",
]


class _LoopGone(Exception):
    """The loop a session ran on closed (its port went down, or its thread died)."""


async def _call(fn: Callable[..., T], *args: Any) -> T:
    """fn(*args) as a coroutine: to run a session's synchronous method on its loop."""
    return fn(*args)
