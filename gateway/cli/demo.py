"""`wsgw demo` (what `make run` runs): the whole gateway on a laptop-sized lab.

    lab namespace: the feed simulator (Binance dialect, a few symbols) on the kernel
    this process:  the control plane (FastAPI on 127.0.0.1, no auth: loopback only)
                   + the live runtime: a DPDK port on the lab's veth (net_af_packet),
                   the engine thread and its C fast path, an upstream session in the
                   Binance dialect over wsgw's own TCP/IP stack, the fan-out hub
                   + a local consumer reading the shared-memory ring

Everything is configured through the REST API, as an operator would. A line per second
shows messages/s, the simulator-to-consumer latency, gaps and the session's state, with
the URLs of the dashboard, the API docs and the stream. Without root or DPDK the session
falls back to the kernel transport (simulator on loopback) and says so.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gateway.cli.common import LabName
from gateway.lab import Lab, LabError
from gateway.simulator.process import start_simulator

if TYPE_CHECKING:
    import httpx
    import uvicorn

SIM_PORT = 9443
TOPICS = ["btcusdt@trade", "ethusdt@trade", "solusdt@depth"]


class RingConsumer:
    """A local consumer: tails the gateway's ring for the demo's topics, in a thread."""

    def __init__(self, ring: str, topics: list[str]) -> None:
        from gateway.client import Client

        self.client = Client.attach(ring, topics=topics, copy=True)
        self.count = 0
        self.gaps = 0
        self.latencies_us: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="demo-consumer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import orjson

        from dataplane.ring import Gap, RingMessage

        while not self._stop.is_set():
            for item in self.client.read(timeout=0.2):
                if not isinstance(item, RingMessage):
                    self.gaps += isinstance(item, Gap)
                    continue
                self.count += 1
                payload = bytes(item.payload)
                if b'"sim_ts"' in payload:
                    sent = orjson.loads(payload).get("sim_ts")
                    if isinstance(sent, int):
                        self.latencies_us.append((time.time_ns() - sent) / 1e3)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.client.close()


def _free_port(preferred: int) -> int:
    for candidate in (preferred, 0):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", candidate))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise OSError("no free TCP port on 127.0.0.1")


def run_demo(*, name: str, duration: float, hugepages: str, api_port: int = 0) -> int:
    """The demo (see `demo`); api_port 0: 8080 when free, else any free port."""
    import httpx

    dpdk = os.geteuid() == 0 and _shim_has_dpdk()
    if not dpdk:
        print("no root or no DPDK here: the session uses the kernel transport (OS sockets)")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    state = Path(tempfile.mkdtemp(prefix="wsgw-demo-"))
    lab = Lab(name) if dpdk else None
    children: list[subprocess.Popen[str]] = []
    server: uvicorn.Server | None = None
    consumer: RingConsumer | None = None
    try:
        sim_host = "127.0.0.1"
        if lab is not None:
            lab.up()
            sim_host = lab.peer_ip
            print(
                f"lab {name}: simulator at {lab.peer_ip}:{SIM_PORT} in namespace {lab.netns}; "
                f"the gateway's stack is {lab.gw_ip} on {lab.gw_if} (DPDK net_af_packet)"
            )
        try:
            sim = start_simulator(lab, SIM_PORT, 50, host=sim_host)
        except RuntimeError as exc:
            raise LabError(str(exc)) from None
        children.append(sim)
        port = api_port or _free_port(8080)
        server = _start_api(state, port, hugepages)
        base = f"http://127.0.0.1:{port}"
        api = httpx.Client(base_url=base, timeout=10)
        session = _configure(api, lab, sim_host)
        sub = _post(
            api, "/v1/subscriptions", {"session_id": session, "topics": TOPICS, "consumer": "demo"}
        )
        consume = sub["consume"]
        consumer = RingConsumer(consume["ring"], consume["ring_topics"])
        _print_where(port, consume)
        return _report(api, session, consumer, duration, stop)
    except (LabError, OSError, httpx.HTTPError, RuntimeError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    finally:
        if consumer is not None:
            consumer.close()
        if server is not None:
            server.should_exit = True
            time.sleep(0.5)
        for child in children:
            child.kill()
            child.wait()
        if lab is not None:
            lab.down()
            print(f"lab {name} removed")
        shutil.rmtree(state, ignore_errors=True)  # the demo's database and settings


def _start_api(state: Path, port: int, hugepages: str) -> uvicorn.Server:
    """The control plane (built as `wsgw serve` builds it) on 127.0.0.1:port, started."""
    import uvicorn

    from api.app import create_app
    from gateway.runtime import build_runtime
    from gateway.settings import Settings

    settings = Settings(
        state_dir=state,
        db={"url": f"sqlite:///{state}/wsgw.db"},  # type: ignore[arg-type]
        auth={"mode": "none"},  # type: ignore[arg-type]
        api={"host": "127.0.0.1", "port": port},  # type: ignore[arg-type]
        hub={"gateway": f"demo{os.getpid()}"},  # type: ignore[arg-type]
        dpdk={"hugepages": hugepages},  # type: ignore[arg-type]
    )
    app = create_app(settings, build_runtime(settings))
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    threading.Thread(target=server.run, name="demo-api", daemon=True).start()
    _wait(lambda: bool(server.started), 20, f"the control plane did not start on port {port}")
    return server


def _print_where(port: int, consume: dict[str, Any]) -> None:
    base = f"http://127.0.0.1:{port}"
    print(f"API        {base}  (port {port}: --api-port chooses it)")
    print(f"dashboard  {base}/   (no token needed: loopback, auth off)")
    print(f"API docs   {base}/docs      metrics {base}/metrics")
    print(f"stream     ws://127.0.0.1:{port}{consume['stream_url']}")
    print(f"ring       /dev/shm/{consume['ring']}  topics {consume['ring_topics']}")
    print(f"SDK        Client.connect({consume['ring_url']!r}, topics={consume['ring_topics']!r})")
    print("a line per second (Ctrl-C stops; everything is removed on exit)")


def _shim_has_dpdk() -> bool:
    try:
        from dataplane.shim import load

        return load().has_dpdk
    except Exception:
        return False


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(what)
        time.sleep(0.05)


def _post(api: httpx.Client, path: str, body: dict[str, Any] | None = None) -> Any:
    response = api.post(path, json=body)
    if response.status_code >= 400:
        raise RuntimeError(f"POST {path}: {response.status_code} {response.text}")
    return response.json()


def _configure(api: httpx.Client, lab: Lab | None, sim_host: str) -> int:
    """Port (DPDK only), session and start, through the REST API."""
    url = f"ws://{sim_host}:{SIM_PORT}/binance/stream"
    body: dict[str, Any] = {
        "name": "binance-demo",
        "url": url,
        "dialect": "binance",
        "transport": "kernel",
    }
    if lab is not None:
        port = _post(
            api,
            "/v1/ports",
            {
                "name": "lab",
                "device": lab.vdev,
                "ipv4": lab.gw_ip,
                "netmask": lab.netmask,
                "mtu": 1500,
            },
        )
        print(f"port {port['id']}: {lab.vdev} {lab.gw_ip}/24 ({port['status']['state']})")
        body.update(transport="dpdk", port_id=port["id"])
    session = _post(api, "/v1/sessions", body)
    _post(api, f"/v1/sessions/{session['id']}/start")
    print(f"session {session['id']}: {url} dialect binance transport {body['transport']}")
    return int(session["id"])


def _report(
    api: httpx.Client, session: int, consumer: RingConsumer, duration: float, stop: threading.Event
) -> int:
    start = time.monotonic()
    last_count, last = 0, start
    while not stop.wait(1.0):
        now = time.monotonic()
        count = consumer.count
        rate = (count - last_count) / (now - last)
        last_count, last = count, now
        recent = consumer.latencies_us[-500:]
        latency = (
            f"p50 {statistics.median(recent):.0f} us  "
            f"p99 {sorted(recent)[int(0.99 * (len(recent) - 1))]:.0f} us"
            if recent
            else "-"
        )
        state = api.get(f"/v1/sessions/{session}").json()["status"]["state"]
        print(
            f"t={now - start:5.1f}s  {rate:7.1f} msg/s  total {count}  "
            f"simulator->consumer {latency}  gaps {consumer.gaps}  session {state}",
            flush=True,
        )
        if duration > 0 and now - start >= duration:
            break
    ok = consumer.count > 0
    if not ok:
        print("no message reached the consumer", file=sys.stderr)
    return 0 if ok else 1


def demo(
    name: LabName = "wsgw",
    duration: Annotated[float, typer.Option(help="seconds to run; 0 runs until Ctrl-C")] = 0.0,
    hugepages: Annotated[str, typer.Option(help="auto | on | off")] = "auto",
    api_port: Annotated[
        int,
        typer.Option(help="the API's port on 127.0.0.1 (0: 8080, or a free one)", min=0, max=65535),
    ] = 0,
) -> None:
    """The whole gateway on a lab (what `make run` runs): the feed simulator in the lab's
    namespace, a DPDK port on its veth, a Binance session over wsgw's own stack, the hub, a
    ring consumer and the API with the dashboard; prints a line per second (messages/s,
    simulator-to-consumer latency, gaps, state). Falls back to the kernel transport
    without root or DPDK, and says so."""
    sys.exit(run_demo(name=name, duration=duration, hugepages=hugepages, api_port=api_port))
