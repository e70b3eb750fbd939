"""The hub end to end: a real uvicorn server on loopback serving /v1/stream, real WebSocket
clients (websockets) in another process, ring consumers in processes of their own, NATS
subscribers against a nats-server of our own, all fed by a synthetic publisher (this
thread plays the engine). Every consumer must get every message of its topics, in order;
a consumer that does not read is cut off (disconnect) or told exactly what it lost
(drop_oldest) while the others lose nothing; tokens and parameters are checked."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing as mp
import os
import socket
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from dataplane.ring import SHM_DIR, RingWriter
from gateway.hub import Hub, ring_topics
from gateway.hub.consumer import ConsumerStats
from gateway.hub.nats import NatsConfig, NatsSink
from tests.integration.conftest import spawn
from wsgw_bench.servers import NatsServer, ServerThread, gateway_app, nats_server_binary

CTX = mp.get_context("spawn")
RING = f"wsgw-test-{os.getpid()}-hubstream"
TOPICS = ["t0", "t1", "t2", "t3"]
HAVE_NATS = nats_server_binary() is not None
SENTINEL = -1  # the number of a message that says "that was all"


# ---- the gateway under test ----------------------------------------------------------------
@dataclass
class Gateway:
    hub: Hub
    server: ServerThread
    service: Any
    session: int
    consume: str  # token secrets
    admin: str
    nats: NatsServer | None

    @property
    def ws(self) -> str:
        return self.server.ws_url + "/v1/stream"

    def stats(self, name: str) -> ConsumerStats | None:
        return next((s for s in self.hub.consumer_stats() if s.name == name), None)

    def wait_consumers(self, n: int, timeout: float = 30.0) -> None:
        wait_until(lambda: len(self.hub.consumers()) == n, timeout, f"{n} consumers")


@pytest.fixture(
    scope="module",
    params=[("websockets-sansio", True), ("wsproto", True), ("websockets-sansio", False)],
    ids=["websockets-wire", "wsproto-wire", "websockets-asgi"],
)
def gw(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    """The gateway, once per WebSocket implementation uvicorn may pick ("auto" takes
    websockets when it is installed, else wsproto), with the stream's fast path (frames
    written to the connection's transport) and once with plain ASGI sends."""
    impl, wire = request.param
    state = tmp_path_factory.mktemp("gw")
    nats = NatsServer().start() if HAVE_NATS else None
    sink = NatsSink(NatsConfig(servers=[nats.url])).start(10) if nats else None
    hub = Hub(ring=RingWriter.create(RING, 64 << 20), nats=sink)
    app = gateway_app(state, hub)
    app.state.stream_wire = wire
    server = ServerThread(app, ws=impl).start()
    try:
        service = server.config.app.state.control
        _, consume = service.tokens.create("reader", ["consume"])
        _, admin = service.tokens.create("operator", ["admin"])
        session = service.sessions.create(
            {
                "name": "feed",
                "url": "wss://feed.example/ws",
                "dialect": "generic",
                "transport": "kernel",
            }
        ).id
        yield Gateway(hub, server, service, session, consume, admin, nats)
    finally:
        server.stop()
        hub.close()
        if nats is not None:
            nats.cleanup()
        assert not list(SHM_DIR.glob(RING + "*")), "ring file left behind"


@pytest.fixture
def procs() -> Iterator[list[Any]]:
    """Every process a test starts: killed and reaped whatever happened."""
    started: list[Any] = []
    yield started
    for p in started:
        if p.is_alive():
            p.kill()
        p.join(10)


def wait_until(check: Callable[[], bool], timeout: float = 30.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or check}")
        time.sleep(0.005)


def payload(i: int, topic: str, pad: int) -> bytes:
    return orjson.dumps({"i": i, "t": topic, "ts": time.time_ns(), "pad": "x" * pad})


def publish(hub: Hub, session: int, start: int, count: int, *, pad: int = 40, batch: int = 100,
            topics: list[str] = TOPICS) -> None:  # fmt: skip
    """Messages start..start+count-1; message i goes to topics[i % len(topics)]."""
    for first in range(start, start + count, batch):
        numbers = range(first, min(first + batch, start + count))
        picked = [(i, topics[i % len(topics)]) for i in numbers]
        hub.publish_batch([(session, t, payload(i, t, pad), time.time_ns(), i) for i, t in picked])


def publish_sentinel(hub: Hub, session: int, topic: str) -> None:
    hub.publish_batch([(session, topic, payload(SENTINEL, topic, 0), time.time_ns(), None)])


def expected(topics: list[str], start: int, count: int) -> list[int]:
    return [i for i in range(start, start + count) if TOPICS[i % len(TOPICS)] in topics]


# ---- client processes (module level: spawn imports them by name) -------------------------
def ws_clients_main(specs: list[dict[str, Any]], go: Any, results: Any) -> None:
    results.put(asyncio.run(_ws_clients(specs, go)))


async def _ws_clients(specs: list[dict[str, Any]], go: Any) -> list[dict[str, Any]]:
    return list(await asyncio.gather(*(_ws_client(spec, go) for spec in specs)))


async def _ws_client(spec: dict[str, Any], go: Any) -> dict[str, Any]:
    """Read a stream; record message numbers, gaps (with their position) and the close.
    modes: fast (read until `expect` messages or the sentinel), stall (read nothing until
    `go`, then read until closed or the sentinel comes)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    got: list[int] = []
    seqs: list[int] = []
    gaps: list[tuple[int, dict[str, Any]]] = []
    out: dict[str, Any] = {"name": spec["name"], "close": None, "error": None}
    kwargs: dict[str, Any] = {"max_size": None, "ping_interval": None, "open_timeout": 20}
    if spec.get("rcvbuf"):  # a reader whose socket holds little: backpressure comes soon
        host, port = spec["url"].split("/")[2].split(":")
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, spec["rcvbuf"])
        sock.connect((host, int(port)))
        kwargs.update(sock=sock, max_queue=2)
    try:
        async with connect(spec["url"], additional_headers=spec.get("headers", {}), **kwargs) as ws:
            if spec["mode"] == "stall":
                while not go.is_set():
                    await asyncio.sleep(0.01)
            while True:
                frame = await asyncio.wait_for(ws.recv(), 30)
                obj = orjson.loads(frame)
                if obj.get("type") == "gap" and obj.get("past"):
                    # the session's gap from an earlier test (see the late-consumer test)
                    assert not got, "a past gap after data"
                    continue
                if obj.get("type") == "gap":
                    gaps.append((len(got), obj))
                    continue
                if obj.get("type") == "subscribed":
                    continue
                if obj.get("type") == "msg":
                    seqs.append(obj["seq"])
                    assert obj["topic"] == orjson.loads(obj["payload"])["t"]
                    obj = orjson.loads(obj["payload"])
                if obj["i"] == SENTINEL:  # the publisher's last message
                    break
                got.append(obj["i"])
                if spec["mode"] == "fast" and len(got) >= spec.get("expect", 10**12):
                    break
    except ConnectionClosed as exc:
        out["close"] = (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd else ("no close frame", "")
    except Exception as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    out.update(got=got, seqs=seqs, gaps=gaps)
    return out


def ring_consumer_main(
    name: str, filters: list[str], expect: int, ready: Any, results: Any
) -> None:
    from dataplane.ring import Gap, RingReader

    got: list[int] = []
    gaps: list[tuple[int, dict[str, Any]]] = []
    lapped = 0
    with RingReader.attach(name, topics=filters, start="latest") as reader:
        ready.set()
        deadline = time.monotonic() + 60
        while len(got) < expect and time.monotonic() < deadline:
            for event in reader.read_batch(timeout=1.0):
                if isinstance(event, Gap):
                    lapped += event.lost
                elif event.topic == "$gap":
                    gaps.append((len(got), orjson.loads(bytes(event.payload))))
                else:
                    got.append(orjson.loads(bytes(event.payload))["i"])
    results.put({"name": f"ring {filters}", "got": got, "gaps": gaps, "lapped": lapped})


def nats_subscribers_main(
    url: str, subjects: list[str], expect: list[int], ready: Any, results: Any
) -> None:
    results.put(asyncio.run(_nats_subscribers(url, subjects, expect, ready)))


async def _nats_subscribers(
    url: str, subjects: list[str], expect: list[int], ready: Any
) -> list[dict[str, Any]]:
    import nats

    out = []
    done = []
    conns = []
    for subject, n in zip(subjects, expect, strict=True):
        nc = await nats.connect(url)
        conns.append(nc)
        box: dict[str, Any] = {"name": f"nats {subject}", "got": [], "gaps": []}
        event = asyncio.Event()

        async def on_msg(
            m: Any, box: dict[str, Any] = box, n: int = n, event: asyncio.Event = event
        ) -> None:
            if m.subject.endswith(".$gap"):
                box["gaps"].append((len(box["got"]), orjson.loads(m.data)))
            else:
                box["got"].append(orjson.loads(m.data)["i"])
            if len(box["got"]) >= n:
                event.set()

        await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
        await nc.flush()
        out.append(box)
        done.append(event)
    ready.set()
    with contextlib.suppress(TimeoutError):  # reported as what was missing
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in done)), 60)
    await asyncio.sleep(0.2)  # a gap event published last may still be on its way
    for nc in conns:
        await nc.close()
    return out


# ---- tests ------------------------------------------------------------------------------------
def test_every_consumer_gets_every_message_of_its_topics_in_order(
    gw: Gateway, procs: list[Any]
) -> None:
    n, gap_at = 20_000, 10_000
    sid = gw.session
    sub_all = gw.service.subscriptions.create(
        {"session_id": sid, "topics": TOPICS, "consumer": "sub-all", "queue_size": 50_000}
    ).subscription.id
    sub_two = gw.service.subscriptions.create(
        {"session_id": sid, "topics": ["t1", "t2"], "consumer": "sub-two", "queue_size": 50_000}
    ).subscription.id
    auth = {"Authorization": f"Bearer {gw.consume}"}
    big = "queue_size=50000"
    ws_specs: list[dict[str, Any]] = []
    for k in range(10):
        if k < 3:
            url, topics = f"{gw.ws}?subscription={sub_all}", TOPICS
        elif k < 5:
            url, topics = f"{gw.ws}?subscription={sub_two}&envelope=1", ["t1", "t2"]
        elif k < 8:
            topics = [TOPICS[k % 4]]
            url = f"{gw.ws}?session={sid}&topics={topics[0]}&{big}&envelope={k % 2}"
        else:
            url, topics = f"{gw.ws}?session={sid}&{big}&token={gw.consume}", TOPICS
        ws_specs.append(
            {
                "name": f"ws{k}",
                "url": url,
                "headers": auth if "token=" not in url else {},
                "mode": "fast",
                "expect": len(expected(topics, 0, n)),
                "topics": topics,
            }
        )
    go, ws_results = CTX.Event(), CTX.Queue()
    spawn(procs, ws_clients_main, ws_specs, go, ws_results)
    ring_results, ring_specs = CTX.Queue(), []
    for k in range(10):
        topics = TOPICS if k < 4 else [TOPICS[k % 4]]
        ring_specs.append(topics)
        ready = CTX.Event()
        spawn(
            procs,
            ring_consumer_main,
            RING,
            ring_topics(sid, topics),
            len(expected(topics, 0, n)),
            ready,
            ring_results,
        )
        assert ready.wait(60), "ring consumer did not attach"  # fmt: skip
    nats_results = None
    nats_subjects = [f"wsgw.{sid}.>", f"wsgw.{sid}.t0", f"wsgw.{sid}.t3"]
    nats_topics = [TOPICS, ["t0"], ["t3"]]
    if gw.nats is not None:
        ready, nats_results = CTX.Event(), CTX.Queue()
        counts = [len(expected(t, 0, n)) for t in nats_topics]
        spawn(procs, nats_subscribers_main, gw.nats.url, nats_subjects, counts, ready, nats_results)
        assert ready.wait(60), "NATS subscribers did not connect"
    gw.wait_consumers(10)

    publish(gw.hub, sid, 0, gap_at)
    gap_seq = gw.hub.publish_gap(sid, 42, "reconnect")
    publish(gw.hub, sid, gap_at, n - gap_at)

    results = ws_results.get(timeout=120)
    rings = [ring_results.get(timeout=60) for _ in range(10)]
    nats_got = nats_results.get(timeout=60) if nats_results is not None else []
    gw.wait_consumers(0)
    for spec, r in zip(ws_specs, results, strict=True):
        assert r["error"] is None, r
        assert r["got"] == expected(spec["topics"], 0, n), spec["name"]
        assert r["seqs"] == sorted(r["seqs"])
        (position, gap), *more = r["gaps"]
        assert not more
        assert position == len(expected(spec["topics"], 0, gap_at)), spec["name"]
        assert (gap["seq"], gap["lost"], gap["reason"], gap["session"]) == (
            gap_seq,
            42,
            "reconnect",
            sid,
        )
    for topics, r in zip(ring_specs, sorted(rings, key=lambda r: -len(r["got"])), strict=False):
        _ = topics
        assert r["lapped"] == 0
    for r in rings:
        mine = [t for t in TOPICS if f"{sid}:{t}" in r["name"]]
        assert r["got"] == expected(mine, 0, n), r["name"]
        assert [(p, g["lost"], g["seq"]) for p, g in r["gaps"]] == [
            (len(expected(mine, 0, gap_at)), 42, gap_seq)
        ]
    for topics, r in zip(nats_topics, nats_got, strict=True):
        assert r["got"] == expected(topics, 0, n), r["name"]
        if r["name"].endswith(">"):
            assert [(p, g["lost"]) for p, g in r["gaps"]] == [(gap_at, 42)]
    stats = {s.name: s for s in gw.hub.consumer_stats()}
    assert stats["sub-all"].delivered == 3 * (n + 1)
    app_state = gw.server.config.app.state
    assert app_state.stream_paths["wire" if app_state.stream_wire else "asgi"] >= 10
    assert stats["sub-all"].disconnects == {"client": 3}
    if gw.nats is None:
        pytest.skip("nats-server is not installed: WebSocket and ring consumers checked, NATS not")


def test_a_consumer_that_stops_reading_is_cut_off_and_the_others_lose_nothing(
    gw: Gateway, procs: list[Any]
) -> None:
    sid = gw.session
    auth = {"Authorization": f"Bearer {gw.consume}"}
    base = f"{gw.ws}?session={sid}&topics=t0"
    specs = [
        {"name": "slow", "url": f"{base}&queue_size=64&consumer=slow-1", "headers": auth,
         "mode": "stall", "rcvbuf": 4096},
        {"name": "fast-a", "url": f"{base}&queue_size=1000000&consumer=fast-a", "headers": auth,
         "mode": "fast"},
        {"name": "fast-b", "url": f"{base}&queue_size=1000000&envelope=1&consumer=fast-b",
         "headers": auth, "mode": "fast"},
    ]  # fmt: skip
    go, results = CTX.Event(), CTX.Queue()

    def slow_cut() -> bool:
        stats = gw.stats("slow-1")
        return stats is not None and stats.disconnects.get("slow", 0) == 1

    spawn(procs, ws_clients_main, specs, go, results)
    gw.wait_consumers(3)
    total = 0
    while not slow_cut() and total < 50_000:  # its buffers fill, then its queue of 64
        publish(gw.hub, sid, total, 100, pad=1000, topics=["t0"])
        total += 100
    assert slow_cut(), "the consumer that does not read was never cut off"
    publish(gw.hub, sid, total, 1000, pad=1000, topics=["t0"])  # the others go on
    total += 1000
    publish_sentinel(gw.hub, sid, "t0")
    go.set()
    out = {r["name"]: r for r in results.get(timeout=120)}
    slow = out["slow"]
    assert slow["close"] == (4008, "consumer too slow: queue of 64 messages full"), slow["close"]
    assert slow["got"] == list(range(len(slow["got"])))  # a clean prefix, nothing skipped
    assert slow["gaps"] == []
    for name in ("fast-a", "fast-b"):
        assert out[name]["error"] is None and out[name]["close"] is None, out[name]
        assert out[name]["got"] == list(range(total)), name
    gw.wait_consumers(0)
    assert gw.stats("fast-a").dropped == 0  # type: ignore[union-attr]


def test_drop_oldest_tells_the_consumer_exactly_what_it_lost(gw: Gateway, procs: list[Any]) -> None:
    sid = gw.session
    url = (
        f"{gw.ws}?session={sid}&topics=t0&queue_size=64&overflow=drop_oldest&envelope=1"
        f"&consumer=lossy&token={gw.consume}"
    )
    spec = {"name": "lossy", "url": url, "mode": "stall", "rcvbuf": 4096}
    go, results = CTX.Event(), CTX.Queue()
    spawn(procs, ws_clients_main, [spec], go, results)
    gw.wait_consumers(1)
    stats = gw.stats("lossy")
    assert stats is not None
    total = 0
    while stats.dropped < 500 and total < 50_000:
        publish(gw.hub, sid, total, 100, pad=1000, topics=["t0"])
        total += 100
    assert stats.dropped >= 500
    publish_sentinel(gw.hub, sid, "t0")  # the newest: drop_oldest never drops it
    go.set()
    (r,) = results.get(timeout=120)
    assert r["error"] is None and r["close"] is None, r
    got, gaps = r["got"], r["gaps"]
    assert got == sorted(got) and got[-1] == total - 1
    assert gaps and all(g["reason"] == "queue_full" for _, g in gaps)
    # Between two messages it got, the ones missing are exactly what the gaps said.
    lost_before: dict[int, int] = {}
    for position, gap in gaps:
        lost_before[position] = lost_before.get(position, 0) + gap["lost"]
    previous = -1
    for position, i in enumerate(got):
        assert i - previous - 1 == lost_before.get(position, 0), (position, i)
        previous = i
    assert len(got) + sum(g["lost"] for _, g in gaps) == total
    gw.wait_consumers(0)
    assert stats.dropped == sum(g["lost"] for _, g in gaps)
    assert stats.disconnects == {"client": 1}


def test_a_late_consumer_is_told_of_the_sessions_last_gap(gw: Gateway) -> None:
    """A stream that subscribes after the session's gap (a restored session reconnects
    before any consumer is there) gets that gap first, once, marked past with its time, in
    both modes; a stream that was there gets it live, once; a newer gap reaches both live;
    a stream of another session gets none."""
    from websockets.asyncio.client import ClientConnection, connect

    sid = gw.service.sessions.create(
        {"name": "late", "url": "wss://feed.example/ws", "dialect": "generic",
         "transport": "kernel"}
    ).id  # fmt: skip
    quiet = gw.service.sessions.create(
        {"name": "quiet", "url": "wss://feed.example/ws", "dialect": "generic",
         "transport": "kernel"}
    ).id  # fmt: skip
    base = f"{gw.ws}?topics=t0&token={gw.consume}&session="

    async def frames(ws: ClientConnection, until: int = SENTINEL) -> list[dict[str, Any]]:
        """Frames (without the hello) up to the data message numbered `until`."""
        out: list[dict[str, Any]] = []
        while True:
            obj = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            if obj.get("type") == "subscribed":
                continue
            out.append(obj)
            data = orjson.loads(obj["payload"]) if obj.get("type") == "msg" else obj
            if data.get("i") == until:
                return out

    def numbers(got: list[dict[str, Any]]) -> list[Any]:
        """Data messages as their number, gaps as (reason, past)."""
        return [
            (f["reason"], bool(f.get("past")))
            if f.get("type") == "gap"
            else orjson.loads(f["payload"] if f.get("type") == "msg" else orjson.dumps(f))["i"]
            for f in got
        ]

    async def consumers(n: int) -> None:
        while len(gw.hub.consumers()) != n:
            await asyncio.sleep(0.005)

    async def run() -> dict[str, Any]:
        async with connect(f"{base}{sid}&envelope=1") as early:
            await consumers(1)
            publish(gw.hub, sid, 0, 8, topics=["t0"])
            before = time.time_ns()
            gw.hub.publish_gap(sid, None, "restart: an older one")
            gap = gw.hub.publish_gap(sid, None, "restart: killed")
            after = time.time_ns()
            publish(gw.hub, sid, 8, 8, topics=["t0"])
            seen = await frames(early, 15)  # routed: nothing old is pending any more
            async with (
                connect(f"{base}{sid}&envelope=1") as late,
                connect(f"{base}{sid}") as late_raw,
                connect(f"{base}{quiet}&envelope=1") as other,
            ):
                await consumers(4)
                publish(gw.hub, sid, 16, 4, topics=["t0"])
                newer = gw.hub.publish_gap(sid, 2, "reconnect")
                publish(gw.hub, sid, 20, 4, topics=["t0"])
                publish_sentinel(gw.hub, sid, "t0")
                publish_sentinel(gw.hub, quiet, "t0")
                return {
                    "early": seen + await frames(early),
                    "late": await frames(late),
                    "late_raw": await frames(late_raw),
                    "other": await frames(other),
                    "gap": gap,
                    "newer": newer,
                    "window": (before, after),
                }

    r = asyncio.run(run())
    after_gap = [*range(16, 20), ("reconnect", False), *range(20, 24), SENTINEL]
    assert numbers(r["early"]) == [
        *range(8),
        ("restart: an older one", False),
        ("restart: killed", False),
        *range(8, 16),
        *after_gap,
    ]
    for name in ("late", "late_raw"):
        assert numbers(r[name]) == [("restart: killed", True), *after_gap], name
        past = r[name][0]
        assert (past["seq"], past["session"], past["lost"]) == (r["gap"], sid, None), name
        assert r["window"][0] <= past["ts_ns"] <= r["window"][1], name
        assert r[name][5]["seq"] == r["newer"] and "past" not in r[name][5], name
    assert numbers(r["other"]) == [SENTINEL]
    gw.wait_consumers(0)


async def _close_of(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async with connect(url, additional_headers=headers or {}, ping_interval=None) as ws:
        try:
            frame = await asyncio.wait_for(ws.recv(), 10)
        except ConnectionClosed as exc:
            closed = exc.rcvd
        else:
            return (0, str(frame))
    assert closed is not None
    return closed.code, closed.reason


def test_tokens_scopes_and_parameters_are_checked(gw: Gateway) -> None:
    sid = gw.session
    body = {"session_id": sid, "topics": ["t0"], "consumer": "c"}
    sub = gw.service.subscriptions.create(body).subscription.id
    consume = {"Authorization": f"Bearer {gw.consume}"}
    no_token = (4401, "missing, invalid or revoked token")
    no_scope = (4403, "the stream needs the 'consume' scope")
    cases = [
        (f"{gw.ws}?subscription={sub}", None, no_token),
        (f"{gw.ws}?subscription={sub}&token=wsgw_nope", None, no_token),
        (f"{gw.ws}?subscription={sub}", {"Authorization": f"Bearer {gw.admin}"}, no_scope),
        (f"{gw.ws}?subscription={sub}&token={gw.admin}", None, no_scope),
        (f"{gw.ws}?subscription=999", consume, (4404, "subscription 999 not found")),
        (f"{gw.ws}?session=999&topics=a", consume, (4404, "session 999 not found")),
        (f"{gw.ws}?session={sid}&overflow=block", consume,
         (4400, "overflow must be disconnect or drop_oldest, not 'block'")),
        (gw.ws, consume, (4400, "give either subscription=ID or session=ID (with topics=a,b)")),
    ]  # fmt: skip
    for url, headers, want in cases:
        assert asyncio.run(_close_of(url, headers)) == want, url

    async def hello() -> dict[str, Any]:
        from websockets.asyncio.client import connect

        async with connect(f"{gw.ws}?subscription={sub}&envelope=1&token={gw.consume}") as ws:
            first: dict[str, Any] = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            return first

    first = asyncio.run(hello())
    assert first == {
        "type": "subscribed",
        "subscription": sub,
        "session": sid,
        "topics": ["t0"],
        "queue_size": 4096,
        "overflow": "disconnect",
        "conflation_ms": 0,
        "next_seq": first["next_seq"],
        "epoch": f"{gw.hub.ring.epoch:016x}" if gw.hub.ring else first["epoch"],
        "latency_profile": "economical",
        "reader_wait": "futex",
    }
    assert first["epoch"] == gw.hub.epoch_hex
    gw.wait_consumers(0)


def test_metrics_show_the_hub_and_its_consumers(gw: Gateway) -> None:
    with urllib.request.urlopen(gw.server.url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    for needle in (
        "wsgw_hub_published_total",
        "wsgw_hub_ring_writes_total",
        'wsgw_consumer_delivered_total{consumer="sub-all"}',
        'wsgw_consumer_disconnects_total{consumer="slow-1",reason="slow"} 1.0',
        'wsgw_consumer_dropped_total{consumer="lossy",reason="queue_full"}',
        'wsgw_consumer_lag{consumer="sub-all"} 0.0',
    ):
        assert needle in text, needle
    if gw.nats is not None:
        assert "wsgw_nats_published_total" in text
        assert 'wsgw_nats_dropped_total{reason="buffer_full"} 0.0' in text


@pytest.mark.skipif(
    not HAVE_NATS, reason="nats-server is not installed (apt-get install nats-server)"
)
def test_nats_server_is_there() -> None:
    """A visible skip when the NATS part of the fan-out test could not run."""
    assert Path(nats_server_binary() or "").exists()
