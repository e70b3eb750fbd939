"""The remote transport: a gateway's downstream WebSocket (/v1/stream), for consumers on
other hosts, read into the same events as the ring (gateway.hub.protocol has the wire
protocol this follows).

The stream is opened with `envelope=1`, so every message carries what a ring record does:
the gateway's sequence number, the session, the topic and the receive stamp. A message
becomes a `RingMessage` whose topic is the ring's name for it (`<session>:<topic>`, as a
ring reader filters and sees it) and whose topic_id is -1 (ids belong to one ring). A
session's gap (an upstream reconnect) arrives as it does on the ring: a message of the
`$gap` topic with the gap's JSON as payload. Messages the gateway dropped for this stream
(`queue_full`, `gateway_overload`) become a `Gap`. The `subscribed` frame gives the run's
epoch; a stream that reconnects to another run reports `Restart`, and one that reconnects to
the same run reports the ring sequence numbers that went by meanwhile as a `Gap` (of all
topics: at most what this stream missed).

The socket is read in the consumer's own thread (the reading side of wsgw's sans-IO
`dataplane.ws.WsClient`, which answers pings and close frames): one wake-up per batch of
frames, where a client with a reading thread of its own (websockets' threaded one, used
before) adds that thread's wake-up to every message's path. `interrupt` (asyncio
cancellation) and `close` end a wait at once (gateway.client.socketwait).

While the WebSocket client is between messages (plain TCP), one shim call per read
(`dataplane.shim.StreamRead`: recv, the frame scan and the envelopes of the exact shape the
C stream sink writes, payload unescaped) gives the RingMessages' fields, so a read costs a
few Python steps rather than recv + WsClient + orjson per frame (each step runs cold after
an idle gap, issue #16). What it does not take (control frames, other shapes, a frame cut
by the read) goes through the WsClient and orjson, the reference: the same events (tested
for equality). WSGW_STREAM_READ=python turns it off.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import os
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import SplitResult, parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from dataplane.ring import WAIT_AUTO, Gap, RingMessage, WaitPolicy
from dataplane.ws.client import WsClient
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Closed as WsClosed
from dataplane.ws.events import Handshake as WsHandshake
from dataplane.ws.events import Message as WsMessage
from dataplane.ws.events import MessageBatch as WsMessageBatch
from dataplane.ws.events import RejectedHandshake as WsRejected
from dataplane.ws.events import WsEvent
from gateway.client.core import (
    ClientEvent,
    NetworkSource,
    SourceUnavailableError,
    StreamClosedError,
    parse_wait,
)
from gateway.client.socketwait import SocketWait
from gateway.hub.names import RING_GAP_TOPIC, ring_topic
from gateway.hub.protocol import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_POLICY_VIOLATION,
    CLOSE_SESSION_DELETED,
    CLOSE_UNAUTHORIZED,
)

if TYPE_CHECKING:
    from dataplane.shim import StreamRead

#: How long opening a stream may take before it counts as unavailable.
OPEN_TIMEOUT = 5.0
#: Bytes per read of the socket.
RECV_BYTES = 256 << 10
#: Frames read from the socket and not yet taken by the consumer, at the most: beyond it the
#: socket is left unread, TCP pushes back, and the gateway's queue for this stream fills (its
#: overflow policy applies).
MAX_HELD = 16384
#: Largest message (and frame) the client takes: a book snapshot in an envelope can be
#: large; more is a protocol violation (close 1009).
MAX_MESSAGE_SIZE = 64 << 20
#: Longest single poll of a wait without a timeout (it then polls again).
LONGEST_WAIT = 60.0
#: Ring names of (session, topic) kept, at the most (then the cache starts again).
MAX_NAMES = 4096
#: Close codes after which connecting again cannot help: the stream ends for good.
FINAL_CLOSE_CODES = frozenset(
    {
        CLOSE_BAD_REQUEST,
        CLOSE_UNAUTHORIZED,
        CLOSE_FORBIDDEN,
        CLOSE_NOT_FOUND,
        CLOSE_SESSION_DELETED,
        CLOSE_POLICY_VIOLATION,
    }
)
#: Gap reasons that mean this stream lost messages (the others are the session's own).
STREAM_GAP_REASONS = frozenset({"queue_full", "gateway_overload"})
#: recv's results (-errno) that mean "nothing there now" for the shim's read.
_NOTHING_NOW = (-errno.EAGAIN, -errno.EWOULDBLOCK, -errno.EINTR)
_new_tuple = tuple.__new__


def _shim_read() -> StreamRead | None:
    """The shim's one-call read (recv, frames, the C sink's envelopes), None without the
    shim (WSGW_STREAM_READ=python: never; the WebSocket client and orjson read everything)."""
    if os.environ.get("WSGW_STREAM_READ", "").lower() == "python":
        return None
    from dataplane.shim import StreamRead, available

    if not available("the /v1/stream read falls back to pure Python"):
        return None
    return StreamRead(RECV_BYTES, MAX_MESSAGE_SIZE)


def stream_url(url: str, topics: Iterable[str] | None, session: int | None = None) -> str:
    """The /v1/stream URL to open: `url` (ws[s]://host:port[/v1/stream][?session=..]) with
    envelope=1, the session and the topics (upstream topics of the session) added."""
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    if not path.endswith("/v1/stream"):
        path += "/v1/stream"
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "envelope"]
    query.append(("envelope", "1"))
    if session is not None:
        query = [(k, v) for k, v in query if k != "session"] + [("session", str(session))]
    if topics is not None:
        query.append(("topics", ",".join(topics)))
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


class StreamSource(NetworkSource):
    """Messages from a gateway's /v1/stream over one WebSocket connection."""

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        previous: StreamSource | None = None,
        open_timeout: float = OPEN_TIMEOUT,
        wait: WaitPolicy | str | None = WAIT_AUTO,
    ) -> None:
        """Open the stream (SourceUnavailableError: nothing answers; StreamClosedError: the
        gateway refused it for good, e.g. 4401 bad token). previous: the connection this one
        follows, for the Restart or Gap between them. wait: how a read waits (Client's
        module doc; "auto": as the gateway's `subscribed` frame recommends)."""
        given_wait = parse_wait(wait)
        parts = urlsplit(url)
        if parts.scheme not in ("ws", "wss") or not parts.hostname:
            raise ValueError(f"bad stream URL {url!r}: ws://host[:port]/... or wss://...")
        self.url = url
        self._pending: list[ClientEvent] = []
        # Received, not yet taken: frames to decode, and the shim's envelopes as RingMessages.
        self._frames: deque[bytes | RingMessage] = deque()
        # The shim's read, and whether it may read now (the WebSocket client is between
        # messages: no partial frame, fragment or close held; plain TCP, not TLS).
        self._shim: StreamRead | None = None
        self._shim_now = False
        # (session, topic): its ring name (topic as str, or as bytes from the shim's read)
        self._names: dict[tuple[int, str | bytes], str] = {}
        self._ended = False
        self.close_code: int | None = None
        self.close_reason = ""
        self._lock = threading.Lock()
        self._waiting = SocketWait()
        deadline = time.monotonic() + open_timeout
        try:
            self._sock, self._ws, early = _open(parts, token, open_timeout)
        except (OSError, TimeoutError, ssl.SSLError, LocalProtocolError) as exc:
            self._waiting.close()
            raise SourceUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(self._sock, ssl.SSLSocket):
            self._shim = _shim_read()
        try:
            self._take(early)  # frames that came with the 101
            first = self._first_frame(deadline)
        except BaseException:
            self.close()
            raise
        if first.get("type") != "subscribed":
            self.close()
            raise StreamClosedError(1002, f"expected a subscribed frame, got {first!r:.80}")
        self.subscribed: dict[str, Any] = first
        self._choose_wait(given_wait, first.get("reader_wait"))
        self._epoch = int(first.get("epoch") or "0", 16)
        self.last_seq = int(first.get("next_seq") or 1) - 1
        if previous is not None and previous._epoch == self._epoch:
            missed = self.last_seq - previous.last_seq
            if missed > 0:
                self._pending.append(Gap(missed, previous.last_seq + 1))

    def _first_frame(self, deadline: float) -> dict[str, Any]:
        """The stream's first frame (blocking, up to the deadline): what it carries."""
        sock = self._sock
        while not self._frames:
            if self._ended:
                code, reason = self.close_code or 1006, self.close_reason
                if code in FINAL_CLOSE_CODES:
                    raise StreamClosedError(code, reason)
                raise SourceUnavailableError(f"{self.url}: closed {code} {reason}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise SourceUnavailableError(f"{self.url}: no subscribed frame")
            sock.settimeout(left)
            try:
                data = sock.recv(RECV_BYTES)
            except (TimeoutError, OSError) as exc:
                raise SourceUnavailableError(f"{self.url}: {type(exc).__name__}: {exc}") from exc
            self._received(data)
        if not self._ended:  # (a close right behind the first frames closed it already)
            sock.setblocking(False)
        return cast(dict[str, Any], orjson.loads(cast(bytes, self._frames.popleft())))

    # ---- the socket, in the reading thread -----------------------------------------------
    def _received(self, data: bytes) -> None:
        """Bytes from the socket (b"": its end) through the protocol: data messages
        queued, pongs and close replies sent, the close noted."""
        ws = self._ws
        try:
            ws.receive_data(data)
        except LocalProtocolError as exc:  # bytes after the connection ended
            self._end(self.close_code or 1006, str(exc))
            return
        self._take(ws.events())

    def _take(self, events: Iterable[WsEvent]) -> None:
        closed: WsClosed | None = None
        for event in events:
            kind = type(event)
            if kind is WsMessage:
                self._frames.append(event.data)  # type: ignore[union-attr]
            elif kind is WsMessageBatch:
                self._frames.extend(event.payloads())  # type: ignore[union-attr]
            elif kind is WsClosed:
                closed = event  # type: ignore[assignment]
        ws = self._ws
        self._shim_now = self._shim is not None and ws.at_message_boundary
        outgoing = ws.data_to_send()
        if outgoing and not self._ended:
            # A pong, or the close reply (section 5.5.1) before the socket closes below:
            # best effort, a dead socket shows on the next read.
            with contextlib.suppress(OSError):
                self._sock.sendall(outgoing)
        if closed is not None:
            self._end(closed.code, closed.reason)

    def _end(self, code: int, reason: str) -> None:
        if not self._ended:
            self._ended = True
            self.close_code, self.close_reason = code, reason
            with contextlib.suppress(OSError):
                self._sock.close()

    def _drain_socket(self) -> None:  # noqa: PLR0911, PLR0912 (the shim's read, the Python one: inline)
        """What the socket holds, read without blocking (TLS: what it decrypted too).
        Between messages the shim reads (one call: recv, frames, envelopes); the frames of
        that read it did not take, and every read while the WebSocket client holds part of
        a frame, go through the client and orjson."""
        sock, ws = self._sock, self._ws
        while not self._ended:
            whole = -1  # the shim's read: its size (the Python one: -1)
            if self._shim_now:
                shim = self._shim
                assert shim is not None
                count = shim.read(sock.fileno())
                ctx = shim.ctx
                got, consumed = ctx.got, ctx.consumed
                if got < 0:
                    if got not in _NOTHING_NOW:
                        exc = OSError(-got, os.strerror(-got))  # (its subclass, as recv's)
                        self._end(1006, f"{type(exc).__name__}: {exc}")
                    return
                if count:
                    self._envelopes(shim, count)
                if got and consumed == got:  # (all taken: the client stays between messages)
                    if got == RECV_BYTES and len(self._frames) < MAX_HELD:
                        continue
                    return
                data = shim.buf[consumed:got].tobytes()
                whole = got
            else:
                try:
                    data = sock.recv(RECV_BYTES)
                except (BlockingIOError, InterruptedError, ssl.SSLWantReadError):
                    return
                except OSError as exc:
                    self._end(1006, f"{type(exc).__name__}: {exc}")
                    return
            try:  # (what _received does, without its call)
                ws.receive_data(data)
            except LocalProtocolError as exc:  # bytes after the connection ended
                self._end(self.close_code or 1006, str(exc))
                return
            self._take(ws.events())
            if not data or len(self._frames) >= MAX_HELD:
                return
            if whole >= 0:  # (what the shim read: the whole read's size is known)
                if whole < RECV_BYTES:
                    return
                continue
            if len(data) < RECV_BYTES and not (isinstance(sock, ssl.SSLSocket) and sock.pending()):
                return

    def _envelopes(self, shim: StreamRead, count: int) -> None:
        """The shim's envelopes of one read as RingMessages, queued."""
        step = shim.WORDS
        words, buf, pay = shim.out[: step * count], shim.buf, shim.pay
        names, append = self._names, self._frames.append
        for at in range(0, len(words), step):
            seq, session, ts, topic_at, topic_len, pay_at, pay_len = words[at : at + step]
            key = (session, buf[topic_at : topic_at + topic_len].tobytes())
            name = names.get(key)
            if name is None:
                if len(names) >= MAX_NAMES:
                    names.clear()
                name = names[key] = ring_topic(session, key[1].decode())
            payload = pay[pay_at : pay_at + pay_len].tobytes()
            append(_new_tuple(RingMessage, (seq, session, name, ts, payload, -1)))

    # ---- MessageSource ------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        """Up to max events: waits up to timeout (None: until one comes or the stream ends)
        for the first, then takes what has already arrived. After the frames that came
        before it, a close that ends the stream for good raises StreamClosedError."""
        events, self._pending = self._pending, []
        limit = max or 1024
        waited = False
        if not events and not self._frames and timeout != 0:
            self.wait(timeout)  # it read the socket once poll said there was something
            waited = True
        with self._lock:
            if not waited and len(self._frames) < limit:
                self._drain_socket()
            frames = self._frames
            while frames and len(events) < limit:
                item = frames.popleft()
                if type(item) is RingMessage:  # the shim's envelope, made
                    self.last_seq = item[0]
                    events.append(item)
                    continue
                event = self._event(item)  # type: ignore[arg-type]
                if event is not None:
                    events.append(event)
        if not events and self._ended and self.close_code in FINAL_CLOSE_CODES:
            assert self.close_code is not None
            raise StreamClosedError(self.close_code, self.close_reason)
        return events

    def _event(self, frame: bytes) -> ClientEvent | None:
        body = orjson.loads(frame)
        kind = body.get("type")
        if kind == "msg":
            session = body["session"]
            text = body.get("payload")
            payload = text.encode() if text is not None else base64.b64decode(body["payload_b64"])
            self.last_seq = seq = body["seq"]
            key = (session, body["topic"])
            name = self._names.get(key)
            if name is None:
                if len(self._names) >= MAX_NAMES:
                    self._names.clear()
                name = self._names[key] = ring_topic(session, key[1])
            # (tuple.__new__: RingMessage's own __new__ is a Python function, one more call)
            return _new_tuple(RingMessage, (seq, session, name, body["recv_ts_ns"], payload, -1))
        if kind == "gap":
            seq = body.get("seq")
            if body.get("reason") in STREAM_GAP_REASONS:
                lost = body.get("lost") or 0
                return Gap(lost, seq if seq is not None else self.last_seq + 1)
            if seq is not None:
                self.last_seq = max(self.last_seq, seq)
            return RingMessage(
                seq or 0, body["session"], RING_GAP_TOPIC, body.get("ts_ns") or 0, frame, -1
            )
        return None  # a frame kind this client does not know: later protocol versions

    @property
    def epoch(self) -> int:
        return self._epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        """Until a frame is there (True), timeout, the stream's end or interrupt (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        spin_s = self._spin_s(spin)
        # The socket is read before the first poll (what came meanwhile, what the TLS layer
        # holds decrypted, unseen by poll), then after each poll that found it readable.
        # (Without that first read, p50 at 1k msg/s was 113 us against 83 with it.)
        drain = True
        while True:
            with self._lock:
                if drain and not (self._pending or self._frames):
                    self._drain_socket()
                if self._pending or self._frames:
                    return True
                if self._ended:
                    return False
                fd = self._sock.fileno()
            left = LONGEST_WAIT if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            woke = self._waiting.wait(fd, left, spin_s)
            if woke == "interrupted":
                return False
            drain = woke == "ready"

    def interrupt(self) -> None:
        self._waiting.interrupt()

    @property
    def ended(self) -> bool:
        return self._ended and not self._pending and not self._frames

    def close(self) -> None:
        """Close the stream (a close frame, best effort) and end a wait in another thread."""
        self._waiting.close()
        with self._lock:
            if not self._ended:
                with contextlib.suppress(Exception):
                    self._sock.sendall(self._ws.close(1000))
                self._end(1000, "closed by the client")


def _open(
    parts: SplitResult, token: str | None, timeout: float
) -> tuple[socket.socket, WsClient, list[WsEvent]]:
    """Connect and upgrade (TLS for wss://, the system's trust store): the socket, the
    protocol and the events that came with the 101 (frames right behind it)."""
    secure = parts.scheme == "wss"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    sock = socket.create_connection((host, port), timeout)
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if secure:
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        headers = [("Authorization", f"Bearer {token}")] if token else []
        ws = WsClient(
            host,
            target,
            port=port,
            secure=secure,
            extra_headers=headers,
            deflate=False,
            batch=True,
            max_message_size=MAX_MESSAGE_SIZE,
            max_frame_size=MAX_MESSAGE_SIZE,
        )
        sock.sendall(ws.initiate())
        ws.prepare_receive()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no answer to the upgrade request in time")
            sock.settimeout(left)
            data = sock.recv(RECV_BYTES)
            ws.receive_data(data)
            events = list(ws.events())
            for at, event in enumerate(events):
                if isinstance(event, WsHandshake):
                    return sock, ws, events[at + 1 :]
                if isinstance(event, WsRejected):
                    raise ConnectionRefusedError(f"HTTP {event.status}: {event.reason}")
            if not data:
                raise ConnectionResetError("the server closed the connection")
    except BaseException:
        sock.close()
        raise
