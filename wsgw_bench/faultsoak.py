"""`faultsoak`: sessions that come back after every fault, and gaps that are all announced
(issue #17: "a 30-minute fault soak (upstream killed and restarted every 20 s, link down 10 s
every 2 minutes, on both transports) ends with every session connected and every gap
counted").

What runs, all real (no mocks):

    lab namespace   the feed simulator (Binance dialect, a process of its own) on
                    0.0.0.0:SIM_PORT, so both veths reach it
    twin namespace  (`Lab(kernel_client=True)`) the kernel transport's OS sockets: the
                    runtime's session loop thread starts in it (`Lab.client_threads`)
    this process    the gateway: LiveRuntime + DpdkEngines as `wsgw serve` builds them (a
                    DPDK port on the lab's veth with net_af_packet, dpdk sessions on the
                    engine loop), two Binance sessions with the exchange sequence check on,
                    one over wsgw's stack ("dpdk") and one over OS sockets ("kernel"), into
                    the hub and its shared-memory ring
    child process   a ring reader keeping a `Ledger`: per session, messages, `$gap` records,
                    and every topic's simulator sequence (`sim_seq`) checked

Faults (`schedule`, fixed in advance): every --kill-every s the simulator gets SIGKILL and a
new one starts on the same port --restart-after s later (1 s: reconnects meanwhile are
refused, as while an exchange's server restarts); every --link-down-every s both peer-side
veths (the DPDK one and the twin's, inside the lab namespace) go down for --link-down-for s.
Kills fall on multiples of kill-every, so one can land inside a flap: both faults at once.

Verdict (`SessionResult.problems`): each session connected at the end and delivering since
the last fault; every sequence break the reader saw came after a gap record of its session
(no silent loss); the reader got every gap record the session counted; it was never lapped.
Also reported per session: connects, reconnects, connect failures, the exchange sequence
breaks the session found, messages delivered, messages lost where the sequence tells (a
jump after a gap, on a feed that kept running for the other session), feed restarts seen
(the sequence went back: a new simulator, loss unknown), and the time to recover from each
outage (faults that overlap are one outage): from its end (simulator ready, links up) to
the session's next message, sampled every TICK_S, and the share of the run it was
connected. `--out DIR` gets faultsoak.json too: the whole result, outage by outage.

Duration: `--duration S`, else 30 minutes (kill every 20 s, links down 10 s every 120 s);
--quick: 30 s (kills at 10 and 20 s, one 3 s flap at 15 s). Not part of `wsgw bench all`: it
judges reliability, not speed, and its quick mode runs in `make test`
(tests/bench/test_faultsoak.py); `make faultsoak` runs the long one.
"""

from __future__ import annotations

import bisect
import os
import statistics
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from functools import partial
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

from gateway.lab import Lab
from gateway.runtime import SessionState, SessionStatus
from gateway.simulator.process import start_simulator
from wsgw_bench.core import (
    BenchOptions,
    Measurement,
    report_run,
    scenario,
    scenario_log,
    unique_lab_name,
)
from wsgw_bench.soak import TOPICS, Child, sim_seq, wait_until

if TYPE_CHECKING:
    from gateway.hub import Hub
    from gateway.runtime.live import LiveRuntime

SCENARIO = "faultsoak"
SIM_PORT = 9470
RATE = 50.0  # simulator messages/s per topic
RING_CAPACITY = 16 << 20
TICK_S = 0.1  # how often session progress is sampled
#: From a kill to the new simulator's start: reconnects meet a closed port meanwhile (a
#: refused connect), as they do while an exchange's server restarts.
RESTART_AFTER_S = 1.0
SETTLE_S = 45.0  # after the last fault: time to come back (the backoff cap is 30 s)
KILL = "kill"
LINK = "link"
#: (session id, transport): one session per transport, each with its own way to the peer.
SESSIONS = ((1, "dpdk"), (2, "kernel"))
PORT_ID = 1

Log = Callable[[str], None]


# ---- the plan -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    duration: float  # seconds of faults, from the first messages on
    kill_every: float
    link_down_every: float
    link_down_for: float
    restart_after: float = RESTART_AFTER_S  # from the kill to the new simulator's start
    rate: float = RATE
    settle: float = SETTLE_S


def plan_for(options: BenchOptions) -> Plan:
    quick = options.quick
    return Plan(
        duration=options.duration or (30.0 if quick else 1800.0),
        kill_every=options.kill_every or (10.0 if quick else 20.0),
        link_down_every=options.link_down_every or (15.0 if quick else 120.0),
        link_down_for=options.link_down_for or (3.0 if quick else 10.0),
        restart_after=RESTART_AFTER_S if options.restart_after is None else options.restart_after,
    )


@dataclass(frozen=True)
class Fault:
    kind: str  # KILL or LINK
    at: float  # seconds after the start
    length: float  # links stay down this long; 0 for a kill (restart_after is the plan's)


def schedule(plan: Plan) -> list[Fault]:
    """Kills at every multiple of kill_every, flaps at every multiple of link_down_every,
    each within the duration (a flap ends before it)."""
    faults: list[Fault] = []
    for kind, every, length in (
        (KILL, plan.kill_every, 0.0),
        (LINK, plan.link_down_every, plan.link_down_for),
    ):
        k = 1
        while k * every + length < plan.duration:
            faults.append(Fault(kind, k * every, length))
            k += 1
    return sorted(faults, key=lambda f: (f.at, f.kind))


@dataclass(frozen=True)
class Outage:
    """Faults as they happened, overlapping ones merged: from the first fault's start to
    the last one's end (simulator ready again, links up again), seconds after the start."""

    kinds: tuple[str, ...]
    start: float
    end: float


def merge(done: list[tuple[str, float, float]]) -> list[Outage]:
    """(kind, start, end) of each fault made -> outages, overlapping faults as one."""
    out: list[Outage] = []
    for kind, start, end in sorted(done, key=lambda d: d[1]):
        if out and start <= out[-1].end:
            last = out[-1]
            out[-1] = Outage((*last.kinds, kind), last.start, max(last.end, end))
        else:
            out.append(Outage((kind,), start, end))
    return out


# ---- what the reader saw (in the consumer process) ---------------------------------------------
@dataclass
class FeedLedger:
    """One session's feed as the ring reader saw it."""

    messages: int = 0
    gaps: int = 0  # `$gap` records of the session
    lost: int = 0  # messages missing by the sequence after a gap (announced loss)
    restarts: int = 0  # a topic's sequence went back after a gap: a new feed, loss unknown
    silent: int = 0  # sequence breaks with no gap record since the topic's last message
    first_silent: str = ""
    last: dict[str, int] = field(default_factory=dict)
    after_gap: set[str] = field(default_factory=set)  # topics with a gap since their last

    def gap(self) -> None:
        self.gaps += 1
        self.after_gap.update(self.last)

    def message(self, topic: str, seq: int) -> None:
        self.messages += 1
        last = self.last.get(topic)
        self.last[topic] = seq
        announced = topic in self.after_gap
        self.after_gap.discard(topic)
        if last is None or seq == last + 1:
            return
        if not announced:
            self.silent += 1
            self.first_silent = self.first_silent or f"{topic}: {seq} after {last}"
        elif seq > last:
            self.lost += seq - last - 1
        else:
            self.restarts += 1

    def report(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k not in ("last", "after_gap")}


class Ledger:
    """Every session's FeedLedger, and how often the reader was lapped (it lost records of
    every session then: the next break of each topic counts as announced)."""

    def __init__(self) -> None:
        self.feeds: dict[int, FeedLedger] = {}
        self.lapped = 0

    def feed(self, session_id: int) -> FeedLedger:
        return self.feeds.setdefault(session_id, FeedLedger())

    def lap(self, lost: int) -> None:
        self.lapped += lost
        for feed in self.feeds.values():
            feed.after_gap.update(feed.last)

    def report(self) -> dict[str, Any]:
        return {
            "lapped": self.lapped,
            "sessions": {sid: feed.report() for sid, feed in self.feeds.items()},
        }


def ledger_consumer_main(conn: Connection, ring: str, filters: list[str]) -> None:
    from dataplane.ring import Gap, RingReader
    from gateway.hub.names import RING_GAP_TOPIC

    ledger = Ledger()
    with RingReader.attach(ring, topics=filters, start="latest") as reader:
        conn.send("ready")
        while not conn.poll():
            for event in reader.read_batch(timeout=0.2):
                if isinstance(event, Gap):
                    ledger.lap(event.lost)
                elif event.topic == RING_GAP_TOPIC:
                    ledger.feed(event.session_id).gap()
                elif (seq := sim_seq(event.payload)) is not None:
                    ledger.feed(event.session_id).message(event.topic, seq)
    conn.recv()
    conn.send(ledger.report())


# ---- session progress (this process) -----------------------------------------------------------
@dataclass(frozen=True)
class Progress:
    t: float  # seconds after the start
    connected: bool
    messages: int  # the session's data messages so far


def session_counters(runtime: LiveRuntime) -> dict[int, dict[str, float]]:
    """Each live session's counters (session_<name> metrics) by session id."""
    out: dict[int, dict[str, float]] = {}
    for metric in runtime.metrics().metrics:
        sid = metric.labels.get("session")
        if sid is not None and "topic" not in metric.labels:
            out.setdefault(int(sid), {})[metric.name.removeprefix("session_")] = metric.value
    return out


class Monitor:
    """Samples every session's state and message count each TICK_S on a thread of its own
    (a fault being made never delays it), keeps each one's last counters, and prints a
    progress line now and then."""

    def __init__(self, runtime: LiveRuntime, start: float, log: Log, progress_every: float) -> None:
        self.runtime = runtime
        self.start = start
        self.log = log
        self.progress_every = progress_every
        self.samples: dict[int, list[Progress]] = {sid: [] for sid, _ in SESSIONS}
        self.counters: dict[int, dict[str, float]] = {sid: {} for sid, _ in SESSIONS}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="faultsoak-monitor", daemon=True)

    def begin(self) -> Monitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _run(self) -> None:
        next_print = self.progress_every
        while not self._stop.wait(TICK_S):
            self.sample()
            t = time.monotonic() - self.start
            if t >= next_print:
                next_print += self.progress_every
                self.log(f"t={t:5.0f} s " + "; ".join(self.line(sid) for sid, _ in SESSIONS))

    def sample(self) -> None:
        t = time.monotonic() - self.start
        counters = session_counters(self.runtime)
        for sid, _ in SESSIONS:
            if sid in counters:  # a failed session's last counters stay
                self.counters[sid] = counters[sid]
            state = self.runtime.session_status(sid).state
            messages = int(self.counters[sid].get("messages", 0))
            self.samples[sid].append(Progress(t, state is SessionState.CONNECTED, messages))

    def line(self, sid: int) -> str:
        c = self.counters[sid]
        state = self.runtime.session_status(sid).state
        transport = dict(SESSIONS)[sid]
        return (
            f"{transport} {state} msgs {c.get('messages', 0):.0f} reconnects "
            f"{c.get('reconnects', 0):.0f} gaps {c.get('gaps', 0):.0f}"
        )

    def settle(self, since: float, what: str, timeout: float) -> None:
        """Wait until every session delivers again since `since` or has failed (a failed
        session never comes back); judged at the end, so a timeout is only logged."""

        def settled() -> bool:
            return all(
                self.delivering_since(sid, since)
                or self.runtime.session_status(sid).state is SessionState.FAILED
                for sid, _ in SESSIONS
            )

        try:
            wait_until(settled, what, timeout)
        except RuntimeError as exc:
            self.log(str(exc))

    def delivering_since(self, sid: int, since: float) -> bool:
        """Connected and with messages counted after `since` (seconds after the start)."""
        return recovery(self.samples[sid], since, float("inf")) is not None


def recovery(samples: list[Progress], end: float, limit: float) -> float | None:
    """Seconds from `end` (an outage's) to the first sample after it, no later than
    `limit`, that is connected and counts more messages than the last one at `end`."""
    times = [s.t for s in samples]
    i = bisect.bisect_right(times, end)
    base = samples[i - 1].messages if i else 0
    for s in samples[i:]:
        if s.t > limit:
            break
        if s.connected and s.messages > base:
            return s.t - end
    return None


# ---- the faults ---------------------------------------------------------------------------------
class Upstream:
    """The feed simulator in the lab's namespace on 0.0.0.0:SIM_PORT, restarted at will."""

    def __init__(self, lab: Lab, rate: float) -> None:
        self.lab = lab
        self.rate = rate
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Upstream:
        self.proc = start_simulator(self.lab, SIM_PORT, self.rate, host="0.0.0.0")  # noqa: S104
        return self

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait()
            if proc.stdout is not None:
                proc.stdout.close()


def set_peer_links(lab: Lab, state: str) -> None:
    """Both peer-side veths of the lab (its own namespace only) `up` or `down`."""
    for iface in (lab.peer_if, lab.peer_client_if):
        lab.exec(["ip", "link", "set", iface, state])


def make_faults(
    plan: Plan, lab: Lab, upstream: Upstream, start: float, log: Log
) -> list[tuple[str, float, float]]:
    """Run the schedule until the duration is over; (kind, start, end) of each fault made."""
    actions: list[tuple[float, str]] = []
    for f in schedule(plan):
        if f.kind == KILL:
            actions.append((f.at, KILL))
        else:
            actions += [(f.at, "down"), (f.at + f.length, "up")]
    done: list[tuple[str, float, float]] = []
    down_at = 0.0
    for at, what in sorted(actions):
        time.sleep(max(0.0, start + at - time.monotonic()))
        t0 = time.monotonic() - start
        if what == KILL:
            upstream.kill()
            time.sleep(plan.restart_after)
            upstream.start()
            t1 = time.monotonic() - start
            done.append((KILL, t0, t1))
            log(f"t={t0:5.1f} s simulator killed, a new one ready after {t1 - t0:.2f} s")
        elif what == "down":
            set_peer_links(lab, "down")
            down_at = t0
            log(f"t={t0:5.1f} s peer links down")
        else:
            set_peer_links(lab, "up")
            done.append((LINK, down_at, time.monotonic() - start))
            log(f"t={t0:5.1f} s peer links up")
    time.sleep(max(0.0, start + plan.duration - time.monotonic()))
    return done


# ---- results --------------------------------------------------------------------------------
@dataclass(frozen=True)
class SessionResult:
    transport: str
    state: str  # the runtime's, at the end
    reason: str
    connects: int
    reconnects: int
    connect_failures: int
    gaps: int  # gap events the session counted (reconnects and sequence breaks)
    sequence_gaps: int  # exchange sequence breaks the session found
    messages: int  # data messages the session handed to the hub
    delivered: int  # data messages the ring reader got
    gaps_seen: int  # `$gap` records the ring reader got
    lost: int  # messages missing by the sequence after a gap
    restarts: int  # feed restarts the reader saw after a gap (loss unknown)
    silent: int  # sequence breaks without a gap before them
    first_silent: str
    #: Per outage, seconds from its end to the next message whatever came between (None:
    #: none before the run ended); late: how many of them came after the next outage began.
    recoveries: tuple[float | None, ...]
    late_recoveries: int
    connected_share: float  # of the progress samples (every TICK_S), connected ones
    gap_reasons: tuple[tuple[str, int], ...]  # the session's gap events by reason, most first

    @property
    def recovered(self) -> list[float]:
        return [r for r in self.recoveries if r is not None]

    @property
    def max_recovery(self) -> float:
        return max(self.recovered, default=float("nan"))

    def problems(self) -> list[str]:
        out: list[str] = []
        who = f"{self.transport} session"
        if self.state != "connected":
            out.append(f"{who} {self.state} at the end ({self.reason})")
        elif self.recoveries and self.recoveries[-1] is None:
            out.append(f"{who} delivered nothing after the last outage")
        if self.silent:
            out.append(
                f"{who}: {self.silent} sequence breaks without a gap (first: {self.first_silent})"
            )
        if self.gaps_seen != self.gaps:
            out.append(f"{who} counted {self.gaps} gaps, the reader saw {self.gaps_seen}")
        if not self.delivered:
            out.append(f"{who}: the reader got no message")
        return out

    def as_dict(self) -> dict[str, Any]:
        worst = self.max_recovery if self.recovered else None  # JSON has no NaN
        return {**asdict(self), "max_recovery_s": worst, "ok": not self.problems()}


@dataclass(frozen=True)
class Result:
    plan: Plan
    elapsed: float
    faults: tuple[tuple[str, float, float], ...]
    outages: tuple[Outage, ...]
    sessions: tuple[SessionResult, ...]
    lapped: int

    def problems(self) -> list[str]:
        out = [p for s in self.sessions for p in s.problems()]
        if self.lapped:
            out.append(f"the ring reader was lapped ({self.lapped} records): checks incomplete")
        return out

    @property
    def ok(self) -> bool:
        return not self.problems()

    def session(self, transport: str) -> SessionResult:
        return next(s for s in self.sessions if s.transport == transport)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "problems": self.problems(),
            "plan": asdict(self.plan),
            "elapsed_s": self.elapsed,
            "kills": sum(1 for kind, _, _ in self.faults if kind == KILL),
            "link_flaps": sum(1 for kind, _, _ in self.faults if kind == LINK),
            "outages": [asdict(o) for o in self.outages],
            "lapped": self.lapped,
            "sessions": [s.as_dict() for s in self.sessions],
        }


def _session_result(
    transport: str,
    status: SessionStatus,
    counters: dict[str, float],
    seen: dict[str, Any],
    recoveries: list[float | None],
    late_recoveries: int,
    samples: list[Progress],
    gap_reasons: Counter[str],
) -> SessionResult:
    def count(name: str) -> int:
        return int(counters.get(name, 0))

    return SessionResult(
        transport=transport,
        state=str(status.state),
        reason=status.reason or "",
        connects=count("connects"),
        reconnects=count("reconnects"),
        connect_failures=count("connect_failures"),
        gaps=count("gaps"),
        sequence_gaps=count("sequence_gaps"),
        messages=count("messages"),
        delivered=int(seen.get("messages", 0)),
        gaps_seen=int(seen.get("gaps", 0)),
        lost=int(seen.get("lost", 0)),
        restarts=int(seen.get("restarts", 0)),
        silent=int(seen.get("silent", 0)),
        first_silent=str(seen.get("first_silent", "")),
        recoveries=tuple(recoveries),
        late_recoveries=late_recoveries,
        connected_share=sum(p.connected for p in samples) / max(len(samples), 1),
        gap_reasons=tuple(gap_reasons.most_common()),
    )


# ---- the run --------------------------------------------------------------------------------
def dpdk_runtime(
    undo: ExitStack, lab: Lab, ring_name: str, capacity: int, session_config: Any
) -> tuple[Hub, LiveRuntime]:
    """A hub on a new ring and a LiveRuntime with DPDK engines, its session loop in the lab's
    client threads (kernel sockets in the twin); undo closes the runtime, then the hub."""
    from dataplane.ring import RingWriter
    from gateway.hub import Hub
    from gateway.runtime.engines import DpdkEngines
    from gateway.runtime.live import LiveRuntime
    from gateway.settings import Settings

    hub = Hub(ring=RingWriter.create(ring_name, capacity, replace=True))
    undo.callback(hub.close)
    settings = Settings()
    with lab.client_threads():  # the session loop thread: kernel sockets in the twin
        runtime = LiveRuntime(
            hub,
            engine_factory=lambda: DpdkEngines(settings),
            session_config=session_config,
            hub=hub,
        )
    undo.callback(runtime.close)
    return hub, runtime


def start_binance(
    runtime: LiveRuntime,
    sid: int,
    name: str,
    url: str,
    transport: str,
    topics: Sequence[str],
    port_id: int,
) -> None:
    """Session sid on the simulator's binance stream at url over transport (a dpdk one on
    the port port_id), subscribed to topics."""
    from gateway.runtime import SessionSpec

    runtime.subscribe(sid, list(topics))
    port = port_id if transport == "dpdk" else None
    runtime.start_session(SessionSpec(sid, name, url, "binance", transport, port))


def stop_sessions(runtime: LiveRuntime, sids: Sequence[int]) -> None:
    """Stop the sessions sids and wait until each is stopped (or failed)."""
    for sid in sids:
        runtime.stop_session(sid)
    ended = (SessionState.STOPPED, SessionState.FAILED)
    wait_until(
        lambda: all(runtime.session_status(sid).state in ended for sid in sids),
        "the sessions to stop",
    )


def run_faultsoak(plan: Plan, lab_name: str, log: Log = print) -> Result:
    """The whole run (module docstring); everything it made is gone when it returns or
    raises, Ctrl-C included."""
    from gateway.hub import ring_topics
    from gateway.runtime import PortSpec, RuntimeEvent
    from gateway.sessions import GAP, SessionConfig

    lab = Lab(lab_name, kernel_client=True)
    ring_name = f"wsgw-faultsoak{os.getpid()}-messages"
    upstream = Upstream(lab, plan.rate)
    gap_reasons: dict[int, Counter[str]] = {sid: Counter() for sid, _ in SESSIONS}

    def count_gap(event: RuntimeEvent) -> None:
        if event.kind == GAP and event.session_id in gap_reasons:
            gap_reasons[event.session_id][event.reason or ""] += 1

    # Undone in reverse order however the block ends, each step even when one before fails.
    with ExitStack() as undo:
        lab.down()
        undo.callback(lab.down)
        lab.up()
        undo.callback(upstream.kill)
        upstream.start()
        session_config = partial(SessionConfig.from_spec, sequence_check=True)
        _, runtime = dpdk_runtime(undo, lab, ring_name, RING_CAPACITY, session_config)
        runtime.set_event_sink(count_gap)
        runtime.port_up(
            PortSpec(PORT_ID, "faultsoak", lab.vdev, lab.gw_ip, lab.netmask, None, 1500)
        )
        filters = sorted({f for sid, _ in SESSIONS for f in ring_topics(sid, list(TOPICS))})
        consumer = Child(ledger_consumer_main, ring_name, filters)
        undo.callback(consumer.close)
        hosts = {"dpdk": lab.peer_ip, "kernel": lab.peer_client_ip}
        for sid, transport in SESSIONS:
            url = f"ws://{hosts[transport]}:{SIM_PORT}/binance/stream"
            start_binance(runtime, sid, f"faultsoak-{transport}", url, transport, TOPICS, PORT_ID)
        start = time.monotonic()
        monitor = Monitor(runtime, start, log, max(10.0, plan.duration / 20)).begin()
        undo.callback(monitor.stop)
        monitor.settle(0.0, "the first messages of every session", 20.0)
        log(
            f"{plan.duration:.0f} s: kill every {plan.kill_every:g} s, links down "
            f"{plan.link_down_for:g} s every {plan.link_down_every:g} s, "
            f"{plan.rate * len(TOPICS):.0f} msg/s per session, lab {lab.name}"
        )
        done = make_faults(plan, lab, upstream, start, log)
        outages = merge(done)
        last_end = outages[-1].end if outages else 0.0
        monitor.settle(last_end, "every session back after the last fault", plan.settle)
        monitor.stop()
        monitor.sample()
        elapsed = time.monotonic() - start
        statuses = {sid: runtime.session_status(sid) for sid, _ in SESSIONS}
        stop_sessions(runtime, [sid for sid, _ in SESSIONS])
        time.sleep(0.5)  # the last records reach the reader
        seen = consumer.results()
    sessions = []
    for sid, transport in SESSIONS:
        limits = [o.start for o in outages[1:]] + [elapsed]
        recoveries = [recovery(monitor.samples[sid], o.end, elapsed) for o in outages]
        late = sum(
            1
            for o, r, limit in zip(outages, recoveries, limits, strict=True)
            if r is None or o.end + r > limit
        )
        sessions.append(
            _session_result(
                transport,
                statuses[sid],
                monitor.counters[sid],
                seen["sessions"].get(sid, {}),
                recoveries,
                late,
                monitor.samples[sid],
                gap_reasons[sid],
            )
        )
    return Result(plan, elapsed, tuple(done), tuple(outages), tuple(sessions), seen["lapped"])


def summary(result: Result) -> str:
    """The verdict and a line per session, for the terminal."""
    d = result.as_dict()
    lines = [
        "verdict: "
        + (
            "OK: every session connected, every gap announced"
            if result.ok
            else "NOT OK: " + "; ".join(result.problems())
        ),
        f"{d['kills']} kills, {d['link_flaps']} link flaps ({result.plan.link_down_for:g} s), "
        f"{len(result.outages)} outages in {result.elapsed:.0f} s",
    ]
    for s in result.sessions:
        recovered = s.recovered
        median = statistics.median(recovered) if recovered else float("nan")
        lines.append(
            f"  {s.transport:6} {s.state:10} connects {s.connects} reconnects {s.reconnects} "
            f"failures {s.connect_failures} gaps {s.gaps} (reader {s.gaps_seen}, sequence "
            f"{s.sequence_gaps}) delivered {s.delivered} lost {s.lost} restarts {s.restarts} "
            f"silent {s.silent} recovery max {s.max_recovery:.2f} s median {median:.2f} s "
            f"({s.late_recoveries} after the next fault began), connected "
            f"{100 * s.connected_share:.0f} % of the time"
        )
        if s.gap_reasons:
            lines.append(
                "    gap reasons: " + "; ".join(f"{n} x {why}" for why, n in s.gap_reasons[:5])
            )
    return "\n".join(lines)


def _measurements(result: Result) -> list[Measurement]:
    out: list[Measurement] = []
    problems = result.problems()
    out.append(
        Measurement(
            SCENARIO,
            "verdict (1 = ok)",
            "gateway",
            "",
            True,
            [1.0 if result.ok else 0.0],
            note="; ".join(problems)
            or f"every session connected at the end, every gap announced; "
            f"{result.elapsed:.0f} s, {len(result.faults)} faults, {len(result.outages)} outages",
        )
    )
    for s in result.sessions:
        who = f"{s.transport} session"
        figures: list[tuple[str, str, bool, float, str]] = [
            (
                "connected at the end (1 = yes)",
                "",
                True,
                float(s.state == "connected"),
                s.reason,
            ),
            ("connects", "count", True, s.connects, ""),
            ("reconnects", "count", True, s.reconnects, ""),
            ("connect failures", "count", False, s.connect_failures, ""),
            (
                "gaps counted by the session",
                "count",
                False,
                s.gaps,
                f"{s.sequence_gaps} of them exchange sequence breaks",
            ),
            ("gap records the reader saw", "count", False, s.gaps_seen, ""),
            ("sequence breaks without a gap", "count", False, s.silent, s.first_silent),
            (
                "messages delivered to the reader",
                "count",
                True,
                s.delivered,
                f"{s.messages} handed to the hub",
            ),
            (
                "messages lost, by the sequence",
                "count",
                False,
                s.lost,
                f"announced by a gap; {s.restarts} feed restarts seen (loss unknown)",
            ),
            (
                "recovery after an outage, max",
                "s",
                False,
                s.max_recovery,
                f"from an outage's end to the next message; {s.late_recoveries} of "
                f"{len(s.recoveries)} outages recovered only after the next began",
            ),
            ("time connected", "%", True, 100 * s.connected_share, f"sampled every {TICK_S} s"),
        ]
        for metric, unit, higher, value, note in figures:
            out.append(Measurement(SCENARIO, metric, who, unit, higher, [float(value)], note=note))
    return out


@scenario(
    SCENARIO,
    "sessions through upstream kills and link flaps, dpdk and kernel: all back, every gap told",
    needs_root=True,
    in_all=False,
)
def faultsoak(options: BenchOptions) -> list[Measurement]:
    log = scenario_log(SCENARIO)
    result = run_faultsoak(plan_for(options), unique_lab_name(options, "fs"), log)
    # the whole result, every outage with its recoveries
    report_run(options, SCENARIO, summary(result), result.as_dict(), log, allow_nan=False)
    return _measurements(result)
