"""Hostile segments from the peer namespace against a live connection (RFC 5961 and co).

A kernel TCP server in the lab namespace holds a connection with the stack; scapy, run in
the same namespace on its veth end, forges segments with that connection's 4-tuple. The
stack must ignore out-of-window RSTs, answer in-window ones and SYNs with a challenge ACK,
drop bad checksums and bogus options (counted), and the connection must carry on intact.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Iterator

import pytest

from dataplane.dpdk import Eal
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpState
from dataplane.wire.addr import ip_to_int
from gateway.lab import Lab
from tests.conftest import requires_dpdk
from tests.integration.test_stack_kernel import MB, Stack
from wsgw_bench.peer_server import payload

pytestmark = [requires_dpdk, pytest.mark.dpdk]


@pytest.fixture
def stack(eal: Eal, lab: Lab) -> Iterator[Stack]:
    with eal.open_port(lab.vdev) as port:
        yield Stack(lab, port)


def forge(stack: Stack, sock: TcpSocket, scapy_tcp: str, *, count: int = 1) -> None:
    """Send `count` copies of Ether/IP/<scapy_tcp> from the peer's veth, pumping the stack.

    In the scapy expression, `seq`/`ack` are the connection's next expected sequence number
    and acknowledgement, and `ts` a valid timestamp option (RFC 7323 section 3.2: once
    negotiated, a segment without one is dropped before anything else is looked at)."""
    lab = stack.lab
    conn = sock._connection if hasattr(sock, "_connection") else sock.connection  # type: ignore[attr-defined]
    code = (
        "from scapy.all import Ether, IP, TCP, Raw, sendp\n"
        f"seq, ack = {conn._rcv_nxt & 0xFFFFFFFF}, {conn._snd_max & 0xFFFFFFFF}\n"
        f"ts = [('Timestamp', ({(conn._ts_recent + 1000) & 0xFFFFFFFF}, 0))]\n"
        f"p = Ether(dst='{stack.port.mac.hex(':')}')/IP(src='{lab.peer_ip}', dst='{lab.gw_ip}')/"
        f"{scapy_tcp.format(sport=sock.remote.port, dport=sock.local.port)}\n"
        f"sendp([p] * {count}, iface='{lab.peer_if}', verbose=False)\n"
    )
    proc = lab.popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True)
    stack.runner.run_until(lambda: proc.poll() is not None, timeout=30)
    assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
    stack.runner.run_for(0.05)


@pytest.fixture
def connection(stack: Stack) -> Iterator[tuple[TcpSocket, subprocess.Popen[str]]]:
    server = stack.server("echo", 6001)
    sock = stack.runner.connect(ip_to_int(stack.lab.peer_ip), 6001, timeout=5)
    try:
        yield sock, server
    finally:
        server.kill()


def echo_ok(stack: Stack, sock: TcpSocket, data: bytes = b"still alive") -> None:
    stack.runner.send_all(sock, data, timeout=5)
    assert stack.runner.recv_exactly(sock, len(data), timeout=5) == data


def test_out_of_window_rst_is_ignored(stack: Stack, connection) -> None:  # type: ignore[no-untyped-def]
    sock, _ = connection
    forge(
        stack, sock, "TCP(sport={sport}, dport={dport}, flags='R', seq=(seq + 10_000_000) % 2**32)"
    )
    assert sock.state is TcpState.ESTABLISHED
    echo_ok(stack, sock)


def test_in_window_rst_gets_a_challenge_ack(stack: Stack, connection) -> None:  # type: ignore[no-untyped-def]
    sock, _ = connection
    before = sock.stats.challenge_acks
    forge(stack, sock, "TCP(sport={sport}, dport={dport}, flags='R', seq=(seq + 100) % 2**32)")
    assert sock.state is TcpState.ESTABLISHED
    assert sock.stats.challenge_acks == before + 1
    echo_ok(stack, sock)


def test_syn_on_an_established_connection_gets_a_challenge_ack(stack: Stack, connection) -> None:  # type: ignore[no-untyped-def]
    sock, _ = connection
    before = sock.stats.challenge_acks
    forge(
        stack,
        sock,
        "TCP(sport={sport}, dport={dport}, flags='S', seq=(seq + 10) % 2**32, options=ts)",
    )
    forge(stack, sock, "TCP(sport={sport}, dport={dport}, flags='S', seq=12345)")  # out of window
    assert sock.state is TcpState.ESTABLISHED
    assert sock.stats.challenge_acks == before + 1
    echo_ok(stack, sock)


def test_bad_checksums_are_counted_and_dropped(stack: Stack, connection) -> None:  # type: ignore[no-untyped-def]
    sock, _ = connection
    before = stack.iface.counters.rx_dropped_checksum
    forge(
        stack,
        sock,
        "TCP(sport={sport}, dport={dport}, flags='PA', seq=seq, ack=ack, chksum=0xdead)"
        "/Raw(b'evil')",
        count=5,
    )
    assert stack.iface.counters.rx_dropped_checksum == before + 5
    echo_ok(stack, sock)  # and the forged bytes never reached the stream


def test_bogus_options_are_counted_and_dropped(stack: Stack, connection) -> None:  # type: ignore[no-untyped-def]
    sock, _ = connection
    before = stack.iface.counters.rx_dropped_malformed
    # An option whose length runs past the header, and one with length 1 (illegal).
    forge(
        stack,
        sock,
        "TCP(sport={sport}, dport={dport}, flags='A', seq=seq, ack=ack,"
        " options=[(99, b'x' * 30)], dataofs=7)",
    )
    forge(
        stack,
        sock,
        "TCP(sport={sport}, dport={dport}, flags='A', seq=seq, ack=ack, options=[(2, b'')])",
    )
    assert stack.iface.counters.rx_dropped_malformed >= before + 1
    assert sock.state is TcpState.ESTABLISHED
    echo_ok(stack, sock)


def test_zero_window_held_for_seconds_then_transfer_completes(stack: Stack) -> None:
    """The kernel peer sits on a 4 KiB buffer for 3 s: the stack probes, then resumes."""
    data = payload(2 * MB, 3)
    sock, out = stack.send_to("stall-sink", 6002, data, timeout=60, size=3000)
    assert sock.stats.zero_window_probes >= 1
    assert out.split()[:3] == ["sha256", hashlib.sha256(data).hexdigest(), str(len(data))]
