"""The client WebSocket connection both transports build on, and how an opener drives it.

`WsClientConnection` is the application's side of one WebSocket (recv, send, ping, close,
message handler, backpressure) over any `asyncio.Transport`: the kernel transport
(`kernel.connect_kernel`, an OS socket) and the DPDK transport (`dpdk.connect_dpdk`, an
`EngineTransport` over wsgw's own stack) open the same class, so the WebSocket, TLS, ping
and close logic is one piece of code whichever network carries the bytes.

An opener (a transport's connect function) follows one contract:

1. `prepare_connection(url, **options)`: the sans-IO WebSocket (and TLS for wss://) in a
   `WsClientConnection`, attached to no network yet;
2. open TCP with `ConnectionProtocol(connection)` as the transport's protocol (asyncio
   calls its `connection_made`, or the transport does);
3. `connection.start_opening()` (the upgrade request, or the TLS ClientHello), then
   `connection.prepare_receive()` while it is on its way;
4. `await connection.wait_open()` under the open timeout; on any failure abort the
   transport. Network failures and the timeout are raised as the `TransportError`
   family (`transport_error`, `TransportTimeoutError`); a refused upgrade as
   `HandshakeRejected`, as `wait_open` gives it.

`PendingConnection` wraps such an opener so that `connect_*(...)` can be awaited or used
as `async with`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Sequence
from types import TracebackType
from typing import Any, TypedDict, cast

from dataplane.errors import DataplaneError, TransportError, transport_error
from dataplane.transports.base import WsUrl, parse_ws_url
from dataplane.ws import events as ev
from dataplane.ws.client import (
    CLOSE_ABNORMAL,
    CLOSE_INTERNAL_ERROR,
    CLOSE_NORMAL,
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_MESSAGE_SIZE,
    ConnectionState,
    WsClient,
)
from dataplane.ws.deflate import DeflateOptions, DeflateParams
from dataplane.ws.errors import (
    ConnectionClosed,
    ConnectionClosedOK,
    HandshakeRejected,
    LocalProtocolError,
    TlsError,
    closed_error,
)
from dataplane.ws.handshake import HeaderPairs
from dataplane.ws.scan import BackendName
from dataplane.ws.tls import TlsClient

_OPEN_STATES = frozenset({ConnectionState.OPEN, ConnectionState.CLOSING})
#: How long a protocol violation waits for the application to answer the messages that
#: came before it (section 7.1.7 says fail; Autobahn grades the echoes sent first).
DEFERRED_FAILURE_GRACE_S = 1.0
_log = logging.getLogger(__name__)

#: What `WsClientConnection.set_message_handler` takes: called with each message, in order.
MessageHandler = Callable[[ev.Message], None]


class ConnectionProtocol(asyncio.Protocol):
    """The asyncio protocol an opener gives its transport: asyncio's callbacks (connection
    made, each read, end of stream, loss, flow control), forwarded to the connection."""

    def __init__(self, owner: WsClientConnection) -> None:
        self._owner = owner
        # Each read goes straight to the connection: one Python call less per read.
        self.data_received = owner._data_received  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._owner._connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self._owner._data_received(data)

    def eof_received(self) -> bool:
        self._owner._data_received(b"")
        return False  # let asyncio close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._connection_lost(exc)

    def pause_writing(self) -> None:
        self._owner._pause_writing()

    def resume_writing(self) -> None:
        self._owner._resume_writing()


class WsClientConnection:
    """An open client WebSocket over an asyncio transport (implements
    `base.WebSocketConnection`). Get one from a transport's connect function
    (`kernel.connect_kernel`, `dpdk.connect_dpdk`); openers build it with
    `prepare_connection` and drive it as the module docstring says."""

    def __init__(
        self,
        ws: WsClient,
        tls: TlsClient | None,
        *,
        close_timeout: float = 10.0,
        max_queue: int = 4096,
    ) -> None:
        self._ws = ws
        self._tls = tls
        self.close_timeout = close_timeout
        self._max_queue = max_queue
        self._loop = asyncio.get_running_loop()
        self._transport: asyncio.Transport | None = None
        self._opened: asyncio.Future[ev.Handshake] = self._loop.create_future()
        self._lost: asyncio.Future[None] = self._loop.create_future()
        # Queued data: Messages, and MessageBatches (runs of messages from one scan) that
        # recv() splits on demand; _queued counts messages, for max_queue.
        self._messages: collections.deque[ev.Message | ev.MessageBatch] = collections.deque()
        self._queued = 0
        self._recv_waiter: asyncio.Future[None] | None = None
        self._handler: MessageHandler | None = None
        self._draining = False  # set_message_handler is handing the queue over
        self._reading_paused = False
        self._writing_paused = False
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._pings: dict[bytes, tuple[asyncio.Future[float], float]] = {}
        self._linger: asyncio.TimerHandle | None = None
        self._deferred_failure: asyncio.Handle | None = None
        self._deferred_deadline = 0.0  # loop time by which a held violation fails anyway
        self._close_notify_sent = False
        self._local_close: tuple[int, str] | None = None
        #: What ended the connection below the WebSocket layer (a TLS or socket error).
        self.error: Exception | None = None
        self.handshake: ev.Handshake | None = None
        self.close_received: ev.CloseReceived | None = None
        self.closed: ev.Closed | None = None
        self.pings_received = 0
        self.messages_received = 0
        #: Called whenever every byte received is processed and every message was taken
        #: (the C feed path arms there: `EngineTransport.arm_feed`); None: nobody asks.
        self.on_idle: Callable[[], None] | None = None
        #: Called with True when a read queued messages and with False when recv_frames
        #: finds the queue empty again (every run it handed out was processed): a feed
        #: group's leg counts queued messages as unread input, which its socket no longer
        #: shows (gateway.groups.feed.GroupRouter.leg_queued); None: nobody asks.
        self.on_queued: Callable[[bool], None] | None = None
        self._told_queued = False

    # ---- properties ---------------------------------------------------------------------
    @property
    def state(self) -> ConnectionState:
        return self._ws.state

    @property
    def subprotocol(self) -> str | None:
        return self._ws.subprotocol

    @property
    def deflate(self) -> DeflateParams | None:
        return self._ws.deflate

    @property
    def transport(self) -> asyncio.Transport | None:
        """The transport below (an EngineTransport on the DPDK stack)."""
        return self._transport

    @property
    def tls(self) -> TlsClient | None:
        return self._tls

    @property
    def close_code(self) -> int | None:
        return self.closed.code if self.closed else None

    @property
    def close_reason(self) -> str:
        return self.closed.reason if self.closed else ""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The asyncio transport's extra info ("peername", "sockname", "socket", ...)."""
        transport = self._transport
        return transport.get_extra_info(name, default) if transport else default

    # ---- application API ------------------------------------------------------------------
    async def recv(self) -> ev.Message:
        """The next message; raises ConnectionClosed once the queue is empty and the
        connection is over."""
        if self._handler is not None:
            raise self._handler_set()
        while True:
            messages = self._messages
            if messages:
                head = messages.popleft()
                if type(head) is ev.MessageBatch:
                    split = head.messages()
                    head = split.pop(0)
                    messages.extendleft(reversed(split))
                assert type(head) is ev.Message
                self._queued -= 1
                self._taken()
                return head
            await self._wait_data()

    async def recv_batch(self, max_messages: int) -> list[ev.Message]:
        """Wait for one message, then take every message already queued (up to
        max_messages) at once: consumers that handle bursts pay one wake-up per burst."""
        batch = [await self.recv()]
        messages = self._messages
        while messages and len(batch) < max_messages:
            head = messages.popleft()
            if type(head) is ev.MessageBatch:
                split = head.messages()
                room = max_messages - len(batch)
                if len(split) > room:
                    messages.extendleft(reversed(split[room:]))
                    split = split[:room]
                batch += split
            else:
                assert type(head) is ev.Message
                batch.append(head)
        self._queued -= len(batch) - 1
        self._taken()
        return batch

    async def recv_frames(self) -> ev.MessageBatch:
        """The next run of messages as one `MessageBatch`, without a Python object per
        message: a batch from one scan of a read as it is, or the messages queued one by
        one (fragmented, compressed...) gathered into one. Raises ConnectionClosed like
        recv() once nothing is queued and the connection is over."""
        if self._handler is not None:
            raise self._handler_set()
        messages = self._messages
        if not messages:
            on_idle = self.on_idle
            if on_idle is not None and self._ws.at_message_boundary:
                on_idle()  # every run handed out was processed by the caller
            if self._told_queued:
                self._tell_queued(False)
        while not messages:
            await self._wait_data()
        head = messages.popleft()
        if type(head) is ev.MessageBatch:
            batch = head
        else:
            assert type(head) is ev.Message
            run = [head]
            while messages and type(messages[0]) is ev.Message:
                run.append(messages.popleft())  # type: ignore[arg-type]
            batch = ev.MessageBatch.of(run)
        self._queued -= len(batch)
        self._taken()
        return batch

    async def _wait_data(self) -> None:
        """Wait until data is queued; raise the close once the connection is over."""
        if self._ws.state not in _OPEN_STATES or self._lost.done():
            raise self._closed_exception()
        waiter = self._loop.create_future()
        self._recv_waiter = waiter
        try:
            await waiter
        finally:
            self._recv_waiter = None
        if self._handler is not None:
            raise self._handler_set()

    def _taken(self) -> None:
        """Messages were taken from the queue: read the socket again below half of it; a
        held violation fails once the queue is empty (after the taker's answer)."""
        if self._deferred_failure is not None and not self._messages:
            self._deferred_failure.cancel()
            self._deferred_failure = self._loop.call_soon(self._fail_deferred)
        if self._reading_paused and self._queued <= self._max_queue // 2:
            self._reading_paused = False
            if self._transport is not None:
                self._transport.resume_reading()

    def __aiter__(self) -> AsyncIterator[ev.Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[ev.Message]:
        """Messages until a clean close; an unclean end raises ConnectionClosedError."""
        while True:
            try:
                yield await self.recv()
            except ConnectionClosedOK:
                return

    def set_message_handler(self, handler: MessageHandler | None) -> None:
        """Have each message handed to handler(message) as soon as it is read, on the
        loop's thread, instead of queued for recv(): no task wakes up per message (the
        callback style of picows's listener). Messages already queued go to it first, in
        order; None queues them again. While a handler is set recv(), recv_batch() and
        recv_frames() raise LocalProtocolError; answer from the handler with `send_nowait`.
        A handler that raises gets no more messages: the exception is logged and kept in
        `error`, the rest of the read is queued, and the connection closes with 1011
        (internal error, RFC 6455 section 7.4.1)."""
        self._handler = handler
        if handler is None:
            return
        waiter = self._recv_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)  # a recv() already waiting raises: the messages go here
        if self._draining:
            return  # called by a handler while the queue drains: that loop goes on with it
        messages = self._messages
        self._draining = True
        try:
            while messages and self._handler is not None:
                head = messages.popleft()
                run = head.messages() if type(head) is ev.MessageBatch else [head]
                self._queued -= len(run)
                rest = self._hand_over(run)  # type: ignore[arg-type]
                messages.extendleft(reversed(rest))
                self._queued += len(rest)
        finally:
            self._draining = False
        self._taken()

    def _hand_over(self, run: list[ev.Message]) -> list[ev.Message]:
        """Each message of run to the handler of the moment, in order (a handler may
        replace or remove itself); returns the messages left once there is none (removed,
        or it raised), for the queue."""
        for index, message in enumerate(run):
            handler = self._handler
            if handler is None:
                return run[index:]
            try:
                handler(message)
            except Exception as exc:
                self._handler_failed(exc)
                return run[index + 1 :]
        return []

    def _handler_failed(self, exc: Exception) -> None:
        _log.exception("message handler %r raised; closing with 1011", self._handler)
        self._handler = None
        if self.error is None:
            self.error = exc
        if self._ws.state is ConnectionState.OPEN and self._transport is not None:
            self._write(self._ws.close(CLOSE_INTERNAL_ERROR, "message handler failed"))
            self._local_close = (CLOSE_INTERNAL_ERROR, "message handler failed")

    def _handler_set(self) -> LocalProtocolError:
        return LocalProtocolError(
            "a message handler is set: messages go to it, not to recv() "
            "(set_message_handler(None) first)"
        )

    async def send(self, data: str | bytes, *, text: bool | None = None) -> None:
        """Send one message: str as text, bytes as binary unless text=True (then UTF-8);
        waits while the transport's buffer is above its high-water mark."""
        self.send_nowait(data, text=text)
        if self._writing_paused:
            await self._drain()

    def send_nowait(self, data: str | bytes, *, text: bool | None = None) -> None:
        """`send` without the wait for the transport to drain, for code that cannot await
        (a message handler); `writing_paused` says when the buffer is above its mark."""
        ws = self._ws
        if ws.state is not ConnectionState.OPEN:
            raise self._closed_exception()
        if text is None:
            text = isinstance(data, str)
        if text:
            frame = ws.send_text(data)
        elif isinstance(data, str):
            raise LocalProtocolError("a str message is text: pass bytes for binary")
        else:
            frame = ws.send_binary(data)
        self._write(frame)

    @property
    def writing_paused(self) -> bool:
        """The transport's write buffer is above its high-water mark (`send` waits)."""
        return self._writing_paused

    def ping(self, payload: bytes | None = None) -> asyncio.Future[float]:
        """Send a ping now; the future gives the round-trip time in seconds when the pong
        comes back. A pong answers its own ping and every earlier one (section 5.5.3)."""
        ws = self._ws
        if ws.state is not ConnectionState.OPEN:
            raise self._closed_exception()
        if payload is None:
            payload = os.urandom(4)
            while payload in self._pings:
                payload = os.urandom(4)
        elif payload in self._pings:
            raise LocalProtocolError("a ping with this payload is already waiting for its pong")
        frame = ws.ping(payload)
        future: asyncio.Future[float] = self._loop.create_future()
        self._pings[payload] = (future, time.monotonic())
        self._write(frame)
        return future

    async def pong(self, payload: bytes = b"") -> None:
        """An unsolicited pong: a heartbeat that expects no answer."""
        if self._ws.state is not ConnectionState.OPEN:
            raise self._closed_exception()
        self._write(self._ws.pong(payload))

    async def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """The closing handshake (section 7.1.2), then wait for the server to close TCP
        (section 7.1.1: the server closes first); after close_timeout, drop it ourselves."""
        self._fail_deferred()  # a violation is held: that failure is the close
        if self._ws.state is ConnectionState.OPEN and self._transport is not None:
            self._write(self._ws.close(code, reason))
            self._local_close = (code, reason)
        try:
            async with asyncio.timeout(self.close_timeout):
                await asyncio.shield(self._lost)
        except TimeoutError:
            self._abort()
            await asyncio.shield(self._lost)

    async def wait_closed(self) -> None:
        await asyncio.shield(self._lost)

    async def __aenter__(self) -> WsClientConnection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # ---- internals ----------------------------------------------------------------------
    def _closed_exception(self) -> ConnectionClosed:
        closed = self.closed
        if closed is not None:
            error = closed_error(closed.code, closed.reason, closed.clean)
        elif self._local_close is not None:  # our close is sent, the reply not yet in
            error = closed_error(*self._local_close, clean=True)
        else:
            error = closed_error(CLOSE_ABNORMAL, "connection lost", clean=False)
        error.__cause__ = self.error
        return error

    def _write(self, plaintext: bytes) -> None:
        transport = self._transport
        if not plaintext or transport is None or transport.is_closing():
            return
        if self._tls is not None:
            try:
                ciphertext = self._tls.send(plaintext)
            except TlsError:
                self._abort()
                return
            if ciphertext:
                transport.write(ciphertext)
        else:
            transport.write(plaintext)

    def start_opening(self) -> None:
        """Opener's step once TCP is up and the protocol's connection_made ran: the TLS
        ClientHello first for wss://, else the upgrade request (RFC 6455 section 4.1)."""
        transport = self._transport
        assert transport is not None
        if self._tls is not None:
            transport.write(self._tls.start())
        else:
            transport.write(self._ws.initiate())

    def wait_open(self) -> asyncio.Future[ev.Handshake]:
        """The opening handshake's outcome: the server's `Handshake`, or the error that
        ended the open (`HandshakeRejected`, a `TransportError`, a `TlsError`). The one
        future itself, not a shield: awaiting it costs no extra loop iteration, and a
        timeout or a cancel that cancels it only drops a connection the opener aborts."""
        return self._opened

    def prepare_receive(self) -> None:
        """Get ready for the answer (`WsClient.prepare_receive`): the openers call it once
        the request (or the ClientHello) is on its way, so the work overlaps its trip."""
        self._ws.prepare_receive()

    def _connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports quack like asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _data_received(self, data: bytes) -> None:
        """One socket read (b"" at end of stream), whole, into TLS and the WebSocket."""
        ws = self._ws
        tls = self._tls
        ws.messages_pending = bool(self._messages)
        if tls is None:
            ws.receive_data(data)
        else:
            was_complete = tls.handshake_complete
            try:
                plain = tls.receive_data(data)
            except TlsError as exc:
                self.error = exc
                self._fail_open(exc)
                self._abort()
                return
            out = tls.data_to_send()
            if out and self._transport is not None and not self._transport.is_closing():
                self._transport.write(out)
            if not was_complete and tls.handshake_complete:
                self._write(ws.initiate())
            if plain:
                ws.receive_data(plain)
            if not data or tls.peer_closed:
                ws.receive_data(b"")  # TCP end or close_notify: the stream is over
                self._send_close_notify()
        out = ws.data_to_send()
        if out:
            self._write(out)
        self._dispatch()

    def _dispatch(self) -> None:
        """The WebSocket's events after a read: messages queued for recv() (or handed to
        the message handler) inline, the rarer events through `_on_other_event`; then the
        reader is woken, reading paused at max_queue, and a held failure scheduled."""
        for event in self._ws.events():
            kind = type(event)
            if kind is ev.Message:
                self.messages_received += 1
                handler = self._handler
                if handler is not None:
                    try:
                        handler(event)  # type: ignore[arg-type]
                    except Exception as exc:
                        self._handler_failed(exc)
                    continue
                self._messages.append(event)  # type: ignore[arg-type]
                self._queued += 1
                continue
            if kind is ev.MessageBatch:
                count = len(event)  # type: ignore[arg-type]
                self.messages_received += count
                if self._handler is not None:
                    rest = self._hand_over(event.messages())  # type: ignore[union-attr]
                    self._messages.extend(rest)
                    self._queued += len(rest)
                    continue
                self._messages.append(event)  # type: ignore[arg-type]
                self._queued += count
                continue
            self._on_other_event(event)
        if self._messages:
            if not self._told_queued and self.on_queued is not None:
                self._tell_queued(True)
            waiter = self._recv_waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            if (
                not self._reading_paused
                and self._queued >= self._max_queue
                and self._transport is not None
            ):
                self._reading_paused = True
                self._transport.pause_reading()
        elif self.on_idle is not None and self._ws.at_message_boundary:
            self.on_idle()  # a read with no message (a ping, a pong): nothing held
        if self._ws.failure_deferred and self._deferred_failure is None:
            # A violation after messages not yet answered: fail once the application took
            # them (`_taken`), one loop turn later so that the task these messages wake
            # (scheduled above) answers them before our close; at the latest after a grace.
            self._deferred_deadline = self._loop.time() + DEFERRED_FAILURE_GRACE_S
            self._deferred_failure = self._loop.call_soon(self._fail_deferred_once_answered)

    def _tell_queued(self, queued: bool) -> None:
        self._told_queued = queued
        on_queued = self.on_queued
        if on_queued is not None:
            on_queued(queued)

    def _on_other_event(self, event: ev.WsEvent) -> None:
        """Every event but the messages (taken inline by `_dispatch`, once per read): pings
        and pongs, the opening handshake's outcome, the close."""
        if isinstance(event, ev.Ping):
            self.pings_received += 1
        elif isinstance(event, ev.Pong):
            self._on_pong(event.payload)
        elif isinstance(event, ev.Handshake):
            self.handshake = event
            if not self._opened.done():
                self._opened.set_result(event)
        elif isinstance(event, ev.RejectedHandshake):
            self._fail_open(
                HandshakeRejected(
                    f"WebSocket handshake rejected: {event.reason}",
                    event.status,
                    event.headers,
                    event.body,
                    reason=event.reason,
                    closed=event.closed,
                )
            )
            self._abort()
        elif isinstance(event, ev.CloseReceived):
            self.close_received = event
        elif isinstance(event, ev.Closed):
            self._on_closed(event)

    def _fail_deferred_once_answered(self) -> None:
        """The held violation fails now if the application took every message that came
        before it, else when it does (`_taken`) or at the deadline, whichever is first.
        Reads that come in several pieces (one per TCP segment on the DPDK transport) would
        otherwise close before the earlier pieces' messages are echoed (Autobahn 4.1.3)."""
        self._deferred_failure = None
        remaining = self._deferred_deadline - self._loop.time()
        if self._messages and remaining > 0:
            self._deferred_failure = self._loop.call_later(remaining, self._fail_deferred)
            return
        self._fail_deferred()

    def _fail_deferred(self) -> None:
        """Fail on the violation the WebSocket held (`WsClient.defer_failure`)."""
        if self._deferred_failure is not None:
            self._deferred_failure.cancel()
        self._deferred_failure = None
        ws = self._ws
        if ws.failure_deferred:
            ws.fail_deferred()
            self._write(ws.data_to_send())
            self._dispatch()

    def _on_pong(self, payload: bytes) -> None:
        if payload not in self._pings:
            return  # unsolicited (a heartbeat) or already answered
        now = time.monotonic()
        while self._pings:
            key, (future, sent) = next(iter(self._pings.items()))
            del self._pings[key]
            if not future.done():
                future.set_result(now - sent)
            if key == payload:
                break

    def _on_closed(self, event: ev.Closed) -> None:
        self.closed = event
        self._wake_all()
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        # Our last frame is written. Let the server close TCP first (section 7.1.1). TLS
        # servers (asyncio's among them) wait for our close_notify before they do; after a
        # failure, half-close too so the server notices even if it ignores our close frame.
        self._send_close_notify()
        if event.failure:
            self._write_eof()
        self._linger = self._loop.call_later(self.close_timeout, self._abort)

    def _send_close_notify(self) -> None:
        tls = self._tls
        transport = self._transport
        if tls is None or self._close_notify_sent or transport is None or transport.is_closing():
            return
        self._close_notify_sent = True
        with contextlib.suppress(TlsError):
            out = tls.close()
            if out:
                transport.write(out)

    def _write_eof(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if transport.can_write_eof():
            transport.write_eof()

    def _fail_open(self, exc: Exception) -> None:
        if not self._opened.done():
            self._opened.set_exception(exc)
            self._opened.exception()  # retrieved: the opener re-raises it

    def _abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    def _wake_all(self) -> None:
        waiter = self._recv_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        for drain in self._drain_waiters:
            if not drain.done():
                drain.set_result(None)
        self._drain_waiters.clear()

    def _connection_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, OSError | DataplaneError):
            # Either transport's socket error (an OSError, a TcpError) as the one family.
            exc = transport_error(exc, "connection lost")
        if exc is not None and self.error is None:
            self.error = exc
        if self._linger is not None:
            self._linger.cancel()
        if self._ws.state in _OPEN_STATES:
            self._ws.receive_data(b"")  # ended without a closing handshake: 1006
            self._dispatch()
        if self.closed is None:
            self.closed = ev.Closed(CLOSE_ABNORMAL, "connection lost", clean=False)
        if not self._opened.done():
            if isinstance(exc, TransportError):
                self._fail_open(exc)
            else:
                reason = f": {exc}" if exc else ""
                text = f"connection closed during the opening handshake{reason}"
                self._fail_open(HandshakeRejected(text, 0, closed=exc is None))
        error = self._closed_exception()
        for future, _sent in self._pings.values():
            if not future.done():
                future.set_exception(error)
                future.exception()
        self._pings.clear()
        self._wake_all()
        if not self._lost.done():
            self._lost.set_result(None)

    def _pause_writing(self) -> None:
        self._writing_paused = True

    def _resume_writing(self) -> None:
        self._writing_paused = False
        for drain in self._drain_waiters:
            if not drain.done():
                drain.set_result(None)
        self._drain_waiters.clear()

    async def _drain(self) -> None:
        if self._lost.done():
            raise self._closed_exception()
        waiter = self._loop.create_future()
        self._drain_waiters.append(waiter)
        await waiter


#: A transport's opener: opener(url, **options) opens TCP and the WebSocket, as the module
#: docstring says, and returns the open connection.
Opener = Callable[..., Awaitable[WsClientConnection]]


class ConnectOptions(TypedDict, total=False):
    """The options both transports' connect functions take (`connect_kernel(url,
    **options)`, `connect_dpdk(url, engine=..., **options)`), listed once so that they
    stay the same and are type-checked in both; the defaults are `prepare_connection`'s.

    ssl_context / ca_file: how the server's certificate is verified (default: the system's
    CAs; verification is never off unless the context says so). server_hostname: the name
    for SNI and certificate checks (default: the URL's host). connect_host/connect_port:
    where to connect, when it is not the URL's host and port (a local tunnel, a test).
    max_queue: messages held for recv() before the socket stops being read.
    batch_receive: runs of plain data frames from one read are queued as one
    `MessageBatch` (`recv_frames()` hands them out whole; `recv()` splits them)."""

    subprotocols: Sequence[str]
    extra_headers: HeaderPairs
    origin: str | None
    deflate: bool | DeflateOptions | None
    max_message_size: int
    max_frame_size: int
    ssl_context: ssl.SSLContext | None
    ca_file: str | os.PathLike[str] | None
    server_hostname: str | None
    connect_host: str | None
    connect_port: int | None
    open_timeout: float
    close_timeout: float
    max_queue: int
    scan_backend: BackendName
    batch_receive: bool


class PendingConnection:
    """What `connect_kernel(...)` and `connect_dpdk(...)` return: await it for the open
    connection, or use it as `async with` (closed on the way out). Nothing happens until
    then: the opener runs with url and options when awaited or entered; an option no
    transport takes is refused here, at the call."""

    def __init__(self, url: str, options: ConnectOptions, opener: Opener) -> None:
        unknown = sorted(options.keys() - ConnectOptions.__optional_keys__)
        if unknown:
            raise TypeError(f"unknown connect option(s): {', '.join(unknown)}")
        self._url = url
        self._options = options
        self._opener = opener
        self._connection: WsClientConnection | None = None

    def __await__(self) -> Generator[Any, None, WsClientConnection]:
        return self._opener(self._url, **self._options).__await__()

    async def __aenter__(self) -> WsClientConnection:
        self._connection = await self._opener(self._url, **self._options)
        return self._connection

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._connection is not None:
            await self._connection.close()


def prepare_connection(
    url: str,
    *,
    subprotocols: Sequence[str] = (),
    extra_headers: HeaderPairs = (),
    origin: str | None = None,
    deflate: bool | DeflateOptions | None = True,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    ssl_context: ssl.SSLContext | None = None,
    ca_file: str | os.PathLike[str] | None = None,
    server_hostname: str | None = None,
    open_timeout: float = 10.0,
    close_timeout: float = 10.0,
    max_queue: int = 4096,
    scan_backend: BackendName = "auto",
    batch_receive: bool = True,
    connect_host: str | None = None,
    connect_port: int | None = None,
) -> tuple[WsClientConnection, WsUrl, float]:
    """The sans-IO WebSocket (and TLS for wss://) wrapped in a connection object, not yet
    attached to any network: what every transport does before it opens TCP. Returns the
    connection, the parsed URL and the opening-handshake timeout. Takes every
    `ConnectOptions` with its default (connect_host/connect_port are the opener's)."""
    target: WsUrl = parse_ws_url(url)
    ws = WsClient(
        target.host,
        target.resource,
        port=target.port,
        secure=target.secure,
        origin=origin,
        subprotocols=subprotocols,
        extra_headers=extra_headers,
        deflate=deflate,
        max_message_size=max_message_size,
        max_frame_size=max_frame_size,
        scan_backend=scan_backend,
        batch=batch_receive,
        defer_failure=True,  # answers to the messages before a violation go out first
    )
    tls: TlsClient | None = None
    if target.secure:
        hostname = server_hostname or target.host
        if ssl_context is not None:
            tls = TlsClient(hostname, context=ssl_context)
        else:
            tls = TlsClient(hostname, ca_file=ca_file, alpn_protocols=["http/1.1"])
    elif ssl_context is not None or ca_file is not None:
        raise LocalProtocolError(f"{url!r} is not wss://: TLS options make no sense")
    connection = WsClientConnection(ws, tls, close_timeout=close_timeout, max_queue=max_queue)
    return connection, target, open_timeout
