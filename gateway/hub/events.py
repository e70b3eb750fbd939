"""What flows through the hub: the engine's messages, the gap records it writes to the ring,
and what a downstream consumer reads (a `Delivery` shared by every consumer of a message, or a
`GapNotice`)."""

from __future__ import annotations

import base64
from typing import Any, NamedTuple

import orjson

#: (session_id, topic, payload, recv_ts_ns, upstream seq or None): one upstream message as
#: the engine hands it to `Hub.publish_batch` (the ring copies the payload: any buffer).
Message = tuple[int, str, bytes, int, int | None]

# Gap reasons the hub itself produces (sessions pass their own to publish_gap).
QUEUE_FULL = "queue_full"
OVERLOAD = "gateway_overload"
RING_TOO_LARGE = "too_large_for_ring"
RING_NO_TOPIC = "ring_topic_table_full"


def gap_json(
    seq: int | None,
    session_id: int,
    lost: int | None,
    reason: str,
    epoch: str | None,
    extra: dict[str, object],
) -> bytes:
    """A gap as JSON, one spelling for the ring, NATS and /v1/stream: the common fields, then
    extra, then the epoch when it is known."""
    body: dict[str, object] = {
        "type": "gap",
        "seq": seq,
        "session": session_id,
        "lost": lost,
        "reason": reason,
        **extra,
    }
    if epoch is not None:
        body["epoch"] = epoch
    return orjson.dumps(body)


# ---- ring records the hub writes -------------------------------------------------------
class GapEvent(NamedTuple):
    """A session reconnected: `lost` messages (None: unknown) may be missing before `seq`.
    epoch: the hub's run (Hub.epoch_hex), for NATS subscribers, who see no ring header."""

    seq: int
    session_id: int
    lost: int | None
    reason: str
    ts_ns: int
    epoch: str | None = None

    def json(self) -> bytes:
        extra: dict[str, object] = {"ts_ns": self.ts_ns}
        return gap_json(self.seq, self.session_id, self.lost, self.reason, self.epoch, extra)


# ---- what a consumer reads ------------------------------------------------------------------
class Delivery:
    """One message as every downstream consumer sees it. The text and the envelope are
    made once, by the first consumer that needs them, and shared by the others."""

    __slots__ = (
        "_envelope",
        "_envelope_frame",
        "_envelope_wire",
        "_raw_frame",
        "_raw_wire",
        "_text",
        "payload",
        "recv_ts_ns",
        "seq",
        "session_id",
        "topic",
        "upstream_seq",
    )

    def __init__(
        self,
        seq: int,
        session_id: int,
        topic: str,
        payload: bytes,
        recv_ts_ns: int,
        upstream_seq: int | None,
    ) -> None:
        self.seq = seq
        self.session_id = session_id
        self.topic = topic
        self.payload = payload
        self.recv_ts_ns = recv_ts_ns
        self.upstream_seq = upstream_seq
        self._text: str | bool | None = False  # False: not decoded yet
        self._envelope: str | None = None
        self._raw_frame: dict[str, Any] | None = None
        self._envelope_frame: dict[str, Any] | None = None
        self._raw_wire: bytes | None = None
        self._envelope_wire: bytes | None = None

    @property
    def text(self) -> str | None:
        """The payload as text when it is UTF-8 (most feeds send JSON), else None."""
        text = self._text
        if text is False:
            try:
                text = self.payload.decode()
            except UnicodeDecodeError:
                text = None
            self._text = text
        return text  # type: ignore[return-value]

    def envelope(self) -> str:
        """The JSON envelope: seq, session, topic, recv_ts_ns[, upstream_seq], and the payload
        as a string (`payload`) when it is UTF-8, else base64 (`payload_b64`)."""
        env = self._envelope
        if env is None:
            body: dict[str, Any] = {
                "type": "msg",
                "seq": self.seq,
                "session": self.session_id,
                "topic": self.topic,
                "recv_ts_ns": self.recv_ts_ns,
            }
            if self.upstream_seq is not None:
                body["upstream_seq"] = self.upstream_seq
            text = self.text
            if text is not None:
                body["payload"] = text
            else:
                body["payload_b64"] = base64.b64encode(self.payload).decode()
            env = self._envelope = orjson.dumps(body).decode()
        return env

    def raw_frame(self) -> dict[str, Any]:
        """The ASGI message sending the payload as is (text when UTF-8), made once."""
        frame = self._raw_frame
        if frame is None:
            text = self.text
            frame = self._raw_frame = (
                {"type": "websocket.send", "text": text}
                if text is not None
                else {"type": "websocket.send", "bytes": self.payload}
            )
        return frame

    def envelope_frame(self) -> dict[str, Any]:
        """The ASGI message sending the envelope, made once."""
        frame = self._envelope_frame
        if frame is None:
            frame = self._envelope_frame = {"type": "websocket.send", "text": self.envelope()}
        return frame

    def raw_wire(self) -> bytes:
        """The whole server-to-client WebSocket frame of the payload (the same bytes for
        every consumer: servers do not mask), made once."""
        wire = self._raw_wire
        if wire is None:
            opcode = OP_TEXT if self.text is not None else OP_BINARY
            wire = self._raw_wire = ws_frame(opcode, self.payload)
        return wire

    def envelope_wire(self) -> bytes:
        wire = self._envelope_wire
        if wire is None:
            wire = self._envelope_wire = ws_frame(OP_TEXT, self.envelope().encode())
        return wire

    def __repr__(self) -> str:
        return f"<Delivery seq={self.seq} session={self.session_id} topic={self.topic!r}>"


class GapNotice(NamedTuple):
    """Messages a consumer will not get. reason: the session's (an upstream reconnect),
    QUEUE_FULL (drop_oldest dropped them from its queue) or OVERLOAD (its loop fell that
    many ring records behind, of any stream). lost: how many (None when the session could
    not tell). seq: the gap record's sequence number for upstream gaps, None for the others.

    past: the session's last upstream gap, which happened before this consumer subscribed
    (`Hub.subscribe` hands it over once, first): data from before the subscription may be
    missing. ts_ns: when that gap happened (time.time_ns()); set on past notices only.
    epoch: the hub's run identifier (Hub.epoch_hex), on upstream gaps: a restart of the
    gateway is a new epoch."""

    session_id: int
    lost: int | None
    reason: str
    seq: int | None = None
    ts_ns: int | None = None
    past: bool = False
    epoch: str | None = None

    def json(self) -> str:
        extra: dict[str, object] = {"past": True, "ts_ns": self.ts_ns} if self.past else {}
        return gap_json(
            self.seq, self.session_id, self.lost, self.reason, self.epoch, extra
        ).decode()


StreamEvent = Delivery | GapNotice

OP_TEXT = 0x1
OP_BINARY = 0x2


def ws_frame(opcode: int, data: bytes) -> bytes:
    """An unmasked, unfragmented WebSocket frame (RFC 6455 5.2): what a server sends."""
    n = len(data)
    if n < 126:
        head = bytes((0x80 | opcode, n))
    elif n < 1 << 16:
        head = bytes((0x80 | opcode, 126)) + n.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 127)) + n.to_bytes(8, "big")
    return head + data
