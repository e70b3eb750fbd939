"""The sans-IO WebSocket client (RFC 6455, RFC 7692): bytes in, typed events out.

    ws = WsClient("feed.example", "/v1/stream", secure=True)
    sock.sendall(ws.initiate())
    while ...:
        ws.receive_data(sock.recv(65536))      # b"" when the peer closed TCP
        for event in ws.events(): ...
        sock.sendall(ws.data_to_send())        # pongs, close replies, failure closes
    sock.sendall(ws.send_text('{"op": "subscribe"}'))

No socket, no clock, no asyncio. The server's protocol violations never raise: they end
in a `Closed(failure=True)` event with the close frame queued in `data_to_send()` (section
7.1.7); with `defer_failure`, once the messages that came before the violation in the
same read are answered (`fail_deferred()`). Calling a method the state forbids raises
`LocalProtocolError`.

Hot path: one shim call scans every complete frame of a read (`dataplane.ws.scan`); an
unfragmented, uncompressed data frame then costs one slice, one ASCII check and one event.
With `batch=True` (the transports' default) it costs nothing in Python: one shim call finds
the run of such frames of a read and checks the UTF-8 of the text ones, and the run is one
`MessageBatch` event (the read's bytes plus offset/length pairs). Every other frame (control,
fragment, RSV bit, mask, oversize, bad UTF-8, the partial frame at the end) goes through the
per-frame code, so the events are the same messages in the same order either way.
"""

from __future__ import annotations

import codecs
import enum
import functools
import os
import struct
import zlib
from collections.abc import Iterator, Sequence

from dataplane.ws import events as ev
from dataplane.ws.deflate import (
    Compressor,
    Decompressor,
    DeflateOptions,
    DeflateParams,
    MessageTooBig,
)
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.handshake import Accepted, ClientHandshake, HeaderPairs
from dataplane.ws.scan import (
    BATCH_FULL,
    BATCH_OTHER,
    FIN,
    MASKED,
    OPCODE,
    RSV1,
    RSV2,
    RSV3,
    SCAN_WORDS,
    UINT64_MAX,
    BackendName,
    BatchScanner,
    Scanner,
    _utf8_ok,
    masker,
    shared_scanners,
)
from dataplane.ws.scan import resolve as resolve_backend

DEFAULT_MAX_MESSAGE_SIZE = 16 * 1024 * 1024
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

# Opcodes, section 5.2 / 11.8.
OP_CONTINUATION = 0x0
OP_TEXT = 0x1
OP_BINARY = 0x2
OP_CLOSE = 0x8
OP_PING = 0x9
OP_PONG = 0xA

# Close codes, section 7.4.1 and the IANA registry (11.7).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006
CLOSE_INVALID_DATA = 1007
CLOSE_POLICY = 1008
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL_ERROR = 1011

_FIN_TEXT = FIN | OP_TEXT
_FIN_BINARY = FIN | OP_BINARY
_MAX_CONTROL_PAYLOAD = 125  # section 5.5
_MAX_CLOSE_REASON = 123  # 125 minus the 2-byte code
_KEY_POOL = 4096  # masking keys are drawn from os.urandom this many bytes at a time


def is_valid_close_code(code: int) -> bool:
    """May this code appear in a close frame (section 7.4.1, 7.4.2)? 1004-1006 and 1015 are
    reserved for local use, 1016-2999 for future RFCs, 3000-4999 are for libraries/apps."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


class ConnectionState(enum.Enum):
    CONNECTING = "connecting"  # before and during the opening handshake
    OPEN = "open"
    CLOSING = "closing"  # we sent a close frame, the server's is still to come
    CLOSED = "closed"  # both close frames exchanged: only the TCP close remains
    REJECTED = "rejected"  # the opening handshake failed
    ERROR = "error"  # we failed the connection, or it ended without a closing handshake


class _Trigger(enum.Enum):
    ACCEPTED = "101 accepted"
    REJECTED = "handshake rejected"
    SEND_CLOSE = "send close"
    RECV_CLOSE = "receive close"
    FAIL = "protocol failure"
    EOF = "end of stream"


_S = ConnectionState
_T = _Trigger
# Every state change of the connection, in one table (h11's _state.py style). A pair that
# is missing is an illegal transition.
_TRANSITIONS: dict[tuple[ConnectionState, _Trigger], ConnectionState] = {
    (_S.CONNECTING, _T.ACCEPTED): _S.OPEN,
    (_S.CONNECTING, _T.REJECTED): _S.REJECTED,
    (_S.CONNECTING, _T.EOF): _S.REJECTED,
    (_S.OPEN, _T.SEND_CLOSE): _S.CLOSING,
    (_S.OPEN, _T.RECV_CLOSE): _S.CLOSED,  # our reply is queued at once (section 5.5.1)
    (_S.OPEN, _T.FAIL): _S.ERROR,
    (_S.OPEN, _T.EOF): _S.ERROR,
    (_S.CLOSING, _T.RECV_CLOSE): _S.CLOSED,
    (_S.CLOSING, _T.FAIL): _S.ERROR,
    (_S.CLOSING, _T.EOF): _S.ERROR,
    (_S.CLOSED, _T.EOF): _S.CLOSED,
    (_S.REJECTED, _T.EOF): _S.REJECTED,
    (_S.ERROR, _T.EOF): _S.ERROR,
}
_SPAN = struct.Struct("=QQ")  # one (offset, length) pair of a batch scan's spans
# One masker per backend: a function without state, made once instead of once per client.
_masker = functools.cache(masker)
# deflate=True's offer, made once (it is immutable) rather than checked anew per client.
_DEFAULT_DEFLATE = DeflateOptions()


class WsClient:
    """One client connection's WebSocket protocol state (RFC 6455 + RFC 7692)."""

    # The frame scanners (`prepare_receive`): frames are only read once the connection is
    # open, and the 101 that opens it makes them at the latest.
    _scanner: Scanner
    _max_words: int
    _batch: BatchScanner | None
    _one: Scanner | None

    def __init__(
        self,
        host: str,
        path: str = "/",
        *,
        port: int | None = None,
        secure: bool = False,
        origin: str | None = None,
        subprotocols: Sequence[str] = (),
        extra_headers: HeaderPairs = (),
        deflate: bool | DeflateOptions | None = True,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        scan_backend: BackendName = "auto",
        batch: bool = False,
        defer_failure: bool = False,
    ) -> None:
        """batch: complete unfragmented data frames found by one scan come out as one
        `MessageBatch` event instead of one `Message` each (see `_feed_batches`).

        defer_failure: a protocol violation that follows complete messages of the same
        read does not fail the connection at once: the messages come out as events, the
        failure waits for `fail_deferred()` (`failure_deferred` says so) and nothing more
        is read meanwhile. An application that answers messages as they come can so
        answer the ones the server sent before its violation, and only then fail
        (section 7.1.7; Autobahn's cases 3.2, 4.1.3, 5.15 send such reads). The
        transports use it: they fail once the application had its turn."""
        if max_message_size < 1 or max_frame_size < 1:
            raise LocalProtocolError("size limits must be positive")
        options = _DEFAULT_DEFLATE if deflate is True else deflate or None
        self._handshake = ClientHandshake(
            host,
            path,
            port=port,
            secure=secure,
            origin=origin,
            subprotocols=subprotocols,
            extra_headers=extra_headers,
            deflate=options,
        )
        self._deflate_options = options
        self._state = ConnectionState.CONNECTING
        self._initiated = False
        self.max_message_size = max_message_size
        self.max_frame_size = max_frame_size
        self._fast_limit = min(max_message_size, max_frame_size)
        backend = resolve_backend(scan_backend)  # once, not once per scanner (reads the env)
        self._backend = backend
        self._batching = batch
        self._defer_failure = defer_failure
        self._deferred: tuple[int, str] | None = None  # (code, reason) of a held failure
        #: Set by a transport before each read: messages of earlier reads are still waiting
        #: for the application, so a violation now is held too (`defer_failure`).
        self.messages_pending = False
        self._receive_ready = False  # the scanners exist (prepare_receive)
        self._mask = _masker(backend)
        self._events: list[ev.WsEvent] = []
        self._outgoing: list[bytes] = []
        # Receive buffer: reads not yet parsed, and how many bytes the next frame needs.
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._need = 0
        # The message being reassembled from fragments (section 5.4), if any.
        self._frag_opcode: int | None = None
        self._frag_compressed = False
        self._frag_parts: list[bytes] = []
        self._frag_size = 0
        self._utf8: codecs.IncrementalDecoder | None = None  # for fragmented text, made then
        # A text frame still arriving: its payload is checked as it comes (fail fast, 8.1);
        # the decoder exists once a non-ASCII byte (or a carried partial sequence) came.
        self._partial_text = False
        self._partial_utf8: codecs.IncrementalDecoder | None = None
        self._compressor: Compressor | None = None
        self._decompressor: Decompressor | None = None
        self._keys = b""
        self._key_pos = 0
        self.handshake: ev.Handshake | None = None
        self.close_code: int | None = None
        self.close_reason = ""

    # ---- state ------------------------------------------------------------------------
    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def subprotocol(self) -> str | None:
        return self.handshake.subprotocol if self.handshake else None

    @property
    def deflate(self) -> DeflateParams | None:
        return self.handshake.deflate if self.handshake else None

    @property
    def at_message_boundary(self) -> bool:
        """Open, every byte received parsed, no frame or fragmented message half read, no
        failure held, no compression: the next byte starts a new message (the C feed path
        may take the stream from here, see dataplane/feed.py)."""
        return (
            self._state is ConnectionState.OPEN
            and not self._chunks
            and self._frag_opcode is None
            and self._deferred is None
            and self._decompressor is None
            and not self._events
        )

    @property
    def failure_deferred(self) -> bool:
        """A violation is held (`defer_failure`) until `fail_deferred()`."""
        return self._deferred is not None

    def fail_deferred(self) -> None:
        """_Fail the WebSocket Connection_ (section 7.1.7) on the violation that
        `defer_failure` held: its close frame is queued and the Closed event follows.
        Nothing happens when no violation is held."""
        deferred = self._deferred
        if deferred is not None:
            self._deferred = None
            self._fail_now(*deferred)

    def _move(self, trigger: _Trigger) -> None:
        try:
            self._state = _TRANSITIONS[(self._state, trigger)]
        except KeyError:
            raise LocalProtocolError(
                f"cannot {trigger.value} in state {self._state.value}"
            ) from None

    # ---- output -----------------------------------------------------------------------
    def initiate(self) -> bytes:
        """The upgrade request (section 4.1); send it first."""
        if self._initiated or self._state is not ConnectionState.CONNECTING:
            raise LocalProtocolError("the opening handshake was already sent")
        self._initiated = True
        return self._handshake.request()

    def prepare_receive(self) -> None:
        """Work for the answer done ahead: a transport calls it once the request is on the
        wire, so that it overlaps the round trip instead of delaying the open. The 101's
        expected outcome (`ClientHandshake.expect`), and the frame scanners (their result
        arrays: 64 KiB for the batch scan), which the accepted 101 makes otherwise."""
        if self._state is ConnectionState.CONNECTING:
            self._handshake.expect()
        self._make_scanners()

    def _make_scanners(self) -> None:
        if self._receive_ready:
            return
        self._receive_ready = True
        self._scanner, self._batch, self._one = shared_scanners(self._backend, batch=self._batching)
        self._max_words = self._scanner.max_frames * SCAN_WORDS

    def data_to_send(self) -> bytes:
        """Bytes the protocol produced on its own (pongs, close replies, failure closes)."""
        if not self._outgoing:
            return b""
        out = b"".join(self._outgoing)
        self._outgoing.clear()
        return out

    def send_text(self, data: str | bytes) -> bytes:
        """One text message as one frame; bytes must already be UTF-8 (checked)."""
        if isinstance(data, str):
            payload = data.encode("utf-8")
        else:
            payload = bytes(data)
            if not (payload.isascii() or _utf8_ok(payload)):
                raise LocalProtocolError("text message is not valid UTF-8")
        return self._send_data(OP_TEXT, payload)

    def send_binary(self, data: bytes | bytearray | memoryview) -> bytes:
        return self._send_data(OP_BINARY, bytes(data))

    def ping(self, payload: bytes = b"") -> bytes:
        """A ping (section 5.5.2); match the Pong event's payload to measure the round trip."""
        return self._send_control(OP_PING, payload)

    def pong(self, payload: bytes = b"") -> bytes:
        """An unsolicited pong: a one-way heartbeat (section 5.5.3)."""
        return self._send_control(OP_PONG, payload)

    def close(self, code: int | None = CLOSE_NORMAL, reason: str = "") -> bytes:
        """Start the closing handshake (section 7.1.2); the server's close frame follows.
        code None sends a close frame without a status code."""
        if self._state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"cannot close in state {self._state.value}")
        payload = self._close_payload(code, reason)
        self._move(_Trigger.SEND_CLOSE)
        return self._frame(FIN | OP_CLOSE, payload)

    @staticmethod
    def _close_payload(code: int | None, reason: str) -> bytes:
        if code is None:
            if reason:
                raise LocalProtocolError("a close reason needs a close code")
            return b""
        if not is_valid_close_code(code):
            raise LocalProtocolError(f"close code {code} may not be sent (section 7.4)")
        encoded = reason.encode("utf-8")
        if len(encoded) > _MAX_CLOSE_REASON:
            raise LocalProtocolError(f"close reason is {len(encoded)} bytes, at most 123")
        return code.to_bytes(2, "big") + encoded

    def _send_data(self, opcode: int, payload: bytes) -> bytes:
        if self._state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"cannot send a message in state {self._state.value}")
        compressor = self._compressor
        if compressor is not None and compressor.wants(len(payload)):
            return self._frame(FIN | RSV1 | opcode, compressor.compress(payload))
        return self._frame(FIN | opcode, payload)

    def _send_control(self, opcode: int, payload: bytes) -> bytes:
        if self._state is not ConnectionState.OPEN:
            raise LocalProtocolError(f"cannot send a control frame in state {self._state.value}")
        if len(payload) > _MAX_CONTROL_PAYLOAD:
            raise LocalProtocolError(f"control payload of {len(payload)} bytes, at most 125")
        return self._frame(FIN | opcode, bytes(payload))

    def _frame(self, first_byte: int, payload: bytes) -> bytes:
        """One masked client frame (section 5.2, 5.3): the key is fresh os.urandom output."""
        pos = self._key_pos
        if pos + 4 > len(self._keys):
            self._keys = os.urandom(_KEY_POOL)
            pos = 0
        key = self._keys[pos : pos + 4]
        self._key_pos = pos + 4
        size = len(payload)
        if size < 126:
            header = bytes((first_byte, 0x80 | size))
        elif size < 65536:
            header = struct.pack("!BBH", first_byte, 0xFE, size)
        else:
            header = struct.pack("!BBQ", first_byte, 0xFF, size)
        return header + key + self._mask(payload, key)

    # ---- input ------------------------------------------------------------------------
    def events(self) -> Iterator[ev.WsEvent]:
        """The events produced by receive_data since the last call, oldest first."""
        if not self._events:
            return iter(())
        events = self._events
        self._events = []
        return iter(events)

    def receive_data(self, data: bytes) -> None:
        """Feed bytes from the server; b"" means the server closed TCP (end of stream)."""
        state = self._state
        # OPEN or CLOSING: frames still come (compared by identity: an enum's hash is Python)
        if state is ConnectionState.OPEN or state is ConnectionState.CLOSING:
            if self._deferred is not None:
                # After a violation nothing more is read (section 7.1.7); the end of the
                # stream fails the connection now, then ends it.
                if not data:
                    self.fail_deferred()
                    self._move(_Trigger.EOF)
                return
            if not data:
                self._end_of_stream()
            elif self._chunks:
                self._feed(bytes(data))
            else:
                self._take(bytes(data))  # what _feed comes to when no frame is held
        elif state is ConnectionState.CONNECTING:
            if not self._initiated:
                raise LocalProtocolError("call initiate() and send the request first")
            self._receive_handshake(bytes(data))
        elif not data:
            self._move(_Trigger.EOF)
        # Otherwise closed, failed or rejected: section 7.1.7, process nothing more.

    def _receive_handshake(self, data: bytes) -> None:
        outcome = self._handshake.receive_data(data)
        if outcome is None:
            return
        if isinstance(outcome, ev.RejectedHandshake):
            self._move(_Trigger.REJECTED if data else _Trigger.EOF)
            self._events.append(outcome)
            return
        self._accept(outcome)

    def _accept(self, accepted: Accepted) -> None:
        self._move(_Trigger.ACCEPTED)
        self._make_scanners()
        self.handshake = accepted.event
        params = accepted.event.deflate
        if params is not None and self._deflate_options is not None:
            self._compressor = Compressor(params, self._deflate_options)
            self._decompressor = Decompressor(params)
        self._events.append(accepted.event)
        if accepted.leftover:
            # Frames that came in the same read as the 101 (the old C client's bug).
            self._feed(accepted.leftover)

    def _end_of_stream(self) -> None:
        self._chunks.clear()
        self._move(_Trigger.EOF)
        self.close_code = CLOSE_ABNORMAL
        self.close_reason = "connection closed without a closing handshake"
        self._events.append(ev.Closed(CLOSE_ABNORMAL, self.close_reason, clean=False))

    def _feed(self, data: bytes) -> None:
        """Received bytes, after the handshake: every complete frame in them becomes events;
        an incomplete last frame is held for the next read. A read that completes a held
        frame joins only that frame's bytes; the rest of the read is scanned where it is
        (a bulk stream ends nearly every read mid-frame: joining the whole read copied it)."""
        while self._chunks:
            joined = self._add_to_partial_frame(data)
            if joined is None:
                return
            head, data = joined
            if not self._take(head) or not data:
                return
            # A held frame whose header was partial may still be incomplete: loop.
        self._take(data)

    def _take(self, buf: bytes) -> bool:
        """The frames of buf (the fast paths first: one whole frame, then the C batch scan,
        then the per-frame scan); an incomplete last frame is held. False when the
        connection ended on one of them (section 7.1.7: the rest is not ours to read)."""
        start = 0
        if self._batch is not None and self._decompressor is None:
            # The commonest read of a request/response exchange or a quiet feed is exactly
            # one final, unmasked, uncompressed data frame: taken without a C scan.
            # So is one of the 16-bit length form (an envelope, a small book).
            size = len(buf) - 2
            head = 2 if 0 <= size < 126 and buf[1] == size else 0  # mask bit clear
            if not head and size >= 2 and buf[1] == 126 and (buf[2] << 8 | buf[3]) == size - 2:
                head = 4
                size -= 2
            if head and size <= self._fast_limit and self._frag_opcode is None:
                first = buf[0]
                payload = buf[head:]
                if first == _FIN_BINARY or (
                    first == _FIN_TEXT and (payload.isascii() or _utf8_ok(payload))
                ):
                    self._events.append(ev.Message(payload, first == _FIN_TEXT))
                    self._buffered = 0
                    self._need = 0
                    return True
            start = self._feed_batches(buf)
            if start < 0:
                return False  # closed or failed
            if start == len(buf):  # every frame taken: no partial frame to judge
                self._buffered = 0
                self._need = 0
                return True
        scan = self._scanner.scan
        max_words = self._max_words
        while True:
            words, start, need, pending = scan(buf, start)
            if words and not self._frames(buf, words):
                return False  # closed or failed: the rest is not ours to read (section 7.1.7)
            if len(words) < max_words:
                break
        if start < len(buf):
            return self._hold_partial_frame(buf, start, need, pending)
        self._buffered = 0
        self._need = 0
        return True

    def _add_to_partial_frame(self, data: bytes) -> tuple[bytes, bytes] | None:
        """A read that continues the held incomplete frame: once the frame can be whole,
        (its joined bytes, the rest of the read), else None (held, not rescanned; its
        text checked)."""
        missing = max(self._need - self._buffered, 0)
        if len(data) < missing:
            # The pending frame is still incomplete: do not rescan; text is checked.
            self._chunks.append(data)
            self._buffered += len(data)
            if self._partial_text:
                self._check_partial_text(data)
            return None
        self._chunks.append(data[:missing] if missing < len(data) else data)
        head = b"".join(self._chunks)
        self._chunks = []
        self._partial_text = False
        self._partial_utf8 = None
        return head, data[missing:]

    def _hold_partial_frame(self, buf: bytes, start: int, need: int, pending: int) -> bool:
        """The incomplete frame at start: judged from its header before its payload is
        buffered (section 5.2 length, the frame size limit), then held until need bytes
        are in. need saturates at UINT64_MAX only for a length with the top bit set;
        pending (the payload length) is UINT64_MAX while the header itself is partial.
        False when the connection failed on it (nothing more of the read is ours)."""
        if need == UINT64_MAX or (pending != UINT64_MAX and pending >> 63):
            return self._fail(CLOSE_PROTOCOL_ERROR, "payload length with the top bit set")
        if pending != UINT64_MAX and pending > self.max_frame_size:
            return self._fail(CLOSE_TOO_BIG, f"frame of {pending} bytes exceeds the limit")
        self._chunks = [buf[start:] if start else buf]
        self._buffered = len(buf) - start
        self._need = need
        return pending == UINT64_MAX or self._watch_partial_text(buf, start)

    def _watch_partial_text(self, buf: bytes, start: int) -> bool:
        """The frame at start is incomplete but its header is in: when it carries text
        (an uncompressed text message, or a continuation of one), check the UTF-8 of the
        payload that is there, and of every read that adds to it, so that invalid text
        fails at once and not only once a frame of megabytes is whole (section 8.1,
        "fail fast"; Autobahn 6.4.3, 6.4.4). The whole frame is checked again as usual.
        False when that text failed the connection."""
        first = buf[start]
        second = buf[start + 1]
        if second & 0x80 or first & (RSV1 | RSV2 | RSV3):
            return True  # masked or compressed or invalid: judged when the frame is whole
        opcode = first & OPCODE
        carried: codecs.IncrementalDecoder | None = None
        if opcode == OP_TEXT and self._frag_opcode is None:
            pass
        elif opcode == OP_CONTINUATION and self._frag_opcode == OP_TEXT:
            if self._frag_compressed:
                return True
            carried = self._utf8  # the state of the message's earlier fragments
        else:
            return True
        length = second & 0x7F
        header = 4 if length == 126 else 10 if length == 127 else 2
        self._partial_text = True
        self._partial_utf8 = None
        if carried is not None and carried.getstate()[0]:
            utf8 = self._partial_utf8 = codecs.getincrementaldecoder("utf-8")()
            utf8.setstate(carried.getstate())
        return self._check_partial_text(buf[start + header :])

    def _check_partial_text(self, part: bytes) -> bool:
        """Feed more of a pending text frame to its UTF-8 check (`_watch_partial_text`);
        an ASCII run with no sequence open needs no decoder. False: the text failed the
        connection."""
        utf8 = self._partial_utf8
        if utf8 is None:
            if part.isascii():
                return True
            utf8 = self._partial_utf8 = codecs.getincrementaldecoder("utf-8")()
        try:
            utf8.decode(part)
        except UnicodeDecodeError:
            return self._fail(CLOSE_INVALID_DATA, "text message is not valid UTF-8")
        return True

    def _feed_batches(self, buf: bytes) -> int:
        """The batch path: one C scan gives the run of complete, final, unmasked, RSV-clear
        data frames within the size limit (text validated as UTF-8 in C), which becomes one
        MessageBatch event. The frame that ends a run goes through the per-frame code, then
        the next run starts. Returns where the per-frame loop of `_feed` carries on (the end
        of the buffer, or a partial frame to buffer), or -1 when the connection ended."""
        batch = self._batch
        one = self._one
        assert batch is not None
        assert one is not None
        append = self._events.append
        limit = self._fast_limit
        start = 0
        while True:
            if self._frag_opcode is None:
                count, spans, opcodes, start, why = batch.scan(buf, start, limit)
                if count == 1:
                    # One message (a request's answer, a quiet feed): as the per-message
                    # API wants it, without a batch to split.
                    offset, size = _SPAN.unpack(spans)
                    append(ev.Message(buf[offset : offset + size], opcodes[0] == 1))
                elif count:
                    append(ev.MessageBatch(buf, spans, opcodes))
                if why == BATCH_FULL:
                    continue
                if why != BATCH_OTHER:
                    return start  # the end, or a partial frame: the per-frame code buffers it
            # One frame through the per-frame code: the one that ended the run, or the next
            # of a fragmented message (frame by frame until it ends, then runs again).
            words, after, _, _ = one.scan(buf, start)
            if not words:
                return start  # incomplete: judged and buffered by the per-frame code
            if not self._frames(buf, words):
                return -1
            start = after

    def _frames(self, buf: bytes, words: list[int]) -> bool:
        """Handle scanned frames; False when the connection ended on one of them."""
        append = self._events.append
        limit = self._fast_limit
        it = iter(words)
        for info, offset, size, _key in zip(it, it, it, it, strict=True):
            # Fast path: a whole, uncompressed, unmasked data message in one frame (the
            # MASK bit sits in bit 8 of info, so a masked frame never matches).
            first = info & 0x1FF
            if first == _FIN_TEXT and size <= limit and self._frag_opcode is None:
                payload = buf[offset : offset + size]
                if payload.isascii() or _utf8_ok(payload):
                    append(ev.Message(payload, True))
                    continue
                return self._fail(CLOSE_INVALID_DATA, "text message is not valid UTF-8")
            if first == _FIN_BINARY and size <= limit and self._frag_opcode is None:
                append(ev.Message(buf[offset : offset + size], False))
                continue
            if not self._slow_frame(info, buf, offset, size):
                return False
        return True

    def _slow_frame(self, info: int, buf: bytes, offset: int, size: int) -> bool:
        """Every frame the fast path does not take: the checks of section 5.2 that hold for
        any frame, then a control frame (section 5.5) or a data frame (sections 5.4, 5.6),
        each in its own step below."""
        if info & MASKED:
            return self._fail(CLOSE_PROTOCOL_ERROR, "the server masked a frame (section 5.1)")
        if size >> 63:
            return self._fail(CLOSE_PROTOCOL_ERROR, "payload length with the top bit set")
        if size > self.max_frame_size:
            return self._fail(CLOSE_TOO_BIG, f"frame of {size} bytes exceeds the limit")
        first = info & 0xFF
        if first & OPCODE >= OP_CLOSE:
            return self._control_frame(first, buf, offset, size)
        return self._data_frame(first, buf, offset, size)

    def _control_frame(self, first: int, buf: bytes, offset: int, size: int) -> bool:
        """A ping, a pong or a close (section 5.5): a ping is answered with a pong of the
        same payload while open (section 5.5.2), a close ends the stream (`_receive_close`)."""
        violation = _control_frame_violation(first, size)
        if violation is not None:
            return self._fail(CLOSE_PROTOCOL_ERROR, violation)
        opcode = first & OPCODE
        payload = buf[offset : offset + size]
        if opcode == OP_PING:
            if self._state is ConnectionState.OPEN:
                self._outgoing.append(self._frame(FIN | OP_PONG, payload))
            self._events.append(ev.Ping(payload))
            return True
        if opcode == OP_PONG:
            self._events.append(ev.Pong(payload))
            return True
        return self._receive_close(payload)

    def _data_frame(self, first: int, buf: bytes, offset: int, size: int) -> bool:
        """A text, binary or continuation frame (sections 5.4, 5.6): checked, inflated when
        the message is compressed (RFC 7692), its text checked as it comes (section 8.1),
        then held as a fragment or, on FIN, handed out as a message."""
        violation = self._data_header_violation(first)
        if violation is not None:
            return self._fail(CLOSE_PROTOCOL_ERROR, violation)
        opcode = first & OPCODE
        fin = first & FIN
        first_fragment = opcode != OP_CONTINUATION
        if first_fragment:
            self._frag_opcode = opcode
            self._frag_compressed = bool(first & RSV1)
        payload = buf[offset : offset + size]
        if self._frag_compressed and self._decompressor is not None:
            inflated = self._inflate(payload, fin)
            if inflated is None:
                return False
            payload = inflated
        total = self._frag_size + len(payload)
        if total > self.max_message_size:
            return self._fail(CLOSE_TOO_BIG, f"message exceeds {self.max_message_size} bytes")
        text = self._frag_opcode == OP_TEXT
        if text:
            if first_fragment and fin:  # a whole message: checked at once
                valid = payload.isascii() or _utf8_ok(payload)
            else:
                valid = self._fragment_text_valid(payload, fin)
            if not valid:
                return self._fail(CLOSE_INVALID_DATA, "text message is not valid UTF-8")
        if not fin:
            self._frag_parts.append(payload)
            self._frag_size = total
            return True
        # The message's last frame: its fragments, if any, and this one are the message.
        parts = self._frag_parts
        if parts:
            parts.append(payload)
            payload = b"".join(parts)
            self._frag_parts = []
        self._frag_opcode = None
        self._frag_size = 0
        if self._utf8 is not None:
            self._utf8.reset()
        self._events.append(ev.Message(payload, text))
        return True

    def _data_header_violation(self, first: int) -> str | None:
        """What is wrong with a data frame's first byte, in the RFC's order, or None.
        Section 5.2: data opcodes 0x3-0x7 are reserved, and RSV1-3 are 0 unless an
        extension says otherwise; permessage-deflate gives RSV1 the meaning "compressed",
        on a message's first frame only (RFC 7692 section 6). Section 5.4: continuation
        frames follow a message's first frame, and no message starts inside another."""
        opcode = first & OPCODE
        continuation = opcode == OP_CONTINUATION
        if opcode > OP_BINARY:
            violation: str | None = f"unknown data opcode {opcode:#x}"
        elif first & (RSV2 | RSV3):
            violation = "RSV2/RSV3 set without an extension"
        elif first & RSV1 and self._decompressor is None:
            violation = "RSV1 set without permessage-deflate"
        elif first & RSV1 and continuation:
            violation = "RSV1 set on a continuation frame"
        elif continuation and self._frag_opcode is None:
            violation = "continuation frame without a message"
        elif not continuation and self._frag_opcode is not None:
            violation = "new message inside a fragmented one"
        else:
            violation = None
        return violation

    def _inflate(self, payload: bytes, fin: int) -> bytes | None:
        """A compressed message's frame, inflated within what is left of the message size
        limit (RFC 7692 section 7.2.2); None once that failed the connection."""
        decompressor = self._decompressor
        assert decompressor is not None
        try:
            return decompressor.feed(
                payload, self.max_message_size - self._frag_size, final=bool(fin)
            )
        except MessageTooBig:
            self._fail(CLOSE_TOO_BIG, "decompressed message exceeds the limit")
        except zlib.error as exc:
            self._fail(CLOSE_INVALID_DATA, f"bad deflate data: {exc}")
        return None

    def _fragment_text_valid(self, payload: bytes, fin: int) -> bool:
        """A fragment of a text message is UTF-8 so far (section 8.1): checked as it
        arrives, through the message's incremental decoder, so that bad text fails fast."""
        utf8 = self._utf8
        if utf8 is None:
            utf8 = self._utf8 = codecs.getincrementaldecoder("utf-8")()
        try:
            utf8.decode(payload, final=bool(fin))
        except UnicodeDecodeError:
            return False
        return True

    def _receive_close(self, payload: bytes) -> bool:
        """The server's close frame (section 5.5.1, 7.1.5, 7.4)."""
        if len(payload) == 1:
            return self._fail(CLOSE_PROTOCOL_ERROR, "close frame with a 1-byte payload")
        if payload:
            code = int.from_bytes(payload[:2], "big")
            if not is_valid_close_code(code):
                return self._fail(CLOSE_PROTOCOL_ERROR, f"invalid close code {code}")
            try:
                reason = payload[2:].decode("utf-8")
            except UnicodeDecodeError:
                return self._fail(CLOSE_INVALID_DATA, "close reason is not valid UTF-8")
        else:
            code, reason = CLOSE_NO_STATUS, ""
        if self._state is ConnectionState.OPEN:
            # Echo the code, the usual reply (section 5.5.1): no status for no status.
            echo = b"" if code == CLOSE_NO_STATUS else code.to_bytes(2, "big")
            self._outgoing.append(self._frame(FIN | OP_CLOSE, echo))
        self._move(_Trigger.RECV_CLOSE)
        self._chunks = []
        self.close_code = code
        self.close_reason = reason
        self._events.append(ev.CloseReceived(code, reason))
        self._events.append(ev.Closed(code, reason, clean=True))
        return False

    def _fail(self, code: int, reason: str) -> bool:
        """_Fail the WebSocket Connection_ (section 7.1.7): queue our close frame, stop.
        With `defer_failure`, when messages not yet answered came before the violation
        (not yet handed out by `events()`, or `messages_pending`), only stop:
        `fail_deferred()` fails once they are answered."""
        if (
            self._defer_failure
            and self._state is ConnectionState.OPEN
            and (
                self.messages_pending
                or any(type(event) in (ev.Message, ev.MessageBatch) for event in self._events)
            )
        ):
            self._deferred = (code, reason)
            self._chunks = []
            return False
        return self._fail_now(code, reason)

    def _fail_now(self, code: int, reason: str) -> bool:
        if self._state is ConnectionState.OPEN:
            text = reason.encode("utf-8")[:_MAX_CLOSE_REASON].decode("utf-8", "ignore")
            self._outgoing.append(self._frame(FIN | OP_CLOSE, self._close_payload(code, text)))
        self._move(_Trigger.FAIL)
        self._chunks = []
        self.close_code = code
        self.close_reason = reason
        self._events.append(ev.Closed(code, reason, clean=False, failure=True))
        return False


def _control_frame_violation(first: int, size: int) -> str | None:
    """Section 5.5: the control opcodes are close, ping and pong (0x8-0xA, others are
    reserved); control frames carry no RSV bit here, are never fragmented and carry at
    most 125 bytes."""
    opcode = first & OPCODE
    if opcode > OP_PONG:
        return f"unknown control opcode {opcode:#x}"
    if first & (RSV1 | RSV2 | RSV3):
        return "reserved bit set on a control frame"
    if not first & FIN:
        return "fragmented control frame"
    if size > _MAX_CONTROL_PAYLOAD:
        return f"control frame of {size} bytes"
    return None
