"""`wsgw bench fleet` (issue #20): three `wsgw serve` nodes on a throwaway PostgreSQL
cluster, N kernel sessions to the feed simulator, and repeated kill -9 of a node that owns
sessions. After each kill the node is started again (a new incarnation, its own ring), the
fleet rebalances, and the next kill hits the next node.

What it measures, from each node's message ring (what a consumer on that node reads):
- failover time: from the kill to the first message of a moved session on the ring of the
  node that took it over (detection by lease expiry + acquire + connect + subscribe), its
  p50/p99/max against the lease time (target: p99 <= 2x the lease);
- messages lost per failover and session: the simulator's per-topic sequence (`sim_seq`)
  jumps from the last message on the killed node's ring to the first on the new owner's;
  one leg per session, so the feed's messages during the failover are lost by design (the
  zero-loss target needs a feed group with a leg on another node);
- the same for the rebalancing hand-overs that follow each restart (graceful: one per tick);
- messages published twice (the same session and sequence on two nodes' rings): the fence;
  a make-before-break hand-over (gateway.fleet.node) publishes a few on both rings on
  purpose, with the same message ids: those are counted apart (`overlap`).
- on the bus (`run_bus`, a `nats-server -js` of its own): a feed group with its two legs on
  different nodes and two single-leg sessions; kill -9 a node that runs a leg and a single
  session: the messages missing from the JetStream stream (what a durable consumer gets)
  for the group and for the single session, and any stored twice;
- the bus path (`run_bus_latency`): simulator send (`sim_ts`) -> a core NATS subscriber and a
  JetStream push consumer, a fleet node (PostgreSQL lease, fence) vs a single gateway with the
  same NATS settings, alternated windows in one run, p50/p99 and the load (target: the fleet
  adds under 50 us p50).

`--quick`: 3 sessions, 2 kills (the smoke test in tests/bench/test_fleet.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from wsgw_bench.core import BenchOptions, Measurement, report_run, scenario, scenario_log
from wsgw_bench.gateways import (
    ServeGateway,
    closing_with_logs,
    create_sessions,
    fleet_env,
    jetstream_nats,
    wait_for,
)
from wsgw_bench.servers import postgres_server

SCENARIO = "fleet"
TOPIC = "btcusdt@trade"


# ---- a throwaway PostgreSQL cluster -------------------------------------------------------------
@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """A throwaway PostgreSQL (wsgw_bench.servers.postgres_server) with a fresh database;
    yields its URL; stopped and removed afterwards, also on failure."""
    with postgres_server() as server:
        server.execute("CREATE DATABASE fleet")
        yield server.url("fleet")


# ---- what the rings saw -------------------------------------------------------------------------
class RingTap:
    """Reads every node's ring on a thread: per (ring, session), the simulator sequence of
    each message with its arrival time. A killed node's ring stays readable to its end."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, int], list[tuple[float, int]]] = {}
        self._readers: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="fleet-ring-tap", daemon=True)
        self._thread.start()

    def add(self, ring: Path) -> None:
        from dataplane.ring import RingReader

        reader = RingReader.attach(ring.name, start="oldest", copy=True)
        with self._lock:
            self._readers[ring.name] = reader

    def _run(self) -> None:
        from dataplane.ring import RingMessage

        while not self._stop.is_set():
            with self._lock:
                readers = list(self._readers.items())
            for name, reader in readers:
                now = time.monotonic()
                for event in reader.read_batch(timeout=0):
                    if not isinstance(event, RingMessage) or event.topic.startswith("$"):
                        continue
                    seq = _sim_seq(bytes(event.payload))
                    if seq is not None:
                        with self._lock:
                            self.seen.setdefault((name, event.session_id), []).append((now, seq))
            self._stop.wait(0.01)

    def first_after(self, ring: str, sid: int, after: float) -> tuple[float, int] | None:
        with self._lock:
            return next((x for x in self.seen.get((ring, sid), ()) if x[0] > after), None)

    def last(self, ring: str, sid: int) -> tuple[float, int] | None:
        with self._lock:
            seen = self.seen.get((ring, sid))
            return seen[-1] if seen else None

    def flowing(self, ring: str, sid: int, within: float) -> bool:
        last = self.last(ring, sid)
        return last is not None and last[0] > time.monotonic() - within

    def hand_overs(self, sid: int) -> list[tuple[str, str, int, int]]:
        """The session's changes of ring in sequence order: (from, to, last seq on the old
        ring, first seq on the new one)."""
        rings = self._rings_by_seq(sid)
        changes: list[tuple[str, str, int, int]] = []
        current: str | None = None
        last_seq = 0
        for seq in sorted(rings):
            on = rings[seq]
            if current is not None and current not in on:
                changes.append((current, min(on), last_seq, seq))
            if current not in on:
                current = min(on)
            last_seq = seq
        return changes

    def _rings_by_seq(self, sid: int) -> dict[int, set[str]]:
        with self._lock:
            rings: dict[int, set[str]] = {}
            for (ring, s), seen in self.seen.items():
                if s == sid:
                    for _, seq in seen:
                        rings.setdefault(seq, set()).add(ring)
        return rings

    def duplicates(self, sid: int) -> list[frozenset[str]]:
        """The rings of each sequence of the session published on more than one ring."""
        rings = self._rings_by_seq(sid)
        return [frozenset(on) for on in rings.values() if len(on) > 1]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()


def _sim_seq(payload: bytes) -> int | None:
    with contextlib.suppress(orjson.JSONDecodeError):
        value = orjson.loads(payload)
        if isinstance(value, dict) and isinstance(value.get("sim_seq"), int):
            return int(value["sim_seq"])
    return None


# ---- the run ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class FleetPlan:
    sessions: int
    kills: int
    lease_s: float = 3.0
    nodes: int = 3
    rate: float = 100.0  # simulator messages/s per topic


@dataclass
class FleetResult:
    plan: FleetPlan
    failover_s: list[float] = field(default_factory=list)  # per moved session, per kill
    lost_per_failover: list[int] = field(default_factory=list)  # per moved session
    lost_per_hand_over: list[int] = field(default_factory=list)  # rebalancing moves
    #: Each rebalancing move: (session, ring it left, ring it went to, messages lost).
    hand_overs: list[tuple[int, str, str, int]] = field(default_factory=list)
    duplicates: int = 0  # (session, seq) published on two rings, not at a hand-over
    overlap: int = 0  # the same at a make-before-break hand-over (same message ids: by design)
    moved_per_kill: list[int] = field(default_factory=list)

    def summary(self) -> str:
        lease = self.plan.lease_s
        p50, p99, top = (percentile(self.failover_s, q) for q in (50, 99, 100))
        return "\n".join([
            f"{self.plan.nodes} nodes, {self.plan.sessions} sessions, {self.plan.kills} kills, "
            f"lease {lease:.1f} s; moved per kill {self.moved_per_kill}",
            f"failover p50 {p50:.2f} s, p99 {p99:.2f} s ({p99 / lease:.2f}x lease), "
            f"max {top:.2f} s over {len(self.failover_s)} moves",
            f"lost per failover (per session) p50 {percentile(self.lost_per_failover, 50):.0f} "
            f"max {max(self.lost_per_failover, default=0)}; per rebalancing hand-over p50 "
            f"{percentile(self.lost_per_hand_over, 50):.0f} max "
            f"{max(self.lost_per_hand_over, default=0)} ({len(self.lost_per_hand_over)} moves)",
            f"published twice: {self.duplicates} (on both rings at a make-before-break "
            f"hand-over, by design: {self.overlap})",
        ])  # fmt: skip


def percentile(values: list[float] | list[int], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return float(ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)])


def plan_for(options: BenchOptions) -> FleetPlan:
    if options.quick:
        return FleetPlan(sessions=3, kills=2)
    return FleetPlan(sessions=9, kills=max(6, 2 * options.repetitions))


def run_fleet(plan: FleetPlan, log: Callable[[str], None]) -> FleetResult:
    """The whole run (module doc); every process, ring and folder it made is gone after."""
    from gateway.simulator.process import start_simulator

    result = FleetResult(plan)
    tmp = Path(tempfile.mkdtemp(prefix="wsgw-fleet-"))
    tag = f"bf{uuid.uuid4().hex[:6]}"
    nodes: dict[str, ServeGateway] = {}
    every: list[ServeGateway] = []
    tap = RingTap()
    simulator = start_simulator(None, 0, plan.rate, host="127.0.0.1", stdin=True)
    try:
        with closing_with_logs(every, RuntimeError):
            assert simulator.stdout is not None
            sim_port = int(json.loads(simulator.stdout.readline())["port"])
            with postgres_cluster() as db_url:

                def start(name: str, incarnation: int) -> ServeGateway:
                    env = fleet_env(db_url, name, plan.lease_s, {"zone": "lab"})
                    node = ServeGateway(name, tmp, tag=f"{tag}i{incarnation}", env=env)
                    every.append(node)
                    node.start()
                    tap.add(node.ring)
                    nodes[name] = node
                    return node

                for i in range(plan.nodes):  # the first migrates the database
                    start(f"n{i + 1}", 0)
                sessions = create_sessions(nodes["n1"], sim_port, plan.sessions, TOPIC,
                                           prefix="bench", placement={"zone": "lab"})  # fmt: skip
                log(f"{plan.nodes} nodes ready, {plan.sessions} sessions started")

                def owners() -> dict[int, str]:
                    leases = next(iter(n for n in nodes.values())).get("/v1/fleet/leases")["data"]
                    return {x["session_id"]: x["node"] for x in leases if x["live"]}

                def settled() -> bool:
                    """Balanced (no node more than one above another) and every session's
                    messages flowing on its owner's ring."""
                    where = owners()
                    if sorted(where) != sessions:
                        return False
                    load = [list(where.values()).count(n) for n in nodes]
                    if max(load) - min(load) > 1:
                        return False
                    return all(tap.flowing(nodes[where[s]].ring.name, s, 0.5) for s in sessions)

                names = sorted(nodes)
                failed_over: set[tuple[str, int]] = set()  # (killed ring, session)
                for k in range(plan.kills):
                    wait_for(
                        "the fleet settled (balanced, every session flowing)", settled, 180, 0.2
                    )
                    where = owners()
                    victim = nodes[names[k % len(names)]]
                    moved = [s for s, n in where.items() if n == victim.name]
                    last_seq = {s: tap.last(victim.ring.name, s) for s in moved}
                    killed = time.monotonic()
                    victim.kill()
                    others = [n for n in nodes.values() if n is not victim]
                    first_on = _wait_moved(tap, others, moved, killed, 10 * plan.lease_s)
                    time.sleep(0.2)  # the tap has read the killed ring to its end
                    for sid in moved:
                        _, took, first_seq = first_on[sid]
                        last = tap.last(victim.ring.name, sid) or last_seq[sid]
                        result.failover_s.append(took)
                        if last is not None:
                            result.lost_per_failover.append(max(0, first_seq - last[1] - 1))
                    result.moved_per_kill.append(len(moved))
                    failed_over.update((victim.ring.name, sid) for sid in moved)
                    log(f"kill -9 {victim.name}: {len(moved)} sessions moved in "
                        f"{', '.join(f'{v[1]:.2f}' for v in first_on.values())} s")  # fmt: skip
                    victim.close()
                    start(victim.name, k + 1)  # back, on a ring of its own: it rebalances
                wait_for("the fleet settled after the last restart", settled, 180, 0.2)
                time.sleep(0.2)
                for sid in sessions:
                    for ring_a, ring_b, seq_a, seq_b in tap.hand_overs(sid):
                        last_on_a = tap.last(ring_a, sid)
                        if (ring_a, sid) in failed_over and last_on_a and seq_a == last_on_a[1]:
                            continue  # the end of a killed node's ring: counted as a failover
                        lost = max(0, seq_b - seq_a - 1)
                        result.lost_per_hand_over.append(lost)
                        result.hand_overs.append((sid, ring_a, ring_b, lost))
                    pairs = {frozenset((a, b)) for s, a, b, _ in result.hand_overs if s == sid}
                    for rings in tap.duplicates(sid):
                        if rings in pairs:
                            result.overlap += 1
                        else:
                            result.duplicates += 1
    finally:
        tap.close()
        simulator.kill()
        simulator.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _wait_moved(
    tap: RingTap, others: list[ServeGateway], moved: list[int], killed: float, timeout: float
) -> dict[int, tuple[str, float, int]]:
    """session -> (node, seconds from the kill, sequence) of its first message on another
    node's ring after the kill, once every moved session has one."""
    first_on: dict[int, tuple[str, float, int]] = {}

    def all_moved() -> bool:
        for sid in moved:
            for other in others:
                hit = None if sid in first_on else tap.first_after(other.ring.name, sid, killed)
                if hit is not None:
                    first_on[sid] = (other.name, hit[0] - killed, hit[1])
        return len(first_on) == len(moved)

    wait_for("the killed node's sessions flowing elsewhere", all_moved, timeout, 0.02)
    return first_on


def _measurements(result: FleetResult) -> list[Measurement]:
    lease = result.plan.lease_s
    who = f"{result.plan.nodes} nodes, lease {lease:g} s"
    failover = result.failover_s
    p99 = percentile(failover, 99)
    figures: list[tuple[str, str, float, str]] = [
        ("failover p50", "s", percentile(failover, 50), f"{len(failover)} sessions moved"),
        ("failover p99", "s", p99, f"target <= {2 * lease:g} s (2x the lease)"),
        ("failover max", "s", percentile(failover, 100), ""),
        ("failover p99 / lease", "x", p99 / lease, "target <= 2"),
        ("lost per failover p50", "msgs", percentile(result.lost_per_failover, 50),
         f"per session, one leg, {result.plan.rate:g} msg/s"),
        ("lost per failover max", "msgs", float(max(result.lost_per_failover, default=0)), ""),
        ("lost per hand-over p50", "msgs", percentile(result.lost_per_hand_over, 50),
         f"{len(result.lost_per_hand_over)} rebalancing moves"),
        ("published twice", "msgs", float(result.duplicates), "target 0 (the fence)"),
    ]  # fmt: skip
    return [
        Measurement(SCENARIO, metric, who, unit, False, [value], note=note)
        for metric, unit, value, note in figures
    ]


@scenario(
    SCENARIO,
    "3 gateways on PostgreSQL: kill -9 an owner, failover time vs lease, messages lost",
    in_all=False,
)
def fleet(options: BenchOptions) -> list[Measurement]:
    log = scenario_log(SCENARIO)
    plan = plan_for(options)
    result = run_fleet(plan, log)
    bus = run_bus(replace(plan, kills=1 if options.quick else 3), log)
    rounds, window_s = (2, 3.0) if options.quick else (max(6, 2 * options.repetitions), 10.0)
    latency = run_bus_latency(rounds, window_s, plan.rate, log)
    summary = f"{result.summary()}\n{bus.summary()}\n{latency.summary()}"
    report_run(options, SCENARIO, summary, vars(result) | {"plan": vars(plan), "bus": vars(bus),
               "bus_latency": vars(latency)}, log)  # fmt: skip
    who = f"{plan.nodes} nodes, JetStream, {bus.kills} kills"
    return [
        *_measurements(result),
        *_latency_measurements(latency),
        Measurement(SCENARIO, "lost on the bus, group", who, "msgs", False,
                    [float(bus.group_lost)], note="legs on two nodes; target 0"),
        Measurement(SCENARIO, "lost on the bus, single session", who, "msgs", False,
                    [float(bus.single_lost)], note="one leg: its failover's messages"),
        Measurement(SCENARIO, "stored twice on the bus", who, "msgs", False,
                    [float(bus.stored_twice)], note="target 0 (message ids)"),
    ]  # fmt: skip


def _latency_measurements(latency: BusLatencyResult) -> list[Measurement]:
    """sim send -> NATS subscriber p50 and p99 per bus, the single gateway the reference."""
    note = f"alternated, load {_span(latency.load)}; target: the fleet adds < 50 us p50"
    paired = [
        Measurement(SCENARIO, f"bus latency, fleet minus single p50, {bus}", "fleet node", "us",
                    False, [latency.paired_p50_us(bus)],
                    note=f"median over {latency.rounds} rounds of the paired p50s; {note}")
        for bus in BUSES
    ]  # fmt: skip
    return paired + [
        Measurement(SCENARIO, f"bus latency p{q}, {bus}", contender, "us", False,
                    [percentile(figures, q)], reference=contender == "single gateway",
                    note=note)
        for q in (50, 99)
        for bus in BUSES
        for contender, figures in ((c, latency.latency_us.get(c, {}).get(bus, []))
                                   for c in CONTENDERS)
    ]  # fmt: skip


# ---- on the bus: a group with a leg on another node vs a single session ------------------------
STREAM = "FLEET"


@dataclass
class BusResult:
    kills: int = 0
    group_lost: int = 0  # messages missing from the group's stream across the kills
    single_lost: int = 0  # the same for the single-leg sessions the killed node ran
    stored_twice: int = 0
    group_stored: int = 0
    single_stored: int = 0

    def summary(self) -> str:
        return (
            f"on JetStream across {self.kills} owner kill(s): group (legs on two nodes) lost "
            f"{self.group_lost} of {self.group_stored + self.group_lost}; single-leg sessions "
            f"lost {self.single_lost} of {self.single_stored + self.single_lost}; stored twice "
            f"{self.stored_twice}"
        )


def run_bus(plan: FleetPlan, log: Callable[[str], None]) -> BusResult:
    """The bus part (module doc): 3 nodes, a group of 2 legs and 2 single sessions, kill -9
    of a node with a leg and a single session, `plan.kills` times (the node comes back)."""
    from gateway.groups.feed import group_hub_id
    from gateway.simulator.process import start_simulator
    from wsgw_bench.jetstream import stream_sequences
    from wsgw_bench.servers import NatsServer

    result = BusResult()
    tmp = Path(tempfile.mkdtemp(prefix="wsgw-fleetbus-"))
    tag = f"bb{uuid.uuid4().hex[:6]}"
    every: list[ServeGateway] = []
    nodes: dict[str, ServeGateway] = {}
    simulator = start_simulator(None, 0, plan.rate, host="127.0.0.1", stdin=True)
    try:
        with closing_with_logs(every, RuntimeError):
            assert simulator.stdout is not None
            sim_port = int(json.loads(simulator.stdout.readline())["port"])
            with NatsServer(jetstream=True) as nats, postgres_cluster() as db_url:
                nats_settings = jetstream_nats(nats.url, STREAM)

                def start(name: str, incarnation: int) -> None:
                    env = fleet_env(db_url, name, plan.lease_s, {"zone": "lab"})
                    node = ServeGateway(name, tmp, tag=f"{tag}i{incarnation}", env=env,
                                        nats=nats_settings)  # fmt: skip
                    every.append(node)
                    node.start()
                    nodes[name] = node

                for i in range(plan.nodes):
                    start(f"n{i + 1}", 0)
                first = nodes["n1"]
                # legs 0 and 1, then two single sessions
                sessions = create_sessions(first, sim_port, 4, TOPIC, prefix="bus",
                                           placement={"zone": "lab"}, start=False)  # fmt: skip
                legs, singles = sessions[:2], sessions[2:]
                hub = group_hub_id(
                    int(first.post("/v1/groups", {"name": "bus", "legs": legs})["id"])
                )
                for sid in sessions:
                    first.post(f"/v1/sessions/{sid}/start")

                def runs() -> dict[int, str]:
                    return {s: n.name for n in nodes.values() for s in n.connected()}

                def settled() -> bool:
                    where = runs()
                    return set(where) == set(sessions) and where[legs[0]] != where[legs[1]]

                for k in range(plan.kills):
                    wait_for("the legs apart and every session connected", settled, 120, 0.2)
                    time.sleep(2.0)
                    where = runs()
                    victim = next(
                        (n for n in nodes.values() if any(where[s] == n.name for s in singles)
                         and any(where[s] == n.name for s in legs)),
                        nodes[where[legs[0]]],
                    )  # fmt: skip
                    moved = [s for s in singles if where[s] == victim.name]
                    victim.kill()
                    its_legs = [s for s in legs if where[s] == victim.name]
                    log(f"kill -9 {victim.name}: it ran leg(s) {its_legs} and single(s) {moved}")
                    others = [n for n in nodes.values() if n is not victim]

                    def elsewhere(others: list[ServeGateway] = others) -> bool:
                        return set(sessions) <= {s for n in others for s in n.connected()}

                    wait_for("the killed node's sessions elsewhere", elsewhere, 10 * plan.lease_s)
                    victim.close()
                    start(victim.name, k + 1)
                    result.kills += 1
                wait_for("the fleet settled after the last restart", settled, 120, 0.2)
                time.sleep(2.0)
                seqs = stream_sequences(nats.url, STREAM)
                for sid, values in seqs.items():
                    if sid != hub and sid not in singles:
                        continue
                    unique = set(values)
                    result.stored_twice += len(values) - len(unique)
                    lost = max(unique) - min(unique) + 1 - len(unique)
                    if sid == hub:
                        result.group_lost += lost
                        result.group_stored += len(unique)
                    else:
                        result.single_lost += lost
                        result.single_stored += len(unique)
    finally:
        simulator.kill()
        simulator.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return result


# ---- on the bus: what the fleet adds to a message's path ----------------------------------------
@dataclass
class BusLatencyResult:
    """Per contender ("fleet node", "single gateway") and bus ("core NATS", "JetStream"):
    simulator send (sim_ts) -> a NATS subscriber's receipt, in microseconds."""

    rounds: int = 0
    window_s: float = 0.0
    latency_us: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    load: list[float] = field(default_factory=list)  # 1-min load average at each window
    #: (contender, bus) -> each round's window as (start, end) in latency_us's list
    windows: dict[str, list[tuple[int, int]]] = field(default_factory=dict)

    def round_p50s(self, contender: str, bus: str) -> list[float]:
        """Each round's p50 (a window's figures apart: load swings between windows)."""
        figures = self.latency_us.get(contender, {}).get(bus, [])
        spans = self.windows.get(f"{contender}/{bus}", [])
        return [percentile(figures[a:b], 50) for a, b in spans if b > a]

    def paired_p50_us(self, bus: str) -> float:
        """The median over rounds of (fleet node's p50 - single gateway's p50)."""
        fleet, single = (self.round_p50s(c, bus) for c in CONTENDERS)
        return percentile([f - s for f, s in zip(fleet, single, strict=False)], 50)

    def summary(self) -> str:
        lines = [f"bus path, sim send -> NATS subscriber, {self.rounds} alternated rounds of "
                 f"{self.window_s:.0f} s each, load {_span(self.load)}:"]  # fmt: skip
        for bus in BUSES:
            fleet, single = (self.latency_us.get(c, {}).get(bus, []) for c in CONTENDERS)
            if not fleet or not single:
                continue
            f50, s50 = percentile(fleet, 50), percentile(single, 50)
            lines.append(
                f"  {bus}: fleet node p50 {f50:.0f} us p99 {percentile(fleet, 99):.0f} us "
                f"({len(fleet)} msgs); single gateway p50 {s50:.0f} us p99 "
                f"{percentile(single, 99):.0f} us ({len(single)}); the fleet adds "
                f"{f50 - s50:+.0f} us p50 (ratio {f50 / s50:.2f}); round by round "
                f"{self.paired_p50_us(bus):+.0f} us (median of the rounds' p50 differences)"
            )
        return "\n".join(lines)


CONTENDERS = ("fleet node", "single gateway")
BUSES = ("core NATS", "JetStream")


def _span(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}" if values else "?"


class BusTap:
    """A core NATS subscription and a JetStream push consumer (new messages, no acks) on each
    contender's subjects, on a thread of their own; a message received while its contender's
    window is open adds receipt - sim_ts to that contender's figures."""

    def __init__(self, url: str, subjects: dict[str, tuple[str, str]]) -> None:
        """subjects: contender -> (subject prefix, JetStream stream)."""
        import asyncio

        self.url = url
        self.subjects = subjects
        self.latency_us: dict[str, dict[str, list[float]]] = {
            c: {b: [] for b in BUSES} for c in subjects
        }
        self.open: str | None = None  # the contender whose window is open
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="fleet-bus-tap", daemon=True)
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None:
            raise RuntimeError(f"bus tap: {self._error}")

    def _run(self) -> None:
        import asyncio

        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._main())

    async def _main(self) -> None:
        import asyncio

        import nats
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        from wsgw_bench.feed import sim_tail

        self._stop = asyncio.Event()
        try:
            nc = await nats.connect(self.url)
        except Exception as exc:
            self._error = exc
            self._ready.set()
            return
        try:
            js = nc.jetstream()
            for contender, (prefix, stream) in self.subjects.items():
                for bus in BUSES:
                    figures = self.latency_us[contender][bus]

                    async def on_message(msg: Any, c: str = contender, out: list[float] = figures
                                         ) -> None:  # fmt: skip
                        now = time.time_ns()
                        if self.open != c:
                            return
                        tail = sim_tail(msg.data)
                        if tail is not None:
                            out.append((now - tail[1]) / 1000)

                    if bus == "core NATS":
                        await nc.subscribe(f"{prefix}.>", cb=on_message)
                    else:
                        config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW,
                                                ack_policy=AckPolicy.NONE)  # fmt: skip
                        await js.subscribe(f"{prefix}.>", stream=stream, cb=on_message,
                                           config=config, manual_ack=True)  # fmt: skip
            await nc.flush()
            self._ready.set()
            await self._stop.wait()
        except Exception as exc:
            self._error = exc
            self._ready.set()
        finally:
            await nc.close()

    def close(self) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)
        self._loop.close()


def _runs(node: ServeGateway, sid: int, connected: bool) -> Callable[[], bool]:
    """Whether the gateway has the session connected (connected False: has it not)."""
    return lambda: (sid in node.connected()) == connected


def _alternate(
    gateways: dict[str, tuple[ServeGateway, int]],
    tap: BusTap,
    result: BusLatencyResult,
    rounds: int,
    window_s: float,
    log: Callable[[str], None],
) -> None:
    """The rounds: each contender's session runs alone for a window, the first one
    alternating round by round."""
    import os

    for r in range(rounds):
        order = CONTENDERS if r % 2 == 0 else CONTENDERS[::-1]
        for contender in order:
            node, sid = gateways[contender]
            node.post(f"/v1/sessions/{sid}/start")
            wait_for(f"{contender} connected", _runs(node, sid, True), 60)
            time.sleep(1.0)  # warm: subscribed, the first messages through
            result.load.append(os.getloadavg()[0])
            starts = {bus: len(tap.latency_us[contender][bus]) for bus in BUSES}
            tap.open = contender
            time.sleep(window_s)
            tap.open = None
            time.sleep(0.2)  # what was on its way when the window closed
            for bus, start in starts.items():
                end = len(tap.latency_us[contender][bus])
                result.windows.setdefault(f"{contender}/{bus}", []).append((start, end))
            node.post(f"/v1/sessions/{sid}/stop")
            wait_for(f"{contender} stopped", _runs(node, sid, False), 30)
        log(f"bus latency round {r + 1}/{rounds} done (load {result.load[-1]:.1f})")
    result.latency_us = tap.latency_us


def run_bus_latency(
    rounds: int, window_s: float, rate: float, log: Callable[[str], None]
) -> BusLatencyResult:
    """A fleet node (PostgreSQL lease, fence, message ids) and a single gateway (SQLite, no
    fleet) with the same NATS settings (JetStream stream, ids), each one Binance session to
    the simulator; in alternated windows only one of them runs its session (started, then
    stopped through its API), and a subscriber times what it publishes on both buses."""

    from gateway.simulator.process import start_simulator
    from wsgw_bench.servers import NatsServer

    result = BusLatencyResult(rounds=rounds, window_s=window_s)
    tmp = Path(tempfile.mkdtemp(prefix="wsgw-fleetlat-"))
    tag = f"bl{uuid.uuid4().hex[:6]}"
    every: list[ServeGateway] = []
    simulator = start_simulator(None, 0, rate, host="127.0.0.1", stdin=True)
    try:
        with closing_with_logs(every, RuntimeError):
            assert simulator.stdout is not None
            sim_port = int(json.loads(simulator.stdout.readline())["port"])
            with NatsServer(jetstream=True) as nats, postgres_cluster() as db_url:
                subjects = {"fleet node": ("wsgwfleet", "LATFLEET"),
                            "single gateway": ("wsgwone", "LATONE")}  # fmt: skip
                envs = {"fleet node": fleet_env(db_url, "f1", 3.0, {}), "single gateway": {}}
                gateways: dict[str, tuple[ServeGateway, int]] = {}
                for contender, (prefix, stream) in subjects.items():
                    nats_settings = {**jetstream_nats(nats.url, stream), "subject_prefix": prefix}
                    node = ServeGateway(contender.split()[0], tmp, tag=tag, env=envs[contender],
                                        nats=nats_settings)  # fmt: skip
                    every.append(node)
                    node.start()
                    (sid,) = create_sessions(node, sim_port, 1, TOPIC, prefix=prefix, start=False)
                    gateways[contender] = (node, sid)
                tap = BusTap(nats.url, subjects)
                try:
                    _alternate(gateways, tap, result, rounds, window_s, log)
                finally:
                    tap.close()  # before the NATS server stops
    finally:
        simulator.kill()
        simulator.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return result
