"""`python -m gateway.simulator` (what `wsgw simulate` runs): ready line, flags, stdin
control, server pings on the wire, clean exit on SIGTERM."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from websockets.exceptions import ConnectionClosed

from gateway.dialects import make_dialect
from tests.integration.test_simulator_helpers import Received, client, receive, run

REPO = Path(__file__).resolve().parents[2]


class Process:
    """The simulator as a child process, with its stdout read line by line."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway.simulator", *args],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)

    def line(self, timeout: float = 15.0) -> str:
        return self.lines.get(timeout=timeout)

    def send(self, command: str) -> dict[str, object]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return json.loads(self.line())  # type: ignore[no-any-return]


@contextmanager
def simulator(*args: str) -> Iterator[Process]:
    process = Process(*args)
    try:
        yield process
    finally:
        if process.proc.poll() is None:
            process.proc.kill()
        process.proc.wait(10)


def test_cli_flags_stdin_control_and_sigterm() -> None:
    with simulator("--port", "0", "--rate", "300", "--fault", "drop:after=20") as sim:
        assert sim.line() == "ready\n"
        info = json.loads(sim.line())
        assert info["dialects"]["okx"].endswith("/okx")

        async def scenario() -> int:
            dialect = make_dialect("okx")
            got = Received()
            async with client(info["dialects"]["okx"] + dialect.path) as ws:
                for m in dialect.subscribe_messages(["trades:BTC-USDT"]):
                    await ws.send(m)
                with contextlib.suppress(ConnectionClosed):
                    await receive(ws, dialect, lambda g: False, timeout=10, got=got)
            return len(got.seqs["trades:BTC-USDT"])

        assert run(scenario()) == 20  # --fault drop:after=20 on every connection
        stats = sim.send("stats")
        assert stats["ok"] is True
        counters = stats["counters"]
        assert isinstance(counters, dict)
        assert counters["faults_fired"] == {"drop": 1}
        assert counters["data_messages"] == 20
        assert sim.send('{"cmd": "rate", "rate": 5}')["per_topic"] == 5.0
        assert sim.send("fault drop after=1 target=next") == {
            "ok": True,
            "armed": 1,
            "fault": "drop:after=1",
        }
        assert sim.send("frobnicate")["ok"] is False
        sim.proc.send_signal(signal.SIGTERM)
        assert sim.proc.wait(10) == 0


def test_cli_refuses_bad_flags() -> None:
    with simulator("--port", "0", "--fault", "explode") as sim:
        assert sim.proc.wait(20) == 2
        assert sim.proc.stderr is not None
        assert "unknown fault" in sim.proc.stderr.read()


def test_server_pings_on_the_wire() -> None:
    """Server pings are WebSocket ping frames (opcode 9), seen here on a raw socket."""
    with simulator("--port", "0", "--rate", "0", "--ping-interval", "0.2") as sim:
        assert sim.line() == "ready\n"
        port = json.loads(sim.line())["port"]
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall(
                (
                    f"GET /kraken/v2 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                    f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
                ).encode()
            )
            data = b""
            while b"\r\n\r\n" not in data:
                data += sock.recv(4096)
            head, _, rest = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 101")
            seen: set[int] = set()
            buffer = rest
            while 0x9 not in seen:
                while len(buffer) < 2:
                    buffer += sock.recv(4096)
                opcode, length = buffer[0] & 0x0F, buffer[1] & 0x7F
                assert length < 126
                while len(buffer) < 2 + length:
                    buffer += sock.recv(4096)
                seen.add(opcode)
                buffer = buffer[2 + length :]
            assert 0x1 in seen  # Kraken's status message came first


def test_tls_flag_writes_a_ca(tmp_path: Path) -> None:
    with simulator("--port", "0", "--tls", "--cert-dir", str(tmp_path), "--rate", "50") as sim:
        assert sim.line() == "ready\n"
        info = json.loads(sim.line())
        assert info["url"].startswith("wss://")
        assert info["ca"] == str(tmp_path / "ca.pem")

        async def scenario() -> None:
            import ssl

            context = ssl.create_default_context(cafile=info["ca"])
            dialect = make_dialect("bitstamp")
            async with client(info["dialects"]["bitstamp"], ssl=context) as ws:
                for m in dialect.subscribe_messages(["live_trades_btcusd"]):
                    await ws.send(m)
                got = await receive(ws, dialect, lambda g: len(g.seqs["live_trades_btcusd"]) >= 3)
                assert got.seqs["live_trades_btcusd"][:3] == [1, 2, 3]

        run(scenario())
