"""Classic libpcap capture files, and a link middleware that records what passes.

The format is the original one (not pcapng) because every tool reads it: a 24-byte global
header, then per frame a 16-byte record header and the bytes. Link type DLT_EN10MB (1).
Timestamps are microseconds (magic 0xa1b2c3d4) or nanoseconds (magic 0xa1b23c4d).
"""

from __future__ import annotations

import struct
import time
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from dataplane.closing import Closing
from dataplane.links.base import Clock, Link, link_poll_at

DLT_EN10MB = 1
PCAP_MAGIC_MICROSECONDS = 0xA1B2C3D4
PCAP_MAGIC_NANOSECONDS = 0xA1B23C4D
PCAP_VERSION = (2, 4)
DEFAULT_SNAPLEN = 262144  # what tcpdump uses

_GLOBAL_HEADER = struct.Struct("<IHHiIII")
_RECORD_HEADER = struct.Struct("<IIII")


class PcapWriter(Closing):
    """Appends frames to a capture file (little-endian, as libpcap writes on x86)."""

    def __init__(
        self,
        path: str | Path,
        *,
        nanoseconds: bool = False,
        snaplen: int = DEFAULT_SNAPLEN,
        linktype: int = DLT_EN10MB,
    ) -> None:
        self.path = Path(path)
        self.nanoseconds = nanoseconds
        self.snaplen = snaplen
        self.frames_written = 0
        self._file: BinaryIO | None = self.path.open("wb")
        magic = PCAP_MAGIC_NANOSECONDS if nanoseconds else PCAP_MAGIC_MICROSECONDS
        self._file.write(_GLOBAL_HEADER.pack(magic, *PCAP_VERSION, 0, 0, snaplen, linktype))

    def write(self, frame: bytes, timestamp: float) -> None:
        """Record one frame captured at `timestamp` (seconds; the epoch for wall time)."""
        if self._file is None:
            raise ValueError(f"pcap file {self.path} is closed")
        scale = 1_000_000_000 if self.nanoseconds else 1_000_000
        ticks = round(timestamp * scale)
        seconds, fraction = divmod(ticks, scale)
        captured = frame[: self.snaplen]
        self._file.write(_RECORD_HEADER.pack(seconds, fraction, len(captured), len(frame)))
        self._file.write(captured)
        self.frames_written += 1

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class PcapLink(Closing):
    """Link middleware that writes every frame received and every frame taken for sending.

    A debugging aid: wrap the link nearest to the stack to see what the stack saw, or the one
    under a `FaultInjector` to see what reached the wire.
    """

    def __init__(
        self,
        link: Link,
        path: str | Path,
        *,
        clock: Clock = time.time,
        nanoseconds: bool = False,
        snaplen: int = DEFAULT_SNAPLEN,
    ) -> None:
        self.inner = link
        self.mac = link.mac
        self.mtu = link.mtu
        self.clock = clock
        self.writer = PcapWriter(path, nanoseconds=nanoseconds, snaplen=snaplen)

    def rx_burst(self, max_frames: int = 32) -> list[bytes]:
        frames = self.inner.rx_burst(max_frames)
        if frames:
            now = self.clock()
            for frame in frames:
                self.writer.write(frame, now)
        return frames

    def tx_burst(self, frames: Sequence[bytes]) -> int:
        taken = self.inner.tx_burst(frames)
        if taken:
            now = self.clock()
            for frame in frames[:taken]:
                self.writer.write(frame, now)
        return taken

    def poll_at(self) -> float | None:
        return link_poll_at(self.inner)

    def close(self) -> None:
        self.writer.close()
