"""permessage-deflate (RFC 7692): the client's offer, the check of the server's answer, and
the per-message compressor and bounded decompressor."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from dataplane.ws.errors import LocalProtocolError

EXTENSION_NAME = "permessage-deflate"
# RFC 7692 section 7.2.1: a compressed message ends with this empty stored block, which the
# sender removes and the receiver appends back.
_TAIL = b"\x00\x00\xff\xff"
_MIN_BITS = 8
_MAX_BITS = 15


@dataclass(frozen=True)
class DeflateOptions:
    """What the client offers (RFC 7692 section 7.1).

    client_no_context_takeover: we compress every message on its own (RFC 7692 section
        7.1.1.2). On by default: a market-data client sends few, small messages, so the
        ratio hardly suffers, and no compressor state is kept between them.
    server_no_context_takeover: we ask the server to reset its compressor after every message.
    client_max_window_bits: None offers the bare parameter ("the server may limit my
        window"); 8..15 limits our own window.
    server_max_window_bits: None leaves the server's window to the server; 8..15 asks it to
        use at most that window.
    level: zlib compression level of our messages. 1 by default: on a 128 KiB text message
        zlib's usual 6 takes 8.5 ms, 1 takes 1.6 ms for 17 % more bytes (Autobahn 12.3.18,
        1000 such echoes: 16 s of the client's deflate down to 3 s); on small messages
        the levels differ in neither time nor size.
    compress_threshold: messages shorter than this go out uncompressed (RSV1 is per
        message, section 6), so tiny control messages cost no deflate call.
    """

    client_no_context_takeover: bool = True
    server_no_context_takeover: bool = False
    client_max_window_bits: int | None = None
    server_max_window_bits: int | None = None
    level: int = 1
    compress_threshold: int = 0

    def __post_init__(self) -> None:
        for name in ("client_max_window_bits", "server_max_window_bits"):
            value = getattr(self, name)
            if value is not None and not _MIN_BITS <= value <= _MAX_BITS:
                raise LocalProtocolError(f"{name} must be 8..15, not {value}")
        if not -1 <= self.level <= 9:
            raise LocalProtocolError(f"zlib level must be -1..9, not {self.level}")

    def offer(self) -> str:
        """The Sec-WebSocket-Extensions value (section 7.1)."""
        params = [EXTENSION_NAME]
        if self.client_no_context_takeover:
            params.append("client_no_context_takeover")
        if self.server_no_context_takeover:
            params.append("server_no_context_takeover")
        if self.client_max_window_bits is None:
            params.append("client_max_window_bits")
        else:
            params.append(f"client_max_window_bits={self.client_max_window_bits}")
        if self.server_max_window_bits is not None:
            params.append(f"server_max_window_bits={self.server_max_window_bits}")
        return "; ".join(params)


@dataclass(frozen=True)
class DeflateParams:
    """What was agreed: the parameters both sides now use."""

    client_no_context_takeover: bool
    server_no_context_takeover: bool
    client_max_window_bits: int
    server_max_window_bits: int


class NegotiationError(Exception):
    """The server's permessage-deflate response breaks RFC 7692 section 7.1."""


def _window_bits(name: str, value: str | None) -> int:
    # Section 7.1.2: 1*DIGIT in 8..15, no leading zero (quoted strings were unquoted).
    if value is None or not value.isdigit() or value.startswith("0"):
        raise NegotiationError(f"{name} needs a value 8..15, got {value!r}")
    bits = int(value)
    if not _MIN_BITS <= bits <= _MAX_BITS:
        raise NegotiationError(f"{name}={bits} is outside 8..15")
    return bits


def _answered_window_bits(name: str, value: str | None, offered: int | None) -> int:
    """A *_max_window_bits value in the server's answer: 8..15, and not above the value we
    offered, when we offered one (sections 7.1.2.1, 7.1.2.2)."""
    bits = _window_bits(name, value)
    if offered is not None and bits > offered:
        raise NegotiationError(f"{name}={bits} exceeds the {offered} offered")
    return bits


def accept_response(options: DeflateOptions, params: list[tuple[str, str | None]]) -> DeflateParams:
    """Check the server's answer to our offer and return the agreed parameters."""
    seen: set[str] = set()
    client_nct = options.client_no_context_takeover
    server_nct = False
    client_bits = options.client_max_window_bits or _MAX_BITS
    server_bits = _MAX_BITS
    for name, value in params:
        if name in seen:
            raise NegotiationError(f"parameter {name} given twice")
        seen.add(name)
        if name == "server_no_context_takeover":
            if value is not None:
                raise NegotiationError(f"{name} takes no value")
            server_nct = True
        elif name == "client_no_context_takeover":
            if value is not None:
                raise NegotiationError(f"{name} takes no value")
            client_nct = True
        elif name == "server_max_window_bits":
            server_bits = _answered_window_bits(name, value, options.server_max_window_bits)
        elif name == "client_max_window_bits":
            # Section 7.1.2.2: only in answer to an offer that carried the parameter, which
            # ours always does; a value above an explicit offer is a violation.
            client_bits = _answered_window_bits(name, value, options.client_max_window_bits)
        else:
            raise NegotiationError(f"unknown parameter {name}")
    if options.server_max_window_bits is not None and "server_max_window_bits" not in seen:
        # Section 7.1.2.1: accepting our server_max_window_bits means echoing it.
        raise NegotiationError("server_max_window_bits was offered but not answered")
    if options.server_no_context_takeover and not server_nct:
        # Section 7.1.1.1: accepting the offer means including the parameter.
        raise NegotiationError("server_no_context_takeover was offered but not answered")
    return DeflateParams(client_nct, server_nct, client_bits, server_bits)


class Compressor:
    """Our side of the extension: one message in, one compressed payload out (section 7.2.1).
    Without context takeover no compressor outlives its message, so an idle connection
    holds no deflate state (about 256 KiB at the default memLevel)."""

    def __init__(self, params: DeflateParams, options: DeflateOptions) -> None:
        self._reset = params.client_no_context_takeover
        self._level = options.level
        self.threshold = options.compress_threshold
        # zlib cannot make raw deflate with an 8-bit window; an 8-bit limit therefore means
        # sending uncompressed messages, which section 6 allows (RSV1 is per message).
        self.enabled = params.client_max_window_bits >= 9
        self._wbits = -params.client_max_window_bits
        self._zlib = self._new() if self.enabled and not self._reset else None

    def _new(self) -> zlib._Compress:
        return zlib.compressobj(self._level, zlib.DEFLATED, self._wbits)

    def wants(self, size: int) -> bool:
        return self.enabled and size >= self.threshold

    def compress(self, data: bytes) -> bytes:
        if not self.enabled:
            raise LocalProtocolError("compression is disabled for this connection")
        z = self._zlib or self._new()
        out = z.compress(data) + z.flush(zlib.Z_SYNC_FLUSH)
        # Z_SYNC_FLUSH always ends in the empty stored block; an empty message leaves b"\0".
        return out[:-4] if out.endswith(_TAIL) else out


class MessageTooBig(Exception):
    """The decompressed message would exceed the size limit (close 1009)."""


class Decompressor:
    """The server's side of the extension, streamed per fragment and bounded: no call ever
    produces more than the bytes the message may still grow by (plus one to notice)."""

    def __init__(self, params: DeflateParams) -> None:
        self._reset = params.server_no_context_takeover
        # Inflating with the largest window reads every smaller window too.
        self._zlib = zlib.decompressobj(-_MAX_BITS)

    def feed(self, data: bytes, budget: int, final: bool) -> bytes:
        """Inflate one fragment; raises MessageTooBig past budget, zlib.error on bad data."""
        z = self._zlib
        chunks: list[bytes] = []
        produced = 0
        if final:
            data += _TAIL
        while True:
            out = z.decompress(data, budget - produced + 1)
            produced += len(out)
            if produced > budget:
                raise MessageTooBig(f"decompressed message exceeds {budget} bytes")
            if out:
                chunks.append(out)
            data = z.unconsumed_tail
            if not data:
                break
        # A sender may end a message with a final block (BFINAL, section 7.2.3.3): the
        # stream is over, so the next message starts a new one.
        if final and (self._reset or z.eof):
            self._zlib = zlib.decompressobj(-_MAX_BITS)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
