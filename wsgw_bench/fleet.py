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
- messages published twice (the same session and sequence on two nodes' rings): the fence.

`--quick`: 3 sessions, 2 kills (the smoke test in tests/bench/test_fleet.py).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from wsgw_bench.core import BenchOptions, Measurement, report_run, scenario, scenario_log
from wsgw_bench.servers import free_port, postgres_server

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = "fleet"
TOPIC = "btcusdt@trade"


def wait_for(
    what: str, predicate: Callable[[], bool], timeout: float = 15, every: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


# ---- a throwaway PostgreSQL cluster -------------------------------------------------------------
@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """A throwaway PostgreSQL (wsgw_bench.servers.postgres_server) with a fresh database;
    yields its URL; stopped and removed afterwards, also on failure."""
    with postgres_server() as server:
        server.execute("CREATE DATABASE fleet")
        yield server.url("fleet")


# ---- one node ---------------------------------------------------------------------------------
class FleetGateway:
    """One `wsgw serve` of a fleet (own state dir, API port and ring); its log goes to a
    file, shown when something fails. `tag` names its ring: a restarted node takes a new one."""

    def __init__(
        self, name: str, db_url: str, tmp: Path, tag: str, lease_s: float, labels: dict[str, str]
    ) -> None:
        self.name = name
        self.port = free_port()
        self.gateway = f"{tag}{name}"
        self.ring = Path("/dev/shm") / f"wsgw-{self.gateway}-messages"  # noqa: S108
        state = tmp / f"{name}-{tag}"
        state.mkdir()
        self.log = tmp / f"{name}-{tag}.log"
        env = {
            **os.environ,
            "WSGW_STATE_DIR": str(state),
            "WSGW_CONFIG": str(tmp / "absent.toml"),
            "WSGW_DB__URL": db_url,
            "WSGW_HUB__GATEWAY": self.gateway,
            "WSGW_HUB__RING_CAPACITY": str(1 << 22),
            "WSGW_FLEET__ENABLED": "true",
            "WSGW_FLEET__NODE": name,
            "WSGW_FLEET__LABELS": json.dumps(labels),
            "WSGW_FLEET__LEASE_S": str(lease_s),
        }
        command = [sys.executable, "-m", "gateway.cli", "serve", "--no-auth"]
        with self.log.open("w") as out:
            self.proc = subprocess.Popen(
                [*command, "--port", str(self.port)],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join([line for line in text if "uvicorn.access" not in line][-lines:])

    def wait_ready(self, timeout: float = 180) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"{self.name} exited early:\n{self.tail()}"
            with contextlib.suppress(httpx.HTTPError):
                return self.api.get("/readyz").status_code == 200
            return False

        wait_for(f"{self.name} /readyz", ready, timeout)

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.api.post(path, json=body)
        assert response.status_code in (200, 201), f"POST {path}: {response.text}"
        result: dict[str, Any] = response.json()
        return result

    def get(self, path: str) -> dict[str, Any]:
        response = self.api.get(path, params={"limit": 100} if path == "/v1/sessions" else None)
        assert response.status_code == 200, f"GET {path}: {response.text}"
        result: dict[str, Any] = response.json()
        return result

    def connected(self) -> set[int]:
        """The sessions this node's runtime has connected."""
        with contextlib.suppress(httpx.HTTPError):
            data = self.get("/v1/sessions")["data"]
            return {s["id"] for s in data if s["status"]["state"] == "connected"}
        return set()

    def stopped_by_signal(self) -> bool:
        """Every thread of the process is stopped (SIGSTOP has taken effect)."""
        tasks = Path(f"/proc/{self.proc.pid}/task")
        return all(
            (t / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T" for t in tasks.iterdir()
        )

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def close(self) -> None:
        self.api.close()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
        self.proc.wait(10)
        self.ring.unlink(missing_ok=True)


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

    def duplicates(self, sid: int) -> int:
        """Sequences of the session published on more than one ring."""
        rings = self._rings_by_seq(sid)
        return sum(1 for on in rings.values() if len(on) > 1)

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
    duplicates: int = 0  # (session, seq) published on two rings
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
            f"published twice: {self.duplicates}",
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
    nodes: dict[str, FleetGateway] = {}
    every: list[FleetGateway] = []
    tap = RingTap()
    simulator = start_simulator(None, 0, plan.rate, host="127.0.0.1", stdin=True)
    try:
        assert simulator.stdout is not None
        sim_port = int(json.loads(simulator.stdout.readline())["port"])
        with postgres_cluster() as db_url:

            def start(name: str, incarnation: int) -> FleetGateway:
                node = FleetGateway(
                    name, db_url, tmp, f"{tag}i{incarnation}", plan.lease_s, {"zone": "lab"}
                )
                every.append(node)
                node.wait_ready()
                tap.add(node.ring)
                nodes[name] = node
                return node

            for i in range(plan.nodes):  # the first migrates the database
                start(f"n{i + 1}", 0)
            first = nodes["n1"]
            sessions = []
            for i in range(plan.sessions):
                row = first.post(
                    "/v1/sessions",
                    {"name": f"bench-{i}", "url": f"ws://127.0.0.1:{sim_port}/binance/stream",
                     "dialect": "binance", "transport": "kernel", "placement": {"zone": "lab"},
                     "reconnect_initial_delay_s": 0.1},
                )  # fmt: skip
                first.post("/v1/subscriptions", {"session_id": row["id"], "topics": [TOPIC],
                                                 "consumer": f"c{i}"})  # fmt: skip
                first.post(f"/v1/sessions/{row['id']}/start")
                sessions.append(int(row["id"]))
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
                wait_for("the fleet settled (balanced, every session flowing)", settled, 180, 0.2)
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
                result.duplicates += tap.duplicates(sid)
    except Exception as exc:
        logs = "\n".join(f"--- {n.log.name}\n{n.tail()}" for n in every)
        raise RuntimeError(f"{type(exc).__name__}: {exc}\n{logs}") from exc
    finally:
        tap.close()
        for node in every:
            node.close()
        simulator.kill()
        simulator.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
    return result


def _wait_moved(
    tap: RingTap, others: list[FleetGateway], moved: list[int], killed: float, timeout: float
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
    result = run_fleet(plan_for(options), log)
    report_run(options, SCENARIO, result.summary(), vars(result) | {"plan": vars(result.plan)}, log)
    return _measurements(result)
