"""The DPDK transport: the same WebSocket connection as the kernel transport, over wsgw's
own TCP/IP stack on a DPDK port.

    engine = Engine(interface, port=dpdk_port); engine.start()
    async with connect_dpdk("ws://198.18.5.1:9000/stream", engine=engine) as ws:
        async for message in ws: ...

The TCP connection lives on the engine thread (every stack object does). `EngineTransport`
is an `asyncio.Transport` whose bytes cross threads once per engine batch: writes are
queued and the engine is woken to send them; what the socket received is handed to the
event loop in one `call_soon_threadsafe` per batch. On the loop side it is the kernel
transport's very connection class (`KernelWebSocket`): the WebSocket, TLS, ping and close
logic is one piece of code whichever network carries the bytes.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import socket
import time
from typing import Any

from dataplane.engine import Engine
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpState
from dataplane.transports.kernel import KernelWebSocket, _Connect, _Protocol, prepare_connection
from dataplane.wire.addr import ip_to_int


class EngineTransport(asyncio.Transport):
    """asyncio's transport interface over a TcpSocket that the engine thread drives."""

    def __init__(
        self, engine: Engine, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol
    ) -> None:
        super().__init__()
        self._engine = engine
        self._loop = loop
        self._protocol = protocol
        self._out: collections.deque[bytes] = collections.deque()  # loop -> engine
        self._sock: TcpSocket | None = None
        self._closing = False
        self._eof_requested = False
        self._abort_requested = False
        self._reading = True
        self._lost_reported = False
        self._eof_reported = False
        self._pending: bytes = b""  # engine side: what the socket did not take yet
        self.peer: tuple[str, int] | None = None

    # ---- asyncio.Transport, on the loop thread -----------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        self._out.append(bytes(data))
        self._engine.fastpath.wake()

    def write_eof(self) -> None:
        self._eof_requested = True
        self._engine.fastpath.wake()

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self.write_eof()

    def abort(self) -> None:
        self._closing = True
        self._abort_requested = True
        self._engine.fastpath.wake()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._reading = False  # the socket's buffer fills and TCP's window closes

    def resume_reading(self) -> None:
        self._reading = True
        self._engine.fastpath.wake()

    def is_reading(self) -> bool:
        return self._reading

    def get_write_buffer_size(self) -> int:
        return sum(len(chunk) for chunk in self._out)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer
        if name == "transport":
            return "dpdk"
        return default

    # ---- the engine side: a service run once per batch on the engine thread ------------------
    def attach(self, sock: TcpSocket) -> None:
        self._sock = sock
        self.peer = (str(ipaddress.IPv4Address(sock.remote.ip)), sock.remote.port)

    def pump(self, now: float) -> None:
        sock = self._sock
        if sock is None:
            return
        if self._abort_requested:
            sock.abort()
            self._finish(None)
            return
        # Out: everything queued, as far as the send buffer takes it (backpressure).
        pending = self._pending
        while pending or self._out:
            if not pending:
                pending = self._out.popleft()
            taken = sock.send(pending) if sock.state in _SENDING else 0
            pending = pending[taken:]
            if pending:
                break
        self._pending = pending
        if self._eof_requested and not pending and not self._out and sock.state in _SENDING:
            sock.close()
        # In: whatever arrived, in one hand-off per batch.
        if self._reading:
            data = sock.recv(1 << 22)
            if data:
                self._loop.call_soon_threadsafe(self._deliver, data)
        if sock.error is not None:
            self._finish(sock.error)
        elif sock.at_eof and not self._eof_reported and self._reading:
            # (recv above took every byte: at_eof means the peer's FIN is next)
            self._eof_reported = True
            self._loop.call_soon_threadsafe(self._deliver_eof)
        # Both directions are over once the peer's FIN is read and ours is queued, as a
        # kernel socket's close() would have it: the stack finishes LAST-ACK on its own.
        if sock.state is TcpState.CLOSED or (
            self._eof_reported and self._eof_requested and sock.state not in _SENDING
        ):
            self._finish(None)

    def _finish(self, exc: Exception | None) -> None:
        if self._lost_reported:
            return
        self._lost_reported = True
        self._closing = True
        if self.pump in self._engine.services:
            self._engine.services.remove(self.pump)
        self._loop.call_soon_threadsafe(self._protocol.connection_lost, exc)

    # ---- back on the loop thread --------------------------------------------------------------
    def _deliver(self, data: bytes) -> None:
        self._protocol.data_received(data)

    def _deliver_eof(self) -> None:
        # asyncio's contract: a protocol that does not ask to keep the transport open on
        # EOF gets it closed for it.
        if not self._protocol.eof_received():
            self.close()


_SENDING = frozenset({TcpState.ESTABLISHED, TcpState.CLOSE_WAIT})


async def _resolve(host: str, port: int) -> int:
    """IPv4 address of host: a literal as is, a name through the system resolver."""
    try:
        return ip_to_int(str(ipaddress.IPv4Address(host)))
    except ValueError:
        pass
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{host} has no IPv4 address")
    return ip_to_int(str(infos[0][4][0]))


async def _open_dpdk(
    url: str, *, engine: Engine, connect_timeout: float, **options: Any
) -> KernelWebSocket:
    connection, target, open_timeout = prepare_connection(url, **options)
    loop = asyncio.get_running_loop()
    host = options.get("connect_host") or target.host
    port = options.get("connect_port") or target.port
    remote_ip = await _resolve(host, port)
    transport = EngineTransport(engine, loop, _Protocol(connection))
    established: asyncio.Future[None] = loop.create_future()

    def open_on_engine() -> None:
        sock = engine.interface.connect(remote_ip, port, time.monotonic())
        transport.attach(sock)

        def watch(now: float) -> None:
            if sock.state in _SENDING:
                engine.services.remove(watch)
                engine.services.append(transport.pump)
                loop.call_soon_threadsafe(_set, established, None)
            elif sock.error is not None or sock.state is TcpState.CLOSED:
                engine.services.remove(watch)
                error = sock.error or ConnectionError(f"connect to {host}:{port} failed")
                loop.call_soon_threadsafe(_set, established, error)

        engine.services.append(watch)

    try:
        async with asyncio.timeout(connect_timeout):
            await asyncio.wrap_future(engine.call(open_on_engine))
            await established
        transport._protocol.connection_made(transport)
        async with asyncio.timeout(open_timeout):
            connection._start()
            await asyncio.shield(connection._opened)
    except TimeoutError:
        transport.abort()
        raise TimeoutError(f"opening {url} over DPDK timed out") from None
    except BaseException:
        transport.abort()
        raise
    return connection


def _set(future: asyncio.Future[None], result: BaseException | None) -> None:
    if future.done():
        return
    if result is None:
        future.set_result(None)
    else:
        future.set_exception(result)


def connect_dpdk(
    url: str, *, engine: Engine, connect_timeout: float = 10.0, **options: Any
) -> _Connect:
    """Open a client WebSocket to url over the engine's user-space stack. Takes the same
    options as `connect_kernel` (TLS, subprotocols, deflate, limits, timeouts)."""
    return _Connect(
        url,
        options,
        opener=lambda u, **o: _open_dpdk(u, engine=engine, connect_timeout=connect_timeout, **o),
    )
