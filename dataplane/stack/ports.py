"""Ephemeral (client) port selection, RFC 6056 section 3.3.4 "Algorithm 4: Double-Hash".

port = low + (F(local ip, remote ip, remote port, key1) + table[G(..., key2)]) mod range,
and the table slot counts up on every use. F spreads connections to different remotes over
the range; the per-slot counter walks successive connections to one remote through it, so
1000 connects to one server get 1000 different ports. The keys come from `secrets` unless a
seed is given for a reproducible test: a port sequence that repeats from run to run (an old
C client never seeded rand() and reused one source port every start) collides with the
far end's TIME_WAIT state and lets an off-path attacker guess the 4-tuple (RFC 6056 s1).

A port is not handed out while a connection to the same remote (ip, port) holds it, nor
within `reuse_delay` seconds of its release (the far end may still hold the old connection
in TIME_WAIT, RFC 9293 section 3.6.1), nor when it is reserved for a listener.
"""

from __future__ import annotations

import errno as _errno
import hashlib
import random
import secrets
import struct

from dataplane.errors import DataplaneError

#: IANA's dynamic range starts at 49152 (RFC 6335); Linux's default range is used here.
DEFAULT_LOW = 32768
DEFAULT_HIGH = 60999
#: 2 x MSL (RFC 9293 section 3.4.2, MSL = 2 minutes) would be the strict bound; Linux holds
#: TIME_WAIT for 60 s, and the far end, not us, is what matters for a client port.
DEFAULT_REUSE_DELAY = 60.0
TABLE_SIZE = 1024

_FLOW = struct.Struct("!IIH")
_HASHES_KEPT = 4096  # 3-tuples whose F and G are remembered (then forgotten all at once)


class LocalPortError(DataplaneError):
    """A local TCP port could not be had."""


class PortsExhaustedError(LocalPortError):
    """Every ephemeral port is in use or cooling down for this remote."""


class PortInUseError(LocalPortError):
    """An explicitly requested local port is taken for that remote (or reserved)."""


class EphemeralPorts:
    """Allocates client ports for one local address (RFC 6056 algorithm 4)."""

    def __init__(
        self,
        low: int = DEFAULT_LOW,
        high: int = DEFAULT_HIGH,
        *,
        seed: int | None = None,
        reuse_delay: float = DEFAULT_REUSE_DELAY,
    ) -> None:
        if not 1 <= low <= high <= 0xFFFF:
            raise ValueError(f"bad ephemeral port range {low}-{high}")
        if reuse_delay < 0:
            raise ValueError("reuse_delay cannot be negative")
        self.low = low
        self.high = high
        self.reuse_delay = reuse_delay
        key_material = (
            secrets.token_bytes(32) if seed is None else random.Random(seed).randbytes(32)
        )
        self._key = key_material
        self._table = [0] * TABLE_SIZE
        # (local ip, remote ip, remote port) -> (F, G): they depend on nothing else, and a
        # client reconnects to the same few remotes (a keyed hash is a microsecond or two).
        self._hashes: dict[tuple[int, int, int], tuple[int, int]] = {}
        self._in_use: set[tuple[int, int, int]] = set()  # (port, remote ip, remote port)
        self._cooling: dict[int, float] = {}  # port -> reusable from
        self._reserved: set[int] = set()

    @property
    def size(self) -> int:
        return self.high - self.low + 1

    def _f_and_g(self, local_ip: int, remote_ip: int, remote_port: int) -> tuple[int, int]:
        """Algorithm 4's F (the offset) and G (the table slot) for the 3-tuple: the two
        halves of one keyed hash, two independent 64-bit values, remembered per 3-tuple."""
        three = (local_ip, remote_ip, remote_port)
        found = self._hashes.get(three)
        if found is None:
            digest = hashlib.blake2b(_FLOW.pack(*three), key=self._key, digest_size=16).digest()
            found = (int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big"))
            if len(self._hashes) >= _HASHES_KEPT:
                self._hashes.clear()
            self._hashes[three] = found
        return found

    def _available(self, port: int, remote_ip: int, remote_port: int, now: float) -> bool:
        if port in self._reserved or (port, remote_ip, remote_port) in self._in_use:
            return False
        until = self._cooling.get(port)
        if until is None:
            return True
        if now >= until:
            del self._cooling[port]
            return True
        return False

    def allocate(self, local_ip: int, remote_ip: int, remote_port: int, now: float) -> int:
        """A fresh port for a connection to (remote_ip, remote_port), marked in use."""
        offset, slot = self._f_and_g(local_ip, remote_ip, remote_port)
        index = slot % TABLE_SIZE
        for _ in range(self.size):
            port = self.low + (offset + self._table[index]) % self.size
            self._table[index] += 1
            if self._available(port, remote_ip, remote_port, now):
                self._in_use.add((port, remote_ip, remote_port))
                return port
        raise PortsExhaustedError(
            f"all {self.size} ephemeral ports ({self.low}-{self.high}) are in use or in "
            f"their {self.reuse_delay:g} s reuse delay",
            _errno.EADDRNOTAVAIL,  # what a kernel socket's connect says when it runs out
        )

    def claim(self, port: int, remote_ip: int, remote_port: int) -> None:
        """Mark an explicitly chosen local port in use (a caller's `local_port=`)."""
        if not 1 <= port <= 0xFFFF:
            raise ValueError(f"TCP port out of range: {port}")
        key = (port, remote_ip, remote_port)
        if key in self._in_use or port in self._reserved:
            raise PortInUseError(f"local port {port} is already in use for that remote")
        self._in_use.add(key)

    def release(self, port: int, remote_ip: int, remote_port: int, now: float) -> None:
        """The connection using `port` is gone; the port cools down before reuse."""
        self._in_use.discard((port, remote_ip, remote_port))
        if self.low <= port <= self.high and self.reuse_delay > 0:
            self._cooling[port] = now + self.reuse_delay

    def reserve(self, port: int) -> None:
        """Keep `port` (a listening port) out of the ephemeral pool."""
        self._reserved.add(port)

    def unreserve(self, port: int) -> None:
        self._reserved.discard(port)

    def in_use(self, port: int, remote_ip: int, remote_port: int) -> bool:
        return (port, remote_ip, remote_port) in self._in_use
