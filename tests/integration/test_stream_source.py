"""The SDK's /v1/stream source (gateway.client.stream), read in the consumer's thread on
wsgw's sans-IO WebSocket client, against a server nobody here wrote (the `websockets`
library's): the stream's frames as events, the server's pings answered while the consumer
reads, a close code that ends the stream for good raised after the frames before it, and
waits that interrupt and close end from another thread."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import trustme
from websockets.asyncio.server import ServerConnection, serve

from dataplane.ring import WaitPolicy
from gateway.client import Gap, RingMessage, StreamClosedError
from gateway.client.stream import StreamSource
from tests.integration.source_checks import (
    check_a_busy_read_polls_and_a_futex_read_sleeps,
    check_interrupt_and_close_end_a_wait_in_another_thread,
)

EPOCH = "00000000000000aa"
Handler = Callable[[ServerConnection], Awaitable[None]]


class Server:
    """A websockets server on a loop in a thread, running `handler` per connection."""

    def __init__(self, handler: Handler, tls: ssl.SSLContext | None = None) -> None:
        self.handler = handler
        self.tls = tls
        self.loop = asyncio.new_event_loop()
        self.port = 0
        started = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(started,), daemon=True)
        self.thread.start()
        assert started.wait(10)

    def _run(self, started: threading.Event) -> None:
        async def main() -> None:
            async with serve(
                self.handler, "127.0.0.1", 0, ping_interval=None, ssl=self.tls
            ) as server:
                self.port = next(iter(server.sockets)).getsockname()[1]
                started.set()
                await asyncio.Future()

        with contextlib.suppress(asyncio.CancelledError):
            self.loop.run_until_complete(main())

    @property
    def url(self) -> str:
        scheme = "wss" if self.tls else "ws"
        return f"{scheme}://127.0.0.1:{self.port}/v1/stream?session=3&envelope=1"

    def stop(self) -> None:
        for task in asyncio.all_tasks(self.loop):
            self.loop.call_soon_threadsafe(task.cancel)
        self.thread.join(5)


def subscribed(next_seq: int = 1) -> bytes:
    return orjson.dumps({"type": "subscribed", "next_seq": next_seq, "epoch": EPOCH})


def msg(seq: int) -> bytes:
    body = {"type": "msg", "seq": seq, "session": 3, "topic": "t0", "recv_ts_ns": 10 + seq}
    return orjson.dumps({**body, "payload": f'{{"i":{seq}}}'})


@pytest.fixture
def server_of() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def make(handler: Handler, tls: ssl.SSLContext | None = None) -> Server:
        servers.append(Server(handler, tls))
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


@pytest.fixture
def source_of(server_of: Callable[..., Server]) -> Iterator[Callable[..., StreamSource]]:
    """A StreamSource on a new server running `handler`, closed at the end of the test."""
    sources: list[StreamSource] = []

    def make(handler: Handler, tls: ssl.SSLContext | None = None, **kwargs: Any) -> StreamSource:
        sources.append(StreamSource(server_of(handler, tls).url, **kwargs))
        return sources[-1]

    yield make
    for source in sources:
        source.close()


def read_n(source: StreamSource, count: int) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + 10
    while len(got) < count and time.monotonic() < deadline:
        got.extend(source.read(timeout=0.2))
    return got


def read_on(source: StreamSource, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        source.read(timeout=0.1)


def test_frames_become_events_in_order_with_the_queue_full_gap(
    source_of: Callable[..., StreamSource],
) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(subscribed(5).decode())
        for seq in range(5, 505):
            await ws.send(msg(seq).decode())
        gap = {"type": "gap", "seq": 505, "session": 3, "lost": 7, "reason": "queue_full"}
        await ws.send(orjson.dumps(gap).decode())
        await ws.wait_closed()

    source = source_of(handler)
    got = read_n(source, 501)
    messages = [e for e in got if type(e) is RingMessage]
    assert [m.seq for m in messages] == list(range(5, 505))
    assert messages[0] == RingMessage(5, 3, "3:t0", 15, b'{"i":5}', -1)
    assert got[-1] == Gap(7, 505)
    assert source.epoch == int(EPOCH, 16)


def test_the_server_s_pings_are_answered_while_the_consumer_reads(
    source_of: Callable[..., StreamSource],
) -> None:
    answered: list[float] = []

    async def handler(ws: ServerConnection) -> None:
        await ws.send(subscribed().decode())
        for seq in range(1, 4):
            answered.append(await asyncio.wait_for(await ws.ping(), 5))  # the pong's latency
            await ws.send(msg(seq).decode())
        await ws.wait_closed()

    got = read_n(source_of(handler), 3)
    assert [e.seq for e in got] == [1, 2, 3]
    assert len(answered) == 3


def test_a_final_close_is_raised_after_the_frames_that_came_before_it(
    source_of: Callable[..., StreamSource],
) -> None:
    replies: list[object] = []

    async def handler(ws: ServerConnection) -> None:
        await ws.send(subscribed().decode())
        await ws.send(msg(1).decode())
        await ws.close(4410, "session 3 was deleted")
        replies.append(ws.protocol.close_rcvd)  # the client's close frame (section 5.5.1)

    source = source_of(handler)
    assert [e.seq for e in read_n(source, 1)] == [1]
    with pytest.raises(StreamClosedError) as closed:
        read_on(source, 5.0)
    assert (closed.value.code, closed.value.reason) == (4410, "session 3 was deleted")
    assert source.ended
    source.close()
    deadline = time.monotonic() + 5
    while not replies and time.monotonic() < deadline:
        time.sleep(0.01)
    assert replies and replies[0] is not None, "the close was not answered"


def test_a_refusal_before_the_first_frame_is_raised_at_open(
    server_of: Callable[..., Server],
) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.close(4401, "bad token")

    server = server_of(handler)
    with pytest.raises(StreamClosedError) as refused:
        StreamSource(server.url, token="nope")
    assert refused.value.code == 4401


def test_interrupt_and_close_end_a_wait_in_another_thread(
    source_of: Callable[..., StreamSource],
) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.send(subscribed().decode())
        await ws.wait_closed()

    check_interrupt_and_close_end_a_wait_in_another_thread(source_of(handler))


def test_wss_with_the_system_s_trust_store(
    source_of: Callable[..., StreamSource], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS: frames decrypted ahead of a read (more than one TLS record per socket read) are
    all delivered, and the server's pings answered, through the default context."""
    ca = trustme.CA()
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(tls)
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))  # the system's, for the test
    answered: list[float] = []

    async def handler(ws: ServerConnection) -> None:
        await ws.send(subscribed().decode())
        for seq in range(1, 301):
            await ws.send(msg(seq).decode())
        answered.append(await asyncio.wait_for(await ws.ping(), 5))
        await ws.wait_closed()

    source = source_of(handler, tls)
    got = read_n(source, 300)
    deadline = time.monotonic() + 5
    while not answered and time.monotonic() < deadline:
        source.read(timeout=0.1)
    assert [e.seq for e in got] == list(range(1, 301))
    assert answered


@pytest.mark.parametrize(
    ("advice", "given", "want"),
    [
        (None, None, (WaitPolicy("futex"), "default")),
        ("futex", None, (WaitPolicy("futex"), "gateway")),
        ("busy", None, (WaitPolicy("busy"), "gateway")),
        ("busy", "auto", (WaitPolicy("busy"), "gateway")),
        ("spin:40", None, (WaitPolicy("spin", 40), "gateway")),
        ("someday", None, (WaitPolicy("futex"), "default")),  # a later gateway's word
        ("busy", "spin:50", (WaitPolicy("spin", 50), "given")),
        ("busy", WaitPolicy("futex"), (WaitPolicy("futex"), "given")),
    ],
)
def test_a_read_waits_as_given_else_as_the_subscribed_frame_recommends(
    source_of: Callable[..., StreamSource],
    advice: str | None,
    given: WaitPolicy | str | None,
    want: tuple[WaitPolicy, str],
) -> None:
    hello = {"type": "subscribed", "next_seq": 1, "epoch": EPOCH}
    if advice is not None:
        hello["reader_wait"] = advice

    async def handler(ws: ServerConnection) -> None:
        await ws.send(orjson.dumps(hello).decode())
        await asyncio.Future()

    source = source_of(handler, wait=given) if given else source_of(handler)
    assert (source.wait_policy, source.wait_origin) == want


def test_a_wait_policy_that_is_none_is_refused_before_connecting() -> None:
    with pytest.raises(ValueError, match="wait policy must be"):
        StreamSource("ws://127.0.0.1:9/v1/stream?session=3", wait="sometimes")


def test_a_busy_reader_polls_its_socket_and_takes_a_frame_as_it_comes(
    server_of: Callable[..., Server],
) -> None:
    """busy: an empty read polls (the thread's CPU time grows as it waits); futex sleeps;
    a frame sent while the busy reader polls is read."""
    send = asyncio.Event()

    async def handler(ws: ServerConnection) -> None:
        await ws.send(subscribed().decode())
        await send.wait()
        await ws.send(msg(1).decode())
        await asyncio.Future()

    server = server_of(handler)
    busy = StreamSource(server.url, wait="busy")
    sleepy = StreamSource(server.url, wait="futex")
    try:
        check_a_busy_read_polls_and_a_futex_read_sleeps(busy, sleepy)
        threading.Timer(0.05, server.loop.call_soon_threadsafe, (send.set,)).start()
        got = busy.read(timeout=5.0)
        assert [m.seq for m in got] == [1]
    finally:
        busy.close()
        sleepy.close()
