"""The C benchmark peers (wsgw_bench/peer/): they build, and answer real clients on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from wsgw_bench import peers
from wsgw_bench.peers import UdpSink, WsPeer, udpsend

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")


def test_build_is_cached_and_rebuilt_when_stale(tmp_path: Path) -> None:
    binary = peers.build("wspeer", build_dir=tmp_path)
    assert binary.exists()
    stamp = tmp_path / "wspeer.sha256"
    first = binary.stat().st_mtime_ns
    assert peers.build("wspeer", build_dir=tmp_path).stat().st_mtime_ns == first
    stamp.write_text("built from another source\n")
    assert peers.build("wspeer", build_dir=tmp_path).stat().st_mtime_ns != first
    assert stamp.read_text().strip() != "built from another source"


def test_unknown_peer_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown peer"):
        peers.build("nope")


def test_all_peers_build_warning_free() -> None:
    built = peers.build_all()
    assert set(built) == {"wspeer", "wsclient", "udpsend", "udpsink"}
    assert all(path.exists() for path in built.values())


@pytest.fixture
def wspeer() -> object:
    peer = WsPeer.start(host="127.0.0.1")
    try:
        yield peer
    finally:
        peer.stop()
        assert peer.proc.poll() is not None


def test_handshake_accept_key(wspeer: WsPeer) -> None:
    """RFC 6455 section 1.3's own example key gives its own example answer."""
    key = "dGhlIHNhbXBsZSBub25jZQ=="
    with socket.create_connection(("127.0.0.1", wspeer.port), timeout=5) as sock:
        sock.sendall(
            b"GET /echo HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + key.encode() + b"\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        answer = sock.recv(4096).decode()
    assert answer.startswith("HTTP/1.1 101 ")
    expected = base64.b64encode(
        hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest()
    ).decode()
    assert expected == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert f"Sec-WebSocket-Accept: {expected}\r\n" in answer


def test_bad_request_gets_400(wspeer: WsPeer) -> None:
    with socket.create_connection(("127.0.0.1", wspeer.port), timeout=5) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 400 ")


def test_echo_with_websockets(wspeer: WsPeer) -> None:
    from websockets.asyncio.client import connect

    async def main() -> None:
        url = f"ws://127.0.0.1:{wspeer.port}/echo"
        async with connect(url, compression=None, max_size=None, proxy=None) as ws:
            for message in (b"", b"a" * 10, b"b" * 126, b"c" * 70_000, "text \u00e9"):
                await ws.send(message)
                assert await ws.recv() == message
            pong = await ws.ping(b"p")
            await asyncio.wait_for(pong, 5)
        assert ws.close_code == 1000

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["binary", "text"])
def test_flood_with_websockets(wspeer: WsPeer, kind: str) -> None:
    from websockets.asyncio.client import connect

    count, size = 5000, 100

    async def main() -> None:
        url = f"ws://127.0.0.1:{wspeer.port}/flood/{count}/{size}/{kind}"
        seen = 0
        async with connect(url, compression=None, proxy=None) as ws:
            async for message in ws:
                assert len(message) == size
                if kind == "binary":
                    assert isinstance(message, bytes)
                    seq = int.from_bytes(message[:8], "big")
                    stamp = int.from_bytes(message[8:16], "big")
                else:
                    assert isinstance(message, str)
                    seq, stamp = int(message[:16], 16), int(message[16:32], 16)
                assert seq == seen
                assert stamp > 1_600_000_000 * 10**9  # CLOCK_REALTIME, in ns
                seen += 1
        assert seen == count
        assert ws.close_code == 1000

    asyncio.run(main())


def test_flood_from_the_command_line() -> None:
    from websockets.asyncio.client import connect

    peer = WsPeer.start(host="127.0.0.1", mode=("flood", "300", "16"))
    try:

        async def main() -> list[int]:
            async with connect(f"ws://127.0.0.1:{peer.port}/", proxy=None) as ws:
                return [int.from_bytes(m[:8], "big") async for m in ws]  # type: ignore[arg-type]

        assert asyncio.run(main()) == list(range(300))
    finally:
        peer.stop()


def test_bad_command_line() -> None:
    binary = peers.build("wspeer")
    proc = subprocess.run(
        [str(binary), "127.0.0.1", "0", "flood", "10", "8"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert "SIZE must be >= 16" in proc.stderr


@pytest.mark.parametrize("mode", ["sendto", "sendmmsg"])
def test_udpsend_into_udpsink(mode: str) -> None:
    sink = UdpSink.start(host="127.0.0.1")
    try:
        sink.reset(2000, 42)
        result = udpsend(None, mode, "127.0.0.1", sink.port, 18, 2000, 42, batch=32)
        assert result["sent"] == 2000
        assert result["ns"] > 0
        report = sink.report()
        for _ in range(100):
            if report["unique"] == 2000:
                break
            report = sink.report()
        assert report["unique"] == 2000
        assert report["duplicates"] == 0
        assert report["out_of_range"] == 0
        assert report["foreign"] == 1  # the warm-up datagram (tag 0)
    finally:
        sink.stop()
    assert sink.proc.poll() is not None


def test_udpsink_counts_duplicates_and_strangers() -> None:
    sink = UdpSink.start(host="127.0.0.1")
    try:
        sink.reset(10, 7)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for seq, tag in ((0, 7), (0, 7), (11, 7), (1, 8)):
                s.sendto(seq.to_bytes(8, "big") + tag.to_bytes(4, "big"), ("127.0.0.1", sink.port))
            s.sendto(b"tiny", ("127.0.0.1", sink.port))
        report = sink.report()
        for _ in range(100):
            if report["received"] == 5:
                break
            report = sink.report()
        assert report == {
            **report,
            "received": 5,
            "unique": 1,
            "duplicates": 1,
            "out_of_range": 1,
            "foreign": 1,
            "short": 1,
        }
    finally:
        sink.stop()
