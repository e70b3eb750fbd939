"""The DPDK transport: the same WebSocket connection as the kernel transport, over wsgw's
own TCP/IP stack on a DPDK port.

    engine = Engine(interface, port=dpdk_port); engine.start()
    async with connect_dpdk("ws://198.18.5.1:9000/stream", engine=engine) as ws:
        async for message in ws: ...

The TCP connection lives on the thread that drives the engine (every stack object does).
`EngineTransport` is an `asyncio.Transport` over it, in one of two modes, chosen by the loop
it is opened on:

- threaded: the engine runs its own thread (`engine.start()`), the application any asyncio
  loop. Bytes cross threads once per engine batch: writes are queued and the engine is
  woken to send them; what the socket received is handed to the loop in one
  `call_soon_threadsafe` per batch.
- direct: the application runs on the engine's own loop (`dataplane/loop.py`,
  `asyncio.Runner(loop_factory=engine.loop_factory)`). One thread, no hand-off: writes go
  straight into the TcpSocket (on the wire at the loop's next turn, or at once with
  `flush_on_write`), received bytes reach `data_received` inside the engine's batch, and
  the connect completes without a cross-thread future.

On the loop side it is the connection both transports share (`WsClientConnection`, in
`dataplane.transports.connection`): the WebSocket, TLS, ping and close logic is one piece
of code whichever network carries the bytes.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import errno
import functools
import ipaddress
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, Unpack

from dataplane.engine import Engine
from dataplane.errors import (
    DataplaneError,
    ResolveError,
    TransportError,
    TransportTimeoutError,
    UnreachableError,
    transport_error,
)
from dataplane.feed import CFeed
from dataplane.loop import engine_of
from dataplane.stack.socket import TcpSocket
from dataplane.stack.tcp import TcpState
from dataplane.stack.tcp_errors import TcpError
from dataplane.transports.base import parse_ws_url
from dataplane.transports.connection import (
    ConnectionProtocol,
    ConnectOptions,
    PendingConnection,
    WsClientConnection,
    prepare_connection,
)
from dataplane.wire.addr import ip_to_int
from dataplane.ws.errors import LocalProtocolError


class EngineTransport(asyncio.Transport):
    """asyncio's transport interface over a TcpSocket that the engine drives."""

    #: Direct mode: put each write on the wire at once instead of at the loop's next turn
    #: (which comes right after the callbacks that wrote: batches several writes).
    flush_on_write = False

    def __init__(
        self, engine: Engine, loop: asyncio.AbstractEventLoop, protocol: asyncio.Protocol
    ) -> None:
        super().__init__()
        self._engine = engine
        self._loop = loop
        self._protocol = protocol
        self.direct = engine_of(loop) is engine  # the engine runs on this very loop
        self._out: collections.deque[bytes] = collections.deque()  # loop -> engine
        self._sock: TcpSocket | None = None
        self._closing = False
        self._eof_requested = False
        self._reading = True
        self._made = False  # connection_made was called: connection_lost is owed
        # The engine may see the end (a reset) before the opener, on the loop, made the
        # connection: the loss waits here for it (see `made`); the lock orders the two.
        self._handoff = threading.Lock()
        self._early_loss: tuple[Exception | None] | None = None
        self._lost_reported = False
        self._eof_reported = False
        self._pending: bytes = b""  # what the socket did not take yet
        self.peer: tuple[str, int] | None = None
        #: The C feed path (dataplane/feed.py), when the session attached one.
        self.feed: CFeed | None = None
        #: TCP sequence number just past the last byte handed to the protocol (32-bit),
        #: as the protocol's side sees it: where an armed feed would take over.
        self.delivered_seq: int | None = None

    # ---- asyncio.Transport, on the loop thread -----------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing or not data:
            return
        if not self.direct:
            self._out.append(bytes(data))
            self._engine.fastpath.wake()
            return
        sock = self._sock
        if sock is not None and not self._pending and not self._out and sock.state in _SENDING:
            taken = sock.send(data)
            if taken < len(data):
                self._pending = bytes(data[taken:])
        else:
            self._out.append(bytes(data))
        self._wrote()

    def _wrote(self) -> None:
        """Direct mode: output for the wire, now or at the next turn."""
        if self.flush_on_write:
            self._engine.flush()
        else:
            self._engine.mark_dirty()

    def write_eof(self) -> None:
        self._eof_requested = True
        if self.direct:
            if self._sock is not None:
                self._push(self._sock)
            self._wrote()
        else:
            self._engine.fastpath.wake()

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self.write_eof()

    def abort(self) -> None:
        self._closing = True
        if self.direct:
            self._abort_now()
            self._wrote()
        else:
            self._engine.call(self._abort_now)

    def is_closing(self) -> bool:
        return self._closing

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        assert isinstance(protocol, asyncio.Protocol)
        self._protocol = protocol

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol

    def pause_reading(self) -> None:
        self._reading = False  # the socket's buffer fills and TCP's window closes
        if self._sock is not None:
            self._sock.connection.direct_reader = None

    def resume_reading(self) -> None:
        self._reading = True
        self._read_directly()
        self._engine.fastpath.wake()  # the next poll returns at once: the pump delivers

    def _read_directly(self) -> None:
        """Once connection_made has run and while reading: the bytes the C fast path brings
        go from the flow's sync straight to the protocol (direct mode) or to the loop
        (threaded), as `TcpConnection.direct_reader`: not copied into the socket's buffer
        and out again by the pump."""
        sock = self._sock
        if self._reading and self._made and sock is not None:
            reader = self._read_direct if self.direct else self._read_to_loop
            sock.connection.direct_reader = reader

    def _read_to_loop(self, data: bytes) -> None:
        """Threaded mode's direct reader (on the engine thread): one hand-off per sync."""
        sock = self._sock
        if not self._lost_reported and sock is not None:
            self._to_loop(self._deliver_at, data, sock.connection.read_seq)

    def _read_direct(self, data: bytes) -> None:
        if self._lost_reported:
            return
        sock = self._sock
        if sock is not None:
            self.delivered_seq = sock.connection.read_seq
        rx_ns = self._engine.batch_rx_ns
        if rx_ns:
            self._engine.rx_to_protocol_ns.append(time.monotonic_ns() - rx_ns)
        try:  # (_deliver, inline: this is every read of the engine loop)
            self._protocol.data_received(data)
        except Exception as exc:
            self._protocol_failed(exc, "data_received")

    def is_reading(self) -> bool:
        return self._reading

    def get_write_buffer_size(self) -> int:
        return len(self._pending) + sum(len(chunk) for chunk in self._out)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "peername":
            return self.peer
        if name == "transport":
            return "dpdk"
        return default

    # ---- the C feed path (dataplane/feed.py), on the loop thread -----------------------------
    def attach_feed(self, feed: CFeed) -> None:
        """From now on the engine's poll writes the feed's data frames to the ring itself,
        while armed (`arm_feed`)."""
        self.feed = feed
        self._on_engine(self._attach_feed_now)

    def _attach_feed_now(self) -> None:
        sock, feed = self._sock, self.feed
        if sock is not None and feed is not None and not self._lost_reported:
            self._engine.fastpath.attach_feed(sock.connection, feed.handle)

    def detach_feed(self) -> None:
        """Every byte goes to the protocol again (the feed stays readable)."""
        if self.feed is None:
            return
        self._on_engine(self._detach_feed_now)

    def _detach_feed_now(self) -> None:
        if self._sock is not None:
            self._engine.fastpath.detach_feed(self._sock.connection)

    def arm_feed(self) -> None:
        """The protocol has processed every byte it was handed (a message boundary, no
        partial or fragmented message held, every message taken by its reader): the feed
        may take the bytes from there. Stale requests are refused in C (see wsgw_feed.h)."""
        feed, seq = self.feed, self.delivered_seq
        if feed is not None and seq is not None and not self._lost_reported:
            feed.arm(seq)

    def feed_topic(self, topic: str, topic_id: int | None) -> None:
        """Route topic's frames through the feed to ring topic topic_id (None: not any more)."""
        feed = self.feed
        if feed is None:
            return

        def update() -> None:
            if topic_id is None:
                feed.remove_topic(topic)
            else:
                feed.set_topic(topic, topic_id)  # False: the table is full, Python's then

        self._on_engine(update)

    def _on_engine(self, fn: Callable[[], None]) -> None:
        """fn on the engine's thread: now in direct mode, at its next batch otherwise."""
        if self.direct:
            fn()
        else:
            self._engine.call(fn)

    # ---- the engine side: a service run once per batch on the engine's thread ----------------
    def attach(self, sock: TcpSocket) -> None:
        self._sock = sock
        self.peer = (str(ipaddress.IPv4Address(sock.remote.ip)), sock.remote.port)

    def _abort_now(self) -> None:
        if self._sock is not None:
            self._sock.abort()
        self._finish(None)

    def _push(self, sock: TcpSocket) -> None:
        """Out: everything queued, as far as the send buffer takes it (backpressure)."""
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

    def pump(self, now: float) -> None:
        """The engine's service for this connection, once per batch: out (what the loop
        wrote), in (what the socket received), then the end when it came."""
        sock = self._sock
        if sock is None or self._lost_reported:
            return
        if self._pending or self._out or self._eof_requested:
            self._push(sock)
        # In: whatever arrived, in one hand-off per batch (direct: no hand-off at all).
        if self._reading:
            try:
                data = sock.recv(1 << 22)
            except TcpError:  # failed below TCP (ARP gave up): reported as the end below
                data = b""
            if data:
                seq = sock.connection.read_seq
                if self.direct:
                    rx_ns = self._engine.batch_rx_ns
                    if rx_ns:
                        self._engine.rx_to_protocol_ns.append(time.monotonic_ns() - rx_ns)
                    self.delivered_seq = seq
                    self._deliver(data)
                elif not self._to_loop(self._deliver_at, data, seq):
                    return
        if sock.state is TcpState.ESTABLISHED and sock.error is None:
            return  # the common case: no EOF (that is CLOSE-WAIT), no end, no failure
        self._pump_end(sock)

    def _pump_end(self, sock: TcpSocket) -> None:
        """The rest of a pump once the socket left ESTABLISHED or failed: the failure, the
        peer's FIN (EOF to the protocol), and the end of both directions."""
        state = sock.state
        error = sock.error
        if error is not None:
            self._finish(error)
        elif sock.at_eof and not self._eof_reported and self._reading:
            # (recv above took every byte: at_eof means the peer's FIN is next)
            self._eof_reported = True
            if self.direct:
                self._deliver_eof()
            elif not self._to_loop(self._deliver_eof):
                return
        # Both directions are over once the peer's FIN is read and ours is queued, as a
        # kernel socket's close() would have it: the stack finishes LAST-ACK on its own.
        if state is TcpState.CLOSED or (
            self._eof_reported and self._eof_requested and state not in _SENDING
        ):
            self._finish(None)

    def _finish(self, exc: Exception | None) -> None:
        if self._lost_reported:
            return
        self._lost_reported = True
        self._closing = True
        if self._sock is not None:
            self._sock.connection.direct_reader = None
            if self.feed is not None:
                self._engine.fastpath.detach_feed(self._sock.connection)
        if self.pump in self._engine.services:
            self._engine.services.remove(self.pump)
        with self._handoff:
            if not self._made:
                self._early_loss = (exc,)
                return
        if self.direct:
            self._loop.call_soon(self._protocol.connection_lost, exc)
        else:
            self._to_loop(self._protocol.connection_lost, exc)

    def _to_loop(self, callback: Callable[..., object], *args: object) -> bool:
        """Threaded mode: callback(*args) on the application's loop. False once that loop
        is closed (it ended with this connection still open): nobody reads it any more,
        so the connection is aborted instead of failing every engine turn."""
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            if not self._loop.is_closed():
                raise
            if self._sock is not None:
                self._sock.abort()
            self._made = False  # no connection_lost owed to a loop that is gone
            self._finish(None)
            return False
        return True

    # ---- on the loop thread (direct mode: inside the engine's batch) ---------------------------
    def made(self) -> None:
        """The opener's connection_made; a loss the engine saw before it is reported now
        (a peer that resets at once must read as a reset, not as an open that hangs)."""
        with self._handoff:
            self._made = True
            early = self._early_loss
        self._protocol.connection_made(self)
        if early is not None:
            self._loop.call_soon(self._protocol.connection_lost, early[0])

    def _deliver_at(self, data: bytes, seq: int) -> None:
        self.delivered_seq = seq
        self._deliver(data)

    def _deliver(self, data: bytes) -> None:
        try:
            self._protocol.data_received(data)
        except Exception as exc:
            self._protocol_failed(exc, "data_received")

    def _deliver_eof(self) -> None:
        # asyncio's contract: a protocol that does not ask to keep the transport open on
        # EOF gets it closed for it.
        try:
            keep_open = self._protocol.eof_received()
        except Exception as exc:
            self._protocol_failed(exc, "eof_received")
            return
        if not keep_open:
            self.close()

    def _protocol_failed(self, exc: Exception, where: str) -> None:
        """As asyncio's own transports do: report it to the loop and drop the connection."""
        self._loop.call_exception_handler(
            {
                "message": f"EngineTransport: the protocol's {where} raised",
                "exception": exc,
                "transport": self,
                "protocol": self._protocol,
            }
        )
        self.abort()


_SENDING = frozenset({TcpState.ESTABLISHED, TcpState.CLOSE_WAIT})


# IPv4 literals already parsed (an open to a literal then costs a dict look-up).
_LITERALS: dict[str, int] = {}
_LITERALS_MAX = 1024


def _ipv4_literal(host: str) -> int | None:
    """host as an IPv4 address when it is a literal, else None (a name)."""
    found = _LITERALS.get(host)
    if found is None:
        try:
            found = ip_to_int(str(ipaddress.IPv4Address(host)))
        except ValueError:
            return None
        if len(_LITERALS) < _LITERALS_MAX:
            _LITERALS[host] = found
    return found


async def _resolve(host: str, port: int) -> int:
    """IPv4 address of a host name, through the system resolver (a literal is taken by
    `_ipv4_literal` before: no coroutine for it)."""
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise transport_error(exc, f"resolving {host}") from exc
    if not infos:
        raise ResolveError(f"{host} has no IPv4 address")
    return ip_to_int(str(infos[0][4][0]))


async def _open_dpdk(
    url: str,
    *,
    engine: Engine,
    connect_timeout: float | None,
    **options: Unpack[ConnectOptions],
) -> WsClientConnection:
    target = parse_ws_url(url)
    if connect_timeout is None:
        connect_timeout = float(options.get("open_timeout", 10.0))
    loop = asyncio.get_running_loop()
    host = options.get("connect_host") or target.host
    port = options.get("connect_port") or target.port
    remote_ip = _ipv4_literal(host)
    if remote_ip is None:
        remote_ip = await _resolve(host, port)
    transport = EngineTransport(engine, loop, asyncio.Protocol())  # ours once prepared
    established: asyncio.Future[None] = loop.create_future()
    where = f"{host}:{port}"
    url_names_address = _ipv4_literal(target.host) is not None

    open_on_engine = functools.partial(
        _connect_on_engine,
        engine,
        transport,
        remote_ip,
        port,
        where,
        established,
        url_names_address,
    )

    try:
        if transport.direct:
            opened: concurrent.futures.Future[None] | None = None
            open_on_engine()
        else:
            opened = engine.call(open_on_engine)
        # One deadline, moved on once TCP is up: connect_timeout, then open_timeout.
        limit = connect_timeout
        async with asyncio.timeout(connect_timeout) as deadline:
            # The WebSocket (h11 handshake, TLS) is prepared while the SYN is on its way.
            connection, _, open_timeout = prepare_connection(url, **options)
            transport.set_protocol(ConnectionProtocol(connection))
            if opened is not None:
                await asyncio.wrap_future(opened)
            await established
            limit = open_timeout
            deadline.reschedule(loop.time() + open_timeout)
            transport.made()
            transport._read_directly()
            connection.start_opening()
            if transport.direct:
                engine.flush()  # the request leaves now, not at the next turn...
            connection.prepare_receive()  # ...and the answer is prepared for meanwhile
            # Awaited as is, not through asyncio.shield: the shield's outer future wakes
            # this task one loop iteration later, and on the engine loop every iteration
            # is an engine turn (a flush and a C poll) paid before the open returns. The
            # future is this opener's alone: a timeout or a cancel cancelling it only
            # drops a connection that is aborted right below.
            await connection.wait_open()
    except TimeoutError as exc:
        transport.abort()
        if isinstance(exc, TransportError):
            raise
        raise TransportTimeoutError(f"opening {url} over DPDK timed out after {limit} s") from None
    except (OSError, DataplaneError) as exc:  # no route, no local port: the one family
        transport.abort()
        if isinstance(exc, TransportError | LocalProtocolError):
            raise
        raise transport_error(exc, where) from exc
    except BaseException:
        transport.abort()
        raise
    return connection


async def open_tcp(
    engine: Engine, host: str, port: int, protocol: asyncio.Protocol, *, timeout: float
) -> EngineTransport:
    """A TCP connection over the engine's stack for any asyncio protocol (the REST snapshot
    client, dataplane.transports.http): the same connect as a WebSocket's, without the
    WebSocket. Returns once TCP is up and protocol.connection_made has run; raises the
    `TransportError` family as connect_dpdk does (the timeout as TransportTimeoutError)."""
    loop = asyncio.get_running_loop()
    remote_ip = _ipv4_literal(host)
    literal = remote_ip is not None
    if remote_ip is None:
        remote_ip = await _resolve(host, port)
    transport = EngineTransport(engine, loop, protocol)
    established: asyncio.Future[None] = loop.create_future()
    where = f"{host}:{port}"
    connect = functools.partial(
        _connect_on_engine, engine, transport, remote_ip, port, where, established, literal
    )
    try:
        async with asyncio.timeout(timeout):
            if transport.direct:
                connect()
            else:
                await asyncio.wrap_future(engine.call(connect))
            await established
    except BaseException as exc:
        transport.abort()
        if isinstance(exc, TransportError | LocalProtocolError):
            raise
        if isinstance(exc, TimeoutError):
            raise TransportTimeoutError(f"connecting to {where} over DPDK timed out") from None
        if isinstance(exc, OSError | DataplaneError):
            raise transport_error(exc, where) from exc
        raise
    transport.made()
    transport._read_directly()
    return transport


def _connect_on_engine(
    engine: Engine,
    transport: EngineTransport,
    remote_ip: int,
    port: int,
    where: str,
    established: asyncio.Future[None],
    url_names_address: bool,
) -> None:
    """On the engine's thread: send the SYN, then watch the socket (an engine service)
    until TCP is up, when the transport's pump takes over, or failed; the outcome goes to
    established on the opener's loop. An address the stack refuses (our own, a broadcast,
    a martian) raises here."""
    try:
        sock = engine.interface.connect(remote_ip, port, time.monotonic())
    except ValueError as exc:  # our own address, a broadcast, a martian
        if url_names_address:  # the URL says so: no retry changes that
            raise LocalProtocolError(f"{where}: {exc}") from exc
        # A name that resolved to such an address (a sinkhole, a resolver's answer of
        # 0.0.0.0 or 127.x during an outage): the next answer may differ, so retried.
        raise UnreachableError(f"{where}: {exc}", errno.EHOSTUNREACH) from exc
    transport.attach(sock)
    deliver = _set if transport.direct else _threadsafe(established.get_loop())

    def watch(now: float) -> None:
        if sock.state in _SENDING:
            engine.services.remove(watch)
            engine.services.append(transport.pump)
            deliver(established, None)
        elif sock.error is not None or sock.state is TcpState.CLOSED:
            engine.services.remove(watch)
            error = sock.error or ConnectionResetError("the connection closed")
            deliver(established, transport_error(error, where))

    engine.services.append(watch)
    if transport.direct:
        engine.flush()  # the SYN leaves now, not at the next turn


def _threadsafe(
    loop: asyncio.AbstractEventLoop,
) -> Callable[[asyncio.Future[None], BaseException | None], None]:
    def deliver(future: asyncio.Future[None], result: BaseException | None) -> None:
        loop.call_soon_threadsafe(_set, future, result)

    return deliver


def _set(future: asyncio.Future[None], result: BaseException | None) -> None:
    if future.done():
        return
    if result is None:
        future.set_result(None)
    else:
        future.set_exception(result)


def connect_dpdk(
    url: str,
    *,
    engine: Engine,
    connect_timeout: float | None = None,
    **options: Unpack[ConnectOptions],
) -> PendingConnection:
    """Open a client WebSocket to url over the engine's user-space stack. Takes the same
    `ConnectOptions` as `connect_kernel` (TLS, subprotocols, deflate, limits, timeouts)
    and raises the same errors: the `TransportError` family (a TcpError chained as the
    cause).

    connect_timeout: for TCP (SYN, ARP) to come up; default open_timeout, so a peer with
    no ARP reply or no route fails within the open's own timeout, never hangs it."""
    return PendingConnection(
        url,
        options,
        lambda u, **o: _open_dpdk(u, engine=engine, connect_timeout=connect_timeout, **o),
    )
