"""Core NATS publishing from C: the ring's writer sends the NATS sink's PUBs itself.

Without it a record reaches NATS through the sink thread's wake-up, a Python read of the ring
and nats-py's flusher task. With it the thread that writes the record (the engine's C feed,
the hub's publisher) sends `PUB <subject>  <len>\\r\\n<payload>\\r\\n` on the sink's NATS
connection right after the write (dataplane/shim/sink.c, the stream sink's machinery), and
the sink's thread is off the path. C sends once per burst of the writer, not per record:
the PUBs of an engine poll's feeds (or of one ring write call) wait in the slot's buffer
and leave in one send when the burst ends, after the ring writer's lock (sink.c,
`wsgw_sink_burst_end`). Plain (core) publishing only: JetStream's acked publishing,
headers (HPUB) and TLS stay on nats-py (NatsSink decides: `c_path_usable`). Off by
default (`WSGW_NATS_C=1` or `NatsConfig(c_path=True)` turn it on): faster at 100 and 1k
msg/s, not reliably at 10k on the shared 2-vCPU machine (docs/PERFORMANCE.md).

Why a connection of its own, not nats-py's socket: nats-py writes from its flusher task at
any time (PING, its pending buffer), so C could only write on that socket with nats-py
paused around every write. This connection is the sink's only one: nothing else writes on
it. Python speaks the little of the protocol it needs
(https://docs.nats.io/reference/reference-protocols/nats-protocol: INFO, CONNECT, PING/PONG,
-ERR) and takes the socket back from C (disarm) before it writes anything itself: a PONG, a
record C stopped at ($gap, a topic whose subject C does not know yet, EAGAIN, a partial
send), or what was read while disconnected. Every message goes on one connection, so a
subscriber gets them in ring order whoever wrote them.

The hand-over is the stream sink's (gateway.hub.sink): armed at S only when Python has
written every record before S and the ring holds nothing from S on; C disarms itself and
keeps where it stopped. While armed the sink's follower still reads the ring (to know
where it is), and drops what C has sent.

Losses: what C or Python had written into the socket when the server went away (as with
nats-py: its writes into a dead connection are lost too). While disconnected, the records
are kept (up to `buffer_messages`, then counted as `disconnected`) and published on the new
connection, as nats-py's reconnect buffer does (`pending_bytes`); what went over the bound
is owed to each session's subscribers as a `$gap` (reason `nats_sink_dropped`), as the
Python path owes what nats-py's buffer refused, written first on the new connection. Before
the first connection records are dropped (`not_connected`) and owed the same way, and a
skip is kept to be told on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import orjson

from dataplane.ring import Gap, RingEvent
from gateway.hub.sink import (
    BUSY,
    REASONS,
    ST_ARMED,
    ST_MESSAGES,
    ST_NEXT_SEQ,
    ST_REASON,
    SinkSocket,
    StreamSink,
)

if TYPE_CHECKING:
    from gateway.hub.nats import NatsConfig, NatsStats

log = logging.getLogger("wsgw.hub.nats")

#: Whether the plain NATS sink publishes from C: off unless WSGW_NATS_C=1, as at 10k msg/s
#: it did not beat nats-py in every run, even sending once per burst (docs/PERFORMANCE.md).
C_PATH_DEFAULT = os.environ.get("WSGW_NATS_C", "0") == "1"
#: While armed with records read that C may not have sent yet: look again this soon.
RECHECK_S = 0.002
#: More C sends than this within a millisecond hand the connection back to the sink's
#: thread for BUSY_HOLD_S (at 10k msg/s one send per record in the engine's thread, with
#: nats-server's loopback receive work in it, cost more than the thread's batched writes:
#: docs/PERFORMANCE.md).
BUSY_SENDS = 4
BUSY_HOLD_S = 0.2
#: A server line longer than this is a broken connection.
MAX_LINE = 1 << 16


def c_path_usable(config: NatsConfig) -> bool:
    """Plain publishing without headers to nats:// servers: what C sends."""
    return (
        config.c_path
        and config.jetstream is None
        and not config.headers
        and all(urlsplit(u).scheme in ("nats", "") for u in config.servers)
    )


def pub(subject: str, payload: bytes) -> bytes:
    """The bytes of a publish without reply: nats-py's `PUB <subject>  <len>` (and C's)."""
    return b"PUB %s  %d\r\n%s\r\n" % (subject.encode(), len(payload), payload)


class ProtocolError(ConnectionError):
    """The server said -ERR, or something this client does not speak."""


class CNatsConnection:
    """The NATS sink's connection when C publishes (the sink's loop and thread)."""

    def __init__(
        self,
        config: NatsConfig,
        stats: NatsStats,
        subject_of: Callable[[int, int, str], str],
        gap_message: Callable[[int, int, bytes], tuple[str, bytes]],
        stopping: Callable[[], bool],
        on_connected: Callable[[], None],
        behind: Callable[[Gap, int], list[tuple[int, str, bytes]]],
        dropped: Callable[[int, int, int], tuple[str, bytes]] | None = None,
    ) -> None:
        self.config = config
        self.stats = stats
        self.sink: StreamSink | None = None  # attach: the hub's ring is followed
        self._subject_of = subject_of
        self._gap_message = gap_message
        self._gap_tid = -1
        self._wake_fd = -1
        self._stopping = stopping
        self._on_connected = on_connected
        self._behind = behind
        #: (session, first ring seq, count) -> a `$gap` record's subject and body.
        self._dropped = dropped
        self.owed: dict[int, tuple[int, int]] = {}  # session -> (first seq, count) dropped
        self.skipped = 0  # records the follower skipped (buffer_full) that C had not sent
        self.sock: socket.socket | None = None
        self.slot: SinkSocket | None = None
        self.armed = False
        self.backlog: list[RingEvent] = []
        self.next_seq = 0  # one past the last record read from the ring (0: none yet)
        self.c_messages = 0  # sent by C on earlier connections
        self.python_messages = 0
        self.disarms: dict[str, int] = {}
        self.hold_until = 0.0  # C handed back as busy: Python publishes until then
        self.sent_below = 0  # C sent every record before this: never Python's, even read later
        self._write = asyncio.Lock()
        self._pong = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def attach(self, sink: StreamSink, gap_tid: int, wake_fd: int = -1) -> None:
        """The C sink of the ring the NATS sink follows (before the first record); wake_fd:
        the follower's eventfd, which C writes when it stops (the follower parks meanwhile)."""
        self._gap_tid = gap_tid
        self.sink = sink
        self._wake_fd = wake_fd

    @property
    def c_published(self) -> int:
        slot = self.slot
        return self.c_messages + (0 if slot is None else slot.state()[ST_MESSAGES])

    # ---- connection ----------------------------------------------------------------------
    async def connect(self) -> None:
        """Connect to the first server that answers, again after reconnect_wait_s, until
        connected or stopping."""
        cfg = self.config
        failures = 0
        while not self._stopping():
            for url in cfg.servers:
                try:
                    await self._open(url)
                except (OSError, ProtocolError, ValueError, TimeoutError) as exc:
                    failures += 1
                    self.stats.errors += 1
                    self.stats.last_error = f"{type(exc).__name__}: {exc}"
                    if failures in (1, 10) or failures % 100 == 0:
                        log.warning("NATS (C) connect to %s failed: %s", url, exc)
                    continue
                first = self.stats.connects == 0 and self.stats.reconnects == 0
                if first:
                    self.stats.connects += 1
                else:
                    self.stats.reconnects += 1
                self.stats.connected = True
                log.info("NATS (C) connected to %s", url)
                self._on_connected()  # publish what waited
                return
            await asyncio.sleep(cfg.reconnect_wait_s)

    async def _open(self, url: str) -> None:
        cfg = self.config
        parts = urlsplit(url if "://" in url else f"nats://{url}")
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
        loop = asyncio.get_running_loop()
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, kind, proto, _, addr = infos[0]
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            async with asyncio.timeout(cfg.connect_timeout_s):
                await loop.sock_connect(sock, addr)
                buf = bytearray()
                line = await _line(loop, sock, buf)
                if not line.startswith(b"INFO "):
                    raise ProtocolError(f"expected INFO, got {line[:80]!r}")
                info = orjson.loads(line[5:])
                options: dict[str, object] = {
                    "verbose": False,
                    "pedantic": False,
                    "lang": "python3",
                    "version": "wsgw-c",
                    "protocol": 1,
                    "headers": bool(info.get("headers")),
                    "no_responders": bool(info.get("headers")),
                    "name": cfg.name,
                }
                user, password = cfg.user or parts.username, cfg.password or parts.password
                if user:
                    options["user"], options["pass"] = user, password or ""
                if cfg.token:
                    options["auth_token"] = cfg.token
                await loop.sock_sendall(sock, b"CONNECT " + orjson.dumps(options) + b"\r\nPING\r\n")
                while (line := await _line(loop, sock, buf)) != b"PONG":
                    if line.startswith(b"-ERR"):
                        raise ProtocolError(line.decode(errors="replace"))
        except BaseException:
            sock.close()
            raise
        self.sock = sock
        self._reader = asyncio.create_task(self._read(sock, buf))

    async def _read(self, sock: socket.socket, buf: bytearray) -> None:
        """The server's lines: PING is answered (the socket taken back from C first)."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                line = await _line(loop, sock, buf)
                if line == b"PING":
                    async with self._write:
                        await self._take_back()
                        await loop.sock_sendall(sock, b"PONG\r\n")
                    self._on_connected()  # arm again
                elif line == b"PONG":
                    self._pong.set()
                elif line.startswith(b"-ERR"):
                    self.stats.errors += 1
                    self.stats.last_error = line.decode(errors="replace")
                    log.warning("NATS (C): %s", self.stats.last_error)
        except asyncio.CancelledError:
            raise
        except (OSError, ProtocolError) as exc:
            self.stats.last_error = f"{type(exc).__name__}: {exc}"
        if self.sock is sock:
            await self._lost()

    async def _lost(self) -> None:
        """The connection is gone: take what C did not send back, reconnect."""
        async with self._write:
            self._drop_connection()
        self.stats.disconnects += 1
        self.stats.connected = False
        if not self._stopping():
            log.warning("NATS (C) disconnected; reconnecting")
            task = asyncio.get_running_loop().create_task(self.connect())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _drop_connection(self) -> None:
        slot, sock = self.slot, self.sock
        self.slot = self.sock = None
        if slot is not None:
            state = slot.disarm()
            self.c_messages += state[ST_MESSAGES]
            if self.armed:
                self._resume(state[ST_NEXT_SEQ])  # a rest is lost with the connection
            self.armed = False
            slot.remove()
        if sock is not None:
            sock.close()

    async def close(self) -> None:
        """Take the socket back, flush (PING, wait for PONG), close."""
        for task in list(self._tasks):
            task.cancel()
        reader, self._reader = self._reader, None
        slot, sock = self.slot, self.sock
        if sock is not None:
            loop = asyncio.get_running_loop()
            with contextlib.suppress(OSError, TimeoutError):
                async with self._write:
                    await self._take_back()
                    await self._write_backlog(slot, sock)
                    self._pong.clear()
                    await loop.sock_sendall(sock, b"PING\r\n")
                async with asyncio.timeout(2.0):
                    await self._pong.wait()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reader
        self._drop_connection()
        self.stats.connected = False

    # ---- hand-over ----------------------------------------------------------------------
    def _resume(self, seq: int) -> None:
        """Python publishes from seq on: forget what C sent before it, also what the
        follower has not handed over yet (it may be behind C)."""
        self.sent_below = max(self.sent_below, seq)
        self.backlog = [e for e in self.backlog if type(e) is Gap or e[0] >= seq]

    async def _take_back(self) -> None:
        """Disarm (under the write lock): the rest of a PUB C sent in part goes first."""
        slot, sock = self.slot, self.sock
        if not self.armed or slot is None or sock is None:
            return
        self.armed = False
        state = slot.disarm()
        rest = slot.take_rest(state)
        if rest:
            await asyncio.get_running_loop().sock_sendall(sock, rest)
        self._resume(state[ST_NEXT_SEQ])

    async def publish(self, events: list[RingEvent]) -> bool:
        """Hand the records read from the ring over: C's (dropped) or Python's (written).
        True when the sink is armed at the ring's end (or waits for a connection)."""
        for event in events:
            if type(event) is Gap:
                self.next_seq = event.first_seq + event.lost
            else:
                self.next_seq = event[0] + 1
        if self.sock is None:
            if not self.stats.connects:  # never connected: dropped, as nats-py's sink does
                for event in events:
                    if type(event) is Gap:  # a skip: told on the first connection
                        self.backlog.append(event)
                    else:
                        self.stats.dropped_not_connected += 1
                        self._owe(event[0], event[1])
                return True
            self.backlog += events
            self._bound_backlog()
            return True
        self.backlog += events
        async with self._write:
            try:
                return await self._publish()
            except OSError as exc:  # the reader sees the connection go as well
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                return True

    async def _publish(self) -> bool:
        sock = self.sock
        if sock is None:
            return True
        if self.slot is None and self.sink is not None:
            self.slot = self.sink.add_nats(sock.fileno(), self.config.c_busy_sends)
            if self._wake_fd >= 0:
                self.slot.wake_on_stop(self._wake_fd)
        slot = self.slot
        if slot is None:  # no C sink: Python publishes all
            await self._write_backlog(None, sock)
            return True
        if self.armed:
            state = slot.state()
            if state[ST_ARMED]:
                self._resume(state[ST_NEXT_SEQ])
                if self.backlog:  # read before C got to them: look again soon
                    asyncio.get_running_loop().call_later(RECHECK_S, self._on_connected)
                return True
            reason = REASONS[state[ST_REASON]]
            self.disarms[reason] = self.disarms.get(reason, 0) + 1
            if state[ST_REASON] == BUSY:
                self.hold_until = time.monotonic() + BUSY_HOLD_S
            await self._take_back()
        await self._write_backlog(slot, sock)
        if time.monotonic() < self.hold_until or self.next_seq == 0:
            return True  # the sink's thread publishes for now (or nothing read to arm at)
        if slot.arm(self.next_seq):
            self.armed = True
            return True
        return False  # the ring holds more: read it first

    async def _write_backlog(self, slot: SinkSocket | None, sock: socket.socket) -> None:
        out = bytearray()
        sent = 0
        gap_tid = self._gap_tid
        owed, self.owed = self.owed, {}
        if self._dropped is not None:
            for sid, (first, count) in sorted(owed.items()):
                subject, data = self._dropped(sid, first, count)
                out += pub(subject, data)
                self.stats.gaps += 1
        for event in self.backlog:
            if type(event) is Gap:  # the follower skipped: lost only what C had not sent
                lost = event.first_seq + event.lost - max(event.first_seq, self.sent_below)
                if lost > 0:
                    self.skipped += lost
                    for _, subject, data in self._behind(event, lost):
                        out += pub(subject, data)
                        self.stats.gaps += 1
                        self.stats.behind_gaps += 1
                continue
            seq, sid, name, _ts, payload, tid = event  # type: ignore[misc]
            if seq < self.sent_below:
                continue  # C's
            if tid == gap_tid:
                subject, data = self._gap_message(sid, seq, bytes(payload))
                out += pub(subject, data)
                self.stats.gaps += 1
                continue
            subject = self._subject_of(sid, tid, name)
            if slot is not None:
                slot.subject(tid, subject.encode())
            out += pub(subject, bytes(payload))
            sent += 1
        self.backlog = []
        if out:
            await asyncio.get_running_loop().sock_sendall(sock, out)
        self.python_messages += sent

    def _bound_backlog(self) -> None:
        """While disconnected: keep the newest buffer_messages records."""
        over = len(self.backlog) - self.config.buffer_messages
        if over > 0:
            dropped = self.backlog[:over]
            skips: list[RingEvent] = [e for e in dropped if type(e) is Gap]  # still to be told
            self.backlog = skips + self.backlog[over:]
            for event in dropped:
                if type(event) is not Gap:
                    self.stats.dropped_disconnected += 1
                    self._owe(event[0], event[1])

    def _owe(self, seq: int, sid: int) -> None:
        """A record of session sid dropped: owed to its readers as a `$gap`, merged."""
        first, count = self.owed.get(sid, (seq, 0))
        self.owed[sid] = (min(first, seq), count + 1)


async def _line(loop: asyncio.AbstractEventLoop, sock: socket.socket, buf: bytearray) -> bytes:
    """The next CRLF-ended line from sock (buf keeps what follows it)."""
    while True:
        end = buf.find(b"\r\n")
        if end >= 0:
            line = bytes(buf[:end])
            del buf[: end + 2]
            return line
        if len(buf) > MAX_LINE:
            raise ProtocolError("line too long")
        data = await loop.sock_recv(sock, 65536)
        if not data:
            raise ConnectionResetError("NATS server closed the connection")
        buf += data
