"""The two latency profiles measured against each other, alternated in one run:

    python -m wsgw_bench.profiles [--rounds 2] [--rate 1000] [--seconds 20] [--idle 10]
        [--contender LABEL=PROFILE[,WSGW_X=V...]]...   (default: the two profiles as they are)

Per phase (a profile; phases alternate A B, B A, ...): a `wsgw serve` process with
WSGW_LATENCY_PROFILE set and nothing else about latency, configured over its REST API as an
operator would (a DPDK port on the lab's veth, a Binance-dialect session to `wsgw simulate`
in the lab's peer namespace, a subscription of one topic at `rate` msg/s), and a consumer
in another process that attaches to the ring with the client's defaults (wait "auto": it
follows the gateway's profile). Measured:

- idle: the engine thread's CPU % (port up, no session) and the consumer's CPU % (attached,
  nothing to read), over the same `idle` seconds;
- loaded: the latency from the simulator's send stamp (`sim_ts` in each message, taken
  right before its send) to the consumer's receipt (CLOCK_REALTIME right after the read
  that returned it), after a warm-up; p50/p99/p99.9, messages, gaps; the engine thread's
  and the consumer's CPU % meanwhile.

The lab, the simulator and every gateway are removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import httpx

from wsgw_bench.servers import free_port, stop_process

PROFILES = ("economical", "low-latency")
SIM_PORT = 9443
TOPIC = "btcusdt@trade"
WARMUP = 3.0


@dataclass(frozen=True)
class Contender:
    """A gateway configuration: a profile and maybe some WSGW_* variables on top."""

    label: str
    profile: str
    env: tuple[tuple[str, str], ...] = ()

    @classmethod
    def parse(cls, text: str) -> Contender:
        label, _, rest = text.partition("=")
        profile, *pairs = rest.split(",")
        if profile not in PROFILES or not label:
            raise argparse.ArgumentTypeError(f"LABEL=PROFILE[,WSGW_X=V...], not {text!r}")
        env = tuple(tuple(pair.split("=", 1)) for pair in pairs)
        if any(len(pair) != 2 or not pair[0].startswith("WSGW_") for pair in env):
            raise argparse.ArgumentTypeError(f"variables are WSGW_X=V, not {text!r}")
        return cls(label, profile, env)  # type: ignore[arg-type]


@dataclass
class Phase:
    profile: str
    wait: str = ""
    idle_engine_cpu: float = 0.0
    idle_reader_cpu: float = 0.0
    load_engine_cpu: float = 0.0
    load_reader_cpu: float = 0.0
    messages: int = 0
    gaps: int = 0
    p50_us: float = 0.0
    p99_us: float = 0.0
    p999_us: float = 0.0
    load: float = 0.0  # the host's 1-minute load average at the phase's end (2 cores here)
    latencies_us: list[float] = field(default_factory=list, repr=False)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def _thread_cpu(pid: int, prefix: str) -> float:
    """CPU seconds of the threads of pid whose name starts with prefix."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            if (task / "comm").read_text().startswith(prefix):
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _consumer(ring: str, topics: list[str], conn: Connection) -> None:
    """Another process: attach with the client's defaults, then idle / measure on command."""
    from dataplane.ring import RingMessage
    from gateway.client import Client

    client = Client.attach(ring, topics=topics, copy=False)
    conn.send(client.describe_wait())
    while True:
        command = conn.recv()
        if command == "stop":
            break
        duration, record = float(command[0]), bool(command[1])
        latencies: list[float] = []
        gaps = 0
        cpu0 = time.process_time()
        end = time.monotonic() + duration
        while time.monotonic() < end:
            events = client.read(timeout=min(0.2, max(0.0, end - time.monotonic())))
            received = time.time_ns()
            for event in events:
                if type(event) is not RingMessage:
                    gaps += 1
                    continue
                if record:
                    payload = bytes(event.payload)
                    at = payload.rfind(b'"sim_ts":')
                    if at >= 0:
                        sent = int(payload[at + 9 :].rstrip(b"}"))
                        latencies.append((received - sent) / 1e3)
        conn.send((latencies, gaps, time.process_time() - cpu0))
    client.close()


@contextlib.contextmanager
def _gateway(
    profile: str, gateway: str, extra_env: dict[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    state = Path(tempfile.mkdtemp(prefix="wsgw-profiles-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("WSGW_")}
    env |= {
        "WSGW_LATENCY_PROFILE": profile,
        "WSGW_STATE_DIR": str(state),
        "WSGW_DB__URL": f"sqlite:///{state}/wsgw.db",
        "WSGW_AUTH__MODE": "none",
        "WSGW_API__PORT": str(port),
        "WSGW_API__LOG_LEVEL": "warning",
        "WSGW_HUB__GATEWAY": gateway,
        "WSGW_DPDK__HUGEPAGES": "off",
        "WSGW_CONFIG": str(state / "none.toml"),
    } | (extra_env or {})
    with (state / "serve.log").open("wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.cli", "serve"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,  # the child has its own copy of the descriptor
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"wsgw serve did not start: {(state / 'serve.log').read_text()}")
            time.sleep(0.2)
        yield proc, base
    finally:
        stop_process(proc, 30)
        shutil.rmtree(state, ignore_errors=True)
        for leftover in Path("/dev/shm").glob(f"wsgw-{gateway}-*"):  # noqa: S108
            leftover.unlink(missing_ok=True)


def _post(api: httpx.Client, path: str, body: dict[str, Any] | None = None) -> Any:
    r = api.post(path, json=body)
    if r.status_code >= 400:
        raise RuntimeError(f"POST {path}: {r.status_code} {r.text}")
    return r.json()


def _measure(
    consumer: Connection, gateway_pid: int, seconds: float, timed: bool
) -> tuple[list[float], int, float, float]:
    """Have the consumer read for `seconds` (timing messages when `timed`): its latencies
    and gaps, and the engine thread's and the reader's CPU over that time, in percent."""
    engine_before = _thread_cpu(gateway_pid, "wsgw-engine")
    t0 = time.monotonic()
    consumer.send((seconds, timed))
    latencies, gaps, reader_cpu = consumer.recv()
    elapsed = time.monotonic() - t0
    engine_cpu = 100 * (_thread_cpu(gateway_pid, "wsgw-engine") - engine_before) / elapsed
    return latencies, gaps, engine_cpu, 100 * reader_cpu / elapsed


def run_phase(contender: Contender, lab: Any, args: argparse.Namespace, n: int) -> Phase:
    gateway = f"prof{os.getpid()}x{n}"
    profile = contender.profile
    phase = Phase(contender.label)
    with (
        _gateway(profile, gateway, dict(contender.env)) as (proc, base),
        httpx.Client(base_url=base, timeout=30) as api,
    ):
        port = _post(
            api,
            "/v1/ports",
            {"name": "lab", "device": lab.vdev, "ipv4": lab.gw_ip, "netmask": lab.netmask},
        )
        body = {
            "name": "sim",
            "url": f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream",
            "dialect": "binance",
            "transport": "dpdk",
            "port_id": port["id"],
        }
        session = _post(api, "/v1/sessions", body)
        sub = _post(
            api,
            "/v1/subscriptions",
            {"session_id": session["id"], "topics": [TOPIC], "consumer": "profiles"},
        )
        engine = api.get("/v1/engine").json()
        assert engine["latency_profile"] == profile, engine
        ctx = mp.get_context("spawn")
        parent, child = ctx.Pipe()
        consumer = ctx.Process(
            target=_consumer,
            args=(sub["consume"]["ring"], sub["consume"]["ring_topics"], child),
            daemon=True,
        )
        consumer.start()
        try:
            phase.wait = parent.recv()
            time.sleep(2.0)  # the engine thread settles into its idle polling
            _, _, phase.idle_engine_cpu, phase.idle_reader_cpu = _measure(
                parent, proc.pid, args.idle, False
            )
            _post(api, f"/v1/sessions/{session['id']}/start")
            parent.send((WARMUP, False))  # connect, subscribe, first messages
            parent.recv()
            latencies, gaps, phase.load_engine_cpu, phase.load_reader_cpu = _measure(
                parent, proc.pid, args.seconds, True
            )
            parent.send("stop")
            consumer.join(10)
        finally:
            if consumer.is_alive():
                consumer.kill()
                consumer.join(5)
    phase.load = os.getloadavg()[0]
    phase.latencies_us = latencies
    phase.messages, phase.gaps = len(latencies), gaps
    phase.p50_us = _quantile(latencies, 0.5)
    phase.p99_us = _quantile(latencies, 0.99)
    phase.p999_us = _quantile(latencies, 0.999)
    return phase


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="A B + B A pairs count as 2")
    parser.add_argument("--rate", type=float, default=1000.0, help="messages/s of the topic")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured per phase")
    parser.add_argument("--idle", type=float, default=10.0, help="idle seconds per phase")
    parser.add_argument("--lab", default="lprof", help="lab name (a-z0-9, up to 10)")
    parser.add_argument("--json", type=Path, help="write every phase's figures here")
    parser.add_argument(
        "--contender",
        type=Contender.parse,
        action="append",
        help="LABEL=PROFILE[,WSGW_X=V...] (repeatable; default: the two profiles)",
    )
    args = parser.parse_args()
    contenders: list[Contender] = args.contender or [Contender(p, p) for p in PROFILES]

    from gateway.lab import Lab
    from gateway.simulator.process import start_simulator

    lab = Lab(args.lab)
    sim: subprocess.Popen[str] | None = None
    phases: list[Phase] = []
    try:
        lab.up()
        sim = start_simulator(lab, SIM_PORT, args.rate)
        for r in range(args.rounds):
            order = contenders if r % 2 == 0 else contenders[::-1]
            for contender in order:
                phase = run_phase(contender, lab, args, len(phases))
                phases.append(phase)
                print(
                    f"round {r + 1} {contender.label:12} wait {phase.wait:24} "
                    f"idle engine {phase.idle_engine_cpu:5.1f}% "
                    f"reader {phase.idle_reader_cpu:5.1f}%"
                    f" | {phase.messages} msgs gaps {phase.gaps} p50 {phase.p50_us:6.0f} "
                    f"p99 {phase.p99_us:6.0f} p99.9 {phase.p999_us:6.0f} us | engine "
                    f"{phase.load_engine_cpu:5.1f}% reader {phase.load_reader_cpu:5.1f}% | "
                    f"load {phase.load:.1f}",
                    flush=True,
                )
    finally:
        if sim is not None:
            sim.kill()
            sim.wait()
        lab.down()
    _summary(phases, [c.label for c in contenders])
    if args.json:
        args.json.write_text(json.dumps([asdict(p) | {"latencies_us": None} for p in phases]))
    return 0


def _summary(phases: list[Phase], labels: list[str]) -> None:
    print("\nper contender (median over its phases; ratios to the first):")
    keys = ("idle_engine_cpu", "idle_reader_cpu", "p50_us", "p99_us", "p999_us")
    medians: dict[str, dict[str, float]] = {}
    for profile in labels:
        mine = [p for p in phases if p.profile == profile]
        if mine:
            medians[profile] = {k: statistics.median(getattr(p, k) for p in mine) for k in keys}
            pooled = [x for p in mine for x in p.latencies_us]
            medians[profile] |= {
                "pooled_p50": _quantile(pooled, 0.5),
                "pooled_p99": _quantile(pooled, 0.99),
            }
            print(
                f"  {profile:12} " + "  ".join(f"{k} {v:.1f}" for k, v in medians[profile].items())
            )
    first = medians.get(labels[0])
    for label in labels[1:]:
        if first is None or label not in medians:
            continue
        theirs = medians[label]
        ratios = {k: theirs[k] / first[k] for k in ("p50_us", "p99_us", "pooled_p50", "pooled_p99")}
        print(
            f"  {label:12} / {labels[0]}: " + "  ".join(f"{k} {v:.2f}" for k, v in ratios.items())
        )


if __name__ == "__main__":
    sys.exit(main())
