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

Blocking reads use websockets' threaded client (`websockets.sync`): a read waits in slices
of INTERRUPT_SLICE so that `interrupt` (asyncio cancellation) is seen within one.
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

from dataplane.ring import Gap, RingMessage
from gateway.client.core import (
    ClientEvent,
    NetworkSource,
    SourceUnavailableError,
    StreamClosedError,
)
from gateway.hub.names import RING_GAP_TOPIC, ring_topic
from gateway.hub.protocol import (
    CLOSE_BAD_REQUEST,
    CLOSE_FORBIDDEN,
    CLOSE_NOT_FOUND,
    CLOSE_POLICY_VIOLATION,
    CLOSE_SESSION_DELETED,
    CLOSE_UNAUTHORIZED,
)

#: Longest single wait on the socket, so that `interrupt` is seen within it.
INTERRUPT_SLICE = 0.1
#: How long opening a stream may take before it counts as unavailable.
OPEN_TIMEOUT = 5.0
#: Frames websockets' reading thread holds before it stops reading the socket (TCP then
#: pushes back, and the gateway's queue for this stream fills: its overflow policy applies).
MAX_QUEUE = 1024
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
    ) -> None:
        """Open the stream (SourceUnavailableError: nothing answers; StreamClosedError: the
        gateway refused it for good, e.g. 4401 bad token). previous: the connection this one
        follows, for the Restart or Gap between them."""
        from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI
        from websockets.sync.client import connect

        self.url = url
        self._interrupted = threading.Event()
        self._pending: list[ClientEvent] = []
        self._frame: str | bytes | None = None  # received, not yet made an event
        self._ended = False
        self.close_code: int | None = None
        self.close_reason = ""
        headers = {"Authorization": f"Bearer {token}"} if token else None
        try:
            self._ws = connect(
                url,
                additional_headers=headers,
                open_timeout=open_timeout,
                max_size=None,
                max_queue=MAX_QUEUE,
                compression=None,
            ).__enter__()  # the connection itself: it is closed by close(), not a with block
        except InvalidURI as exc:
            raise ValueError(f"bad stream URL {url!r}: {exc}") from None
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            raise SourceUnavailableError(f"{url}: {exc}") from exc
        try:
            first = orjson.loads(self._ws.recv(timeout=open_timeout))
        except ConnectionClosed as exc:
            self._ws.close()
            code, reason = _close_of(exc)
            if code in FINAL_CLOSE_CODES:
                raise StreamClosedError(code, reason) from None
            raise SourceUnavailableError(f"{url}: closed {code} {reason}") from None
        except TimeoutError:
            self._ws.close()
            raise SourceUnavailableError(f"{url}: no subscribed frame") from None
        if first.get("type") != "subscribed":
            self._ws.close()
            raise StreamClosedError(1002, f"expected a subscribed frame, got {first!r:.80}")
        self.subscribed: dict[str, Any] = first
        self._epoch = int(first.get("epoch") or "0", 16)
        self.last_seq = int(first.get("next_seq") or 1) - 1
        if previous is not None and previous._epoch == self._epoch:
            missed = self.last_seq - previous.last_seq
            if missed > 0:
                self._pending.append(Gap(missed, previous.last_seq + 1))

    # ---- MessageSource ------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        """Up to max events: waits up to timeout (None: until one comes or the stream ends)
        for the first, then takes what has already arrived."""
        events, self._pending = self._pending, []
        limit = max or 1024
        if not events:
            self._wait_frame(timeout)
        else:
            self._take(0.0)
        while len(events) < limit and self._frame is not None:
            event = self._event(self._frame)
            self._frame = None
            if event is not None:
                events.append(event)
            if len(events) < limit:
                self._take(0.0)
        return events

    def _take(self, timeout: float) -> bool:
        """Receive one frame into _frame (False: none within timeout, or the stream ended)."""
        from websockets.exceptions import ConnectionClosed

        if self._frame is not None:
            return True
        if self._ended:
            return False
        try:
            self._frame = self._ws.recv(timeout=timeout)
        except TimeoutError:
            return False
        except ConnectionClosed as exc:
            self._ended = True
            self.close_code, self.close_reason = _close_of(exc)
            if self.close_code in FINAL_CLOSE_CODES:
                raise StreamClosedError(self.close_code, self.close_reason) from None
            return False
        return True

    def _wait_frame(self, timeout: float | None) -> bool:
        self._interrupted.clear()
        if timeout == 0:
            return self._take(0.0)
        left = timeout
        while not self._interrupted.is_set():
            slice_s = INTERRUPT_SLICE if left is None else min(left, INTERRUPT_SLICE)
            if self._take(slice_s):
                return True
            if self._ended:
                return False
            if left is not None:
                left -= slice_s
                if left <= 0:
                    return False
        return False

    def _event(self, frame: str | bytes) -> ClientEvent | None:
        body = orjson.loads(frame)
        kind = body.get("type")
        if kind == "msg":
            session = body["session"]
            text = body.get("payload")
            payload = text.encode() if text is not None else base64.b64decode(body["payload_b64"])
            self.last_seq = seq = body["seq"]
            return RingMessage(
                seq, session, ring_topic(session, body["topic"]), body["recv_ts_ns"], payload, -1
            )
        if kind == "gap":
            seq = body.get("seq")
            if body.get("reason") in STREAM_GAP_REASONS:
                lost = body.get("lost") or 0
                return Gap(lost, seq if seq is not None else self.last_seq + 1)
            if seq is not None:
                self.last_seq = max(self.last_seq, seq)
            raw = frame.encode() if isinstance(frame, str) else frame
            return RingMessage(
                seq or 0, body["session"], RING_GAP_TOPIC, body.get("ts_ns") or 0, raw, -1
            )
        return None  # a frame kind this client does not know: later protocol versions

    @property
    def epoch(self) -> int:
        return self._epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        return bool(self._pending) or self._wait_frame(timeout)

    def interrupt(self) -> None:
        self._interrupted.set()

    @property
    def ended(self) -> bool:
        return self._ended and not self._pending and self._frame is None

    def close(self) -> None:
        self._ended = True
        self._ws.close()


def _close_of(exc: Any) -> tuple[int, str]:
    """(code, reason) of a websockets ConnectionClosed: 1006 when no close frame came."""
    received = exc.rcvd
    if received is None:
        return 1006, "connection lost"
    return int(received.code), str(received.reason)
