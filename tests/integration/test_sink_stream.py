"""The stream sink end to end (gateway.hub.sink, dataplane/shim/sink.c): a real uvicorn
server serving /v1/stream over a hub whose ring writer sends the frames itself, raw TCP
WebSocket clients that check every byte and every sequence number, and this thread as the
engine (its `publish_batch` runs the sink's sends). With the sink on and off a client gets
the same frames in the same order; a client that stops reading makes the sink stop
(EAGAIN or a partial frame) and Python carry on exactly there; gaps, pings, disconnects
and consumers coming and going while a stream is armed lose and reorder nothing. With the
sink capped at N streams (api.stream_sink_max) and more open, C never serves more than N,
every stream still gets the sink-off bytes, and a place a stream gives up goes to a waiting
one."""

from __future__ import annotations

import base64
import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from gateway.hub import Hub
from gateway.hub import follower as follower_module
from gateway.hub.consumer import Consumer
from gateway.hub.follower import RingFollower
from gateway.hub.sink import AGAIN, GAP, MAX_STREAMS_DEFAULT, PARTIAL, ST_ARMED
from wsgw_bench.servers import ServerThread, gateway_app

TOPICS = ["t0", "t1", "t2"]
MINE = ["t0", "t2"]  # what the clients subscribe to


@dataclass
class Gateway:
    hub: Hub
    server: ServerThread
    app: Any
    session: int

    def consumers(self) -> list[Consumer]:
        return self.hub.consumers()


@pytest.fixture(scope="module", params=["websockets-sansio", "wsproto"])
def gw(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    hub = Hub()
    app = gateway_app(tmp_path_factory.mktemp("gw"), hub, auth="none")
    server = ServerThread(app, ws=request.param).start()
    try:
        session = app.state.control.sessions.create(
            {"name": "feed", "url": "wss://feed.example/ws", "dialect": "generic",
             "transport": "kernel"}
        ).id  # fmt: skip
        # The topics get their ring ids before anyone subscribes (as a running session's do).
        hub.publish_batch([(session, t, b"{}", 0, None) for t in TOPICS])
        yield Gateway(hub, server, app, session)
    finally:
        server.stop()
        hub.close()


@pytest.fixture(autouse=True)
def sink_on(gw: Gateway) -> Iterator[None]:
    gw.app.state.stream_sink = True
    gw.app.state.stream_sink_max = MAX_STREAMS_DEFAULT
    yield
    gw.app.state.stream_sink = True
    gw.app.state.stream_sink_max = MAX_STREAMS_DEFAULT
    wait_until(lambda: not gw.consumers(), what="every stream to end")


def wait_until(check: Callable[[], bool], timeout: float = 20.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        time.sleep(0.002)


# ---- a raw WebSocket client (RFC 6455): it sees the exact bytes the server sends ---------------
class RawClient:
    def __init__(self, gw: Gateway, query: str, *, rcvbuf: int | None = None) -> None:
        self.sock = socket.socket()
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect(("127.0.0.1", gw.server.port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            f"GET /v1/stream?{query} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n".encode()
        )
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._more()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101"), head

    def _more(self) -> None:
        data = self.sock.recv(1 << 16)
        if not data:
            raise ConnectionError("closed")
        self.buf += data

    def frame(self) -> tuple[int, bytes, bytes]:
        """(opcode, payload, the frame's bytes as received)."""
        while len(self.buf) < 2:
            self._more()
        n = self.buf[1] & 0x7F
        assert not self.buf[1] & 0x80, "a server frame is never masked"
        head = 2 + (2 if n == 126 else 8 if n == 127 else 0)
        while len(self.buf) < head:
            self._more()
        if n >= 126:
            n = int.from_bytes(self.buf[2:head], "big")
        while len(self.buf) < head + n:
            self._more()
        raw, self.buf = self.buf[: head + n], self.buf[head + n :]
        return raw[0] & 0x0F, raw[head:], raw

    def send(self, opcode: int, data: bytes) -> None:
        mask = os.urandom(4)
        n = len(data)
        assert n < 126
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(bytes((0x80 | opcode, 0x80 | n)) + mask + body)

    def data_frames(self, count: int) -> list[tuple[int, bytes, bytes]]:
        """The next `count` data frames (pongs skipped)."""
        out = []
        while len(out) < count:
            op, data, raw = self.frame()
            if op in (1, 2) and not past_gap(data):
                out.append((op, data, raw))
        return out

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.send(0x8, (1000).to_bytes(2, "big"))
        self.sock.close()


def past_gap(data: bytes) -> bool:
    """The session's last gap, which a new subscriber gets first (an earlier test's)."""
    return data.startswith(b'{"type":"gap"') and orjson.loads(data).get("past") is True


def payload(i: int, topic: str, pad: int = 20) -> bytes:
    return orjson.dumps({"i": i, "t": topic, "pad": "x" * pad})


def publish(gw: Gateway, start: int, count: int, *, pad: int = 20, batch: int = 7,
            pause: float = 0.0) -> list[int]:  # fmt: skip
    """Messages start.. (topic i % 3); what a client of MINE should get."""
    for first in range(start, start + count, batch):
        numbers = range(first, min(first + batch, start + count))
        gw.hub.publish_batch(
            [(gw.session, TOPICS[i % 3], payload(i, TOPICS[i % 3], pad), 0, i) for i in numbers]
        )
        if pause:
            time.sleep(pause)
    return [i for i in range(start, start + count) if TOPICS[i % 3] in MINE]


def numbers(frames: list[tuple[int, bytes, bytes]]) -> list[int]:
    return [orjson.loads(data)["i"] for _, data, _ in frames]


def query(gw: Gateway, **extra: Any) -> str:
    args = {"session": gw.session, "topics": ",".join(MINE), "queue_size": 100_000, **extra}
    return "&".join(f"{k}={v}" for k, v in args.items())


def one_consumer(gw: Gateway) -> Consumer:
    wait_until(lambda: len(gw.consumers()) == 1, what="the stream's consumer")
    return gw.consumers()[0]


def armed(consumer: Consumer) -> Callable[[], bool]:
    return lambda: consumer.sink_armed


def test_the_same_frames_in_the_same_order_with_the_sink_on_and_off(gw: Gateway) -> None:
    got: dict[bool, list[bytes]] = {}
    for on in (True, False):
        gw.app.state.stream_sink = on
        client = RawClient(gw, query(gw))
        try:
            consumer = one_consumer(gw)
            if on:
                wait_until(armed(consumer), what="the sink to be armed")
            want = publish(gw, 0, 600, pause=0.001)
            # a binary payload (not UTF-8) goes as a binary frame either way
            gw.hub.publish_batch([(gw.session, "t0", b"\xff\x00" + b"\x01" * 200, 0, None)])
            frames = client.data_frames(len(want) + 1)
            assert numbers(frames[:-1]) == want
            assert frames[-1][0] == 2
            got[on] = [raw for _, _, raw in frames]
            if on:
                assert consumer.sink_arms >= 1
                assert consumer.sink is not None
            else:
                assert consumer.sink is None and consumer.sink_arms == 0
        finally:
            client.close()
        wait_until(lambda: not gw.consumers(), what="the stream to end")
    assert got[True] == got[False]


def test_a_client_that_stops_reading_loses_nothing_and_the_sink_takes_it_back(
    gw: Gateway,
) -> None:
    client = RawClient(gw, query(gw), rcvbuf=4096)
    try:
        consumer = one_consumer(gw)
        wait_until(armed(consumer), what="the sink to be armed")
        # large frames, nobody reading: the socket fills, the sink stops (EAGAIN or a partial
        # frame) and Python queues the rest
        # 9 MB: more than any socket buffer (tcp_wmem's 4 MB), less than the 16 MB ring, so
        # the stream's loop is never lapped however late the loaded machine runs it
        want = publish(gw, 0, 3000, pad=3000, batch=30)
        wait_until(lambda: not consumer.sink_armed, what="the sink to stop")
        assert set(consumer.sink_stops) <= {AGAIN, PARTIAL}, consumer.sink_stops
        more = publish(gw, 3000, 300, pad=3000, batch=30)
        frames = client.data_frames(len(want) + len(more))
        assert numbers(frames) == want + more
        # caught up: armed again, and it still sends everything in order
        wait_until(armed(consumer), what="the sink to be armed again")
        arms = consumer.sink_arms
        assert arms >= 2
        last = publish(gw, 3300, 60, pause=0.002)
        assert numbers(client.data_frames(len(last))) == last
    finally:
        client.close()


def test_a_gap_while_armed_comes_between_the_right_messages(gw: Gateway) -> None:
    client = RawClient(gw, query(gw))
    try:
        consumer = one_consumer(gw)
        wait_until(armed(consumer), what="the sink to be armed")
        before = publish(gw, 0, 30)
        seq = gw.hub.publish_gap(gw.session, 5, "reconnect")
        after = publish(gw, 30, 30)
        frames = []
        while len(frames) < len(before) + len(after) + 1:
            _, data, _ = client.frame()
            if not past_gap(data):
                frames.append(orjson.loads(data))
        gap = frames[len(before)]
        assert gap["type"] == "gap" and gap["seq"] == seq and gap["lost"] == 5
        assert consumer.sink_stops.get(GAP) == 1
        rest = frames[: len(before)] + frames[len(before) + 1 :]
        assert [f["i"] for f in rest] == before + after
        wait_until(armed(consumer), what="the sink to be armed again")
        last = publish(gw, 60, 9)
        assert numbers(client.data_frames(len(last))) == last
    finally:
        client.close()


def test_a_stream_of_every_topic_gets_the_gap_notice_not_the_ring_record(gw: Gateway) -> None:
    client = RawClient(gw, f"session={gw.session}&queue_size=1000")
    try:
        consumer = one_consumer(gw)
        wait_until(armed(consumer), what="the sink to be armed")
        publish(gw, 0, 6)
        seq = gw.hub.publish_gap(gw.session, 2, "reconnect")
        publish(gw, 6, 6)
        frames = [orjson.loads(d) for _, d, _ in client.data_frames(13)]
        assert [f.get("i") for f in frames] == [0, 1, 2, 3, 4, 5, None, 6, 7, 8, 9, 10, 11]
        assert frames[6] == {
            "type": "gap",
            "seq": seq,
            "session": gw.session,
            "lost": 2,
            "reason": "reconnect",
            "epoch": gw.hub.epoch_hex,
        }
    finally:
        client.close()


def test_pings_and_other_consumers_coming_and_going_while_armed(gw: Gateway) -> None:
    client = RawClient(gw, query(gw))
    try:
        consumer = one_consumer(gw)
        wait_until(armed(consumer), what="the sink to be armed")
        stop = threading.Event()
        sent: list[int] = []

        def engine() -> None:
            i = 0
            while not stop.is_set():
                sent.extend(publish(gw, i, 6))
                i += 6
                time.sleep(0.001)

        thread = threading.Thread(target=engine)
        thread.start()
        try:
            for k in range(5):
                client.send(0x9, b"p%d" % k)  # the library's pong takes the stream back
                other = RawClient(gw, query(gw, topics="t1"))  # a consumer comes ...
                other.data_frames(3)
                other.close()  # ... and goes
                time.sleep(0.02)
        finally:
            stop.set()
            thread.join()
        got: list[int] = []
        pongs = 0
        while len(got) < len(sent):
            op, data, _ = client.frame()
            if op == 0xA:
                pongs += 1
            elif not past_gap(data):
                got.append(orjson.loads(data)["i"])
        assert got == sent
        assert consumer.sink_takebacks >= 1  # a pong was written by the library meanwhile
        assert pongs == 5 or client.frame()[0] == 0xA  # the last pong may come after
    finally:
        client.close()


def test_a_client_that_disconnects_mid_stream_costs_the_others_nothing(gw: Gateway) -> None:
    keeper = RawClient(gw, query(gw))
    leaver = RawClient(gw, query(gw), rcvbuf=4096)
    try:
        wait_until(lambda: len(gw.consumers()) == 2, what="two consumers")
        for consumer in gw.consumers():
            wait_until(armed(consumer), what="the sink to be armed")
        want = publish(gw, 0, 200, pad=500, batch=10)
        leaver.sock.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        leaver.sock.close()  # a reset, mid-stream
        want += publish(gw, 200, 400, pad=500, batch=10, pause=0.001)
        assert numbers(keeper.data_frames(len(want))) == want
        wait_until(lambda: len(gw.consumers()) == 1, what="the leaver's consumer to end")
    finally:
        keeper.close()


# ---- the cap: at most api.stream_sink_max streams in the sink -----------------------------------
class ArmedWatch:
    """Samples, from another thread, how many of the streams the C sink has armed (each
    socket's own state, not the count the cap is checked against): its max."""

    def __init__(self, gw: Gateway) -> None:
        self.gw = gw
        self.most = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        while not self._stop.is_set():
            armed = 0
            for consumer in self.gw.consumers():
                link: Any = consumer.sink
                entry = getattr(link, "entry", None)
                if entry is not None:
                    armed += entry.state()[ST_ARMED]
            self.most = max(self.most, armed)
            self.samples += 1
            time.sleep(0.0005)

    def __enter__(self) -> ArmedWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def open_clients(gw: Gateway, count: int, **kwargs: Any) -> list[RawClient]:
    """count clients of MINE, connected one after the other (their consumers in that order)."""
    clients: list[RawClient] = []
    for n in range(1, count + 1):
        clients.append(RawClient(gw, query(gw), **kwargs))
        wait_until(lambda n=n: len(gw.consumers()) == n, what=f"{n} consumers")  # type: ignore[misc]
    return clients


def test_capped_at_n_with_n_plus_k_streams_each_gets_the_sink_off_bytes(gw: Gateway) -> None:
    cap, extra = 2, 3
    got: dict[bool, list[list[bytes]]] = {}
    for on in (True, False):
        gw.app.state.stream_sink = on
        gw.app.state.stream_sink_max = cap
        clients = open_clients(gw, cap + extra)
        try:
            consumers = gw.consumers()
            if on:
                wait_until(lambda: sum(c.sink_armed for c in gw.consumers()) == cap, what="N armed")
            with ArmedWatch(gw) as watch:
                want = publish(gw, 0, 600, pause=0.001)
                frames = [client.data_frames(len(want)) for client in clients]
            assert all(numbers(f) == want for f in frames)
            got[on] = [[raw for _, _, raw in f] for f in frames]
            assert watch.samples > 0 and watch.most <= (cap if on else 0)
            if on:  # first armed, first served: the rest never were
                served = [c for c in consumers if c.sink_arms]
                assert len(served) == cap and watch.most == cap
        finally:
            for client in clients:
                client.close()
        wait_until(lambda: not gw.consumers(), what="the streams to end")
    assert got[True] == got[False]


def test_a_stream_the_sink_hands_back_resumes_exactly_and_its_place_goes_to_a_waiting_one(
    gw: Gateway,
) -> None:
    gw.app.state.stream_sink_max = 1
    slow, fast = open_clients(gw, 2, rcvbuf=4096)
    try:
        first, second = gw.consumers()
        wait_until(armed(first), what="the first stream to be armed")
        with ArmedWatch(gw) as watch:
            time.sleep(0.05)
            assert not second.sink_armed and second.sink_arms == 0  # the cap is taken
            # nobody reads: the first's socket fills, the sink stops in it (EAGAIN or a
            # partial frame) and Python owes it the rest, the second one queues on Python
            want = publish(gw, 0, 3000, pad=3000, batch=30)
            wait_until(lambda: not first.sink_armed, what="the sink to stop")
            assert set(first.sink_stops) <= {AGAIN, PARTIAL}, first.sink_stops
            fast_frames = fast.data_frames(len(want))
            # the second caught up while the first still has a backlog: it takes the place
            wait_until(armed(second), what="the second stream to take the place")
            slow_frames = slow.data_frames(len(want))
            last = publish(gw, 3000, 60, pause=0.002)
            assert numbers(fast.data_frames(len(last))) == last
            assert numbers(slow.data_frames(len(last))) == last
        assert numbers(slow_frames) == want
        assert [raw for *_, raw in slow_frames] == [raw for *_, raw in fast_frames]
        assert watch.most == 1
        assert second.sink_armed and not first.sink_armed  # the place stays taken
    finally:
        slow.close()
        fast.close()


def stream_follower(gw: Gateway) -> RingFollower:
    (router,) = [f for f in gw.hub.followers() if f.name == "stream"]
    return router


@contextlib.contextmanager
def armed_stream(gw: Gateway) -> Iterator[tuple[RawClient, Consumer, RingFollower]]:
    """A client whose stream is armed and got messages 0..2 from the sink; its router's
    follower."""
    client = RawClient(gw, query(gw))
    try:
        consumer = one_consumer(gw)
        wait_until(armed(consumer), what="the sink to be armed")
        first = publish(gw, 0, 3)
        assert numbers(client.data_frames(len(first))) == first
        yield client, consumer, stream_follower(gw)
    finally:
        client.close()


def test_the_router_sleeps_while_the_sink_sends_all_and_its_stop_wakes_it(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While its only stream is armed the router's loop is not woken per record (issue #16:
    those wake-ups found only what the sink had sent, and took a CPU from the client); the
    sink's stop at a gap wakes it at once, not after the park's timer (60 s here)."""
    monkeypatch.setattr(follower_module, "PARK_S", 60.0)
    with armed_stream(gw) as (client, consumer, follower):
        wait_until(lambda: follower.parked, what="the router to park")
        wakeups = follower.wakeups
        more = publish(gw, 3, 300, batch=3, pause=0.001)  # 100 ring writes
        assert numbers(client.data_frames(len(more))) == more
        assert follower.wakeups == wakeups  # the sink sent them all, the loop slept
        seq = gw.hub.publish_gap(gw.session, 2, "reconnect")
        after = publish(gw, 303, 30)
        t0 = time.monotonic()
        frames = []
        while len(frames) < len(after) + 1:
            _, data, _ = client.frame()
            frames.append(orjson.loads(data))
        assert time.monotonic() - t0 < 30  # woken by the sink's stop, not the timer
        assert frames[0]["type"] == "gap" and frames[0]["seq"] == seq
        assert [f["i"] for f in frames[1:]] == after
        assert consumer.sink_stops.get(GAP) == 1
        wait_until(armed(consumer), what="the sink to be armed again")
        last = publish(gw, 333, 9)
        assert numbers(client.data_frames(len(last))) == last
        wait_until(lambda: follower.parked, what="the router to park again")


def test_above_the_park_rate_the_router_is_woken_per_record(
    gw: Gateway, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past PARK_MAX_RATE records a second the router does not park (its wake-ups batch
    records then, and parked measured worse at 20k msg/s): every write wakes it."""
    monkeypatch.setattr(follower_module, "PARK_MAX_RATE", 0)  # any rate is past it
    with armed_stream(gw) as (client, consumer, follower):
        wakeups = follower.wakeups
        more = publish(gw, 3, 30, batch=3, pause=0.02)  # 10 writes, 20 ms apart
        assert numbers(client.data_frames(len(more))) == more
        wait_until(lambda: follower.wakeups >= wakeups + 5, what="wake-ups per write")
        assert not follower.parked and consumer.sink_armed
