"""Typed events out of `WsClient.events()`. Plain slotted classes: `Message` is made once per
market-data message, so it carries no validation and no frozen-dataclass overhead; treat
every event as immutable."""

from __future__ import annotations

import array
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from dataplane.ws.deflate import DeflateParams


@dataclass(slots=True)
class Handshake:
    """The server accepted the upgrade (RFC 6455 section 4.1); the connection is OPEN."""

    subprotocol: str | None
    extensions: tuple[str, ...]  # accepted extension names, e.g. ("permessage-deflate",)
    headers: tuple[tuple[bytes, bytes], ...]  # the 101 response's headers, lower-case names
    deflate: DeflateParams | None = None


@dataclass(slots=True)
class RejectedHandshake:
    """No WebSocket connection: a non-101 answer (`status`, headers, first bytes of the body)
    or a 101 that breaks section 4.1 (`status` 101 and `reason` says what was wrong), or no
    HTTP at all (`status` 0; `closed` when the server ended the connection before it
    answered). The connection state is REJECTED."""

    status: int
    reason: str
    headers: tuple[tuple[bytes, bytes], ...] = ()
    body: bytes = b""
    closed: bool = False


@dataclass(slots=True)
class Message:
    """A whole data message, reassembled and decompressed; `text` messages are valid UTF-8."""

    data: bytes
    text: bool

    def as_text(self) -> str:
        return self.data.decode("utf-8")


@dataclass(slots=True)
class MessageBatch:
    """A run of whole data messages, each one unfragmented, uncompressed frame, found by
    one scan of a read (RFC 6455 section 5.6; text payloads are valid UTF-8).

    `data` is the buffer the payloads sit in (one read, so several batches may share it);
    `spans` holds, per message, its payload offset and length in `data` as native uint64
    pairs, and `opcodes` one byte per message (1 text, 2 binary). Python costs per batch,
    not per message: `views()` gives zero-copy memoryviews, `offsets`/`lengths` the spans
    as memoryviews of unsigned 64-bit ints, `messages()` the per-message `Message`s."""

    data: bytes
    spans: bytes
    opcodes: bytes

    def __len__(self) -> int:
        return len(self.opcodes)

    @property
    def offsets(self) -> memoryview:
        return memoryview(self.spans).cast("Q")[0::2]

    @property
    def lengths(self) -> memoryview:
        return memoryview(self.spans).cast("Q")[1::2]

    def views(self) -> list[memoryview]:
        """Each payload as a memoryview of `data` (no copy)."""
        whole = memoryview(self.data)
        it = iter(memoryview(self.spans).cast("Q").tolist())
        return [whole[offset : offset + size] for offset, size in zip(it, it, strict=True)]

    def payloads(self) -> list[bytes]:
        """Each payload as bytes (one copy each)."""
        data = self.data
        it = iter(memoryview(self.spans).cast("Q").tolist())
        return [data[offset : offset + size] for offset, size in zip(it, it, strict=True)]

    def messages(self) -> list[Message]:
        """The batch as the per-message API's events."""
        data = self.data
        it = iter(memoryview(self.spans).cast("Q").tolist())
        return [
            Message(data[offset : offset + size], op == 1)
            for offset, size, op in zip(it, it, self.opcodes, strict=True)
        ]

    @classmethod
    def of(cls, messages: Sequence[Message]) -> MessageBatch:
        """Messages that came one by one (fragmented, compressed...), as one batch."""
        offsets = itertools.accumulate((len(m.data) for m in messages), initial=0)
        spans = array.array("Q")
        for message, offset in zip(messages, offsets, strict=False):
            spans.append(offset)
            spans.append(len(message.data))
        return cls(
            b"".join(m.data for m in messages),
            spans.tobytes(),
            bytes(1 if m.text else 2 for m in messages),
        )


@dataclass(slots=True)
class Ping:
    """The server pinged; the pong is already queued in `data_to_send()` (section 5.5.2)."""

    payload: bytes


@dataclass(slots=True)
class Pong:
    """A pong (section 5.5.3): the answer to one of our pings, or unsolicited (a heartbeat)."""

    payload: bytes


@dataclass(slots=True)
class CloseReceived:
    """The server's close frame (section 5.5.1): code 1005 when it carried no status code.
    When the server started the close, our reply is already queued in `data_to_send()`."""

    code: int
    reason: str


@dataclass(slots=True)
class Closed:
    """The connection is over for the protocol; only the TCP close remains (section 7.1.1).

    `code`/`reason` are the connection close code and reason (sections 7.1.5, 7.1.6).
    `clean`: both close frames were exchanged. `failure`: this side failed the connection
    (section 7.1.7) because the server broke the protocol; `code` and `reason` are then what
    our close frame says (1002, 1007, 1009, ...). An end of stream without a closing
    handshake gives code 1006."""

    code: int
    reason: str
    clean: bool
    failure: bool = False


WsEvent = (
    Handshake | RejectedHandshake | Message | MessageBatch | Ping | Pong | CloseReceived | Closed
)
