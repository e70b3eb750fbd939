"""The byte containers of a TCP connection: the bounded send buffer, the bounded
out-of-order queue (receiver side, RFC 2018 SACK block generation) and the SACK scoreboard
(sender side, RFC 6675).

All positions are unwrapped sequence numbers (see `tcp_seq`), so plain comparisons hold.
Bytes move by slicing bytearrays, never one at a time.
"""

from __future__ import annotations

from dataplane.stack.tcp_congestion import DUP_THRESH


class SendBuffer:
    """Bytes the application queued, from the oldest unacknowledged one (`start`) onwards.

    The buffer bounds memory: `write` takes what fits and reports how much (backpressure).
    """

    def __init__(self, capacity: int, start: int) -> None:
        self.capacity = capacity
        self.start = start
        self._data = bytearray()

    def __len__(self) -> int:
        return len(self._data)

    @property
    def end(self) -> int:
        """Sequence number just after the last queued byte."""
        return self.start + len(self._data)

    @property
    def free(self) -> int:
        return max(self.capacity - len(self._data), 0)

    def write(self, data: bytes | bytearray | memoryview) -> int:
        taken = min(len(data), self.free)
        if taken:
            self._data += memoryview(data)[:taken]
        return taken

    def read(self, seq: int, length: int) -> bytes:
        """`length` bytes starting at sequence number `seq` (which must be buffered)."""
        offset = seq - self.start
        return bytes(self._data[offset : offset + length])

    def ack_to(self, seq: int) -> int:
        """Drop everything before `seq`; returns how many bytes went."""
        count = min(max(seq - self.start, 0), len(self._data))
        if count:
            del self._data[:count]  # front deletion of a bytearray is amortised O(1)
        self.start += count
        return count

    def clear(self) -> None:
        self.start += len(self._data)
        self._data = bytearray()


class OutOfOrderQueue:
    """Segments received beyond a gap, merged into disjoint blocks, bounded in bytes.

    Data once queued is never dropped again (no reneging, RFC 2018 section 8): when the
    limit is reached, new segments are refused instead.
    """

    MAX_RECENT = 4

    def __init__(self, limit_bytes: int) -> None:
        self.limit_bytes = limit_bytes
        self._starts: list[int] = []
        self._blocks: list[bytearray] = []
        self._bytes = 0
        self._recent: list[int] = []  # first byte of the latest segments, newest first
        self.fin: int | None = None  # sequence number of a FIN seen beyond the gap

    def __len__(self) -> int:
        return self._bytes

    def __bool__(self) -> bool:
        return bool(self._starts) or self.fin is not None

    def blocks(self) -> list[tuple[int, int]]:
        return [(s, s + len(b)) for s, b in zip(self._starts, self._blocks, strict=True)]

    def insert(self, start: int, data: bytes | memoryview) -> bool:
        """Queue `data` at `start`; False when it would exceed the memory bound."""
        end = start + len(data)
        lo = 0
        while lo < len(self._starts) and self._starts[lo] + len(self._blocks[lo]) < start:
            lo += 1
        hi = lo
        while hi < len(self._starts) and self._starts[hi] <= end:
            hi += 1
        if lo == hi:
            if self._bytes + len(data) > self.limit_bytes:
                return False
            self._starts.insert(lo, start)
            self._blocks.insert(lo, bytearray(data))
            self._bytes += len(data)
        else:
            merged_start = min(start, self._starts[lo])
            merged_end = max(end, self._starts[hi - 1] + len(self._blocks[hi - 1]))
            covered = sum(len(b) for b in self._blocks[lo:hi])
            added = (merged_end - merged_start) - covered
            if self._bytes + added > self.limit_bytes:
                return False
            merged = bytearray(merged_end - merged_start)
            merged[start - merged_start : end - merged_start] = data
            for block_start, block in zip(self._starts[lo:hi], self._blocks[lo:hi], strict=True):
                offset = block_start - merged_start
                merged[offset : offset + len(block)] = block
            self._starts[lo:hi] = [merged_start]
            self._blocks[lo:hi] = [merged]
            self._bytes += added
        if start in self._recent:
            self._recent.remove(start)
        self._recent.insert(0, start)
        del self._recent[self.MAX_RECENT :]
        return True

    def pop_ready(self, rcv_nxt: int) -> bytes:
        """Remove and return the bytes that now continue the stream at `rcv_nxt`."""
        ready = bytearray()
        while self._starts and self._starts[0] <= rcv_nxt:
            start, block = self._starts.pop(0), self._blocks.pop(0)
            self._bytes -= len(block)
            end = start + len(block)
            if end > rcv_nxt:
                ready += block[rcv_nxt - start :]
                rcv_nxt = end
        self._recent = [s for s in self._recent if s >= rcv_nxt]
        return bytes(ready)

    def sack_blocks(self, max_blocks: int) -> tuple[tuple[int, int], ...]:
        """SACK blocks in RFC 2018 section 4 order: first the block holding the most recent
        segment, then the other recently reported ones, then the rest."""
        blocks = self.blocks()
        chosen: list[tuple[int, int]] = []
        for recent in self._recent:
            for block in blocks:
                if block[0] <= recent < block[1] and block not in chosen:
                    chosen.append(block)
                    break
        for block in reversed(blocks):
            if block not in chosen:
                chosen.append(block)
        return tuple(chosen[:max_blocks])

    def clear(self) -> None:
        self._starts.clear()
        self._blocks.clear()
        self._recent.clear()
        self._bytes = 0
        self.fin = None


class SackScoreboard:
    """What the peer reported as received beyond the cumulative ACK (RFC 6675 section 3).

    Blocks are disjoint, sorted, in unwrapped sequence numbers.
    """

    def __init__(self) -> None:
        self._blocks: list[tuple[int, int]] = []

    def __bool__(self) -> bool:
        return bool(self._blocks)

    @property
    def blocks(self) -> list[tuple[int, int]]:
        return list(self._blocks)

    @property
    def highest(self) -> int | None:
        """End of the highest SACKed byte range (RFC 6675 "HighSACK" + 1)."""
        return self._blocks[-1][1] if self._blocks else None

    def add(self, start: int, end: int) -> bool:
        """Record one block; True if it told something new."""
        if self.sacked_bytes(start, end) == end - start:
            return False
        merged_start, merged_end = start, end
        kept: list[tuple[int, int]] = []
        for block in self._blocks:
            if block[1] < merged_start or block[0] > merged_end:
                kept.append(block)
            else:
                merged_start = min(merged_start, block[0])
                merged_end = max(merged_end, block[1])
        kept.append((merged_start, merged_end))
        kept.sort()
        self._blocks = kept
        return True

    def prune(self, snd_una: int) -> None:
        """Forget what the cumulative ACK now covers."""
        if self._blocks:
            self._blocks = [(max(s, snd_una), e) for s, e in self._blocks if e > snd_una]

    def clear(self) -> None:
        self._blocks = []

    def covering(self, seq: int) -> int | None:
        """End of the SACKed block containing `seq`, None if `seq` is not SACKed."""
        for start, end in self._blocks:
            if start <= seq < end:
                return end
        return None

    def next_sacked_after(self, seq: int) -> int | None:
        """Start of the first SACKed block beginning after `seq`."""
        for start, _end in self._blocks:
            if start > seq:
                return start
        return None

    def sacked_bytes(self, lo: int, hi: int) -> int:
        return sum(max(0, min(end, hi) - max(start, lo)) for start, end in self._blocks)

    def holes(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The un-SACKed ranges inside [lo, hi)."""
        holes: list[tuple[int, int]] = []
        cursor = lo
        for start, end in self._blocks:
            if end <= cursor:
                continue
            if start >= hi:
                break
            if start > cursor:
                holes.append((cursor, start))
            cursor = max(cursor, end)
        if cursor < hi:
            holes.append((cursor, hi))
        return holes

    def is_lost(self, seq: int, smss: int) -> bool:
        """RFC 6675 section 4 IsLost(): DupThresh discontiguous SACKed ranges above `seq`, or
        more than (DupThresh - 1) * SMSS SACKed bytes above it."""
        above = [(s, e) for s, e in self._blocks if e > seq]
        if len(above) >= DUP_THRESH:
            return True
        sacked_above = sum(e - max(s, seq + 1) for s, e in above)
        return sacked_above > (DUP_THRESH - 1) * smss

    def pipe(self, snd_una: int, snd_max: int, high_rxt: int, smss: int) -> int:
        """RFC 6675 section 4 SetPipe(): un-SACKed bytes not deemed lost, plus bytes
        retransmitted (up to HighRxt) that are still un-SACKed, computed per hole."""
        pipe = 0
        for start, end in self.holes(snd_una, snd_max):
            if not self.is_lost(start, smss):
                pipe += end - start
            pipe += max(0, min(end, high_rxt) - start)
        return pipe
