"""Fan-out end to end on the lab with the DPDK transport: simulator -> gateway -> 10 ring
consumers (separate processes), 10 WebSocket consumers (/v1/stream) and NATS subscribers.
Every consumer gets every message of its topics, in order (the simulator's per-topic
sequence numbers), from the moment it joined; one deliberately slow WebSocket consumer is
cut off by the `disconnect` policy while the others lose nothing."""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import os
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn

from api.app import create_app
from dataplane.ring import ring_name
from gateway.lab import Lab
from gateway.runtime import build_runtime
from gateway.settings import Settings
from gateway.simulator.process import start_simulator
from tests.conftest import requires_dpdk
from tests.integration.test_nats_sink import Subscriber
from wsgw_bench.servers import NatsServer, nats_server_binary

pytestmark = [requires_dpdk, pytest.mark.dpdk]
TOPICS = ["btcusdt@trade", "ethusdt@trade", "solusdt@depth"]
SIM_PORT = 9600
PER_TOPIC = 150  # messages each consumer must see per topic, in order


def contiguous(seqs: list[int]) -> bool:
    return all(b == a + 1 for a, b in itertools.pairwise(seqs))


def ring_consumer(ring: str, topics: list[str], per_topic: int, out: Any) -> None:
    """A consumer process: reads the ring until it has per_topic messages of each topic."""
    from dataplane.ring import Gap
    from gateway.client import Client

    client = Client.attach(ring, topics=topics, copy=True)
    seen: dict[str, list[int]] = defaultdict(list)
    gaps = 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (
        len(seen) < len(TOPICS) or min(len(v) for v in seen.values()) < per_topic
    ):
        for item in client.read(timeout=0.2):
            if isinstance(item, Gap):
                gaps += 1
                continue
            body = orjson.loads(bytes(item.payload))
            seen[item.topic.split(":", 1)[1]].append(int(body["sim_seq"]))
    client.close()
    out.put({"seen": dict(seen), "gaps": gaps})


async def ws_consumer(url: str, per_topic: int) -> dict[str, Any]:
    import websockets

    seen: dict[str, list[int]] = defaultdict(list)
    result: dict[str, Any] = {"seen": seen, "gaps": 0, "close": None}
    try:
        async with websockets.connect(url, max_size=None) as ws:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                frame = orjson.loads(await ws.recv())
                if frame["type"] == "gap":
                    result["gaps"] += 1
                elif frame["type"] == "msg":
                    payload = orjson.loads(frame["payload"])
                    seen[frame["topic"]].append(int(payload["sim_seq"]))
                if len(seen) == len(TOPICS) and min(len(v) for v in seen.values()) >= per_topic:
                    break
    except websockets.ConnectionClosed as closed:
        result["close"] = (closed.rcvd.code, closed.rcvd.reason) if closed.rcvd else None
    return result


async def stalled_consumer(url: str, stall: float) -> tuple[int, str] | None:
    """Reads one message, stops reading for `stall` seconds (a stuck consumer: its small
    receive buffer and the gateway's send buffer fill, then its queue), then drains what
    is left up to the gateway's close frame."""
    import socket

    import websockets

    host, port = url.split("://", 1)[1].split("/", 1)[0].split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    try:
        async with websockets.connect(url, sock=sock, max_size=None, max_queue=4) as ws:
            await ws.recv()
            await asyncio.sleep(stall)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                await ws.recv()
    except websockets.ConnectionClosed as closed:
        return (closed.rcvd.code, closed.rcvd.reason) if closed.rcvd else None
    return None


@pytest.fixture
def gateway(lab: Lab, tmp_path: Path) -> Iterator[tuple[httpx.Client, str, Lab, NatsServer | None]]:
    sim = start_simulator(lab, SIM_PORT, 1000)
    nats = NatsServer().start() if nats_server_binary() else None
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None
    gateway_name = f"e2e{os.getpid()}"
    try:
        with __import__("socket").socket() as probe:
            probe.bind(("127.0.0.1", 0))
            api_port = probe.getsockname()[1]
        settings = Settings(
            state_dir=tmp_path,
            db={"url": f"sqlite:///{tmp_path}/wsgw.db"},  # type: ignore[arg-type]
            auth={"mode": "none"},  # type: ignore[arg-type]
            hub={
                "gateway": gateway_name,  # type: ignore[arg-type]
                "nats": {"servers": [nats.url]} if nats else None,
            },
            dpdk={"hugepages": "off"},  # type: ignore[arg-type]
        )
        app = create_app(settings, build_runtime(settings))
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=api_port, log_level="warning", lifespan="on")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        api = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=10)
        yield api, f"ws://127.0.0.1:{api_port}", lab, nats
    finally:
        if server is not None:
            server.should_exit = True
        if thread is not None:
            thread.join(30)  # the lifespan's shutdown stops the engine and unlinks the ring
        # A shutdown that did not finish (a failed test, a loaded machine) leaves no ring.
        Path("/dev/shm", ring_name(gateway_name, "messages")).unlink(missing_ok=True)
        sim.kill()
        sim.wait()
        if nats is not None:
            nats.cleanup()  # the process and its folder


def post(api: httpx.Client, path: str, body: dict[str, Any] | None = None) -> Any:
    response = api.post(path, json=body)
    assert response.status_code < 400, response.text
    return response.json()


def test_every_consumer_gets_every_message_and_a_slow_one_is_cut_off(gateway) -> None:  # type: ignore[no-untyped-def]
    api, ws_base, lab, nats = gateway
    port = post(
        api,
        "/v1/ports",
        {"name": "lab", "device": lab.vdev, "ipv4": lab.gw_ip, "netmask": lab.netmask},
    )
    session = post(
        api,
        "/v1/sessions",
        {
            "name": "bn",
            "url": f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream",
            "dialect": "binance",
            "transport": "dpdk",
            "port_id": port["id"],
        },
    )
    post(api, f"/v1/sessions/{session['id']}/start")
    sub = post(
        api,
        "/v1/subscriptions",
        {"session_id": session["id"], "topics": TOPICS, "consumer": "e2e", "queue_size": 4096},
    )
    slow_sub = post(
        api,
        "/v1/subscriptions",
        {
            "session_id": session["id"],
            "topics": TOPICS,
            "consumer": "slow",
            "queue_size": 16,
            "overflow": "disconnect",
        },
    )
    nats_sub = Subscriber(nats.url, [f"wsgw.{session['id']}.>"]) if nats else None

    ctx = multiprocessing.get_context("spawn")
    results: Any = ctx.Queue()
    consume = sub["consume"]
    rings = [
        ctx.Process(
            target=ring_consumer, args=(consume["ring"], consume["ring_topics"], PER_TOPIC, results)
        )
        for _ in range(10)
    ]
    for proc in rings:
        proc.start()

    async def websockets_side() -> list[dict[str, Any]]:
        url = f"{ws_base}{consume['stream_url']}&envelope=1"
        slow_url = f"{ws_base}{slow_sub['consume']['stream_url']}&envelope=1"
        tasks: list[Any] = [ws_consumer(url, PER_TOPIC) for _ in range(10)]
        tasks.append(stalled_consumer(slow_url, stall=12.0))
        return list(await asyncio.gather(*tasks))

    try:
        ws_results = asyncio.run(websockets_side())
        ring_results = [results.get(timeout=90) for _ in rings]
    finally:
        for proc in rings:
            proc.join(10)
            if proc.is_alive():
                proc.kill()
        if nats_sub is not None:
            nats_sub.close()

    consumers = [("ring", r) for r in ring_results] + [("stream", r) for r in ws_results[:10]]
    # When a consumer saw nothing, say which ones and what the session went through (one
    # CI run had a consumer with no message at all and no gap in 60 s; not reproduced).
    starved = [f"{kind} {i}" for i, (kind, r) in enumerate(consumers) if not r["seen"]]
    history = api.get(f"/v1/sessions/{session['id']}/events").text if starved else ""
    for kind, result in consumers:
        assert result["gaps"] == 0
        assert set(result["seen"]) == set(TOPICS), (kind, starved, history)
        for topic, seqs in result["seen"].items():
            assert len(seqs) >= PER_TOPIC, topic
            assert contiguous(seqs), f"{topic}: not every message in order"
    slow = ws_results[10]
    assert slow is not None, "the stalled consumer was not cut off"
    assert slow[0] == 4008
    assert "too slow" in slow[1]
    if nats_sub is not None:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for subject, data, _ in nats_sub.got:
            if "$gap" not in subject and "~24gap" not in subject:
                by_topic[subject].append(int(orjson.loads(data)["sim_seq"]))
        assert len(by_topic) == len(TOPICS)
        for seqs in by_topic.values():
            assert len(seqs) >= PER_TOPIC and contiguous(seqs)
