"""The SDK's core NATS reader (gateway.client.nats_core, under NatsSource) against a real
nats-server, with nats-py as the publisher: messages and headers as published, the server's
PINGs answered, a dropped connection (server restart, a reader that paused past the server's
patience, a server gone silent) made again by the next read, tokens, and waits that end on
interrupt and close."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator

import pytest

from dataplane.ring import WaitPolicy
from gateway.client import ClientEvent, Gap, RingMessage, SourceUnavailableError, nats_core
from gateway.client.nats import NatsSource
from gateway.client.nats_core import CoreNatsSubscriber, NatsNeedsLibraryError
from gateway.hub.names import RING_GAP_TOPIC
from tests.integration.nats_helpers import needs_nats
from tests.integration.source_checks import (
    check_a_busy_read_polls_and_a_futex_read_sleeps,
    check_interrupt_and_close_end_a_wait_in_another_thread,
)
from wsgw_bench.servers import NatsServer, free_port

pytestmark = needs_nats

SESSION = 3


def publish(
    url: str,
    count: int,
    start: int = 0,
    token: str | None = None,
    topics: tuple[str, ...] = ("t0",),
    headers: bool = True,
) -> None:
    """count messages on the session's topics in turn (t0), with the sink's headers (or
    none), from nats-py."""

    async def main() -> None:
        import nats

        nc = await nats.connect(url, token=token)
        for i in range(start, start + count):
            fields = {"Wsgw-Seq": str(i), "Wsgw-Recv-Ts": str(1000 + i)} if headers else None
            topic = topics[i % len(topics)]
            await nc.publish(f"wsgw.{SESSION}.{topic}", b'{"i":%d}' % i, headers=fields)
        await nc.flush()
        await nc.close()

    asyncio.run(main())


def read_n(source: NatsSource, count: int, timeout: float = 10.0) -> list[RingMessage]:
    return [e for e in read_events(source, count, timeout) if type(e) is RingMessage]


def read_events(source: NatsSource, count: int, timeout: float = 10.0) -> list[ClientEvent]:
    """Events until count messages came (or timeout)."""
    got: list[ClientEvent] = []
    deadline = time.monotonic() + timeout
    while sum(type(e) is RingMessage for e in got) < count and time.monotonic() < deadline:
        got.extend(source.read(timeout=0.2))
    return got


def core_of(source: NatsSource) -> CoreNatsSubscriber:
    core = source._core
    assert core is not None, "core NATS over nats:// is read by the core reader"
    return core


def wait_connected(source: NatsSource, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not core_of(source).connected:
        assert time.monotonic() < deadline, f"not connected again: {core_of(source).last_error}"
        source.read(timeout=0.1)


@pytest.fixture
def server() -> Iterator[NatsServer]:
    with NatsServer(port=free_port()) as nats:
        yield nats


def test_messages_come_in_order_with_the_published_headers(server: NatsServer) -> None:
    source = NatsSource(server.url, session=SESSION)
    try:
        publish(server.url, 500)
        got = read_n(source, 500)
    finally:
        source.close()
    assert [m.seq for m in got] == list(range(500))
    assert [m.ts_ns for m in got] == [1000 + i for i in range(500)]
    assert {m.topic for m in got} == {f"{SESSION}:t0"}
    assert got[7].payload == b'{"i":7}'
    assert source.ended


def test_the_connection_s_name_shows_in_the_server_s_monitoring() -> None:
    with NatsServer(monitor=True) as server:
        source = NatsSource(server.url, session=SESSION, name="desk-7")
        try:
            url = f"http://127.0.0.1:{server.monitor_port}/connz?subs=1"
            with urllib.request.urlopen(url, timeout=5) as answer:
                connz = json.load(answer)
        finally:
            source.close()
    [connection] = connz["connections"]
    assert connection["name"] == "desk-7"
    assert connection["subscriptions_list"] == [f"wsgw.{SESSION}.*"]


def test_a_consumer_that_does_not_keep_up_holds_a_bounded_backlog(
    server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the socket holds beyond MAX_HELD read-but-untaken messages stays in the socket
    (TCP pushes back to the server): a slow consumer's memory is bounded, and it still gets
    every message, in order, once it reads."""
    monkeypatch.setattr(nats_core, "MAX_HELD", 100)
    monkeypatch.setattr(nats_core, "RECV_BYTES", 2048)
    source = NatsSource(server.url, session=SESSION)
    try:
        publish(server.url, 2000)
        time.sleep(0.3)  # all of it sent, most of it in the socket
        first = source.read(max=10, timeout=1.0)
        held = len(core_of(source)._pending)
        rest = read_n(source, 2000 - len(first))
    finally:
        source.close()
    assert held < 100 + 2048 // 40  # at most one read's messages beyond the bound
    assert [m.seq for m in [*first, *rest]] == list(range(2000))  # type: ignore[union-attr]


def test_topics_asked_for_are_filtered_by_the_server(server: NatsServer) -> None:
    source = NatsSource(server.url, session=SESSION, topics=["t1", "t2"])
    try:
        publish(server.url, 300, topics=("t0", "t1", "t2"))
        got = read_n(source, 200)
        assert source.read(timeout=0.3) == []
    finally:
        source.close()
    assert [m.seq for m in got] == [i for i in range(300) if i % 3]
    assert core_of(source).received == 200  # t0's never came over the connection


def test_a_server_restart_is_a_reconnect_and_the_stream_goes_on(server: NatsServer) -> None:
    source = NatsSource(server.url, session=SESSION)
    try:
        publish(server.url, 10)
        assert [m.seq for m in read_n(source, 10)] == list(range(10))
        server.stop()
        assert source.read(timeout=0.3) == []  # the drop is seen, nothing raised
        assert not core_of(source).connected
        server.start()
        wait_connected(source)
        publish(server.url, 10, start=10)
        after = read_events(source, 10)  # nothing published meanwhile: no Gap
        assert [m.seq for m in after] == list(range(10, 20))  # type: ignore[union-attr]
        assert (core_of(source).connects, core_of(source).disconnects) == (2, 1)
    finally:
        source.close()


@pytest.mark.parametrize("headers", [True, False])
def test_what_a_reconnect_missed_is_a_gap_before_the_next_message(
    server: NatsServer, headers: bool
) -> None:
    """Core NATS keeps nothing while the reader is away: the first message after a
    reconnect comes behind a Gap of the ring sequences in between (with the sink's
    headers), or of unknown size, Gap(0, 0) (without them)."""
    source = NatsSource(server.url, session=SESSION)
    try:
        publish(server.url, 10, headers=headers)
        assert len(read_n(source, 10)) == 10
        server.stop()
        source.read(timeout=0.3)
        server.start()
        wait_connected(source)
        publish(server.url, 5, start=15, headers=headers)  # 10-14 went by meanwhile
        first = source.read(max=1, timeout=5.0)  # the Gap comes with its message
        after = first + read_events(source, 4)
    finally:
        source.close()
    assert len(first) == 2
    assert after[0] == (Gap(5, 10) if headers else Gap(0, 0))
    assert [type(e) for e in after[1:]] == [RingMessage] * 5


def test_a_token_server_refuses_a_wrong_token_and_serves_the_right_one() -> None:
    with NatsServer(config='authorization { token: "s3cret" }') as server:
        with pytest.raises(SourceUnavailableError, match="Authorization Violation"):
            NatsSource(server.url, session=SESSION, token="wrong")
        source = NatsSource(server.url, session=SESSION, token="s3cret")
        try:
            publish(server.url, 5, token="s3cret")
            assert [m.seq for m in read_n(source, 5)] == list(range(5))
        finally:
            source.close()


PATIENT_LITTLE = 'ping_interval: "500ms"\nping_max: 1\n'


def test_the_server_s_pings_are_answered_while_the_consumer_reads() -> None:
    with NatsServer(config=PATIENT_LITTLE) as server:
        source = NatsSource(server.url, session=SESSION)
        try:
            deadline = time.monotonic() + 3.0  # six of the server's PINGs
            while time.monotonic() < deadline:
                source.read(timeout=0.2)
            publish(server.url, 3)
            assert [m.seq for m in read_n(source, 3)] == [0, 1, 2]
            assert core_of(source).disconnects == 0, core_of(source).last_error
        finally:
            source.close()


def test_a_consumer_that_paused_past_the_server_s_patience_reconnects_when_it_reads() -> None:
    with NatsServer(config=PATIENT_LITTLE) as server:
        source = NatsSource(server.url, session=SESSION)
        try:
            time.sleep(2.5)  # not reading: the server's PINGs go unanswered, it drops us
            wait_connected(source)
            if core_of(source).disconnects == 0:  # the drop shows on the next read
                source.read(timeout=0.5)
                wait_connected(source)
            assert core_of(source).disconnects == 1
            publish(server.url, 3)
            assert [m.seq for m in read_n(source, 3)] == [0, 1, 2]
        finally:
            source.close()


class SilentServer:
    """A TCP peer that answers the handshake (INFO, then PONG to the first PING) and then
    says nothing: a server that hangs, or a path that blackholes."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.accepted = 0
        self.conns: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted += 1
            self.conns.append(conn)
            conn.sendall(b'INFO {"server_id":"silent","max_payload":1048576}\r\n')
            seen = b""
            while b"PING\r\n" not in seen:
                seen += conn.recv(4096)
            conn.sendall(b"PONG\r\n")

    def close(self) -> None:
        self.listener.close()
        for conn in self.conns:
            conn.close()


def test_a_server_gone_silent_is_dropped_after_unanswered_pings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(nats_core, "PING_INTERVAL_S", 0.2)
    silent = SilentServer()
    source = NatsSource(f"nats://127.0.0.1:{silent.port}", session=SESSION)
    try:
        deadline = time.monotonic() + 5
        while silent.accepted < 2 and time.monotonic() < deadline:
            source.read(timeout=0.1)
        assert silent.accepted >= 2, "the silent server was not left and connected to again"
        assert core_of(source).disconnects >= 1
        assert "PINGs" in (core_of(source).last_error or "")
    finally:
        source.close()
        silent.close()


def test_interrupt_and_close_end_a_wait_in_another_thread(server: NatsServer) -> None:
    source = NatsSource(server.url, session=SESSION)
    check_interrupt_and_close_end_a_wait_in_another_thread(source)


def test_no_server_is_unavailable_and_tls_is_left_to_nats_py() -> None:
    with pytest.raises(SourceUnavailableError, match="ConnectionRefused"):
        NatsSource(f"nats://127.0.0.1:{free_port()}", session=SESSION, connect_timeout=1)
    with pytest.raises(NatsNeedsLibraryError):
        CoreNatsSubscriber([f"tls://127.0.0.1:{free_port()}"], ["wsgw.>"])


def test_through_nats_py_a_reconnect_is_told_the_same_way(
    server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where nats-py reads core NATS (TLS), its reconnect is told by the same Gap."""
    monkeypatch.setattr(NatsSource, "_open_core", lambda *_: False)
    source = NatsSource(server.url, session=SESSION)
    try:
        assert source._core is None and source._nc is not None
        publish(server.url, 10)
        assert len(read_n(source, 10)) == 10
        server.stop()
        deadline = time.monotonic() + 5
        while source._nc.is_connected and time.monotonic() < deadline:
            time.sleep(0.05)
        server.start()
        deadline = time.monotonic() + 15
        while not source._nc.is_connected:
            assert time.monotonic() < deadline, "nats-py did not reconnect"
            time.sleep(0.05)
        publish(server.url, 5, start=15)
        after = read_events(source, 5)
    finally:
        source.close()
    assert after[0] == Gap(5, 10)
    assert [type(e) for e in after[1:]] == [RingMessage] * 5


@pytest.mark.parametrize("reader", ["core", "nats-py"])
def test_odd_messages_on_the_subjects_are_handed_over_and_end_nothing(
    server: NatsServer, monkeypatch: pytest.MonkeyPatch, reader: str
) -> None:
    """What another publisher puts on the sink's subjects (a Wsgw-Seq that is no number, a
    gap record that is no JSON object, a session that is no number) does not end a read or
    nats-py's callback: it is handed over as far as it can be read, or left out when it is
    not a session's subject; the messages after it come as published, on both readers."""
    if reader == "nats-py":
        monkeypatch.setattr(NatsSource, "_open_core", lambda *_: False)
    source = NatsSource(server.url)  # every session: "wsgw.>"

    async def main() -> None:
        import nats

        nc = await nats.connect(server.url)
        await nc.publish(f"wsgw.{SESSION}.t0", b"a", headers={"Wsgw-Seq": "x1"})
        await nc.publish(f"wsgw.{SESSION}.$gap", b"not json", headers={"Wsgw-Seq": "2"})
        await nc.publish(f"wsgw.{SESSION}.$gap", b"[1]", headers={"Wsgw-Seq": "3"})
        await nc.publish(f"wsgw.{SESSION}.$gap", b'{"epoch":5,"seq":"7"}')
        await nc.publish("wsgw.abc.t0", b"not a session", headers={"Wsgw-Seq": "4"})
        await nc.publish(f"wsgw.{SESSION}.t0", b"b", headers={"Wsgw-Seq": "5"})
        await nc.flush()
        await nc.close()

    try:
        assert (source._core is None) == (reader == "nats-py")
        asyncio.run(main())
        got = read_n(source, 5)
    finally:
        source.close()
    assert [(m.seq, m.topic, bytes(m.payload)) for m in got] == [
        (0, f"{SESSION}:t0", b"a"),
        (2, RING_GAP_TOPIC, b"not json"),
        (3, RING_GAP_TOPIC, b"[1]"),
        (0, RING_GAP_TOPIC, b'{"epoch":5,"seq":"7"}'),
        (5, f"{SESSION}:t0", b"b"),
    ]


def test_the_core_reader_waits_as_given(server: NatsServer) -> None:
    """Core NATS carries no recommendation: futex unless `wait` says; busy polls the socket
    (the thread's CPU time grows as it waits) and still takes what comes."""
    busy = NatsSource(server.url, session=SESSION, wait="busy")
    sleepy = NatsSource(server.url, session=SESSION)
    try:
        assert (busy.wait_policy, busy.wait_origin) == (WaitPolicy("busy"), "given")
        assert (sleepy.wait_policy, sleepy.wait_origin) == (WaitPolicy("futex"), "default")
        check_a_busy_read_polls_and_a_futex_read_sleeps(busy, sleepy)
        threading.Timer(0.05, publish, (server.url, 3)).start()
        assert [m.seq for m in read_n(busy, 3)] == [0, 1, 2]
    finally:
        busy.close()
        sleepy.close()
