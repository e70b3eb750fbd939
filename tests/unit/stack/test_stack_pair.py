"""Two whole stacks over an in-memory link, one thread, a virtual clock.

Interface + TcpConnection + runner on both ends, with seeded faults in between: bulk
transfers must arrive intact (sha256) whatever the link does, corrupted frames must be
dropped by the checksums, and a run must be the same run for the same seed.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import Any

import pytest
from iface_helpers import dropped

from dataplane.links import (
    FaultConfig,
    FaultInjector,
    Link,
    PcapLink,
    VirtualClock,
    memory_link_pair,
)
from dataplane.stack.iface import Interface, TcpListener
from dataplane.stack.runner import ConnectionClosedError, StackRunner, StackTimeoutError
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpState
from dataplane.wire.addr import ip_to_int

CLIENT_MAC = bytes.fromhex("020000000001")
SERVER_MAC = bytes.fromhex("020000000002")
CLIENT_IP = ip_to_int("198.18.0.1")
SERVER_IP = ip_to_int("198.18.0.2")
NETMASK = ip_to_int("255.255.255.0")
PORT = 8443
MB = 1 << 20
ONE_WAY_LATENCY = 0.0005  # 1 ms round trip


class Tap:
    """Test-only link middleware: remembers a digest of every frame taken for sending."""

    def __init__(self, link: Link) -> None:
        self.inner = link
        self.mac = link.mac
        self.mtu = link.mtu
        self.sent: list[bytes] = []

    def rx_burst(self, max_frames: int = 32) -> list[bytes]:
        return self.inner.rx_burst(max_frames)

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        taken = self.inner.tx_burst(frames)
        self.sent.extend(
            hashlib.blake2b(f, digest_size=12).digest() + f[6:12] for f in frames[:taken]
        )
        return taken

    def poll_at(self) -> float | None:
        poll_at = getattr(self.inner, "poll_at", None)
        return poll_at() if poll_at else None


@dataclass
class Side:
    iface: Interface
    runner: StackRunner
    faults: FaultInjector | None
    before_faults: Tap | None = None
    after_faults: Tap | None = None


@dataclass
class Pair:
    clock: VirtualClock
    client: Side
    server: Side
    listener: TcpListener


def make_pair(
    faults: FaultConfig | None = None,
    seed: int = 1,
    *,
    static_arp: bool = False,
    taps: bool = False,
    pcap: Path | None = None,
) -> Pair:
    clock = VirtualClock()
    a, b = memory_link_pair(
        clock=clock, latency=ONE_WAY_LATENCY, mac_a=CLIENT_MAC, mac_b=SERVER_MAC
    )
    sides = []
    for index, (link, ip, peer_ip, peer_mac) in enumerate(
        ((a, CLIENT_IP, SERVER_IP, SERVER_MAC), (b, SERVER_IP, CLIENT_IP, CLIENT_MAC))
    ):
        iface = Interface(
            link.mac,
            ip,
            NETMASK,
            None,
            seed=seed * 2 + index,
            strict=True,
            announce=not static_arp,
            static_arp={peer_ip: peer_mac} if static_arp else None,
        )
        outer: Link = link
        after = before = None
        injector = None
        if taps:
            outer = after = Tap(outer)
        if faults is not None:
            outer = injector = FaultInjector(outer, faults, seed * 2 + index, clock=clock)
        if taps:
            outer = before = Tap(outer)
        if pcap is not None and index == 0:
            outer = PcapLink(outer, pcap, clock=clock)
        runner = StackRunner(iface, outer, clock)
        sides.append(Side(iface, runner, injector, before, after))
    client, server = sides
    client.runner.peers.append(server.runner)
    listener = server.iface.listen(PORT)
    return Pair(clock, client, server, listener)


@dataclass
class Pump:
    """A bulk application on one socket: sends `outgoing`, then FIN; hashes what it reads."""

    sock: TcpSocket
    outgoing: bytes
    sent: int = 0
    received: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    fin_sent: bool = False

    def pump(self) -> None:
        view = memoryview(self.outgoing)
        while self.sent < len(view) and self.sock.send_space > 0:
            taken = self.sock.send(view[self.sent : self.sent + 256 * 1024])
            if taken == 0:
                break
            self.sent += taken
        if self.sent == len(view) and not self.fin_sent:
            self.sock.close()
            self.fin_sent = True
        while chunk := self.sock.connection.recv(1 << 20):
            self.digest.update(chunk)
            self.received += len(chunk)

    @property
    def done(self) -> bool:
        return self.fin_sent and self.sock.at_eof


def stats_dict(stats: Any) -> Any:
    if is_dataclass(stats) and not isinstance(stats, type):
        return asdict(stats)
    return repr(stats)


def bidirectional_transfer(
    pair: Pair, size: int, seed: int, timeout: float = 600.0
) -> dict[str, Any]:
    """`size` bytes each way at once; returns everything that should repeat per seed."""
    client_data = random.Random(seed).randbytes(size)
    server_data = random.Random(seed + 1).randbytes(size)
    server: list[Pump] = []

    def serve(now: float) -> None:
        if not server:
            sock = pair.listener.accept()
            if sock is None:
                return
            server.append(Pump(sock, server_data))
        server[0].pump()

    pair.server.runner.services.append(serve)
    sock = pair.client.runner.connect(SERVER_IP, PORT, timeout=60.0)
    client = Pump(sock, client_data)

    def finished() -> bool:
        client.pump()
        assert sock.error is None, sock.error
        return client.done and bool(server) and server[0].done

    assert pair.client.runner.run_until(finished, timeout), (
        f"client sent {client.sent} got {client.received}; server "
        f"{(server[0].sent, server[0].received) if server else None} at t={pair.clock():.3f}"
    )
    assert client.received == size
    assert server[0].received == size
    assert client.digest.digest() == hashlib.sha256(server_data).digest()
    assert server[0].digest.digest() == hashlib.sha256(client_data).digest()
    # Let both ends finish closing (TIME_WAIT included) so every connection is removed.
    assert pair.client.runner.run_until(
        lambda: pair.client.iface.connection_count == 0 and pair.server.iface.connection_count == 0,
        600.0,
    ), (sock.state, server[0].sock.state)
    return {
        "virtual_time": pair.clock(),
        "client": pair.client.iface.counters.as_dict(),
        "server": pair.server.iface.counters.as_dict(),
        "client_faults": pair.client.faults.counters() if pair.client.faults else None,
        "server_faults": pair.server.faults.counters() if pair.server.faults else None,
        "client_tcp": stats_dict(sock.stats),
        "server_tcp": stats_dict(server[0].sock.stats),
    }


# -- the regression for the blocking-recv deadlock ------------------------------------------


def test_request_queued_by_send_leaves_while_the_application_waits() -> None:
    """An old C client's blocking recv() stopped servicing TX, so its request never left.

    Here the application queues a request with `send()` (no I/O happens: it is only
    buffered), then waits in `recv_exactly`; the wait keeps servicing TX, so the request
    leaves, the server answers, and the answer is received.
    """
    pair = make_pair()
    request, response = b"GET /feed HTTP/1.1\r\n\r\n", b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
    served: list[TcpSocket] = []

    def serve(now: float) -> None:
        if not served and (accepted := pair.listener.accept()) is not None:
            served.append(accepted)
        if served and served[0].connection.readable:
            assert served[0].recv(1000) == request
            served[0].send(response)

    pair.server.runner.services.append(serve)
    sock = pair.client.runner.connect(SERVER_IP, PORT, timeout=5.0)
    tx_before = pair.client.iface.counters.tcp_tx_segments
    assert sock.send(request) == len(request)
    assert pair.client.iface.counters.tcp_tx_segments == tx_before  # only buffered so far
    assert pair.client.runner.recv_exactly(sock, len(response), timeout=5.0) == response
    assert pair.client.iface.counters.tcp_tx_segments > tx_before
    assert pair.clock() < 0.1  # a few round trips, not a timeout


def test_runner_helpers_round_trip_and_close() -> None:
    pair = make_pair()
    echo: list[TcpSocket] = []

    def serve(now: float) -> None:
        if not echo and (accepted := pair.listener.accept()) is not None:
            echo.append(accepted)
        if echo:
            while data := echo[0].connection.recv(65536):
                echo[0].send(data)
            if echo[0].at_eof and echo[0].state is TcpState.CLOSE_WAIT:
                echo[0].close()

    pair.server.runner.services.append(serve)
    runner = pair.client.runner
    sock = runner.connect(SERVER_IP, PORT, timeout=5.0)
    payload = random.Random(5).randbytes(300_000)
    runner.send_all(sock, payload, timeout=30.0)
    assert runner.recv_exactly(sock, 1000, timeout=30.0) == payload[:1000]
    runner.close(sock, timeout=30.0)
    assert runner.recv_until_eof(sock, timeout=30.0) == payload[1000:]
    assert runner.run_until(lambda: pair.client.iface.connection_count == 0, 600.0)


def test_runner_on_the_real_clock() -> None:
    """The same helpers with time.monotonic: idle waits sleep briefly instead of jumping."""
    a, b = memory_link_pair(mac_a=CLIENT_MAC, mac_b=SERVER_MAC)
    client = Interface(CLIENT_MAC, CLIENT_IP, NETMASK, None, strict=True)
    server = Interface(SERVER_MAC, SERVER_IP, NETMASK, None, strict=True)
    listener = server.listen(PORT)
    server_runner = StackRunner(server, b)
    runner = StackRunner(client, a, peers=[server_runner])
    accepted: list[TcpSocket] = []

    def serve(now: float) -> None:
        if not accepted and (sock := listener.accept()) is not None:
            accepted.append(sock)
        if accepted and (data := accepted[0].connection.recv(1000)):
            accepted[0].send(data.upper())

    server_runner.services.append(serve)
    started = time.monotonic()
    sock = runner.connect(SERVER_IP, PORT, timeout=5.0)
    runner.send_all(sock, b"ping", timeout=5.0)
    assert runner.recv_exactly(sock, 4, timeout=5.0) == b"PING"
    assert not runner.run_until(lambda: False, 0.05)  # an idle wait ends at its timeout
    assert 0.05 <= time.monotonic() - started < 2.0


def test_recv_exactly_reports_early_eof() -> None:
    pair = make_pair()

    def serve(now: float) -> None:
        if (sock := pair.listener.accept()) is not None:
            sock.send(b"short")
            sock.close()

    pair.server.runner.services.append(serve)
    sock = pair.client.runner.connect(SERVER_IP, PORT, timeout=5.0)
    with pytest.raises(ConnectionClosedError, match="after 5 of the 10 bytes"):
        pair.client.runner.recv_exactly(sock, 10, timeout=5.0)


def test_recv_exactly_times_out() -> None:
    pair = make_pair()
    sock = pair.client.runner.connect(SERVER_IP, PORT, timeout=5.0)
    with pytest.raises(StackTimeoutError, match="0 of 10 bytes in 2 s"):
        pair.client.runner.recv_exactly(sock, 10, timeout=2.0)
    assert 2.0 <= pair.clock() < 2.1


def test_connect_to_a_closed_port_is_refused() -> None:
    pair = make_pair()
    with pytest.raises(Exception, match=r"(?i)reset|refused"):
        pair.client.runner.connect(SERVER_IP, PORT + 1, timeout=5.0)
    assert pair.server.iface.counters.tcp_rst_sent == 1


def test_ping_between_stacks_learns_arp_both_ways() -> None:
    pair = make_pair()
    pair.client.runner.run_for(0.01)  # announcements
    sock = pair.client.runner.connect(SERVER_IP, PORT, timeout=5.0)
    assert sock.state is TcpState.ESTABLISHED
    assert pair.client.iface.arp.lookup(SERVER_IP, pair.clock()) == SERVER_MAC
    assert pair.server.iface.arp.lookup(CLIENT_IP, pair.clock()) == CLIENT_MAC


def test_pcap_of_a_connection_is_readable(tmp_path: Path) -> None:
    scapy_all = pytest.importorskip("scapy.all")
    path = tmp_path / "pair.pcap"
    pair = make_pair(pcap=path)
    bidirectional_transfer(pair, 50_000, seed=3)
    pair.client.runner.link.close()  # type: ignore[attr-defined]
    packets = scapy_all.rdpcap(str(path))
    tcp = [p for p in packets if p.haslayer(scapy_all.TCP)]
    assert tcp[0][scapy_all.TCP].flags == "S"
    assert any(p[scapy_all.TCP].flags.F for p in tcp)
    assert (
        sum(len(p[scapy_all.TCP].payload) for p in tcp if p[scapy_all.IP].src == "198.18.0.2")
        >= 50_000
    )


# -- bulk transfers under faults -------------------------------------------------------------

FAULTS = {
    "clean": (FaultConfig(direction="tx"), False),
    "drop1": (FaultConfig(drop_pct=1, direction="tx"), False),
    "drop5": (FaultConfig(drop_pct=5, direction="tx"), False),
    "drop10": (FaultConfig(drop_pct=10, direction="tx"), False),
    "reorder5": (FaultConfig(reorder_pct=5, direction="tx"), False),
    "duplicate5": (FaultConfig(duplicate_pct=5, direction="tx"), False),
    # Without FCS a flipped ARP bit would poison the cache: corruption tests use static ARP,
    # so every frame is IPv4 and every flip must be caught by a checksum.
    "corrupt5": (FaultConfig(corrupt_pct=5, direction="tx"), True),
    "mixed": (
        FaultConfig(
            drop_pct=2,
            reorder_pct=2,
            duplicate_pct=2,
            corrupt_pct=2,
            delay=0.0005,  # a 2 ms round trip instead of 1 ms
            direction="tx",
        ),
        True,
    ),
}
SLOW = {"drop10", "mixed"}


def check_corruption_was_caught(pair: Pair) -> int:
    """Every corrupted frame with an intact source MAC was dropped by the receiving stack."""
    caught = 0
    for sender, receiver in ((pair.client, pair.server), (pair.server, pair.client)):
        assert sender.before_faults is not None
        assert sender.after_faults is not None
        originals = {entry[:12] for entry in sender.before_faults.sent}
        corrupted = [entry for entry in sender.after_faults.sent if entry[:12] not in originals]
        detectable = sum(1 for entry in corrupted if entry[12:] == sender.iface.mac)
        dropped_frames = dropped(receiver.iface.counters)
        assert dropped_frames == detectable
        caught += dropped_frames
    return caught


@pytest.mark.parametrize(
    "name",
    [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in FAULTS],
)
def test_20mb_each_way_under_faults(name: str) -> None:
    config, static_arp = FAULTS[name]
    pair = make_pair(config, seed=11, static_arp=static_arp, taps=config.corrupt_pct > 0)
    started = time.perf_counter()
    result = bidirectional_transfer(pair, 20 * MB, seed=11)
    elapsed = time.perf_counter() - started
    faults: dict[str, int] = {}
    for side in ("client_faults", "server_faults"):
        for key, value in result[side]["tx"].items():
            faults[key] = faults.get(key, 0) + value
    print(
        f"\n{name}: {elapsed:.2f} s wall, {result['virtual_time']:.3f} s virtual, faults {faults}"
    )
    if config.corrupt_pct:
        assert check_corruption_was_caught(pair) > 0
    for side in ("client", "server"):
        assert result[side]["rx_errors_internal"] == 0


def test_same_seed_same_run() -> None:
    config = FaultConfig(drop_pct=3, reorder_pct=3, duplicate_pct=3, corrupt_pct=3, direction="tx")
    runs = [
        bidirectional_transfer(make_pair(config, seed, static_arp=True), 2 * MB, seed)
        for seed in (5, 5, 6)
    ]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert runs[0]["client_faults"]["tx"]["dropped"] > 0
