"""An upstream that fails on purpose, then comes back: a child process for
test_session_failure_kinds.py (stdlib only, so it starts fast in the lab's namespace).

    python faulty_upstream.py --port P --upstream HOST:PORT --mode MODE [--tls GOOD BAD]

Until it reads `heal` on stdin, every connection to port P fails the MODE way:

    refused   nothing listens (the kernel answers SYNs with RST)
    reset     accept, then abort with RST before any answer
    silent    accept, read the upgrade request, never answer
    http503   answer 503 Service Unavailable (Retry-After: 0) and close
    accept    answer 101 with a wrong Sec-WebSocket-Accept
    eof       read the request, close (FIN) without an answer
    drop      proxy to the upstream, then abort with RST once some data went through
    protocol  accept the upgrade, then send a frame with RSV1 set (nothing negotiated it)
    closefin  accept the upgrade, then end TCP (FIN) without a close frame
    restart   accept the upgrade, then close with 1012 (service restart)
    tls       TLS with a certificate from a CA the client does not trust (GOOD/BAD: dirs
              holding ca.pem, server.pem, server.key; after `heal` the GOOD one is used)

After `heal` (answered `healed` once done) it is a plain TCP proxy to the upstream (TLS
terminated here with the GOOD certificate in mode tls). Prints `ready` once set up.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import socket
import ssl
import struct
import sys
from pathlib import Path

DROP_AFTER = 4096  # bytes from the upstream before `drop` resets the client
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 section 1.3


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), not FIN."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _read_head(reader: asyncio.StreamReader) -> bytes:
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        return await reader.readuntil(b"\r\n\r\n")
    return b""


def _switching_protocols(head: bytes) -> bytes:
    """A valid 101 for the upgrade request `head` (RFC 6455 section 4.2.2)."""
    key = b""
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"sec-websocket-key":
            key = value.strip()
    accept = base64.b64encode(hashlib.sha1(key + GUID).digest())  # RFC 6455 section 4.2.2
    return (
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
        b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
    )


# After a valid 101: what each mode sends (server frames are unmasked, section 5.1).
AFTER_UPGRADE = {
    "protocol": b"\xc1\x02hi",  # FIN + RSV1 + text: RSV1 with no extension (section 5.2)
    "closefin": b"",
    "restart": b"\x88\x11\x03\xf4service restart",  # close 1012 (section 7.4.1)
}


async def _pipe(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    drop_after: int | None = None,
    victim: asyncio.StreamWriter | None = None,
) -> None:
    sent = 0
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
            sent += len(data)
            if drop_after is not None and sent >= drop_after and victim is not None:
                _abort(victim)
                return
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        writer.close()


class Front:
    def __init__(self, args: argparse.Namespace) -> None:
        self.mode: str = args.mode
        self.port: int = args.port
        host, _, port = args.upstream.rpartition(":")
        self.upstream = (host, int(port))
        self.server: asyncio.Server | None = None
        self.good: ssl.SSLContext | None = None
        self.bad: ssl.SSLContext | None = None
        if args.tls:
            self.good, self.bad = (self._context(Path(d)) for d in args.tls)

    @staticmethod
    def _context(directory: Path) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(directory / "server.pem", directory / "server.key")
        return context

    async def _proxy(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        drop_after: int | None = None,
    ) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _abort(writer)
            return
        await asyncio.gather(
            _pipe(reader, up_writer),
            _pipe(up_reader, writer, drop_after, victim=writer),
        )
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            up_writer.close()

    async def _faulty(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        mode = self.mode
        if mode == "drop":
            await self._proxy(reader, writer, drop_after=DROP_AFTER)
            return
        if mode == "reset":
            _abort(writer)
            return
        head = await _read_head(reader)
        if mode == "silent":
            await reader.read()  # until the client gives up
        elif mode == "http503":
            body = b"exchange restarting"
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 0\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()
        elif mode in AFTER_UPGRADE and head:
            writer.write(_switching_protocols(head) + AFTER_UPGRADE[mode])
            await writer.drain()
            if mode == "closefin":
                writer.write_eof()  # FIN, but read on: data after it must not draw a RST
            with contextlib.suppress(asyncio.TimeoutError, ConnectionError):
                await asyncio.wait_for(reader.read(), 2.0)  # until the client closes
        elif mode == "accept" and head:
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: bm90IHRoZSByaWdodCB0b2tlbiE=\r\n\r\n"
            )
            await writer.drain()
            await reader.read()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()

    async def _serve(self, handler: object, context: ssl.SSLContext | None) -> None:
        self.server = await asyncio.start_server(
            handler,  # type: ignore[arg-type]
            "0.0.0.0",
            self.port,
            ssl=context,
            reuse_address=True,
        )

    async def run(self) -> None:
        # Its connections die rudely on purpose: asyncio's reports of that are noise here.
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)
        if self.mode == "tls":
            await self._serve(self._proxy, self.bad)
        elif self.mode != "refused":
            await self._serve(self._faulty, None)
        print("ready", flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                return
            if line.strip() == "heal":
                if self.server is not None:
                    self.server.close()
                await self._serve(self._proxy, self.good)
                print("healed", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--upstream", required=True)
    parser.add_argument("--mode", required=True)
    parser.add_argument("--tls", nargs=2, metavar=("GOOD", "BAD"))
    asyncio.run(Front(parser.parse_args()).run())


if __name__ == "__main__":
    main()
