"""The C NATS connection's PONGs never cut a PUB: a minimal NATS server of our own (INFO,
the CONNECT/PING handshake, then PINGs while the ring's writer publishes) parses what it
got: every PUB whole and in ring order, one PONG per PING."""

from __future__ import annotations

import re
import socket
import threading
import time

from gateway.hub import Hub
from gateway.hub.nats import NatsConfig, NatsSink

PUB = re.compile(rb"PUB (\S+)  (\d+)\r\n")


class FakeServer:
    """Accepts one client, answers its handshake, sends PINGs on demand, keeps the rest."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"nats://127.0.0.1:{self.listener.getsockname()[1]}"
        self.got = bytearray()
        self.conn: socket.socket | None = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        conn, _ = self.listener.accept()
        conn.sendall(b'INFO {"server_id":"fake","headers":true,"max_payload":1048576}\r\n')
        hello = b""
        while b"PING\r\n" not in hello:
            hello += conn.recv(4096)
        assert hello.startswith(b"CONNECT {")
        conn.sendall(b"PONG\r\n")
        self.conn = conn
        while data := conn.recv(1 << 16):
            self.got += data

    def ping(self) -> None:
        assert self.conn is not None
        self.conn.sendall(b"PING\r\n")

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
        self.listener.close()


def parse(data: bytes) -> tuple[list[bytes], int]:
    """The PUBs' payloads, in order, and the PONGs between them; fails on anything else."""
    payloads, pongs, at = [], 0, 0
    while at < len(data):
        if data.startswith(b"PONG\r\n", at) or data.startswith(b"PING\r\n", at):
            pongs += data.startswith(b"PONG", at)
            at += 6
            continue
        m = PUB.match(data, at)
        assert m is not None, data[at : at + 40]
        end = m.end() + int(m.group(2))
        assert data[end : end + 2] == b"\r\n"
        payloads.append(data[m.end() : end])
        at = end + 2
    return payloads, pongs


def test_pongs_go_between_whole_pubs() -> None:
    server = FakeServer()
    sink = NatsSink(NatsConfig(servers=[server.url], c_path=True)).start(10)
    hub = Hub(nats=sink)
    try:
        assert sink.c_path and sink.stats.connected
        n = 0
        for i in range(300):
            hub.publish_batch([(1, "t", b"%d" % (n + k), 0, None) for k in range(5)])
            n += 5
            if i % 30 == 0:
                server.ping()
                time.sleep(0.002)  # the reader answers while the writer may be armed
    finally:
        hub.close()  # flushes: a last PING, answered by nobody: the close waits up to 2 s
        server.close()
        server.thread.join(5)
    payloads, pongs = parse(bytes(server.got))
    assert payloads == [b"%d" % k for k in range(n)]
    assert pongs == 10
    assert sink._c is not None and sink._c.c_published > 0
