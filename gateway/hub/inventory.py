"""Every consumer of a hub, for the operator: the /v1/stream consumers, the NATS sink and
the shared-memory ring's readers (GET /v1/consumers).

What the ring tells of its readers: every reader that can write the ring's wait page takes a
slot in the ring's reader table (wsgw_ring.h) and keeps its position, heartbeat, gaps and
losses there, so each one, in any process, is listed with its lag (the writer's last sequence
minus the last one it read) and can be closed (`close_ring_reader`). Also known: the header's
`waiters` (readers asleep on the futex now), the readers in this process with what they are
for (each consumer loop's follower, the NATS sink's), and the processes that map the ring's
file without a slot (/proc/PID/maps: a read-only reader, a reader beyond the table's
MAX_READERS, or a tool that looks at it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from dataplane.ring import MAX_READERS, RingWriter
from gateway.hub.consumer import Consumer
from gateway.hub.core import Hub


@dataclass(frozen=True)
class StreamConsumerInfo:
    """One open /v1/stream consumer."""

    id: int
    name: str
    session_id: int
    topics: list[str] | None  # None: every topic of the session
    queue_size: int
    overflow: str
    conflation_ms: int
    lag: int  # messages queued for it now
    dropped: int  # dropped by drop_oldest since it opened
    opened_at: float  # Unix time


@dataclass(frozen=True)
class FollowerInfo:
    """A ring reader in this process: a consumer loop's follower, or the NATS sink's."""

    kind: str  # "stream" (a consumer loop) or "nats"
    next_seq: int | None
    lag: int
    dropped: int


@dataclass(frozen=True)
class RingProcess:
    """Another process that maps the ring's file."""

    pid: int
    command: str


@dataclass(frozen=True)
class RingReaderInfo:
    """A reader in the ring's reader table (any process)."""

    slot: int
    pid: int
    name: str  # what the reader calls itself (reader_name), else its process's name
    command: str  # its command line, when /proc shows it ("" otherwise)
    in_gateway: bool  # the gateway's own (a stream loop's follower, the NATS sink's)
    next_seq: int
    lag: int  # messages written that it has not read yet
    messages: int
    gaps: int  # times it was lapped
    dropped: int  # messages lost in those gaps
    attached_at: float  # Unix time
    heartbeat_at: float  # its last read or wait, Unix time
    closing: bool  # the operator closed it; it stops at its next read or wait


@dataclass(frozen=True)
class RingInventory:
    path: str | None  # None: a private memfd ring (no other process can attach)
    capacity_bytes: int
    last_seq: int
    oldest_seq: int
    waiters: int  # readers asleep on the ring's futex now (any process)
    writer_pid: int
    followers: list[FollowerInfo]
    readers: list[RingReaderInfo]
    max_readers: int
    processes: list[RingProcess]  # mapping the file without a slot in the reader table


@dataclass(frozen=True)
class NatsInventory:
    servers: list[str]
    connected: bool
    published: int
    pending: int
    dropped: dict[str, int]
    jetstream_ready: bool
    last_error: str | None


def stream_consumer(consumer: Consumer) -> StreamConsumerInfo:
    options = consumer.options
    return StreamConsumerInfo(
        id=consumer.id,
        name=consumer.name,
        session_id=consumer.session_id,
        topics=None if consumer.topics is None else sorted(consumer.topics),
        queue_size=options.queue_size,
        overflow=options.overflow,
        conflation_ms=options.conflation_ms,
        lag=consumer.lag,
        dropped=consumer.dropped,
        opened_at=consumer.opened_at,
    )


def stream_consumers(hub: Hub) -> list[StreamConsumerInfo]:
    """The open streams, oldest first."""
    return [stream_consumer(c) for c in sorted(hub.consumers(), key=lambda c: c.id)]


def find_consumer(hub: Hub, consumer_id: int) -> Consumer | None:
    return next((c for c in hub.consumers() if c.id == consumer_id and not c.closed), None)


def nats_inventory(hub: Hub) -> NatsInventory | None:
    sink = hub.nats
    stats = getattr(sink, "stats", None)
    config = getattr(sink, "config", None)
    if sink is None or stats is None or config is None:
        return None
    return NatsInventory(
        servers=list(config.servers),
        connected=stats.connected,
        published=stats.published,
        pending=int(getattr(sink, "pending", 0)),
        dropped=dict(getattr(sink, "dropped", {})),
        jetstream_ready=stats.jetstream_ready,
        last_error=stats.last_error,
    )


def ring_inventory(hub: Hub, proc: Path = Path("/proc")) -> RingInventory | None:
    """The ring's header figures and its readers (None: the hub has no ring). Blocking: it
    reads /proc."""
    ring = hub.ring
    if ring is None or ring.closed:
        return None
    info = ring.info()
    followers = [FollowerInfo("stream", f.next_seq, f.pending, f.dropped) for f in hub.followers()]
    sink = hub.nats
    if sink is not None and hasattr(sink, "pending"):
        dropped = getattr(sink, "dropped", {})
        pending = int(getattr(sink, "pending", 0))
        followers.append(FollowerInfo("nats", None, pending, int(dropped.get("buffer_full", 0))))
    path = None if ring.path is None else str(ring.path)
    readers = ring_readers(ring, info.last_seq, proc)
    listed = {r.pid for r in readers}
    mapping = [] if path is None else processes_mapping(path, proc)
    return RingInventory(
        path=path,
        capacity_bytes=info.capacity,
        last_seq=info.last_seq,
        oldest_seq=info.oldest_seq,
        waiters=info.waiters,
        writer_pid=info.writer_pid,
        followers=followers,
        readers=readers,
        max_readers=MAX_READERS,
        processes=[p for p in mapping if p.pid not in listed],
    )


def ring_readers(
    ring: RingWriter, last_seq: int, proc: Path = Path("/proc")
) -> list[RingReaderInfo]:
    """The ring's reader table, lowest slot first, with each reader's lag against last_seq."""
    own = os.getpid()
    return [
        RingReaderInfo(
            slot=r.slot,
            pid=r.pid,
            name=r.name,
            command=_command(proc, r.pid),
            in_gateway=r.pid == own,
            next_seq=r.next_seq,
            lag=r.lag(last_seq),
            messages=r.messages,
            gaps=r.gaps,
            dropped=r.lost,
            attached_at=r.attached_ns / 1e9,
            heartbeat_at=r.heartbeat_ns / 1e9,
            closing=r.close_requested,
        )
        for r in ring.readers()
    ]


def close_ring_reader(hub: Hub, slot: int, pid: int) -> bool:
    """Close the ring reader in `slot` if its pid is still `pid` (its next read or wait fails:
    the SDK raises RingEvictedError). False: no such reader, or one of the gateway's own
    (close its stream instead: a follower's loop would only see an error)."""
    ring = hub.ring
    if ring is None or ring.closed or pid == os.getpid():
        return False
    return ring.close_reader(slot, pid)


def _command(proc: Path, pid: int) -> str:
    try:
        raw = (proc / str(pid) / "cmdline").read_bytes()
    except OSError:  # gone, or another pid namespace's
        return ""
    return raw.replace(b"\0", b" ").strip().decode(errors="replace")[:200]


def processes_mapping(path: str, proc: Path = Path("/proc")) -> list[RingProcess]:
    """Processes other than this one that map `path` (by /proc/PID/maps), by pid."""
    needle = path.encode()
    found: list[RingProcess] = []
    own = os.getpid()
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == own:
            continue
        try:
            maps = (entry / "maps").read_bytes()
            if needle not in maps:
                continue
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").strip()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        found.append(RingProcess(int(entry.name), command.decode(errors="replace")[:200]))
    return sorted(found, key=lambda p: p.pid)
