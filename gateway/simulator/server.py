"""The feed simulator: a WebSocket server speaking every dialect for synthetic symbols.

One server serves all dialects; the first path segment picks one (`/okx/ws/v5/public`),
and a path without a dialect name gets the configured default, so a client can also use
an exchange's own path (`/stream?streams=...`). Each (dialect, topic) has one publisher
with its own sequence; a message is rendered once and written to every subscriber.

Feed groups, for redundant (A/B) feeds: the query parameters `group=NAME` and `leg=NAME`
(taken out before the dialect sees the URL) put a connection in a group, by default the
group `default`, under a leg name, by default its ordinal in the group ("1", "2", ...).
Each group has its own publishers, so every connection of a group that subscribes a topic
gets the same messages, byte for byte (same exchange ids, same `sim_ts` send stamp), in
the same order; a connection that joins (or comes back) gets the stream from that point
on. Faults can target one leg (`leg:A`, `leg:GROUP/A`) while the others keep streaming.

The pump wakes at the next message due, at most once a `pump_tick` (1 ms), and emits every
message due then. While a connection is writable its messages are framed here (a text
frame: header + message) onto its `out`, written to the transport every `ROUND_WRITE`
bytes and at the end of the round: one write for many messages, each stamped (`sim_ts`) when
rendered. Writes made outside the pump (replies, emits) go out at the end of the request or
in a callback soon after; a fault that fires writes what came before it first. When the
connection is not writable (flow control, a stall, a delay), messages queue in its backlog
and its writer task drains them in order, 64 KiB a write. A connection whose backlog passes
`max_backlog` is a slow consumer and is dropped, as exchanges do.

Control: `command({...})` (the library API), the same commands as JSON lines on stdin (the
CLI), HTTP GET on the WebSocket port (`/_sim/stats`, `/_sim/command?cmd=fault&kind=drop`),
and in-band: subscribing to a topic `_sim:<fault>[,k=v...]` arms that fault on the
subscribing connection.

Books (gateway/simulator/books.py): each book topic's publisher keeps one evolving book;
its messages are that book's updates in the venue's format, a connection that subscribes
gets a snapshot in place of its first one where the venue sends one over the WebSocket
(Kraken, OKX `books`, Bybit, Coinbase), and the same port answers the venues' REST book
snapshots (Binance GET /api/v3/depth and /fapi/v1/depth, Bitstamp /api/v2/order_book/
{pair}/, optionally behind /<dialect>): see Simulator.rest_snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import random
import re
import socket
import struct
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from gateway.simulator.books import SimBook
from gateway.simulator.faults import (
    SIMULATOR_KINDS,
    Fault,
    FaultError,
    frame_header,
    malformed_frame,
    oversized_message,
    unknown_opcode_frame,
)
from gateway.simulator.feeds import FEEDS, SIM_PREFIX, Feed, Reply
from gateway.simulator.tls import TlsFiles, ensure_certs

log = logging.getLogger("wsgw.simulator")
_CHECKSUM = re.compile(rb'"checksum":(-?\d+)')
#: An `unavailable` fault's answer (Binance's words for a 503).
_UNAVAILABLE = b'{"code":-1008,"msg":"Service unavailable."}'

_SHORT_TEXT = tuple(frame_header(0x1, size) for size in range(126))
_medium_text = struct.Struct("!BBH").pack


def text_frame_header(size: int) -> bytes:
    """The header of a server's (unmasked) text frame of size bytes, RFC 6455 section 5.2:
    faults.frame_header's, made or packed faster."""
    if size < 126:
        return _SHORT_TEXT[size]
    if size < 1 << 16:
        return _medium_text(0x81, 126, size)
    return frame_header(0x1, size)


#: The backlog's drain writes this many bytes at a time, then looks at flow control.
DRAIN_CHUNK = 64 * 1024
#: A pump round writes a connection's messages when they reach this many bytes, and at the
#: round's end: a message's send stamp waits for the rendering of at most this much after
#: it (at 100k msg/s a round is ~22 KB of Binance trades: p50 receipt - send 2-3.6 ms
#: unsplit, ~120 us at 4 KiB, for ~4 % more CPU).
ROUND_WRITE = 4096

DIALECTS = tuple(FEEDS)
DEFAULT_GROUP = "default"
#: Query parameters that the simulator reads and strips before the dialect sees the URL.
GROUP_PARAM = "group"
LEG_PARAM = "leg"


@dataclass
class SimConfig:
    """Everything the simulator can be told at start (most of it changes at run time too)."""

    host: str = "127.0.0.1"
    port: int = 0
    dialect: str = "binance"  # for paths that do not start with a dialect name
    rate: float = 10.0  # data messages per second per topic (0: only bursts and emits)
    total_rate: float | None = None  # cap over all topics, shared evenly
    burst_size: int = 0  # extra messages per topic every burst_interval seconds
    burst_interval: float = 0.0
    ping_interval: float | None = 20.0  # server WebSocket pings (Binance: 20 s)
    ping_timeout: float | None = 20.0
    heartbeat_interval: float = 1.0  # application heartbeats (Kraken, Coinbase channel)
    tls: bool = False
    cert_dir: Path | None = None
    symbols: tuple[str, ...] | None = None  # None: any symbol is served
    faults: tuple[Fault, ...] = ()  # armed on every new connection
    enforce_limits: bool = False  # close connections that break the exchange's limits
    max_backlog: int = 100_000  # messages held for a connection before it is dropped
    max_message_size: int = 1 << 20  # incoming
    #: The pump's shortest sleep (s): messages due within it go out together, one write
    #: per connection (event loop timers have a resolution of 1 ms: a shorter sleep spins).
    pump_tick: float = 0.001

    def __post_init__(self) -> None:
        if self.dialect not in FEEDS:
            raise ValueError(f"unknown dialect {self.dialect!r}; known: {', '.join(FEEDS)}")
        if self.rate < 0 or (self.total_rate is not None and self.total_rate < 0):
            raise ValueError("rates must not be negative")
        if self.pump_tick <= 0:
            raise ValueError("pump_tick must be positive")


@dataclass
class Counters:
    connections_total: int = 0
    connections_open: int = 0
    data_messages: int = 0  # written to connections (a message to 3 subscribers counts 3)
    skipped_messages: int = 0  # not sent to one connection by a skip fault
    control_messages: int = 0
    slow_consumers: int = 0
    faults_fired: Counter[str] = field(default_factory=Counter)


class _Armed:
    __slots__ = ("fault", "left")

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.left = fault.after


class FeedGroup:
    """Connections that see one stream: the group's publishers render each message once
    and write that same message to every subscribed connection of the group."""

    __slots__ = ("name", "opened", "publishers")

    def __init__(self, name: str) -> None:
        self.name = name
        self.publishers: dict[tuple[str, str], TopicPublisher] = {}
        self.opened = 0  # connections so far: the next one's default leg name

    def publisher(self, feed: Feed, topic: str) -> TopicPublisher:
        key = (feed.name, topic)
        found = self.publishers.get(key)
        if found is None:
            found = self.publishers[key] = TopicPublisher(feed, topic, self.name)
        return found


class SimConnection:
    """One client connection: its dialect, group and leg, topics, armed faults and output
    queue."""

    def __init__(
        self,
        sim: Simulator,
        ws: ServerConnection,
        feed: Feed,
        conn_id: int,
        group: FeedGroup | None = None,
        leg: str | None = None,
    ) -> None:
        self.sim = sim
        self.ws = ws
        self.feed = feed
        self.id = conn_id
        self.dialect = feed.name
        self.group = group or FeedGroup(DEFAULT_GROUP)
        self.leg = leg or str(conn_id)
        self.topics: set[str] = set()
        self.armed: list[_Armed] = []
        self.data_sent = 0
        self.data_skipped = 0
        self.control_sent = 0
        self.backlog: deque[tuple[bytes, bool, float]] = deque()  # message, data?, due
        self.stalled_until = 0.0
        self.delay = 0.0  # seconds every message is held (a delay fault)
        self.skip_next = 0
        self.skip_fraction = 0.0
        self.skip_seqs: set[int] = set()
        self.bad_checksums = 0  # book messages left to send with a wrong checksum
        self.no_snapshots = 0  # book subscribes left to answer without a snapshot
        self.reorder_next = 0  # data messages left to send after the one that follows
        self.held: bytes | None = None  # the reordered message, sent after the next one
        #: Book topics whose next message is a snapshot (just subscribed).
        self.snapshot_due: set[str] = set()
        self._random = random.Random(conn_id)  # skip:fraction, reproducible per connection
        self.closed = False
        self.incoming: deque[float] = deque()
        #: Frames made since the last flush, written to the transport in one write.
        self.out: list[bytes] = []
        self.out_size = 0  # bytes of the messages in `out`
        #: No extension (the server offers none): a text frame is its header and the
        #: message, made here; else websockets frames it.
        self._raw_frames = not ws.protocol.extensions
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._writer = self._loop.create_task(self._drain())

    # ---- output --------------------------------------------------------------------------
    def send_data(self, message: bytes, seq: int = 0) -> None:
        """One data message (`seq`: its number on its topic, for skip:seq)."""
        if self.closed:
            return
        if (self.skip_next or self.skip_fraction or self.skip_seqs) and self._skips(seq):
            return
        if self.bad_checksums and b'"checksum":' in message:
            self.bad_checksums -= 1
            message = _CHECKSUM.sub(lambda m: b'"checksum":%d' % (int(m[1]) ^ 1), message, 1)
        if self.reorder_next and self.held is None:
            self.reorder_next -= 1
            self.held = message
            return
        self._send(message, True)
        if self.held is not None:
            held, self.held = self.held, None
            self._send(held, True)

    def send_control(self, text: str | bytes) -> None:
        if self.closed:
            return
        self._send(text.encode() if isinstance(text, str) else text, False)

    def _send(self, message: bytes, data: bool) -> None:
        """Now, or after what is held back (a backlog, a stall, a delay, a full socket)."""
        if self.backlog or self.stalled_until or self.delay or self.ws.paused:
            self._hold(message, data)
        else:
            self._write(message, data)

    def _skips(self, seq: int) -> bool:
        if seq in self.skip_seqs:
            pass
        elif self.skip_next > 0:
            self.skip_next -= 1
        elif not (self.skip_fraction and self._random.random() < self.skip_fraction):
            return False
        self.data_skipped += 1
        self.sim.counters.skipped_messages += 1
        return True

    def _hold(self, message: bytes, data: bool) -> None:
        due = self._loop.time() + self.delay if self.delay else 0.0
        self.backlog.append((message, data, due))
        self._wake.set()
        if len(self.backlog) > self.sim.config.max_backlog:
            self.sim.counters.slow_consumers += 1
            self.abort()

    def _write(self, message: bytes, data: bool) -> None:
        """Frame the message onto `out`; the simulator flushes it (the pump at the end of
        its round, else soon)."""
        ws = self.ws
        if ws.protocol.state is not State.OPEN:
            self.closed = True
            return
        out = self.out
        if not out:
            self.sim.unflushed(self)
        if self._raw_frames:
            out.append(text_frame_header(len(message)))
            out.append(message)
        else:
            ws.protocol.send_text(message)
            out.extend(ws.protocol.data_to_send())
        self.out_size += len(message)
        if data:
            self.data_sent += 1
            self.sim.counters.data_messages += 1
            if self.armed:
                self._count_down()
        else:
            self.control_sent += 1
            self.sim.counters.control_messages += 1
        if self.out_size >= ROUND_WRITE and self.sim.pumping:
            self.flush()  # a message's send stamp stays near its write in a long round

    def flush(self) -> None:
        """Write what `out` holds, in one write."""
        out = self.out
        if not out:
            return
        self.out = []
        self.out_size = 0
        transport = self.ws.transport
        if transport.is_closing():
            self.closed = True
            return
        try:
            transport.write(b"".join(out))
        except Exception:  # the transport went away under us
            self.closed = True

    async def _drain(self) -> None:
        """Write the backlog in order once the connection can take it."""
        loop = asyncio.get_running_loop()
        try:
            while not self.closed:
                await self._wake.wait()
                self._wake.clear()
                unflushed = 0  # bytes framed since the last flush
                while self.backlog and not self.closed:
                    now = loop.time()
                    if self.stalled_until > now:
                        self.flush()
                        await asyncio.sleep(self.stalled_until - now)
                        continue
                    self.stalled_until = 0.0
                    due = self.backlog[0][2]
                    if due > now:
                        self.flush()
                        await asyncio.sleep(due - now)
                        continue
                    if self.ws.paused:
                        await self.ws.drain()
                        continue
                    message, data, _ = self.backlog.popleft()
                    self._write(message, data)
                    unflushed += len(message)
                    if unflushed >= DRAIN_CHUNK:  # `paused` says when the socket is full
                        self.flush()
                        unflushed = 0
                self.flush()
                if not self.backlog and self.stalled_until <= loop.time():
                    self.stalled_until = 0.0
        except (ConnectionError, ConnectionClosed):
            self.closed = True

    # ---- faults ----------------------------------------------------------------------------
    def arm(self, fault: Fault) -> None:
        armed = _Armed(fault)
        if armed.left <= 0:
            self._fire(fault)
        else:
            self.armed.append(armed)

    def _count_down(self) -> None:
        due = []
        for armed in self.armed:
            armed.left -= 1
            if armed.left <= 0:
                due.append(armed)
        for armed in due:
            self.armed.remove(armed)
            self._fire(armed.fault)

    def _fire(self, fault: Fault) -> None:  # noqa: PLR0912 (a fault dispatcher: one branch per fault kind)
        if self.closed:
            return
        self.flush()  # what went before the fault goes out before it
        self.sim.counters.faults_fired[fault.kind] += 1
        log.info("connection %d (leg %s): fault %s", self.id, self.leg, fault.describe())
        transport = self.ws.transport
        if fault.kind == "drop":
            self.abort()
        elif fault.kind == "close":
            self.closed = True
            self.sim.spawn(self.ws.close(fault.code, fault.reason))
        elif fault.kind == "stall":
            self.stalled_until = asyncio.get_running_loop().time() + fault.seconds
            self._wake.set()
        elif fault.kind == "malformed":
            transport.write(malformed_frame(fault.variant))
            self.closed = True  # the peer fails the connection; nothing valid follows
        elif fault.kind == "opcode":
            transport.write(unknown_opcode_frame(fault.opcode))
            self.closed = True
        elif fault.kind == "oversized":
            self.send_control(oversized_message(fault.size))
        elif fault.kind == "notice":
            notice = self.feed.reconnect_notice()
            if notice is not None:
                self.send_control(notice)
        elif fault.kind == "reset":
            self.reset()
        elif fault.kind == "skip":
            if fault.fraction:
                self.skip_fraction = fault.fraction
            elif fault.seq:
                self.skip_seqs.add(fault.seq)
            else:
                self.skip_next += fault.count
        elif fault.kind == "delay":
            self.delay = fault.seconds
            self._wake.set()
        elif fault.kind == "checksum":
            self.bad_checksums += fault.count
        elif fault.kind == "nosnapshot":
            self.no_snapshots += fault.count
        elif fault.kind == "reorder":
            self.reorder_next += 1
        self.flush()

    def clear_faults(self) -> None:
        """Disarm pending faults and end the lasting ones (skips, delay)."""
        self.armed.clear()
        self.skip_next = 0
        self.skip_fraction = 0.0
        self.skip_seqs.clear()
        self.bad_checksums = 0
        self.no_snapshots = 0
        self.reorder_next = 0
        self.delay = 0.0

    def abort(self) -> None:
        self.closed = True
        self.backlog.clear()
        self.out.clear()
        self.ws.transport.abort()

    def reset(self) -> None:
        """Abort with an RST: linger 0 makes the kernel reset rather than close."""
        sock = self.ws.transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError, AttributeError):  # a plain abort then
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.abort()

    def close_writer(self) -> None:
        self.closed = True
        self._wake.set()
        self._writer.cancel()

    def info(self) -> dict[str, Any]:
        peer = self.ws.remote_address
        return {
            "id": self.id,
            "dialect": self.dialect,
            "group": self.group.name,
            "leg": self.leg,
            "peer": f"{peer[0]}:{peer[1]}" if peer else None,
            "topics": sorted(self.topics),
            "data_sent": self.data_sent,
            "data_skipped": self.data_skipped,
            "delay": self.delay,
            "control_sent": self.control_sent,
            "backlog": len(self.backlog),
            "stalled": self.stalled_until > 0,
            "armed": [a.fault.describe() + f" (in {a.left})" for a in self.armed],
        }


class TopicPublisher:
    """One (dialect, topic) of a group: its sequence, subscribers and place in the
    schedule."""

    __slots__ = (
        "base_count",
        "base_time",
        "book",
        "dialect",
        "feed",
        "group",
        "publishes",
        "seq",
        "subscribers",
        "topic",
    )

    def __init__(self, feed: Feed, topic: str, group: str = DEFAULT_GROUP) -> None:
        self.feed = feed
        self.group = group
        self.dialect = feed.name
        self.topic = topic
        self.seq = 0
        self.subscribers: set[SimConnection] = set()
        self.publishes = feed.publishes(topic)
        self.base_time = 0.0
        self.base_count = 0
        #: The topic's book (book topics the feed models), advanced one update a message.
        self.book = feed.book_state(topic)

    def emit(self, count: int) -> None:
        """Render each message once (one send stamp) and write it to every subscriber; a
        subscriber that is due a snapshot gets the book after this update instead."""
        render, topic, book = self.feed.render, self.topic, self.book
        for _ in range(count):
            self.seq += 1
            ts = time.time_ns()
            message = render(topic, self.seq, ts, book)
            snapshot: bytes | None = None
            for conn in list(self.subscribers):
                if conn.snapshot_due and topic in conn.snapshot_due:
                    conn.snapshot_due.discard(topic)
                    if snapshot is None:
                        snapshot = self.feed.render_snapshot(topic, self.seq, ts, book)
                    conn.send_data(snapshot or message, self.seq)
                else:
                    conn.send_data(message, self.seq)

    @property
    def key(self) -> str:
        """`dialect:topic`, prefixed `group/` outside the default group (stats keys)."""
        name = f"{self.dialect}:{self.topic}"
        return name if self.group == DEFAULT_GROUP else f"{self.group}/{name}"


class Simulator:
    """`async with Simulator(SimConfig(...)) as sim:` serves until the block ends."""

    def __init__(self, config: SimConfig | None = None) -> None:
        self.config = config or SimConfig()
        self.feeds = {name: cls(self.config.symbols) for name, cls in FEEDS.items()}
        self.counters = Counters()
        self.connections: dict[int, SimConnection] = {}
        self.groups: dict[str, FeedGroup] = {DEFAULT_GROUP: FeedGroup(DEFAULT_GROUP)}
        self.tls: TlsFiles | None = None
        self._ids = itertools.count(1)
        self._server: Server | None = None
        self._pump_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        #: The pump's sleep, resolved early by `_poke` (a subscription, a rate change).
        self._pump_waiter: asyncio.Future[None] | None = None
        self.pumping = False  # in a pump round: it flushes at the round's end
        #: Connections with frames in `out`, and the pending flush of those made outside
        #: a pump round (replies, emits, the drain).
        self._unflushed: list[SimConnection] = []
        self._flush_soon: asyncio.Handle | None = None
        self._next_faults: list[Fault] = []  # armed on the next new connection
        self._every_faults: list[Fault] = [
            f for f in self.config.faults if f.kind not in SIMULATOR_KINDS
        ]
        #: Stale REST snapshots to serve next: how far behind each is.
        self.stale_snapshots: list[int] = []
        #: REST snapshots left to answer 503 (an `unavailable` fault).
        self.unavailable_snapshots = 0
        for fault in self.config.faults:
            if fault.kind in SIMULATOR_KINDS:
                self._simulator_fault(fault)
        self._rebase = True

    # ---- lifecycle ---------------------------------------------------------------------------
    async def start(self) -> Simulator:
        cfg = self.config
        ssl_context = None
        if cfg.tls:
            directory = cfg.cert_dir or Path.cwd() / "sim-certs"
            self.tls = ensure_certs(directory, [cfg.host])
            ssl_context = self.tls.server_context()
        self._server = await serve(
            self._handle,
            cfg.host,
            cfg.port,
            ssl=ssl_context,
            process_request=self._process_request,
            compression=None,
            ping_interval=cfg.ping_interval,
            ping_timeout=cfg.ping_timeout,
            max_size=cfg.max_message_size,
            max_queue=None,
            write_limit=1 << 20,
            close_timeout=2.0,  # a client that stopped reading must not hold up a stop
        )
        self._pump_task = asyncio.get_running_loop().create_task(self._pump())
        return self

    async def stop(self) -> None:
        if self._pump_task is not None:
            self._pump_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump_task
            self._pump_task = None
        if self._server is not None:
            self._server.close(close_connections=True)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5)
            self._server = None
        for conn in list(self.connections.values()):
            conn.close_writer()
        for task in list(self._tasks):
            task.cancel()

    async def __aenter__(self) -> Simulator:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def unflushed(self, conn: SimConnection) -> None:
        """conn has frames to write: at the pump round's end, or in a callback soon."""
        self._unflushed.append(conn)
        if not self.pumping and self._flush_soon is None:
            self._flush_soon = asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write every connection's pending frames (one write each)."""
        self._flush_soon = None
        conns, self._unflushed = self._unflushed, []
        for conn in conns:
            conn.flush()

    def spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the simulator is not started")
        sockets = self._server.sockets
        return int(sockets[0].getsockname()[1])

    def url(
        self,
        dialect: str | None = None,
        path: str = "",
        *,
        group: str | None = None,
        leg: str | None = None,
    ) -> str:
        """ws(s)://host:port/<dialect><path>; no dialect: the default dialect's paths;
        group/leg: the query parameters that put the connection in a feed group."""
        scheme = "wss" if self.config.tls else "ws"
        host = self.config.host
        host = f"[{host}]" if ":" in host else host
        prefix = f"/{dialect}" if dialect else ""
        return f"{scheme}://{host}:{self.port}{prefix}{with_group(path, group, leg)}"

    @property
    def publishers(self) -> dict[tuple[str, str], TopicPublisher]:
        """The default group's publishers, by (dialect, topic)."""
        return self.groups[DEFAULT_GROUP].publishers

    def group(self, name: str = DEFAULT_GROUP) -> FeedGroup:
        """The group of that name (made on first use)."""
        found = self.groups.get(name)
        if found is None:
            found = self.groups[name] = FeedGroup(name)
        return found

    def _all_publishers(self) -> list[TopicPublisher]:
        return [p for g in self.groups.values() for p in g.publishers.values()]

    # ---- connections ------------------------------------------------------------------------
    def _route(self, path: str) -> tuple[str, str, str, str | None]:
        """(dialect, the path the dialect sees, group name, leg name or None)."""
        parts = urlsplit(path)
        group, leg = DEFAULT_GROUP, None
        kept: list[str] = []
        for item in parts.query.split("&") if parts.query else []:
            key, _, value = item.partition("=")
            if key == GROUP_PARAM and value:
                group = value
            elif key == LEG_PARAM and value:
                leg = value
            else:
                kept.append(item)
        query = f"?{'&'.join(kept)}" if kept else ""
        segments = parts.path.lstrip("/").split("/", 1)
        if segments[0] in self.feeds:
            rest = "/" + (segments[1] if len(segments) > 1 else "")
            return segments[0], rest + query, group, leg
        return self.config.dialect, parts.path + query, group, leg

    async def _handle(self, ws: ServerConnection) -> None:
        dialect, rest, group_name, leg = self._route(ws.request.path if ws.request else "/")
        group = self.group(group_name)
        group.opened += 1
        conn = SimConnection(
            self, ws, self.feeds[dialect], next(self._ids), group, leg or str(group.opened)
        )
        self.connections[conn.id] = conn
        self.counters.connections_total += 1
        self.counters.connections_open += 1
        try:
            for fault in self._every_faults + self._next_faults:
                conn.arm(fault)
            self._next_faults.clear()
            self._apply(conn, conn.feed.on_open(rest, conn.id))
            async for message in ws:
                if conn.closed:
                    break
                text = message if isinstance(message, str) else message.decode("utf-8", "replace")
                if self.config.enforce_limits and self._over_rate(conn):
                    conn.flush()
                    await ws.close(1008, "Too many requests")
                    break
                self._apply(conn, conn.feed.on_message(text, conn.topics, conn.id))
        except ConnectionClosed:
            pass
        finally:
            self.counters.connections_open -= 1
            self.connections.pop(conn.id, None)
            for topic in list(conn.topics):
                self._unsubscribe(conn, topic)
            conn.feed.on_close(conn.id)
            conn.close_writer()

    def _over_rate(self, conn: SimConnection) -> bool:
        cap = conn.feed.max_messages_per_second
        if cap is None:
            return False
        now = time.monotonic()
        conn.incoming.append(now)
        while conn.incoming and conn.incoming[0] <= now - 1.0:
            conn.incoming.popleft()
        return len(conn.incoming) > cap

    def _apply(self, conn: SimConnection, reply: Reply) -> None:
        for text in reply.commands:
            self._inband(conn, text)
        for message in reply.send:
            conn.send_control(message)
        cap = conn.feed.max_topics_per_connection
        for topic in reply.subscribe:
            if self.config.enforce_limits and cap is not None and len(conn.topics) >= cap:
                conn.flush()
                self.spawn(conn.ws.close(1008, f"more than {cap} streams"))
                conn.closed = True
                return
            self._subscribe(conn, topic)
        for topic in reply.unsubscribe:
            self._unsubscribe(conn, topic)
        conn.flush()  # the replies now: websockets may write a close frame next
        if reply.close is not None:
            conn.closed = True
            self.spawn(conn.ws.close(*reply.close))

    def _inband(self, conn: SimConnection, text: str) -> None:
        spec = text[len(SIM_PREFIX) :].lstrip(":.").lower()
        try:
            conn.arm(Fault.parse(spec))
        except FaultError as exc:
            log.warning("connection %d: in-band command %r: %s", conn.id, text, exc)

    def _subscribe(self, conn: SimConnection, topic: str) -> None:
        if topic in conn.topics:
            return
        publisher = conn.group.publisher(conn.feed, topic)
        conn.topics.add(topic)
        if conn.feed.snapshot_first(topic):
            if conn.no_snapshots:  # a nosnapshot fault: the updates only
                conn.no_snapshots -= 1
            else:
                conn.snapshot_due.add(topic)
        if not publisher.subscribers and publisher.publishes:
            self._rebase = True
            self._poke()
        publisher.subscribers.add(conn)

    def _unsubscribe(self, conn: SimConnection, topic: str) -> None:
        conn.topics.discard(topic)
        conn.snapshot_due.discard(topic)
        publisher = conn.group.publishers.get((conn.dialect, topic))
        if publisher is not None:
            publisher.subscribers.discard(conn)
            if not publisher.subscribers:
                self._rebase = True

    # ---- the schedule -----------------------------------------------------------------------
    def _active(self) -> list[TopicPublisher]:
        return [p for p in self._all_publishers() if p.subscribers and p.publishes]

    def _rate_each(self, active: int) -> float:
        rate = self.config.rate
        if self.config.total_rate is not None and active:
            rate = min(rate, self.config.total_rate / active)
        return rate

    async def _pump(self) -> None:  # noqa: PLR0912 (the scheduler: topics, bursts and heartbeats in one loop)
        """Emit due messages for every active topic, bursts and heartbeats; sleep until the
        next one is due (or a subscription changes the schedule)."""
        loop = asyncio.get_running_loop()
        next_heartbeat = loop.time() + self.config.heartbeat_interval
        next_burst = loop.time() + (self.config.burst_interval or 0)
        while True:
            self.pumping = True
            now = loop.time()
            active = self._active()
            rate = self._rate_each(len(active))
            if self._rebase:
                for p in active:
                    p.base_time, p.base_count = now, p.seq
                self._rebase = False
            wake_at = now + 0.25
            if rate > 0:
                for p in active:
                    due = int((now - p.base_time) * rate) - (p.seq - p.base_count)
                    if due > 0:
                        p.emit(min(due, 100_000))
                    wake_at = min(wake_at, p.base_time + (p.seq - p.base_count + 1) / rate)
            cfg = self.config
            if cfg.burst_size > 0 and cfg.burst_interval > 0:
                if now >= next_burst:
                    for p in active:
                        p.emit(cfg.burst_size)
                    next_burst = now + cfg.burst_interval
                wake_at = min(wake_at, next_burst)
            if cfg.heartbeat_interval > 0:
                if now >= next_heartbeat:
                    for conn in list(self.connections.values()):
                        for message in conn.feed.heartbeat(conn.topics):
                            conn.send_control(message)
                    next_heartbeat = now + cfg.heartbeat_interval
                wake_at = min(wake_at, next_heartbeat)
            self.pumping = False
            self.flush()
            # At least a tick: a message due sooner goes out with the next round's.
            await self._sleep(max(wake_at - loop.time(), cfg.pump_tick))

    async def _sleep(self, delay: float) -> None:
        """The pump's sleep: a future and a timer (no task), ended early by `_poke`."""
        loop = asyncio.get_running_loop()
        waiter = self._pump_waiter = loop.create_future()
        timer = loop.call_later(delay, _resolve, waiter)
        try:
            await waiter
        finally:
            timer.cancel()
            self._pump_waiter = None

    def _poke(self) -> None:
        """Wake the pump now (the schedule changed)."""
        if self._pump_waiter is not None:
            _resolve(self._pump_waiter)

    # ---- control ----------------------------------------------------------------------------
    def targets(self, target: str | int = "all") -> list[SimConnection]:
        """Open connections: all, dialect:<name>, group:<name>, leg:<name> (in any group),
        leg:<group>/<name>, or a connection id."""
        if target == "all":
            return list(self.connections.values())
        if isinstance(target, str):
            kind, sep, name = target.partition(":")
            if sep and kind == "dialect":
                return [c for c in self.connections.values() if c.dialect == name]
            if sep and kind == "group":
                return [c for c in self.connections.values() if c.group.name == name]
            if sep and kind == "leg":
                group, slash, leg = name.rpartition("/")
                return [
                    c
                    for c in self.connections.values()
                    if c.leg == leg and (not slash or c.group.name == group)
                ]
        conn = self.connections.get(int(target))
        return [conn] if conn is not None else []

    def inject(self, fault: Fault, target: str | int = "all") -> int:
        """Arm fault on connections: all (open now), next (the next to connect), every
        (each future one), or what `targets` takes. Returns how many."""
        if fault.kind in SIMULATOR_KINDS:
            self._simulator_fault(fault)
            return 1
        if target == "next":
            self._next_faults.append(fault)
            return 1
        if target == "every":
            self._every_faults.append(fault)
            return 1
        chosen = self.targets(target)
        for conn in chosen:
            conn.arm(fault)
        return len(chosen)

    def _simulator_fault(self, fault: Fault) -> None:
        """A fault of the REST snapshots (SIMULATOR_KINDS), for whoever asks next."""
        if fault.kind == "stale":
            self.stale_snapshots.append(fault.behind)
        else:
            self.unavailable_snapshots += fault.count

    def clear_faults(self) -> None:
        self.stale_snapshots.clear()
        self.unavailable_snapshots = 0
        self._next_faults.clear()
        self._every_faults.clear()
        for conn in self.connections.values():
            conn.clear_faults()

    def set_rate(
        self,
        rate: float | None = None,
        total_rate: float | None = None,
        burst_size: int | None = None,
        burst_interval: float | None = None,
    ) -> None:
        cfg = self.config
        if rate is not None:
            cfg.rate = max(0.0, rate)
        if total_rate is not None:
            cfg.total_rate = total_rate if total_rate > 0 else None
        if burst_size is not None:
            cfg.burst_size = max(0, burst_size)
        if burst_interval is not None:
            cfg.burst_interval = max(0.0, burst_interval)
        self._rebase = True
        self._poke()

    def emit(self, dialect: str, topic: str, count: int = 1, group: str = DEFAULT_GROUP) -> int:
        """Publish count messages on a group's topic now (whether or not anyone listens)."""
        publisher = self.group(group).publisher(self.feeds[dialect], topic)
        publisher.emit(count)
        if publisher in self._active():
            publisher.base_count += count  # an emit does not eat into the scheduled rate
        return publisher.seq

    def sent(self, dialect: str, topic: str, group: str = DEFAULT_GROUP) -> int:
        """Messages published so far on a group's topic (its last sequence number)."""
        found = self.groups.get(group)
        publisher = found.publishers.get((dialect, topic)) if found else None
        return publisher.seq if publisher else 0

    def stats(self) -> dict[str, Any]:
        counters = asdict(self.counters)
        counters["faults_fired"] = dict(self.counters.faults_fired)
        return {
            "counters": counters,
            "rate": {
                "per_topic": self.config.rate,
                "total": self.config.total_rate,
                "burst_size": self.config.burst_size,
                "burst_interval": self.config.burst_interval,
            },
            "sent_per_topic": {p.key: p.seq for p in self._all_publishers() if p.seq},
            "subscribers": {
                p.key: len(p.subscribers) for p in self._all_publishers() if p.subscribers
            },
            "groups": {
                g.name: sorted(c.leg for c in self.connections.values() if c.group is g)
                for g in self.groups.values()
            },
            "connections": [c.info() for c in self.connections.values()],
            "faults": {
                "next": [f.describe() for f in self._next_faults],
                "every": [f.describe() for f in self._every_faults],
                "stale_snapshots": [f"stale:behind={n}" for n in self.stale_snapshots],
                "unavailable_snapshots": self.unavailable_snapshots,
            },
        }

    def command(self, cmd: Mapping[str, Any]) -> dict[str, Any]:  # noqa: PLR0911 (a command dispatcher: one answer per command)
        """Run one control command; the answer is JSON-ready and says ok or why not."""
        name = str(cmd.get("cmd", ""))
        try:
            if name == "stats":
                return {"ok": True, **self.stats()}
            if name == "fault":
                fault = Fault.from_mapping(cmd)
                target = cmd.get("target", "all")
                return {"ok": True, "armed": self.inject(fault, target), "fault": fault.describe()}
            if name == "clear":
                self.clear_faults()
                return {"ok": True}
            if name == "rate":

                def number(key: str) -> float | None:
                    value = cmd.get(key)
                    return None if value is None else float(value)

                burst = cmd.get("burst_size")
                self.set_rate(
                    number("rate"),
                    number("total_rate"),
                    None if burst is None else int(burst),
                    number("burst_interval"),
                )
                return {"ok": True, **self.stats()["rate"]}
            if name == "emit":
                dialect = str(cmd.get("dialect", self.config.dialect))
                group = str(cmd.get("group", DEFAULT_GROUP))
                seq = self.emit(dialect, str(cmd["topic"]), int(cmd.get("count", 1)), group)
                return {"ok": True, "seq": seq}
            if name == "close":
                chosen = self.targets(cmd.get("target", "all"))
                for conn in chosen:
                    conn.flush()
                    conn.closed = True
                    self.spawn(
                        conn.ws.close(int(cmd.get("code", 1001)), str(cmd.get("reason", "")))
                    )
                return {"ok": True, "closed": len(chosen)}
        except (FaultError, KeyError, ValueError, TypeError) as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        known = "stats, fault, clear, rate, emit, close"
        return {"ok": False, "error": f"unknown command {name!r}; known: {known}"}

    # ---- books ------------------------------------------------------------------------------
    def book(self, dialect: str, topic: str, group: str = DEFAULT_GROUP) -> SimBook | None:
        """The simulator's own book of a book topic (made on first use), for tests."""
        return self.group(group).publisher(self.feeds[dialect], topic).book

    def rest_snapshot(self, path: str) -> tuple[HTTPStatus, bytes] | None:
        """A venue's REST book snapshot: GET [/<dialect>]/api/v3/depth?symbol=&limit=
        (Binance; /fapi/v1/depth for USD-M futures) or /api/v2/order_book/{pair}/
        (Bitstamp), of the topic's book in the group `group=` (default: the default one);
        None when path is none of them. A pending `unavailable` fault answers 503, a `stale`
        one with an old book."""
        parts = urlsplit(path)
        query = dict(parse_qsl(parts.query))
        segments = parts.path.lstrip("/").split("/", 1)
        if segments[0] in self.feeds:
            feeds = [self.feeds[segments[0]]]
            rest = "/" + (segments[1] if len(segments) > 1 else "")
        else:
            feeds, rest = list(self.feeds.values()), parts.path
        for feed in feeds:
            try:
                found = feed.rest_book(rest, query)
            except ValueError as exc:
                return HTTPStatus.BAD_REQUEST, json.dumps({"code": -1100, "msg": str(exc)}).encode()
            if found is None:
                continue
            topics, limit = found
            if feed.check(topics[0]):
                return HTTPStatus.BAD_REQUEST, b'{"code":-1121,"msg":"Invalid symbol."}'
            group = self.group(query.get(GROUP_PARAM) or DEFAULT_GROUP)
            known = [p for t in topics if (p := group.publishers.get((feed.name, t)))]
            chosen = next((p for p in known if p.subscribers), None) or (
                known[0] if known else group.publisher(feed, topics[0])
            )
            book = chosen.book
            if book is None:
                return HTTPStatus.NOT_FOUND, b'{"code":-1121,"msg":"No book."}'
            if self.unavailable_snapshots:
                self.unavailable_snapshots -= 1
                self.counters.faults_fired["unavailable"] += 1
                return HTTPStatus.SERVICE_UNAVAILABLE, _UNAVAILABLE
            if self.stale_snapshots:
                self.counters.faults_fired["stale"] += 1
                seq, ts_us, bids, asks = book.stale(self.stale_snapshots.pop(0))
            else:
                seq, ts_us = book.seq, book.ts_us
                bids, asks = book.top(limit)
            return HTTPStatus.OK, feed.rest_body(seq, ts_us, bids[:limit], asks[:limit]).encode()
        return None

    def _process_request(self, ws: ServerConnection, request: Request) -> Response | None:
        """HTTP on the WebSocket port: the venues' REST book snapshots (rest_snapshot), and
        control: GET /_sim/stats, GET /_sim/command?cmd=..."""
        parts = urlsplit(request.path)
        if not parts.path.startswith("/_sim/"):
            if request.headers.get("Upgrade", "").lower() == "websocket":
                return None
            answer = self.rest_snapshot(request.path)
            if answer is None:
                return None
            status, data = answer
            headers = Headers(
                [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
            )
            return Response(status.value, status.phrase, headers, data)
        what = parts.path[len("/_sim/") :]
        if what == "stats":
            body = self.stats()
            status = HTTPStatus.OK
        elif what == "command":
            body = self.command(dict(parse_qsl(parts.query)))
            status = HTTPStatus.OK if body.get("ok") else HTTPStatus.BAD_REQUEST
        else:
            body = {"ok": False, "error": "use /_sim/stats or /_sim/command?cmd=..."}
            status = HTTPStatus.NOT_FOUND
        data = json.dumps(body).encode()
        headers = Headers(
            [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
        )
        return Response(status.value, status.phrase, headers, data)


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


def with_group(path: str, group: str | None = None, leg: str | None = None) -> str:
    """path with `group=`/`leg=` query parameters added (a path may have a query)."""
    params = [f"{k}={v}" for k, v in ((GROUP_PARAM, group), (LEG_PARAM, leg)) if v]
    if not params:
        return path
    path = path or "/"
    return path + ("&" if "?" in path else "?") + "&".join(params)


async def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    """Poll predicate every 5 ms until true; TimeoutError after timeout (tests)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.005)
