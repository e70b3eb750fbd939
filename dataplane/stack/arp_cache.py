"""The neighbour cache: IPv4 next hop -> MAC, with timeouts, retries and a waiting queue.

RFC 826 gives the packet; RFC 1122 section 2.3.2 gives the rules this follows: entries
time out (2.3.2.1, "on the order of a minute"), a request is retransmitted at most about
once a second (2.3.2.1), and while resolution is pending a small queue per next hop holds
the packets to send (2.3.2.2: "SHOULD save at least one ... packet"; the oldest is dropped
when it is full). When every retry went unanswered the waiting packets are dropped and the
failure is returned to the caller, which tells the connections using that next hop.

Sans-IO: time is passed in, requests to send and failures to report come out of `poll`.
"""

from __future__ import annotations

import errno as _errno
from collections import deque
from dataclasses import dataclass, field

from dataplane.stack.tcp_errors import TcpError
from dataplane.wire.addr import int_to_ip


class HostUnreachableError(TcpError):
    """ARP found no one at the next hop: every request went unanswered (EHOSTUNREACH)."""

    default_errno = _errno.EHOSTUNREACH

    def __init__(self, ip: int, arp_requests: int, *, next_hop: int | None = None) -> None:
        self.ip = ip
        self.arp_requests = arp_requests
        self.next_hop = ip if next_hop is None else next_hop
        via = "" if self.next_hop == ip else f" via gateway {int_to_ip(self.next_hop)}"
        super().__init__(
            f"host {int_to_ip(ip)} unreachable{via}: no ARP reply for "
            f"{int_to_ip(self.next_hop)} after {arp_requests} request"
            f"{'' if arp_requests == 1 else 's'}"
        )


@dataclass(frozen=True, slots=True)
class ArpConfig:
    reachable_time: float = 60.0  # how long a learnt MAC is trusted (RFC 1122 2.3.2.1)
    refresh_margin: float = 5.0  # re-ask this long before expiry when the entry is in use
    retry_interval: float = 1.0  # between requests for one address (RFC 1122 2.3.2.1)
    max_requests: int = 3  # requests before declaring the host unreachable
    queue_limit: int = 16  # packets held per unresolved next hop
    max_entries: int = 4096

    def __post_init__(self) -> None:
        if self.reachable_time <= 0 or self.retry_interval <= 0:
            raise ValueError("ARP reachable_time and retry_interval must be positive")
        if self.max_requests < 1 or self.queue_limit < 1 or self.max_entries < 1:
            raise ValueError("ARP max_requests, queue_limit and max_entries must be >= 1")
        if not 0 <= self.refresh_margin < self.reachable_time:
            raise ValueError("ARP refresh_margin must be within reachable_time")


@dataclass(slots=True)
class ArpStats:
    requests_sent: int = 0
    resolved: int = 0  # pending resolutions answered
    learnt: int = 0  # entries created or refreshed
    failures: int = 0  # resolutions given up after max_requests
    expired: int = 0
    queue_dropped: int = 0  # oldest waiting packet dropped because the queue was full
    failed_dropped: int = 0  # waiting packets dropped when resolution failed
    evicted: int = 0  # entries pushed out by max_entries


@dataclass(frozen=True, slots=True)
class ArpFailure:
    """Resolution of `ip` was given up after `requests_sent` unanswered requests."""

    ip: int
    requests_sent: int
    dropped_packets: int

    def error(self, destination: int | None = None) -> HostUnreachableError:
        """The error to give a connection to `destination` routed through this next hop."""
        return HostUnreachableError(
            self.ip if destination is None else destination, self.requests_sent, next_hop=self.ip
        )


@dataclass(slots=True)
class ArpPoll:
    requests: list[int] = field(default_factory=list)  # addresses to send a request for now
    failures: list[ArpFailure] = field(default_factory=list)


@dataclass(slots=True)
class _Entry:
    mac: bytes
    expires_at: float
    refreshing: bool = False
    static: bool = False


@dataclass(slots=True)
class _Pending:
    queue: deque[bytes]
    requests_sent: int = 0
    next_request_at: float = 0.0


class ArpCache:
    """Resolved entries plus pending resolutions, each with its queue of waiting packets."""

    def __init__(self, config: ArpConfig | None = None) -> None:
        self.config = config or ArpConfig()
        self.stats = ArpStats()
        self._entries: dict[int, _Entry] = {}
        self._pending: dict[int, _Pending] = {}
        self._refresh: set[int] = set()
        #: Bumped whenever an entry appears, changes or goes: whoever caches lookups (the
        #: engine's fast-path export) knows to look again.
        self.version = 0
        self._lookup_at: float | None = None  # see lookups_due; None: compute again

    def _changed(self) -> None:
        self.version += 1
        self._lookup_at = None

    def lookups_due(self, now: float) -> bool:
        """An entry reached its refresh margin or its expiry since `lookups_done`: the
        users that cache lookups must look up again (a lookup schedules the refresh)."""
        at = self._lookup_at
        if at is None:
            at = self._lookup_at = self._next_lookup_time(now, after_pass=False)
        return now >= at

    def lookups_done(self, now: float) -> None:
        """Every user just looked its entry up: the next time a lookup would change
        something (an entry nobody looked up stays as it is until someone does)."""
        self._lookup_at = self._next_lookup_time(now, after_pass=True)

    def _next_lookup_time(self, now: float, *, after_pass: bool) -> float:
        best = float("inf")
        margin = self.config.refresh_margin
        for entry in self._entries.values():
            if entry.static:
                continue
            at = entry.expires_at if entry.refreshing else entry.expires_at - margin
            if after_pass and at <= now:
                at = entry.expires_at
                if at <= now:
                    continue
            best = min(best, at)
        return best

    def __contains__(self, ip: int) -> bool:
        return ip in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def is_pending(self, ip: int) -> bool:
        return ip in self._pending

    def waiting(self, ip: int) -> int:
        """How many packets wait for `ip` to resolve."""
        pending = self._pending.get(ip)
        return len(pending.queue) if pending else 0

    def lookup(self, ip: int, now: float) -> bytes | None:
        """The MAC for `ip` if a live entry holds one (and schedule a refresh when it ages)."""
        entry = self._entries.get(ip)
        if entry is None:
            return None
        if entry.static:
            return entry.mac
        if now >= entry.expires_at:
            del self._entries[ip]
            self._refresh.discard(ip)
            self.stats.expired += 1
            self._changed()
            return None
        if not entry.refreshing and now >= entry.expires_at - self.config.refresh_margin:
            entry.refreshing = True  # still used: re-ask before it expires, keep sending
            self._refresh.add(ip)
            self._lookup_at = None
        return entry.mac

    def enqueue(self, ip: int, packet: bytes, now: float) -> None:
        """Hold `packet` until `ip` resolves, starting resolution if it is not under way."""
        pending = self._pending.get(ip)
        if pending is None:
            pending = _Pending(deque(), next_request_at=now)
            self._pending[ip] = pending
        if len(pending.queue) >= self.config.queue_limit:
            pending.queue.popleft()
            self.stats.queue_dropped += 1
        pending.queue.append(packet)

    def learn(self, ip: int, mac: bytes, now: float, *, create: bool = True) -> list[bytes]:
        """Record ip -> mac; returns the packets that were waiting for it, oldest first.

        `create=False` only updates an entry we already have (RFC 826 "merge_flag"): an ARP
        packet not addressed to us refreshes what we know but adds nothing new.
        """
        pending = self._pending.pop(ip, None)
        existing = self._entries.get(ip)
        if existing is not None and existing.static:
            return list(pending.queue) if pending else []  # what an operator set, stays
        if not create and pending is None and existing is None:
            return []
        if ip not in self._entries and len(self._entries) >= self.config.max_entries:
            dynamic = [key for key, entry in self._entries.items() if not entry.static]
            if dynamic:
                oldest = min(dynamic, key=lambda key: self._entries[key].expires_at)
                del self._entries[oldest]
                self._refresh.discard(oldest)
                self.stats.evicted += 1
        self._entries[ip] = _Entry(mac, now + self.config.reachable_time)
        self._changed()
        self._refresh.discard(ip)
        self.stats.learnt += 1
        if pending is None:
            return []
        self.stats.resolved += 1
        return list(pending.queue)

    def add_static(self, ip: int, mac: bytes) -> list[bytes]:
        """A permanent entry (`arp -s`): never expires, never overwritten by ARP packets."""
        if len(mac) != 6:
            raise ValueError(f"a MAC address is 6 bytes, got {len(mac)}")
        pending = self._pending.pop(ip, None)
        self._entries[ip] = _Entry(mac, float("inf"), static=True)
        self._refresh.discard(ip)
        self._changed()
        return list(pending.queue) if pending else []

    def forget(self, ip: int) -> None:
        self._entries.pop(ip, None)
        self._refresh.discard(ip)
        self._changed()

    @property
    def busy(self) -> bool:
        """Resolutions or refreshes are under way (else `poll` has nothing to do)."""
        return bool(self._pending or self._refresh)

    def poll(self, now: float) -> ArpPoll:
        """Requests due now (first tries, retries, refreshes) and resolutions given up."""
        result = ArpPoll()
        for ip in [ip for ip, pending in self._pending.items() if pending.next_request_at <= now]:
            pending = self._pending[ip]
            if pending.requests_sent >= self.config.max_requests:
                del self._pending[ip]
                self.stats.failures += 1
                self.stats.failed_dropped += len(pending.queue)
                result.failures.append(ArpFailure(ip, pending.requests_sent, len(pending.queue)))
                continue
            pending.requests_sent += 1
            pending.next_request_at = now + self.config.retry_interval
            result.requests.append(ip)
        if self._refresh:
            result.requests.extend(sorted(self._refresh - self._pending.keys()))
            self._refresh.clear()
        self.stats.requests_sent += len(result.requests)
        return result

    def poll_at(self) -> float | None:
        """When `poll` has something to do next (a retry or a give-up), None when idle."""
        if self._refresh:
            return 0.0
        if not self._pending:
            return None
        return min(pending.next_request_at for pending in self._pending.values())
