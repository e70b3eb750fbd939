"""TCP segment representation (RFC 9293 section 3.1, options per RFC 7323 and RFC 2018).

`TcpRepr` is what the stack's state machine consumes and produces; parse/emit convert it
to and from bytes. Sequence and acknowledgement numbers are plain 32-bit ints; `window` is
the raw 16-bit header field (unscaled).

Options are emitted in Linux's layout (tcp_options_write), which is also the order MSS,
SACK-permitted, timestamps, window scale, SACK blocks: every option group is NOP-padded to
start its 4-byte fields on 4-byte boundaries, so the whole is a multiple of 4 with no EOL.
A SYN with everything is `MSS, SACK-perm, TS, NOP, WS` (20 bytes) as Linux sends it. A set
that does not fit in 40 bytes that way is emitted without the NOPs and padded with EOL.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, field

from dataplane.wire._common import Buffer, as_bytes
from dataplane.wire.checksum import csum_partial, inet_checksum, pseudo_header_sum, sum16
from dataplane.wire.errors import ChecksumError, MalformedError, TruncatedError
from dataplane.wire.ipv4 import PROTO_TCP


class TcpFlags(enum.IntFlag):
    FIN = 0x01
    SYN = 0x02
    RST = 0x04
    PSH = 0x08
    ACK = 0x10
    URG = 0x20
    ECE = 0x40
    CWR = 0x80

    # enum's own & and | build the result through Flag's machinery (about 0.5 us each,
    # several per segment on the slow path); the 256 members are interned below.
    def __and__(self, other: object) -> TcpFlags:
        if type(other) is TcpFlags:
            return _FLAGS[int.__and__(self, other)]
        return super().__and__(other)  # type: ignore[operator]

    def __or__(self, other: object) -> TcpFlags:
        if type(other) is TcpFlags:
            return _FLAGS[int.__or__(self, other)]
        return super().__or__(other)  # type: ignore[operator]

    __rand__ = __and__
    __ror__ = __or__


# Field offsets: source port 0, destination port 2, sequence 4, acknowledgement 8,
# data offset (high nibble) 12, flags 13, window 14, checksum 16, urgent pointer 18.
_HEADER = struct.Struct("!HHIIBBHHH")
_CHECKSUM = struct.Struct("!H")
_CHECKSUM_OFFSET = 16
HEADER_LEN = _HEADER.size  # 20
MAX_OPTIONS_LEN = 40
MAX_HEADER_LEN = HEADER_LEN + MAX_OPTIONS_LEN
#: Largest segment the 16-bit pseudo-header length can describe.
MAX_SEGMENT_LEN = 0xFFFF

# Option kinds (IANA "TCP Option Kind Numbers") and their fixed lengths.
OPT_EOL = 0  # RFC 9293 section 3.2
OPT_NOP = 1  # RFC 9293 section 3.2
OPT_MSS = 2  # RFC 9293 section 3.7.1
OPT_WINDOW_SCALE = 3  # RFC 7323 section 2.2
OPT_SACK_PERMITTED = 4  # RFC 2018 section 2
OPT_SACK = 5  # RFC 2018 section 3
OPT_TIMESTAMPS = 8  # RFC 7323 section 3.2
_LEN_MSS = 4
_LEN_WINDOW_SCALE = 3
_LEN_SACK_PERMITTED = 2
_LEN_TIMESTAMPS = 10
_SACK_BLOCK_LEN = 8
MAX_SACK_BLOCKS = 4  # (40 - 2) // 8
#: RFC 7323 section 2.3: a larger shift is treated as 14.
MAX_WINDOW_SCALE = 14

_U16 = struct.Struct("!H")
_U32_PAIR = struct.Struct("!II")
_MSS_OPT = struct.Struct("!BBH")
_SACK_EDGES = tuple(struct.Struct(f"!{2 * n}I") for n in range(MAX_SACK_BLOCKS + 1))
# Linux's prefixes: SACK-permitted merged with the timestamp option, or NOP-aligned.
_TS_WITH_SACK_PERM = bytes((OPT_SACK_PERMITTED, 2, OPT_TIMESTAMPS, _LEN_TIMESTAMPS))
_TS_ALONE = bytes((OPT_NOP, OPT_NOP, OPT_TIMESTAMPS, _LEN_TIMESTAMPS))
_SACK_PERM_ALONE = bytes((OPT_NOP, OPT_NOP, OPT_SACK_PERMITTED, 2))
_WS_PREFIX = bytes((OPT_NOP, OPT_WINDOW_SCALE, _LEN_WINDOW_SCALE))

# Interning the 256 flag combinations keeps enum construction off the parse path.
_FLAGS = tuple(TcpFlags(i) for i in range(256))


def _u32(value: int) -> bool:
    return 0 <= value <= 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class TcpOptions:
    mss: int | None = None
    window_scale: int | None = None
    sack_permitted: bool = False
    sack_blocks: tuple[tuple[int, int], ...] = ()  # (left edge, right edge) pairs
    timestamp: tuple[int, int] | None = None  # (TSval, TSecr)

    @classmethod
    def parse(cls, raw: Buffer) -> TcpOptions:
        """The options area of a TCP header (bytes 20 to the data offset).

        NOP and unknown kinds are skipped (unknown ones by their length byte), EOL ends the
        list, a later duplicate overrides an earlier one. A length byte that is missing,
        below 2, past the end, or wrong for a known kind is a `MalformedError`, and so is
        an area longer than the 40 bytes a data offset can describe.
        """
        data = as_bytes(raw)
        if len(data) > MAX_OPTIONS_LEN:
            raise MalformedError(f"TCP options area of {len(data)} bytes, at most 40 fit")
        return _parse_options(data, 0, len(data))

    def emit(self) -> bytes:
        """The options, a multiple of 4 bytes and at most 40 (else `ValueError`).

        Linux's NOP-aligned layout when it fits; otherwise (a combination no real stack
        sends, such as window scale with timestamps and 3 SACK blocks) the same order
        without alignment NOPs, padded with EOL (RFC 9293 section 3.2).
        """
        self._validate()
        aligned = self._emit_aligned()
        if len(aligned) <= MAX_OPTIONS_LEN:
            return aligned
        compact = self._emit_compact()
        if len(compact) > MAX_OPTIONS_LEN:
            raise ValueError(f"TCP options need {len(compact)} bytes, at most 40 fit")
        return compact

    def _validate(self) -> None:
        if self.mss is not None and not 0 <= self.mss <= 0xFFFF:
            raise ValueError(f"TCP MSS out of range: {self.mss}")
        if self.window_scale is not None and not 0 <= self.window_scale <= MAX_WINDOW_SCALE:
            raise ValueError(f"TCP window scale out of range: {self.window_scale}")
        if self.timestamp is not None and (
            len(self.timestamp) != 2 or not all(_u32(value) for value in self.timestamp)
        ):
            raise ValueError(f"TCP timestamps must be two 32-bit values: {self.timestamp}")
        if len(self.sack_blocks) > MAX_SACK_BLOCKS:
            raise ValueError(f"{len(self.sack_blocks)} SACK blocks, at most 4 fit")
        for block in self.sack_blocks:
            if len(block) != 2 or not (_u32(block[0]) and _u32(block[1])):
                raise ValueError(f"SACK blocks must be pairs of 32-bit edges: {block}")

    def _sack_option(self) -> bytes:
        count = len(self.sack_blocks)
        edges = [edge for block in self.sack_blocks for edge in block]
        return bytes((OPT_SACK, 2 + _SACK_BLOCK_LEN * count)) + _SACK_EDGES[count].pack(*edges)

    def _emit_aligned(self) -> bytes:
        out = bytearray()
        if self.mss is not None:
            out += _MSS_OPT.pack(OPT_MSS, _LEN_MSS, self.mss)
        if self.timestamp is not None:
            out += _TS_WITH_SACK_PERM if self.sack_permitted else _TS_ALONE
            out += _U32_PAIR.pack(*self.timestamp)
        elif self.sack_permitted:
            out += _SACK_PERM_ALONE
        if self.window_scale is not None:
            out += _WS_PREFIX
            out.append(self.window_scale)
        if self.sack_blocks:
            out += b"\x01\x01"  # two NOPs put the SACK edges on 4-byte boundaries
            out += self._sack_option()
        return bytes(out)

    def _emit_compact(self) -> bytes:
        out = bytearray()
        if self.mss is not None:
            out += _MSS_OPT.pack(OPT_MSS, _LEN_MSS, self.mss)
        if self.sack_permitted:
            out += bytes((OPT_SACK_PERMITTED, _LEN_SACK_PERMITTED))
        if self.timestamp is not None:
            out += bytes((OPT_TIMESTAMPS, _LEN_TIMESTAMPS)) + _U32_PAIR.pack(*self.timestamp)
        if self.window_scale is not None:
            out += bytes((OPT_WINDOW_SCALE, _LEN_WINDOW_SCALE, self.window_scale))
        if self.sack_blocks:
            out += self._sack_option()
        out += bytes(-len(out) % 4)  # EOL, then zeros, to the 4-byte boundary
        return bytes(out)


_NO_OPTIONS = TcpOptions()


def _parse_options(  # noqa: PLR0912  one TLV walk, a branch per option kind, as the RFCs list them
    data: bytes, start: int, end: int
) -> TcpOptions:
    # RFC 9293 section 3.2 (option format), 3.7.1 (MSS), RFC 7323 sections 2.2 and 3.2,
    # RFC 2018 sections 2 and 3.
    if start == end:
        return _NO_OPTIONS
    if end - start == 12 and data[start : start + 4] == _TS_ALONE:
        # NOP, NOP, timestamps: what every segment after the handshake carries.
        return TcpOptions(timestamp=_U32_PAIR.unpack_from(data, start + 4))
    mss: int | None = None
    window_scale: int | None = None
    sack_permitted = False
    sack_blocks: tuple[tuple[int, int], ...] = ()
    timestamp: tuple[int, int] | None = None
    pos = start
    while pos < end:
        kind = data[pos]
        if kind == OPT_EOL:
            break
        if kind == OPT_NOP:
            pos += 1
            continue
        if pos + 1 >= end:
            raise MalformedError(f"TCP option kind {kind} without a length byte")
        length = data[pos + 1]
        if length < 2 or pos + length > end:
            raise MalformedError(f"TCP option kind {kind} with length {length}")
        if kind == OPT_MSS:
            if length != _LEN_MSS:
                raise MalformedError(f"TCP MSS option with length {length}")
            mss = _U16.unpack_from(data, pos + 2)[0]
        elif kind == OPT_WINDOW_SCALE:
            if length != _LEN_WINDOW_SCALE:
                raise MalformedError(f"TCP window scale option with length {length}")
            # RFC 7323 section 2.3: "use 14 instead of the specified value".
            window_scale = min(data[pos + 2], MAX_WINDOW_SCALE)
        elif kind == OPT_SACK_PERMITTED:
            if length != _LEN_SACK_PERMITTED:
                raise MalformedError(f"TCP SACK-permitted option with length {length}")
            sack_permitted = True
        elif kind == OPT_SACK:
            count, rest = divmod(length - 2, _SACK_BLOCK_LEN)
            if rest or not 1 <= count <= MAX_SACK_BLOCKS:
                raise MalformedError(f"TCP SACK option with length {length}")
            edges = _SACK_EDGES[count].unpack_from(data, pos + 2)
            sack_blocks = tuple(zip(edges[0::2], edges[1::2], strict=True))
        elif kind == OPT_TIMESTAMPS:
            if length != _LEN_TIMESTAMPS:
                raise MalformedError(f"TCP timestamps option with length {length}")
            timestamp = _U32_PAIR.unpack_from(data, pos + 2)
        pos += length
    return TcpOptions(mss, window_scale, sack_permitted, sack_blocks, timestamp)


@dataclass(frozen=True, slots=True)
class TcpRepr:
    src_port: int
    dst_port: int
    seq: int
    ack: int
    flags: TcpFlags
    window: int
    options: TcpOptions = field(default_factory=TcpOptions)
    payload: bytes = b""
    urgent: int = 0

    @property
    def seg_len(self) -> int:
        """Sequence space the segment occupies: payload plus one each for SYN and FIN."""
        flags = int(self.flags)
        return len(self.payload) + (flags >> 1 & 1) + (flags & 1)  # SYN is 0x02, FIN 0x01

    @classmethod
    def parse(
        cls, segment: Buffer, src_ip: int, dst_ip: int, *, verify_checksum: bool = True
    ) -> TcpRepr:
        """The IPv4 payload of a protocol-6 packet (already cut to the IP total length).

        The checksum covers the pseudo header built from src_ip/dst_ip (RFC 9293 section
        3.1); pass verify_checksum=False when the NIC has verified it. The reserved bits
        of byte 12 are ignored.
        """
        data = as_bytes(segment)
        size = len(data)
        if size < HEADER_LEN:
            raise TruncatedError(f"TCP segment of {size} bytes, header needs {HEADER_LEN}")
        if size > MAX_SEGMENT_LEN:
            raise MalformedError(f"TCP segment of {size} bytes exceeds any IPv4 packet")
        src_port, dst_port, seq, ack, offset, flags, window, _, urgent = _HEADER.unpack_from(
            data, 0
        )
        header_len = (offset >> 4) * 4
        if header_len < HEADER_LEN:
            raise MalformedError(f"TCP data offset {header_len // 4} is below 5")
        if header_len > size:
            raise MalformedError(f"TCP header of {header_len} bytes in a {size}-byte segment")
        if verify_checksum:
            # RFC 1071: segment plus pseudo header sum to 0xFFFF, 0 modulo 0xFFFF (the
            # pseudo header is never all zeros: the protocol is 6).
            pseudo = (src_ip >> 16) + (src_ip & 0xFFFF) + (dst_ip >> 16) + (dst_ip & 0xFFFF)
            if (pseudo + PROTO_TCP + size + sum16(data)) % 0xFFFF != 0:
                raise ChecksumError("TCP checksum does not verify")
        options = _parse_options(data, HEADER_LEN, header_len)
        return cls(
            src_port,
            dst_port,
            seq,
            ack,
            _FLAGS[flags],
            window,
            options,
            data[header_len:],
            urgent,
        )

    def emit(self, src_ip: int, dst_ip: int) -> bytes:
        """Header, options and payload, checksum filled in."""
        options = self.options.emit()
        header_len = HEADER_LEN + len(options)
        size = header_len + len(self.payload)
        if size > MAX_SEGMENT_LEN:
            raise ValueError(f"TCP segment of {size} bytes does not fit in IPv4")
        try:
            header = _HEADER.pack(
                self.src_port,
                self.dst_port,
                self.seq,
                self.ack,
                (header_len // 4) << 4,
                int(self.flags),
                self.window,
                0,
                self.urgent,
            )
        except struct.error as exc:
            raise ValueError(f"TCP field out of range: {exc}") from exc
        # Header and options have an even length, so the payload chains after them.
        partial = csum_partial(header, pseudo_header_sum(src_ip, dst_ip, PROTO_TCP, size))
        if options:
            partial = csum_partial(options, partial)
        checksum = inet_checksum(self.payload, partial)
        return (
            header[:_CHECKSUM_OFFSET]
            + _CHECKSUM.pack(checksum)
            + header[_CHECKSUM_OFFSET + 2 :]
            + options
            + self.payload
        )


_IPV4_TCP = struct.Struct("!BBHHHBBHII")  # an option-less IPv4 header for PROTO_TCP
_TS_OPTION = struct.Struct("!BBBBII")  # NOP, NOP, TS, 10, TSval, TSecr
_TS_OPTION_SUM = (OPT_NOP << 8 | OPT_NOP) + (OPT_TIMESTAMPS << 8 | _LEN_TIMESTAMPS)
_IPV4_FLAGS_TTL_SUM = 0x4000 + (64 << 8 | PROTO_TCP)  # DF; TTL 64, protocol 6


class TcpFrameTemplate:
    """Ethernet + IPv4 + TCP for one connection with the constant parts prebuilt: emitting
    a segment fills in only what changes (lengths, IP ident, seq, ack, flags, window,
    options) and computes both checksums from per-connection partial sums, so a data
    segment costs a few struct packs and one checksum pass over its payload.

    The bytes are exactly those of `EthernetRepr(...).emit(Ipv4Repr(src, dst, 6, len,
    ident=ident).emit(seg.emit(src, dst)))` (tests compare them)."""

    __slots__ = ("_dst", "_eth", "_ip_sum", "_pseudo_sum", "_src", "dst_mac")

    def __init__(self, src_mac: bytes, dst_mac: bytes, src_ip: int, dst_ip: int) -> None:
        self.dst_mac = dst_mac
        self._eth = dst_mac + src_mac + b"\x08\x00"
        self._src = src_ip
        self._dst = dst_ip
        addresses = (src_ip >> 16) + (src_ip & 0xFFFF) + (dst_ip >> 16) + (dst_ip & 0xFFFF)
        # IPv4 header words that never change: version/IHL, flags, TTL/protocol, addresses.
        self._ip_sum = 0x4500 + _IPV4_FLAGS_TTL_SUM + addresses
        # RFC 9293 section 3.1 pseudo header, less the TCP length.
        self._pseudo_sum = addresses + PROTO_TCP

    def emit(self, seg: TcpRepr, ident: int) -> bytes:
        """The whole frame for seg with this IP identification."""
        options = seg.options
        if (
            options.timestamp is not None
            and options.mss is None
            and options.window_scale is None
            and not options.sack_permitted
            and not options.sack_blocks
        ):
            tsval, tsecr = options.timestamp
            opt_bytes = _TS_OPTION.pack(
                OPT_NOP, OPT_NOP, OPT_TIMESTAMPS, _LEN_TIMESTAMPS, tsval, tsecr
            )
            opt_sum = _TS_OPTION_SUM + (tsval >> 16) + (tsval & 0xFFFF)
            opt_sum += (tsecr >> 16) + (tsecr & 0xFFFF)
        elif options == _NO_OPTIONS:
            opt_bytes = b""
            opt_sum = 0
        else:
            opt_bytes = options.emit()
            opt_sum = sum16(opt_bytes)
        payload = seg.payload
        header_len = HEADER_LEN + len(opt_bytes)
        tcp_len = header_len + len(payload)
        if tcp_len > MAX_SEGMENT_LEN - 20:
            raise ValueError(f"TCP segment of {tcp_len} bytes does not fit in IPv4")
        seq = seg.seq
        ack = seg.ack
        offset_flags = (header_len // 4) << 12 | int(seg.flags)
        total = (
            self._pseudo_sum
            + tcp_len
            + seg.src_port
            + seg.dst_port
            + (seq >> 16)
            + (seq & 0xFFFF)
            + (ack >> 16)
            + (ack & 0xFFFF)
            + offset_flags
            + seg.window
            + seg.urgent
            + opt_sum
        )
        if payload:
            total += sum16(payload)
        ip_len = 20 + tcp_len
        ip_checksum = (-(self._ip_sum + ip_len + ident)) % 0xFFFF
        try:
            ip_header = _IPV4_TCP.pack(
                0x45, 0, ip_len, ident, 0x4000, 64, PROTO_TCP, ip_checksum, self._src, self._dst
            )
            tcp_header = _HEADER.pack(
                seg.src_port,
                seg.dst_port,
                seq,
                ack,
                offset_flags >> 8,
                offset_flags & 0xFF,
                seg.window,
                (-total) % 0xFFFF,
                seg.urgent,
            )
        except struct.error as exc:
            raise ValueError(f"TCP or IPv4 field out of range: {exc}") from exc
        return self._eth + ip_header + tcp_header + opt_bytes + payload


__all__ = [
    "HEADER_LEN",
    "MAX_OPTIONS_LEN",
    "MAX_SACK_BLOCKS",
    "MAX_WINDOW_SCALE",
    "OPT_EOL",
    "OPT_MSS",
    "OPT_NOP",
    "OPT_SACK",
    "OPT_SACK_PERMITTED",
    "OPT_TIMESTAMPS",
    "OPT_WINDOW_SCALE",
    "PROTO_TCP",
    "TcpFlags",
    "TcpFrameTemplate",
    "TcpOptions",
    "TcpRepr",
]
