"""The user-space stack against the Linux kernel's TCP, through a real DPDK port.

The peer is a kernel TCP server (wsgw_bench/peer_server.py, standard library only) in the
lab namespace; the stack runs in this process on a net_af_packet port on the lab's veth.
This is the slow path alone (every segment through Python); the engine's fast path has its
own tests.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from dataplane.dpdk import DpdkPort, Eal
from dataplane.stack.arp_cache import ArpConfig
from dataplane.stack.iface import Interface
from dataplane.stack.runner import StackRunner
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpConfig, TcpState
from dataplane.stack.tcp_errors import TcpError, TcpRefusedError
from dataplane.wire.addr import ip_to_int
from gateway.lab import Lab
from tests.conftest import requires_dpdk
from wsgw_bench import peer_server
from wsgw_bench.peer_server import payload

pytestmark = [requires_dpdk, pytest.mark.dpdk]
PEER_SERVER = peer_server.__file__  # run as a script in the lab namespace
MB = 1 << 20


class Stack:
    def __init__(self, lab: Lab, port: DpdkPort) -> None:
        self.lab = lab
        self.port = port
        config = TcpConfig(time_wait=0.5, recv_buffer=1 << 20, send_buffer=1 << 20)
        self.iface = Interface(
            port.mac,
            ip_to_int(lab.gw_ip),
            ip_to_int(lab.netmask),
            tcp_config=config,
            arp_config=ArpConfig(retry_interval=0.2, max_requests=3),
        )
        self.runner = StackRunner(self.iface, port, idle_sleep=0.0002)

    def server(self, mode: str, port: int, size: int = 0, seed: int = 1) -> subprocess.Popen[str]:
        proc = self.lab.popen(
            [sys.executable, PEER_SERVER, self.lab.peer_ip, str(port), mode, str(size), str(seed)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        return proc

    def send_to(
        self, mode: str, port: int, data: bytes, timeout: float, size: int = 0
    ) -> tuple[TcpSocket, str]:
        """Send `data` to a kernel peer server and close; the socket and what the server printed."""
        server = self.server(mode, port, size)
        try:
            sock = self.runner.connect(ip_to_int(self.lab.peer_ip), port, timeout=5)
            self.runner.send_all(sock, data, timeout=timeout)
            self.runner.close(sock, timeout=30)
            return sock, server.communicate(timeout=30)[0]
        finally:
            server.kill()


@pytest.fixture
def stack(eal: Eal, lab: Lab) -> Iterator[Stack]:
    with eal.open_port(lab.vdev) as port:
        yield Stack(lab, port)


def test_ping_from_the_kernel_is_answered(stack: Stack) -> None:
    pinger = stack.lab.popen(
        # -w: wait for all three answers (with -W, ping waits only two RTTs for the rest
        # once one came, and a stack polled late under load lost the race: CI, session 17)
        ["ping", "-c", "3", "-i", "0.2", "-w", "5", stack.lab.gw_ip],
        stdout=subprocess.PIPE,
        text=True,
    )
    stack.runner.run_until(lambda: pinger.poll() is not None, timeout=10)
    out = pinger.communicate()[0]
    assert pinger.returncode == 0, out
    assert "3 received" in out
    assert stack.iface.counters.icmp_echo_replies == 3


def test_50mb_to_the_kernel_intact(stack: Stack) -> None:
    data = payload(50 * MB, 7)
    _, out = stack.send_to("sink", 5001, data, timeout=120)
    assert out.split()[:3] == ["sha256", hashlib.sha256(data).hexdigest(), str(len(data))]


def test_50mb_from_the_kernel_intact_and_peer_closes_first(stack: Stack) -> None:
    server = stack.server("source", 5002, 50 * MB, 9)
    try:
        sock = stack.runner.connect(ip_to_int(stack.lab.peer_ip), 5002, timeout=5)
        received = stack.runner.recv_until_eof(sock, timeout=120, max_bytes=60 * MB)
        assert sock.state is TcpState.CLOSE_WAIT  # the kernel's FIN came first
        stack.runner.close(sock, timeout=10)  # LAST_ACK -> CLOSED
        assert sock.state is TcpState.CLOSED
        server.communicate(timeout=10)
    finally:
        server.kill()
    assert hashlib.sha256(received).digest() == hashlib.sha256(payload(50 * MB, 9)).digest()
    assert sock.stats.retransmits == 0 or sock.stats.retransmits < 100


def test_we_close_first_and_pass_time_wait(stack: Stack) -> None:
    server = stack.server("wait-close", 5003)
    try:
        sock = stack.runner.connect(ip_to_int(stack.lab.peer_ip), 5003, timeout=5)
        stack.runner.send_all(sock, b"bye", timeout=5)
        sock.close()
        assert stack.runner.run_until(lambda: sock.state is TcpState.TIME_WAIT, timeout=10)
        assert server.communicate(timeout=10)[0].strip() == "closed"
        assert stack.runner.run_until(lambda: sock.state is TcpState.CLOSED, timeout=5)
    finally:
        server.kill()


def test_closed_port_is_refused_with_a_clear_error(stack: Stack) -> None:
    with pytest.raises(TcpRefusedError, match=r"refused|reset"):
        stack.runner.connect(ip_to_int(stack.lab.peer_ip), 5999, timeout=5)


def test_unreachable_address_fails_after_arp_retries(stack: Stack) -> None:
    start = time.monotonic()
    with pytest.raises(TcpError, match=rf"{stack.lab.unused_ip}.*3 requests"):
        stack.runner.connect(ip_to_int(stack.lab.unused_ip), 80, timeout=10)
    assert time.monotonic() - start < 5
    assert stack.iface.counters.arp_requests_sent >= 3
