"""`feed`: time from the exchange's send to the consumer's first line of code, through wsgw
and next to a consumer connected to the exchange itself (issue #16).

What runs, all real, each part in a process of its own:

    lab namespace   the feed simulator (`wsgw simulate`, Binance dialect, TOPICS) on
                    0.0.0.0:SIM_PORT, so the DPDK veth and the twin's reach it; its rate is
                    changed on its stdin between rates (`Plan.rates`: over all topics)
    twin namespace  (`Lab(kernel_client=True)`) the reference: a picows client of the
                    simulator on kernel TCP (`picows_consumer_main`), as a user writes one
    gateway process (`gateway_main`, one per contender and round) LiveRuntime + DpdkEngines as
                    `wsgw serve` builds them: a Binance session over wsgw's stack on the
                    lab's veth (net_af_packet) or over kernel sockets in the twin namespace,
                    the hub writing the shared-memory ring, and where the contender needs
                    them /v1/stream (uvicorn on uvloop) or the NATS sink (a nats-server of
                    the bench's own, as `fanout` starts it)
    consumer        a process reading the ring with `gateway.client.Client` (the reader's
                    wait policy), a picows client of /v1/stream, or a nats-py subscriber

Every simulator data message ends with `"sim_seq": N, "sim_ts": T`, T = time.time_ns() when
the simulator rendered it. A consumer takes time.time_ns() first thing when a message (the
ring: a batch) reaches its code, then reads the tail: latency = receipt - sim_ts. All stamps
are CLOCK_REALTIME of one machine: time.time_ns() and the ring record's ts_ns (the session's
read stamp, `RingWriter` stamps CLOCK_REALTIME too; see wsgw_ring.h), so they subtract.
The split of the ring contenders' path: sim_ts -> the ring record's ts_ns (the exchange's
send, the wire, the engine's poll and the session's read) and ts_ns -> the consumer (frame
to ring record in the engine, the ring, the reader's wake-up). The ring keeps one stamp per
record, so the write of the record is not told apart from the read: the runtime's
in-gateway latency metric (read -> handed to the hub) stands in for it.

Per contender, round and rate, a window: `Plan.warmup` seconds after the rate is set (the
backlog of the rate change drains), then `Plan.measure` seconds. In it: delivered msg/s,
latency p50/p99/p99.9, messages lost and reordered (every topic's sim_seq must step by
one; the check spans the warm-up too, losses are counted in the window they show in), CPU
per process (gateway, consumer, simulator) from /proc/PID/stat at the window's start and
end, and what losses came with (the reader lapped, the session's reconnects, the
simulator dropping a slow consumer). Contenders alternate by round (`alternate`); within
a contender's turn the rates go up in order (the gateway and consumer stay up across
them). Ratios are to the direct client.

The low-latency contenders run the gateway with `latency_profile = "low-latency"` (the
engine busy-polls, the ring advises readers to busy-wait) and its reader with that advice,
as a deployment would; the others with the default, "economical". The engine's busy poll
takes a whole core: on a 2-vCPU machine that is half of it, shared with the simulator, the
consumer, nats-server and the direct client, so those rows say what the profile costs
there as much as what it gains. /v1/stream and NATS under it: the C stream sink on (the
API's default) and NATS as the NATS sink publishes by default (`C_PATH_DEFAULT`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import multiprocessing as mp
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Literal

from dataplane.ring import WAIT_AUTO
from gateway.client.ring import READER_SLICE_NS
from gateway.hub.nats_c import C_PATH_DEFAULT
from gateway.lab import Lab
from gateway.settings import LATENCY_PROFILES
from gateway.simulator.process import start_simulator
from wsgw_bench.core import (
    BenchOptions,
    Measurement,
    alternate,
    scenario,
    scenario_log,
    unique_lab_name,
)

SCENARIO = "feed"
TOPICS = ("btcusdt@trade", "ethusdt@trade", "solusdt@trade", "bnbusdt@trade")
SIM_PORT = 9480
RING_CAPACITY = 64 << 20  # the gateway's default
CTX = mp.get_context("spawn")
STARTUP_TIMEOUT = 60.0

DIRECT = "direct picows (kernel TCP)"
DPDK_RING = "wsgw dpdk -> ring"
DPDK_RING_LOWLAT = "wsgw dpdk -> ring, low-latency"
KERNEL_RING = "wsgw kernel -> ring"
DPDK_STREAM = "wsgw dpdk -> /v1/stream"
DPDK_NATS = "wsgw dpdk -> nats"
# /v1/stream frames sent by the ring's writer (the engine's thread) through the stream sink
# (gateway.hub.sink), alternated with the router writing them (DPDK_STREAM: sink off).
DPDK_STREAM_SINK = "wsgw dpdk -> /v1/stream, C sink"
# Core NATS PUBs sent by the ring's writer (gateway.hub.nats_c), alternated with the sink's
# thread publishing through nats-py (DPDK_NATS: WSGW_NATS_C's path off).
DPDK_NATS_C = "wsgw dpdk -> NATS, C"
# The two NATS paths read by the consumer SDK (gateway.client: core NATS read in the
# consumer's thread, gateway.client.nats_core) instead of a nats-py subscriber.
DPDK_NATS_SDK = "wsgw dpdk -> nats, wsgw client"
DPDK_NATS_C_SDK = "wsgw dpdk -> NATS, C, wsgw client"
# /v1/stream (C sink) read by the consumer SDK (gateway.client.stream, envelope=1) instead
# of picows: not in `make bench`.
DPDK_STREAM_SINK_SDK = "wsgw dpdk -> /v1/stream, C sink, wsgw client"
# The same with the SDK's stream read in Python only (WSGW_STREAM_READ=python: no one-call
# shim read), to alternate with it (`--contenders`, not in `make bench`).
DPDK_STREAM_SINK_SDK_PY = "wsgw dpdk -> /v1/stream, C sink, wsgw client, Python read"
# The same, C never handing back when busy (NatsConfig.c_busy_sends = 0).
DPDK_NATS_C_NO_HANDBACK = "wsgw dpdk -> NATS, C, no hand-back"
# /v1/stream (C sink) and NATS (the sink's default path) under the low-latency profile.
DPDK_STREAM_LOWLAT = "wsgw dpdk -> /v1/stream, low-latency"
DPDK_NATS_LOWLAT = "wsgw dpdk -> nats, low-latency"
# The same through the consumer SDK, which waits as the profile says: /v1/stream by the
# stream's advice (reader_wait in its hello), core NATS as told (the profile's reader_wait).
DPDK_STREAM_LOWLAT_SDK = "wsgw dpdk -> /v1/stream, low-latency, wsgw client"
DPDK_NATS_LOWLAT_SDK = "wsgw dpdk -> NATS, C, low-latency, wsgw client"
CONTENDERS = (
    DIRECT,
    DPDK_RING,
    DPDK_RING_LOWLAT,
    KERNEL_RING,
    DPDK_STREAM,
    DPDK_STREAM_SINK,
    DPDK_NATS,
    DPDK_NATS_C,
    DPDK_NATS_SDK,
    DPDK_NATS_C_SDK,
    DPDK_STREAM_LOWLAT,
    DPDK_NATS_LOWLAT,
)
# The in-process followers (/v1/stream, NATS) woken by the ring notifier's waiting thread
# instead of the writer directly (gateway.hub.follower): the path before the direct wake-up,
# to alternate with it (`python -m wsgw_bench.feed --contenders ...`), not in `make bench`.
DPDK_STREAM_THREAD = "wsgw dpdk -> /v1/stream, notifier thread"
DPDK_NATS_THREAD = "wsgw dpdk -> nats, notifier thread"
# The engine's nap (adaptive polling: it sleeps up to sleep_max_us, 1 ms by default, in a
# ppoll on the af_packet socket that a frame ends): a shorter ceiling, and no nap at all.
# /v1/stream with the envelope (its recv_ts_ns, the session's read, splits the path as the
# ring record's stamp does), woken both ways.
DPDK_STREAM_ENVELOPE = "wsgw dpdk -> /v1/stream, envelope"
DPDK_STREAM_ENVELOPE_THREAD = "wsgw dpdk -> /v1/stream, envelope, notifier thread"
# The envelope stream (picows) on the C stream sink (its envelopes built and sent by the ring's
# writer), to alternate with the router's envelope stream above.
DPDK_STREAM_SINK_ENVELOPE = "wsgw dpdk -> /v1/stream, C sink, envelope"
DPDK_RING_NAP_100US = "wsgw dpdk -> ring, nap <= 100 us"
DPDK_RING_ENGINE_BUSY = "wsgw dpdk -> ring, engine busy-polls"
# The engine's ACK policy before issue #16's stall fix: "delayed" (every second full-sized
# segment, else the 40 ms timer; the default is now every second segment whatever its size).
DPDK_RING_DELAYED_ACK = "wsgw dpdk -> ring, delayed ACK"
# /v1/stream as before the router wrote a waiting stream's frames itself (the stream's task
# woken, one more turn of the loop), and with a 0.5 ms GIL switch interval in the gateway
# (Python's is 5 ms): before/after and the GIL's share (`--contenders`, not in `make bench`).
DPDK_STREAM_TASK_HOP = "wsgw dpdk -> /v1/stream, task hop"
DPDK_STREAM_SWITCH_500US = "wsgw dpdk -> /v1/stream, switch interval 0.5 ms"
# The C sink's paths as before their followers parked (gateway.hub.follower.PARK off): the
# API loop and the NATS sink's thread woken per ring record while the sink sends them all.
DPDK_STREAM_SINK_NO_PARK = "wsgw dpdk -> /v1/stream, C sink, no park"
DPDK_NATS_C_NO_PARK = "wsgw dpdk -> NATS, C, no park"
# Parked with a shorter tick (gateway.hub.follower.PARK_S 2 ms instead of 10).
DPDK_STREAM_SINK_TICK_2MS = "wsgw dpdk -> /v1/stream, C sink, park tick 2 ms"


@dataclass(frozen=True)
class Profile:
    """The setting a contender differs by: the gateway's latency_profile, whose reader
    wait policy (gateway.settings.LATENCY_PROFILES) its ring consumer uses."""

    latency_profile: str = "economical"
    direct_wake: bool = True  # in-process followers woken by the ring's writer
    engine: tuple[tuple[str, Any], ...] = ()  # engine settings set explicitly
    stream_direct: bool = True  # /v1/stream frames written by the hub's router (no task hop)
    switch_interval_us: int = 0  # the gateway process's sys.setswitchinterval (0: Python's)
    stream_sink: bool = False  # /v1/stream frames sent by the ring's writer (gateway.hub.sink)
    nats_c: bool = False  # NATS PUBs sent by the ring's writer (gateway.hub.nats_c)
    nats_busy_sends: int = -1  # NatsConfig.c_busy_sends (-1: its default)
    wait: str = ""  # the ring reader's wait policy when not the profile's
    reader_cpu: int | Literal["engine"] | None = None  # Client.attach(cpu=)
    halt_poll_ns: int | None = None  # the guest's haltpoll window while it runs (wsgw_bench.wake)
    fused_read: bool = True  # the consumer's read waits and reads in one C call (issue #16)
    #: The ring consumer's waiting thread's scheduler slice, ns (Client.attach slice_ns;
    #: None, the client's default: the thread's own, the kernel's 1.4 ms).
    reader_slice_ns: int | None = None
    #: The engine's back-off set after its port is up: (empty polls before the first nap,
    #: first nap ns), the ceiling kept (`FastPath.set_sleep`); None: the engine's own.
    engine_sleep: tuple[int, int] | None = None
    #: The engine thread's scheduler slice, us (`dataplane.sched`; 0: the kernel's; None:
    #: the engine's own, EngineConfig.slice_ns).
    engine_slice_us: int | None = None
    park: bool = True  # followers park while the C sink sends all they feed
    park_s: float = 0.0  # their tick when parked (0: follower.PARK_S)
    sdk: bool = False  # the consumer reads through the consumer SDK (gateway.client)
    sdk_python_read: bool = False  # ... its /v1/stream read without the shim (WSGW_STREAM_READ)

    @property
    def reader_wait(self) -> str:
        return self.wait or LATENCY_PROFILES[self.latency_profile].reader_wait


DEFAULT = Profile()
LOW_LATENCY = Profile("low-latency")
NOTIFIER_THREAD = Profile(direct_wake=False)


@dataclass(frozen=True)
class Contender:
    name: str
    transport: str | None  # None: the direct client, no gateway
    sink: str  # "ring", "stream", "nats" or "direct"
    profile: Profile = DEFAULT
    envelope: bool = False  # /v1/stream with envelope=1: its recv_ts_ns splits the path


CONTENDER_SPECS = {
    DIRECT: Contender(DIRECT, None, "direct"),
    DPDK_RING: Contender(DPDK_RING, "dpdk", "ring"),
    DPDK_RING_LOWLAT: Contender(DPDK_RING_LOWLAT, "dpdk", "ring", LOW_LATENCY),
    KERNEL_RING: Contender(KERNEL_RING, "kernel", "ring"),
    DPDK_STREAM: Contender(DPDK_STREAM, "dpdk", "stream"),
    DPDK_STREAM_SINK: Contender(DPDK_STREAM_SINK, "dpdk", "stream", Profile(stream_sink=True)),
    DPDK_NATS: Contender(DPDK_NATS, "dpdk", "nats"),
    DPDK_NATS_C: Contender(DPDK_NATS_C, "dpdk", "nats", Profile(nats_c=True)),
    DPDK_STREAM_SINK_SDK_PY: Contender(
        DPDK_STREAM_SINK_SDK_PY,
        "dpdk",
        "stream",
        Profile(stream_sink=True, sdk=True, sdk_python_read=True),
    ),
    DPDK_STREAM_SINK_SDK: Contender(
        DPDK_STREAM_SINK_SDK, "dpdk", "stream", Profile(stream_sink=True, sdk=True)
    ),
    DPDK_NATS_SDK: Contender(DPDK_NATS_SDK, "dpdk", "nats", Profile(sdk=True)),
    DPDK_NATS_C_SDK: Contender(DPDK_NATS_C_SDK, "dpdk", "nats", Profile(nats_c=True, sdk=True)),
    DPDK_STREAM_LOWLAT: Contender(
        DPDK_STREAM_LOWLAT, "dpdk", "stream", Profile("low-latency", stream_sink=True)
    ),
    DPDK_NATS_LOWLAT: Contender(
        DPDK_NATS_LOWLAT, "dpdk", "nats", Profile("low-latency", nats_c=C_PATH_DEFAULT)
    ),
    DPDK_STREAM_LOWLAT_SDK: Contender(
        DPDK_STREAM_LOWLAT_SDK,
        "dpdk",
        "stream",
        Profile("low-latency", stream_sink=True, sdk=True),
    ),
    DPDK_NATS_LOWLAT_SDK: Contender(
        DPDK_NATS_LOWLAT_SDK, "dpdk", "nats", Profile("low-latency", nats_c=True, sdk=True)
    ),
    DPDK_NATS_C_NO_HANDBACK: Contender(
        DPDK_NATS_C_NO_HANDBACK, "dpdk", "nats", Profile(nats_c=True, nats_busy_sends=0)
    ),
    DPDK_STREAM_THREAD: Contender(DPDK_STREAM_THREAD, "dpdk", "stream", NOTIFIER_THREAD),
    DPDK_NATS_THREAD: Contender(DPDK_NATS_THREAD, "dpdk", "nats", NOTIFIER_THREAD),
    DPDK_STREAM_ENVELOPE: Contender(DPDK_STREAM_ENVELOPE, "dpdk", "stream", envelope=True),
    DPDK_STREAM_ENVELOPE_THREAD: Contender(
        DPDK_STREAM_ENVELOPE_THREAD, "dpdk", "stream", NOTIFIER_THREAD, envelope=True
    ),
    DPDK_STREAM_SINK_ENVELOPE: Contender(
        DPDK_STREAM_SINK_ENVELOPE, "dpdk", "stream", Profile(stream_sink=True), envelope=True
    ),
    DPDK_RING_NAP_100US: Contender(
        DPDK_RING_NAP_100US, "dpdk", "ring", Profile(engine=(("sleep_max_us", 100),))
    ),
    DPDK_RING_ENGINE_BUSY: Contender(
        DPDK_RING_ENGINE_BUSY, "dpdk", "ring", Profile(engine=(("poll_mode", "busy"),))
    ),
    DPDK_RING_DELAYED_ACK: Contender(
        DPDK_RING_DELAYED_ACK, "dpdk", "ring", Profile(engine=(("ack_policy", "delayed"),))
    ),
    DPDK_STREAM_TASK_HOP: Contender(
        DPDK_STREAM_TASK_HOP, "dpdk", "stream", Profile(stream_direct=False)
    ),
    DPDK_STREAM_SWITCH_500US: Contender(
        DPDK_STREAM_SWITCH_500US, "dpdk", "stream", Profile(switch_interval_us=500)
    ),
    DPDK_STREAM_SINK_NO_PARK: Contender(
        DPDK_STREAM_SINK_NO_PARK, "dpdk", "stream", Profile(stream_sink=True, park=False)
    ),
    DPDK_NATS_C_NO_PARK: Contender(
        DPDK_NATS_C_NO_PARK, "dpdk", "nats", Profile(nats_c=True, park=False)
    ),
    DPDK_STREAM_SINK_TICK_2MS: Contender(
        DPDK_STREAM_SINK_TICK_2MS, "dpdk", "stream", Profile(stream_sink=True, park_s=0.002)
    ),
}

# Where the wake-ups cost (wsgw_bench.wake): the engine pinned to CPU 1 and its ring reader
# on the same CPU or on the other one; the guest's haltpoll window (the cpuidle governor
# polls that long before it halts the vCPU) for both the direct client and the ring reader.
DPDK_RING_APART = "wsgw dpdk -> ring, engine cpu 1, reader cpu 0"
DPDK_RING_TOGETHER = "wsgw dpdk -> ring, engine and reader cpu 1"
DIRECT_HALT_POLL = "direct picows, halt poll 200 us"
DPDK_RING_HALT_POLL = "wsgw dpdk -> ring, halt poll 200 us"
DPDK_RING_ADAPTIVE = "wsgw dpdk -> ring, adaptive reader"
# The consumer client as before wsgw_ring_read_wait (issue #16): a wait call, then a read call.
DPDK_RING_WAIT_THEN_READ = "wsgw dpdk -> ring, wait then read"
# The engine as it was before issue #16's changes: its back-off stepped up after every
# burst (naps of 2, 4, 8 ... us up to sleep_max_us, where it now starts at the ceiling on
# an RX fd) and the kernel's slice for its thread (it now asks for 100 us).
DPDK_RING_STEPPED_NAPS = "wsgw dpdk -> ring, stepped naps (before)"
# Only the slice as before (the naps at the ceiling): what each change brings.
DPDK_RING_KERNEL_SLICE = "wsgw dpdk -> ring, kernel's slice"
# The engine thread SCHED_FIFO (engine.sched_fifo_priority): a frame's wake-up preempts
# whatever runs on the CPU instead of waiting in the run queue (needs CAP_SYS_NICE).
DPDK_RING_FIFO = "wsgw dpdk -> ring, engine SCHED_FIFO"
# The consumer's waiting thread with a 100 us slice (Client.attach slice_ns, issue #16,
# session 13; the default keeps the kernel's); and the adaptive spin with a short cap: a
# busy feed's next record caught spinning, a slow one's not waited for.
DPDK_RING_READER_SLICE = "wsgw dpdk -> ring, reader slice 100 us"
DPDK_RING_ADAPTIVE_30 = "wsgw dpdk -> ring, adaptive:30 reader"
ENGINE_CPU1 = (("cpu", 1),)
CONTENDER_SPECS.update(
    {
        DPDK_RING_APART: Contender(
            DPDK_RING_APART, "dpdk", "ring", Profile(engine=ENGINE_CPU1, reader_cpu=0)
        ),
        DPDK_RING_TOGETHER: Contender(
            DPDK_RING_TOGETHER, "dpdk", "ring", Profile(engine=ENGINE_CPU1, reader_cpu="engine")
        ),
        DIRECT_HALT_POLL: Contender(
            DIRECT_HALT_POLL, None, "direct", Profile(halt_poll_ns=200_000)
        ),
        DPDK_RING_HALT_POLL: Contender(
            DPDK_RING_HALT_POLL, "dpdk", "ring", Profile(halt_poll_ns=200_000)
        ),
        DPDK_RING_ADAPTIVE: Contender(DPDK_RING_ADAPTIVE, "dpdk", "ring", Profile(wait="adaptive")),
        DPDK_RING_WAIT_THEN_READ: Contender(
            DPDK_RING_WAIT_THEN_READ, "dpdk", "ring", Profile(fused_read=False)
        ),
        DPDK_RING_STEPPED_NAPS: Contender(
            DPDK_RING_STEPPED_NAPS,
            "dpdk",
            "ring",
            Profile(engine_sleep=(64, 2_000), engine_slice_us=0),
        ),
        DPDK_RING_KERNEL_SLICE: Contender(
            DPDK_RING_KERNEL_SLICE, "dpdk", "ring", Profile(engine_slice_us=0)
        ),
        DPDK_RING_FIFO: Contender(
            DPDK_RING_FIFO, "dpdk", "ring", Profile(engine=(("sched_fifo_priority", 1),))
        ),
        DPDK_RING_READER_SLICE: Contender(
            DPDK_RING_READER_SLICE, "dpdk", "ring", Profile(reader_slice_ns=READER_SLICE_NS)
        ),
        DPDK_RING_ADAPTIVE_30: Contender(
            DPDK_RING_ADAPTIVE_30, "dpdk", "ring", Profile(wait="adaptive:30")
        ),
    }
)


# ---- the plan --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    rates: tuple[float, ...]  # msg/s over all topics
    warmup: float  # seconds after a rate change before the window
    measure: float  # the window, seconds
    rounds: int


def plan_for(options: BenchOptions) -> Plan:
    if options.quick:
        return Plan((100.0, 1000.0), 0.3, 0.7, 1)
    return Plan((100.0, 1000.0, 10_000.0, 100_000.0), 1.5, 5.0, min(options.repetitions, 3))


# ---- what a consumer sees (in the consumer processes) --------------------------------------------
_SEQ_KEY = b',"sim_seq":'
_TS_KEY = b',"sim_ts":'
_STREAM_KEY = b'{"stream":"'


def sim_tail(raw: bytes) -> tuple[int, int] | None:
    """(sim_seq, sim_ts) of a simulator data message, None for anything else."""
    at = raw.rfind(_SEQ_KEY)
    if at < 0:
        return None
    ts_at = raw.find(_TS_KEY, at)
    if ts_at < 0:
        return None
    return int(raw[at + 11 : ts_at]), int(raw[ts_at + 10 : raw.index(b"}", ts_at)])


def binance_topic(raw: bytes) -> str:
    """The stream name of a Binance combined-stream message (`{"stream":"<topic>",...`)."""
    if raw.startswith(_STREAM_KEY):
        return raw[11 : raw.index(b'"', 11)].decode()
    return ""


class Tally:
    """One consumer's windows: the orchestrator sends ("window", t0_ns, t1_ns) (a thread of
    this class receives them), messages received in [t0, t1] are counted and timed, and
    once the clock passes t1 the window's result goes back. The sequence check runs on
    every message, windows or not."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.pending: deque[tuple[int, int]] = deque()
        self.stopping = False
        self.t0 = self.t1 = 0
        self.last: dict[str, int] = {}
        #: What happened to the consumer's connection since the last result (the NATS
        #: subscriber's callbacks): reported with the next window, the warm-up included.
        self.events: dict[str, int] = {}
        self._new_window()
        threading.Thread(target=self._control, name="feed-control", daemon=True).start()

    def _new_window(self) -> None:
        self.count = self.lost = self.reordered = self.lapped = 0
        self.latency = array("q")
        self.to_read = array("q")  # sim_ts -> the ring record's stamp (the session's read)
        self.from_read = array("q")  # the ring record's stamp -> the consumer

    def _control(self) -> None:
        while True:
            try:
                cmd = self.conn.recv()
            except (EOFError, OSError):
                cmd = ("stop",)
            if cmd[0] == "window":
                self.pending.append((cmd[1], cmd[2]))
            else:
                self.stopping = True
                return

    def see(self, now: int, raw: bytes, topic: str, read_ts: int = 0) -> None:
        tail = sim_tail(raw)
        if tail is None:
            return
        seq, sent = tail
        last = self.last.get(topic)
        self.last[topic] = max(seq, last or 0)
        # Losses and reorders count wherever they show, the warm-up included (in the next
        # window's result): one that shows between windows was missed before (issue #16).
        if last is not None:
            if seq > last + 1:
                self.lost += seq - last - 1
                self.note("seq jumps")  # one outage: one jump per topic
            elif seq <= last:
                self.reordered += 1
        if not self.t0 <= now <= self.t1:
            return
        self.count += 1
        self.latency.append(now - sent)
        if read_ts:
            self.to_read.append(read_ts - sent)
            self.from_read.append(now - read_ts)

    def note(self, event: str) -> None:
        """Count an event of the consumer's connection (reported with the next window)."""
        self.events[event] = self.events.get(event, 0) + 1

    def lap(self, now: int, lost: int) -> None:
        """The ring reader was lapped: `lost` records overwritten before it read them."""
        if self.t0 <= now <= self.t1:
            self.lapped += lost

    def tick(self, now: int) -> None:
        """Start the next window, or report the current one once it is over."""
        if self.t1 and now > self.t1:
            self.conn.send(
                (
                    "result",
                    {
                        "count": self.count,
                        "lost": self.lost,
                        "reordered": self.reordered,
                        "lapped": self.lapped,
                        "latency": self.latency.tobytes(),
                        "to_read": self.to_read.tobytes(),
                        "from_read": self.from_read.tobytes(),
                        "events": self.events,
                    },
                )
            )
            self.events = {}
            self.t0 = self.t1 = 0
            self._new_window()
        if not self.t1 and self.pending:
            self.t0, self.t1 = self.pending.popleft()


def ring_consumer_main(
    conn: Connection,
    ring: str,
    topics: list[str],
    wait: str,
    cpu: int | Literal["engine"] | None = None,
    fused_read: bool = True,
    slice_ns: int | None = None,
) -> None:
    """A consumer process of the ring, through the consumer client, with `wait` policy (and
    pinned to `cpu` when given; slice_ns: Client.attach's)."""
    from gateway.client import Client
    from gateway.client.ring import RingSource

    with Client.attach(ring, topics=topics, wait=wait, cpu=cpu, slice_ns=slice_ns) as client:
        assert isinstance(client.source, RingSource)
        client.source.reader.fused_wait = fused_read
        _tally_reads(conn, client)


def _tally_reads(conn: Connection, client: Any) -> None:
    """Read a gateway.client Client batch by batch until the orchestrator stops, each
    batch stamped once when read returns (the consumer's first line of code)."""
    from gateway.client import Gap, Restart, RingMessage
    from gateway.hub.names import RING_GAP_TOPIC

    tally = Tally(conn)
    conn.send(("ready", os.getpid()))
    read, see, clock = client.read, tally.see, time.time_ns
    while not tally.stopping:
        events = read(timeout=0.05)
        now = clock()  # the consumer's first line of code for this batch
        for event in events:
            if type(event) is RingMessage:
                if event.topic == RING_GAP_TOPIC:  # a network source's session gap
                    tally.note("$gap")
                else:
                    see(now, bytes(event.payload), event.topic.partition(":")[2], event.ts_ns)
            elif type(event) is Gap:
                tally.lap(now, event.lost)
            elif type(event) is Restart:
                tally.note("restart")
        tally.tick(now)


def _run_async(coro: Any) -> None:
    try:
        import uvloop

        uvloop.run(coro)
    except ImportError:
        asyncio.run(coro)


async def _ticking(tally: Tally) -> None:
    """Windows end on time also when no message comes."""
    while not tally.stopping:
        tally.tick(time.time_ns())
        await asyncio.sleep(0.02)


async def _picows_consumer(conn: Connection, url: str, envelope: bool) -> None:
    import orjson
    import picows

    tally = Tally(conn)
    see, clock = tally.see, time.time_ns
    data_kinds = (picows.WSMsgType.TEXT, picows.WSMsgType.BINARY)

    class Listener(picows.WSListener):
        def on_ws_frame(self, transport: Any, frame: Any) -> None:
            now = clock()  # the consumer's first line of code
            if frame.msg_type in data_kinds:
                raw = frame.get_payload_as_bytes()
                if not envelope:
                    see(now, raw, binance_topic(raw))
                    return
                body = orjson.loads(raw)
                if body.get("type") == "msg":
                    raw = body["payload"].encode()
                    see(now, raw, binance_topic(raw), body["recv_ts_ns"])
            elif frame.msg_type == picows.WSMsgType.CLOSE:
                transport.disconnect()

    transport, _ = await picows.ws_connect(Listener, url)
    conn.send(("ready", os.getpid()))
    await _ticking(tally)
    transport.disconnect()


def picows_consumer_main(conn: Connection, url: str, envelope: bool = False) -> None:
    """A picows client of `url`: the simulator itself (the direct client) or /v1/stream
    (with envelope=1 when `envelope`: the payload and the session's read stamp from it)."""
    _run_async(_picows_consumer(conn, url, envelope))


#: The bench's NATS subscriber's connection name, as nats-server's /connz shows it.
NATS_CONSUMER_NAME = "wsgw-feed-consumer"


async def _nats_consumer(conn: Connection, url: str, subject: str) -> None:
    """A nats-py subscriber that records what happens to its connection: nats-server drops
    a subscriber that does not keep up (a slow consumer: core NATS is at-most-once), which
    shows here as a disconnect and reconnect, and in the server's /connz (`NatsMonitor`)."""
    import nats
    import orjson
    from nats.errors import SlowConsumerError

    tally = Tally(conn)
    see, clock, note = tally.see, time.time_ns, tally.note

    async def on_msg(msg: Any) -> None:
        now = clock()  # the consumer's first line of code
        if msg.subject.endswith(".$gap"):  # the sink fell behind, or the session reconnected
            note(f"$gap {orjson.loads(msg.data).get('reason')}")
            return
        see(now, msg.data, binance_topic(msg.data))

    async def on_error(exc: Exception) -> None:
        slow = isinstance(exc, SlowConsumerError)
        note("consumer slow (client side)" if slow else f"consumer error {type(exc).__name__}")

    async def on_disconnected() -> None:
        note("consumer disconnects")

    async def on_reconnected() -> None:
        note("consumer reconnects")

    nc = await nats.connect(
        url,
        name=NATS_CONSUMER_NAME,
        error_cb=on_error,
        disconnected_cb=on_disconnected,
        reconnected_cb=on_reconnected,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.1,
    )
    await nc.subscribe(subject, cb=on_msg, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await nc.flush()
    conn.send(("ready", os.getpid()))
    await _ticking(tally)
    await nc.close()


def nats_consumer_main(conn: Connection, url: str, subject: str) -> None:
    _run_async(_nats_consumer(conn, url, subject))


def sdk_consumer_main(
    conn: Connection, url: str, session: int | None, wait: str, python_read: bool = False
) -> None:
    """The session's messages on NATS or /v1/stream through the consumer SDK
    (`Client.connect`), read in this thread as a ring consumer reads its ring. wait: the
    core NATS reader's policy (the profile's; the stream follows its hello's advice).
    python_read: /v1/stream without the shim's one-call read (WSGW_STREAM_READ=python)."""
    if python_read:
        os.environ["WSGW_STREAM_READ"] = "python"
    from gateway.client import Client

    if url.startswith("nats:"):  # named as the bench's other subscriber: the monitor's /connz
        from gateway.client.nats import NatsSource

        source = NatsSource(url, session=session, name=NATS_CONSUMER_NAME, wait=wait)
        opened = Client(source)
    else:
        opened = Client.connect(url, session=session)
    with opened as client:
        _tally_reads(conn, client)


# ---- the gateway process ------------------------------------------------------------------------
@dataclass(frozen=True)
class GatewayConfig:
    lab_name: str
    transport: str  # "dpdk" or "kernel"
    sink: str  # "ring", "stream" or "nats"
    latency_profile: str
    ring: str
    nats_url: str | None = None
    direct_wake: bool = True
    engine: tuple[tuple[str, Any], ...] = ()
    stream_direct: bool = True
    switch_interval_us: int = 0
    stream_sink: bool = False
    nats_c: bool = False
    nats_busy_sends: int = -1
    engine_sleep: tuple[int, int] | None = None
    engine_slice_us: int | None = None
    park: bool = True
    park_s: float = 0.0


def gateway_main(conn: Connection, cfg: GatewayConfig) -> None:
    """The gateway as `wsgw serve` builds it (as `soak` and `faultsoak` do), with one Binance
    session; says ("ready", session id, /v1/stream URL or "") once messages flow, stops on
    any message."""
    from dataplane.ring import RingWriter
    from gateway.hub import Hub, follower
    from gateway.runtime import PortSpec, SessionSpec
    from gateway.runtime.engines import DpdkEngines
    from gateway.runtime.live import LiveRuntime
    from gateway.settings import Settings

    follower.DIRECT_WAKE = cfg.direct_wake
    follower.PARK = cfg.park
    if cfg.park_s:
        follower.PARK_S = cfg.park_s
    if cfg.switch_interval_us:
        sys.setswitchinterval(cfg.switch_interval_us / 1e6)
    lab = Lab(cfg.lab_name, kernel_client=True)
    state = Path(tempfile.mkdtemp(prefix="wsgw-feed-"))
    with ExitStack() as undo:
        undo.callback(shutil.rmtree, state, ignore_errors=True)
        sink = None
        if cfg.sink == "nats":
            from gateway.hub.nats import NatsConfig, NatsSink

            assert cfg.nats_url is not None
            config = NatsConfig(servers=[cfg.nats_url], c_path=cfg.nats_c)
            if cfg.nats_busy_sends >= 0:
                config = dataclasses.replace(config, c_busy_sends=cfg.nats_busy_sends)
            sink = NatsSink(config).start(10)
        hub = Hub(ring=RingWriter.create(cfg.ring, RING_CAPACITY, replace=True), nats=sink)
        undo.callback(hub.close)
        sid, stream_url = 1, ""
        if cfg.sink == "stream":
            from wsgw_bench.servers import ServerThread, gateway_app

            app = gateway_app(state, hub, auth="none", latency_profile=cfg.latency_profile)
            app.state.stream_direct = cfg.stream_direct
            app.state.stream_sink = cfg.stream_sink
            server = ServerThread(app, uvloop=True).start()
            undo.callback(server.stop)
            # The stream route looks the session up in the control plane's database (the
            # row's transport is not what runs: the runtime below has the session's spec).
            row = {"name": "feed", "url": "ws://198.18.0.1/", "dialect": "binance"}
            sid = app.state.control.sessions.create({**row, "transport": "kernel"}).id
            stream_url = (
                f"{server.ws_url}/v1/stream?session={sid}&topics={','.join(TOPICS)}"
                "&queue_size=100000&consumer=feed"
            )
        settings = Settings(
            dpdk={"hugepages": "off"},  # type: ignore[arg-type]
            latency_profile=cfg.latency_profile,  # type: ignore[arg-type]
            engine=dict(cfg.engine),  # type: ignore[arg-type]
        )
        engines: list[DpdkEngines] = []  # the runtime's, made at its first port

        def make_engines() -> DpdkEngines:
            engines.append(DpdkEngines(settings))
            return engines[-1]

        with lab.client_threads():  # the session loop thread: kernel sockets in the twin
            runtime = LiveRuntime(hub, engine_factory=make_engines, hub=hub)
        undo.callback(runtime.close)
        port_id = None
        host = lab.peer_client_ip
        if cfg.transport == "dpdk":
            port_id, host = 1, lab.peer_ip
            runtime.port_up(PortSpec(1, "feed", lab.vdev, lab.gw_ip, lab.netmask, None, 1500))
            if cfg.engine_sleep is not None:
                set_engine_sleep(engines[0].engine_for(port_id), *cfg.engine_sleep)
            if cfg.engine_slice_us is not None:
                from dataplane.sched import set_thread_slice

                slice_ns = cfg.engine_slice_us * 1000
                engine = engines[0].engine_for(port_id)
                engine.call(lambda: set_thread_slice(slice_ns)).result(10)
        runtime.subscribe(sid, list(TOPICS))
        url = f"ws://{host}:{SIM_PORT}/binance/stream"
        runtime.start_session(SessionSpec(sid, "feed", url, "binance", cfg.transport, port_id))
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while hub.published_total == 0:
            if time.monotonic() > deadline:
                status = runtime.session_status(sid)
                raise RuntimeError(f"no message through the gateway: {status}")
            time.sleep(0.02)
        conn.send(("ready", sid, stream_url))
        while True:
            try:
                cmd = conn.recv()
            except (EOFError, OSError):
                break
            if cmd[0] != "metrics":
                break
            figures = {**gateway_figures(runtime, engines), **nats_sink_figures(hub)}
            conn.send(("metrics", {**figures, "sink lags": sink_lags(hub)}))
        counters = runtime.sessions_snapshot().get(sid, {}).get("counters", {})
        runtime.stop_session(sid)
    with contextlib.suppress(OSError):
        conn.send(("stopped", dict(counters)))


def set_engine_sleep(engine: Any, idle_polls: int, first_nap_ns: int) -> None:
    """A port's engine (dataplane.engine.Engine) backs off as told (on its own thread, at
    its next batch)."""
    fastpath = engine.fastpath
    ceiling = fastpath.config.sleep_max_ns
    engine.call(lambda: fastpath.set_sleep(idle_polls, first_nap_ns, ceiling)).result(10)


def gateway_figures(runtime: Any, engines: Sequence[Any]) -> dict[str, Any]:
    """From the runtime's metrics: "handoff", its in-gateway latency (session read ->
    handed to the hub, which writes the ring record before it returns) by quantile in us,
    over the last bursts it keeps (empty when it has none); the session's "reconnects" and
    "gaps" so far; the engines' port counters."""
    handoff: dict[str, float] = {}
    out: dict[str, Any] = {"handoff": handoff, "reconnects": 0, "gaps": 0}
    for metric in runtime.metrics().metrics:
        if metric.name == "message_latency_seconds":
            handoff[metric.labels["quantile"]] = metric.value * 1e6
        elif metric.name in ("session_reconnects", "session_gaps"):
            out[metric.name.removeprefix("session_")] += int(metric.value)
    out["threads"] = thread_figures()
    details = engines[0].status().details if engines else None
    out["engine"] = {
        k: v for k, v in (details or {}).get("port1", {}).items() if isinstance(v, int)
    }
    return out


def sink_lags(hub: Any) -> tuple[int, list[int]]:
    """The C sink's lag samples (`StreamSink.lags`: per send, ns from its oldest record's
    ring stamp to the send): the hub's stream sink, else the NATS sink's C path; (0, [])
    without either."""
    nats = getattr(hub, "nats", None)
    for sink in (hub._stream_sink, getattr(nats, "_c_sink", None)):
        if sink is not None:
            lags: tuple[int, list[int]] = sink.lags()
            return lags
    return 0, []


def nats_sink_figures(hub: Any) -> dict[str, Any]:
    """The NATS sink's own counters (what `wsgw_nats_*` metrics export), cumulative: "ring"
    records written, "nats sent" (published, by C or nats-py), "nats dropped" by reason
    (buffer_full: skipped past buffer_messages; disconnected: reconnect buffer full; ...),
    "nats pending" (in the ring, not read by the sink yet), "nats reconnects"; {} without
    a NATS sink."""
    from gateway.hub.nats import NatsSink

    sink = hub.nats
    if not isinstance(sink, NatsSink):
        return {}
    out: dict[str, Any] = {
        "ring": hub.published_total,
        "nats sent": sink.stats.published,
        "nats dropped": dict(sink.dropped),
        "nats pending": sink.pending,
        "nats reconnects": sink.stats.reconnects,
    }
    c = sink._c
    if c is not None:  # the C path: who wrote what, C's sends and why it stopped
        from gateway.hub.sink import ST_SENDS

        slot = c.slot
        out["nats c"] = {
            "by C": c.c_published,
            "by Python": c.python_messages,
            "C sends": slot.state()[ST_SENDS] if slot is not None else 0,
            **{f"disarm {reason}": n for reason, n in c.disarms.items()},
        }
    return out


class NatsMonitor:
    """nats-server's monitoring endpoint (`-m`): /varz (server totals, slow_consumers) and
    /connz?state=all (per connection, closed ones too, so a subscriber the server dropped
    still counts). Messages the server took in from the sink's connection(s) ("wsgw") and
    sent out to the bench's subscriber (NATS_CONSUMER_NAME), cumulative."""

    def __init__(self, port: int, sink_name: str = "wsgw") -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.sink_name = sink_name
        self._carried: tuple[int, dict[str, Any]] | None = None

    def carried(self, gateway_pid: int) -> dict[str, Any] | None:
        """The last window's closing counters of this gateway process: the next window
        counts from them, so a drop between two windows (the warm-up) is not missed."""
        if self._carried is None or self._carried[0] != gateway_pid:
            return None
        return self._carried[1]

    def carry(self, gateway_pid: int, counters: dict[str, Any]) -> None:
        self._carried = (gateway_pid, counters)

    def _get(self, path: str) -> dict[str, Any]:
        from urllib.request import urlopen

        with urlopen(f"{self.base}{path}", timeout=5) as reply:  # noqa: S310 - our own server
            data: dict[str, Any] = json.loads(reply.read())
        return data

    def snapshot(self) -> dict[str, int]:
        varz = self._get("/varz")
        out = {
            "server in": 0,
            "server out": 0,
            "slow consumers": int(varz.get("slow_consumers", 0)),
            "subscriber closed slow": 0,
            "sink closed slow": 0,
        }
        connz = self._get("/connz?state=all&limit=100000")
        for c in connz.get("connections") or []:
            name = c.get("name", "")
            slow = "slow consumer" in str(c.get("reason", "")).lower()
            if name == self.sink_name:
                out["server in"] += int(c.get("in_msgs", 0))
                out["sink closed slow"] += slow
            elif name == NATS_CONSUMER_NAME:
                out["server out"] += int(c.get("out_msgs", 0))
                out["subscriber closed slow"] += slow
        return out


#: The counts along a NATS contender's path, in order (`Window.hops`).
NATS_HOPS = (
    "sim emitted",
    "sim written",
    "ring",
    "nats sent",
    "server in",
    "server out",
    "consumer",
)


def nats_window(
    before: dict[str, Any], after: dict[str, Any], received: int
) -> tuple[dict[str, int], dict[str, int]]:
    """A window's counts at each hop of the NATS path (deltas, NATS_HOPS) from the
    simulator's (`Simulator.sent`), the gateway's (`nats_sink_figures`) and nats-server's
    (`NatsMonitor`) counters taken together at the end of the previous window of the same
    gateway (its start for the first) and at its end, "consumer" in the window only, and
    its loss events by
    where they happened: the sink ("nats sink dropped <reason>", its reconnects), the
    server ("nats-server slow consumers": it dropped a subscriber that fell behind)."""
    hops = {hop: after[hop] - before[hop] for hop in NATS_HOPS[:-1]}
    hops["consumer"] = received
    events = {
        f"nats sink dropped {reason}": n - before["nats dropped"].get(reason, 0)
        for reason, n in after["nats dropped"].items()
    }
    events["nats sink reconnects"] = after["nats reconnects"] - before["nats reconnects"]
    events["upstream: session dropped by the simulator"] = after["sim drops"] - before["sim drops"]
    events["upstream: session reconnects"] = after["reconnects"] - before["reconnects"]
    for what in ("slow consumers", "subscriber closed slow", "sink closed slow"):
        events[f"nats-server {what}"] = after[what] - before[what]
    return hops, events


def nats_loss_where(w: Window, before: Window | None = None) -> str:
    """Where a NATS contender's window lost messages, from its events and hops: upstream
    (the simulator dropped the session, or it reconnected: messages the exchange made and
    never wrote to it), the gateway's sink (its drop counters), nats-server (a slow
    consumer); "unexplained" when none of them counted anything; "" without a loss. A drop
    at the end of a window shows as a jump in the next one: `before`'s (the same turn's
    window before) events count too."""
    if not w.lost or not w.hops:
        return ""
    e: dict[str, int] = dict(w.events)
    for k, n in (before.events if before is not None else {}).items():
        e[k] = e.get(k, 0) + n
    where: list[str] = []
    if any(e.get(k) for k in ("dropped by the simulator", "reconnects")) or any(
        n for k, n in e.items() if k.startswith("upstream:")
    ):
        unsent = w.hops["sim emitted"] - w.hops["sim written"]
        made = f" ({unsent} made, not written, in the span)" if unsent > 0 else ""
        where.append(f"upstream, the exchange dropped the session or it reconnected{made}")
    sink = sum(n for k, n in e.items() if k.startswith("nats sink dropped"))
    if sink:
        where.append(f"the gateway's NATS sink dropped {sink}")
    if e.get("nats-server subscriber closed slow") or e.get("consumer disconnects"):
        where.append("nats-server dropped the subscriber (slow consumer)")
    if e.get("nats-server sink closed slow"):
        where.append("nats-server dropped the gateway's connection (slow consumer)")
    return "; ".join(where) or "unexplained"


def _log_slow_consumers(nats: Any, log: Callable[[str], None]) -> None:
    """nats-server's own lines about slow consumers (which connection, why), before its
    folder goes."""
    for line in nats.log_text.splitlines():
        if "slow consumer" in line.lower():
            log(f"nats-server: {line}")


def thread_figures() -> dict[str, tuple[int, int, int, int]]:
    """Per thread of this process ("comm/tid"): CPU ns, run-queue wait ns and time slices
    (/proc/self/task/*/schedstat), and voluntary context switches (its sleeps: wake-ups)."""
    out: dict[str, tuple[int, int, int, int]] = {}
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError, ValueError):
            run, wait, slices = (int(x) for x in (task / "schedstat").read_text().split())
            status = (task / "status").read_text()
            voluntary = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            out[f"{(task / 'comm').read_text().strip()}/{task.name}"] = (
                run,
                wait,
                slices,
                voluntary,
            )
    return out


def engine_rates(before: dict[str, Any], after: dict[str, Any], seconds: float) -> dict[str, float]:
    """The engine's counters (`gateway_figures`) per second over a window; {} without one."""
    e0, e1 = before.get("engine", {}), after.get("engine", {})
    return {k: (v - e0.get(k, 0)) / seconds for k, v in e1.items()}


def probe_lines(before: dict[str, Any], after: dict[str, Any], seconds: float) -> list[str]:
    """What the gateway's threads and engine did in a window (`gateway_figures` before and
    after): per thread CPU %, run-queue wait per second and wake-ups per second; the
    engine's polls, naps (asked length), naps a frame ended, bursts and frames per burst."""
    lines = []
    t0, t1 = before.get("threads", {}), after.get("threads", {})
    for name, (run, wait, _slices, vol) in sorted(t1.items()):
        r0, w0, _s0, v0 = t0.get(name, (0, 0, 0, 0))
        if run - r0 < 0.002 * seconds * 1e9:
            continue  # under 0.2 % of a CPU: not on the path
        lines.append(
            f"  thread {name:24} cpu {100 * (run - r0) / seconds / 1e9:5.1f}% runq wait "
            f"{(wait - w0) / seconds / 1e6:6.1f} ms/s wakes {(vol - v0) / seconds:8.0f}/s"
        )
    if t1:
        names = sorted({name.split("/")[0] for name in t1})
        lines.append(f"  threads {len(t1)}: {', '.join(names)}")
    c0, c1 = before.get("nats c", {}), after.get("nats c", {})
    if c1:
        lines.append(
            "  nats C/s: "
            + " ".join(f"{k} {(n - c0.get(k, 0)) / seconds:.0f}" for k, n in sorted(c1.items()))
        )
    d = engine_rates(before, after, seconds)
    if d:
        naps, bursts = d.get("c_sleeps", 0.0), d.get("c_rx_bursts", 0.0)
        lines.append(
            f"  engine/s: polls {d.get('c_polls', 0.0):.0f} naps {naps:.0f} (asked "
            f"{d.get('c_sleep_ns', 0.0) / max(naps, 1e-9) / 1e3:.0f} us each) ended by a frame "
            f"{d.get('c_rx_wakes', 0.0):.0f} bursts {bursts:.0f} "
            f"({d.get('c_rx_frames', 0.0) / max(bursts, 1e-9):.2f} frames each) empty polls "
            f"{d.get('c_empty_polls', 0.0):.0f}"
        )
    return lines


# ---- processes (this side) -----------------------------------------------------------------------
class Proc:
    """A child process driven through a pipe; its first message is ("ready", ...)."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        self.conn, child = CTX.Pipe()
        self.proc = CTX.Process(target=target, args=(child, *args), daemon=True)
        self.proc.start()
        child.close()
        self.ready = self.expect("ready", STARTUP_TIMEOUT, f"{target.__name__} start")

    @property
    def pid(self) -> int:
        assert self.proc.pid is not None
        return self.proc.pid

    def expect(self, what: str, timeout: float, doing: str) -> tuple[Any, ...]:
        if not self.conn.poll(timeout):
            self.close()
            raise RuntimeError(f"{doing}: no answer in {timeout:.0f} s")
        try:
            reply: tuple[Any, ...] = self.conn.recv()
        except EOFError:
            self.close()
            raise RuntimeError(f"{doing}: the process ended (exit {self.proc.exitcode})") from None
        if reply[0] != what:
            raise RuntimeError(f"{doing}: {reply!r}")
        return reply

    def send(self, *msg: Any) -> None:
        self.conn.send(msg)

    def close(self, timeout: float = 15.0) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        self.proc.join(timeout)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(5)


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Simulator:
    """The feed simulator in the lab's namespace, its rate set on its stdin."""

    def __init__(self, lab: Lab, rate: float) -> None:
        per_topic = rate / len(TOPICS)
        every = "0.0.0.0"  # noqa: S104 - both veths, the DPDK one and the twin's
        self.proc = start_simulator(lab, SIM_PORT, per_topic, host=every, stdin=True)
        assert self.proc.stdout is not None
        self.proc.stdout.readline()  # the JSON line describing the server

    def set_rate(self, rate: float) -> None:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(f"rate rate={rate / len(TOPICS)!r}\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline()
        if '"ok": true' not in answer:
            raise RuntimeError(f"the simulator did not take the rate: {answer!r}")

    def slow_consumer_drops(self) -> int:
        """Connections the simulator dropped so far for a backlog over its limit (as an
        exchange drops a consumer that does not keep up)."""
        return int(self._stats()["counters"]["slow_consumers"])

    def sent(self) -> dict[str, int]:
        """Data messages the simulator made ("sim emitted": the topics' sequence numbers, so
        also those while no one subscribed) and wrote to connections ("sim written"); with
        one subscriber the difference is what never left the exchange: the backlog of a
        dropped slow consumer, the messages of a reconnect's outage."""
        stats = self._stats()
        return {
            "sim emitted": sum(stats["sent_per_topic"].values()),
            "sim written": int(stats["counters"]["data_messages"]),
            "sim drops": int(stats["counters"]["slow_consumers"]),
        }

    def _stats(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        stats: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return stats

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


@dataclass
class Window:
    """One contender's figures at one rate in one round."""

    rate: float
    seconds: float
    count: int
    lost: int
    reordered: int
    latency: list[int]  # ns, sorted
    to_read: list[int]  # ns, sorted (ring contenders)
    from_read: list[int]
    cpu: dict[str, float] = field(default_factory=dict)  # process -> % of one CPU
    #: The gateway's session read -> handed to the hub, p50 in us (`gateway_figures`).
    handoff_p50: float = float("nan")
    #: What the window's losses came from: "lapped" (ring records the reader lost),
    #: "reconnects" (of the session), "dropped by the simulator" (slow consumer); NATS
    #: contenders: the sink's drops and reconnects, nats-server's slow consumers, the
    #: subscriber's disconnects (`nats_window`, `_nats_consumer`).
    events: dict[str, int] = field(default_factory=dict)
    #: NATS contenders: messages counted at each hop in the window (NATS_HOPS), so a loss
    #: shows where the count falls.
    hops: dict[str, int] = field(default_factory=dict)
    #: The gateway's threads and engine in the window (`probe_lines`; printed with
    #: WSGW_FEED_PROBE=1) and the engine's counters per second (`engine_rates`).
    probe: list[str] = field(default_factory=list)
    engine: dict[str, float] = field(default_factory=dict)
    #: The C sink's sends in the window (sorted, ns): the session's read -> the sink's send
    #: of the record (`sink_lags`; at most the newest 1024).
    sink_lag: list[int] = field(default_factory=list)


def percentile(ordered: list[int], p: float) -> float:
    """The p-th percentile (nearest rank) of sorted ns, in us; NaN when empty."""
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(len(ordered) * p / 100))] / 1e3


def _sorted(raw: bytes) -> list[int]:
    values = array("q")
    values.frombytes(raw)
    return sorted(values)


@contextlib.contextmanager
def running(
    contender: Contender, lab: Lab, nats_url: str | None, tag: str
) -> Iterator[tuple[Proc, Proc | None]]:
    """The contender's consumer (and gateway), up and receiving until the block ends."""
    from dataplane.ring import ring_path

    gateway: Proc | None = None
    consumer: Proc | None = None
    ring = f"wsgw-feed{os.getpid()}{tag}-messages"
    undo = ExitStack()  # host-level settings the contender changes, restored last
    try:
        if contender.profile.halt_poll_ns is not None:
            from wsgw_bench.wake import halt_poll_window

            undo.enter_context(halt_poll_window(contender.profile.halt_poll_ns))
        if contender.transport is None:
            streams = "/".join(TOPICS)
            url = f"ws://{lab.peer_client_ip}:{SIM_PORT}/binance/stream?streams={streams}"
            with lab.client_threads():  # its process is forked from this thread: the twin
                consumer = Proc(picows_consumer_main, url)
        else:
            cfg = GatewayConfig(
                lab.name,
                contender.transport,
                contender.sink,
                contender.profile.latency_profile,
                ring,
                nats_url,
                contender.profile.direct_wake,
                contender.profile.engine,
                contender.profile.stream_direct,
                contender.profile.switch_interval_us,
                contender.profile.stream_sink,
                contender.profile.nats_c,
                contender.profile.nats_busy_sends,
                contender.profile.engine_sleep,
                contender.profile.engine_slice_us,
                contender.profile.park,
                contender.profile.park_s,
            )
            gateway = Proc(gateway_main, cfg)
            sid, stream_url = gateway.ready[1], gateway.ready[2]
            if contender.sink == "ring":
                from gateway.hub.names import ring_topics

                topics = ring_topics(sid, list(TOPICS), gaps=False)
                profile = contender.profile
                consumer = Proc(
                    ring_consumer_main,
                    ring,
                    topics,
                    profile.reader_wait,
                    profile.reader_cpu,
                    profile.fused_read,
                    profile.reader_slice_ns,
                )
            elif contender.sink == "stream" and contender.profile.sdk:
                python_read = contender.profile.sdk_python_read
                consumer = Proc(sdk_consumer_main, stream_url, None, WAIT_AUTO, python_read)
            elif contender.sink == "stream" and contender.envelope:
                consumer = Proc(picows_consumer_main, f"{stream_url}&envelope=1", True)
            elif contender.sink == "stream":
                consumer = Proc(picows_consumer_main, stream_url)
            elif contender.profile.sdk:
                assert nats_url is not None
                consumer = Proc(sdk_consumer_main, nats_url, sid, contender.profile.reader_wait)
            else:
                assert nats_url is not None
                consumer = Proc(nats_consumer_main, nats_url, f"wsgw.{sid}.*")
        yield consumer, gateway
    finally:
        if consumer is not None:
            consumer.close()
        if gateway is not None:
            gateway.close()
        ring_path(ring).unlink(missing_ok=True)
        undo.close()


def measure_window(
    plan: Plan,
    rate: float,
    sim: Simulator,
    consumer: Proc,
    gateway: Proc | None,
    nats: NatsMonitor | None = None,
) -> Window:
    """Set the rate, let it settle, time one window."""
    sim.set_rate(rate)
    t0 = time.time_ns() + int(plan.warmup * 1e9)
    t1 = t0 + int(plan.measure * 1e9)
    consumer.send("window", t0, t1)
    pids = {"consumer": consumer.pid, "simulator": sim.proc.pid}
    if gateway is not None:
        pids["gateway"] = gateway.pid

    def figures() -> dict[str, Any]:
        if gateway is None:
            return {"handoff": {}, "reconnects": 0, "gaps": 0}
        gateway.send("metrics")
        return dict(gateway.expect("metrics", 30.0, "the gateway's metrics")[1])

    time.sleep(max(0.0, (t0 - time.time_ns()) / 1e9))
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    drops_before, gw_before = sim.slow_consumer_drops(), figures()
    path_before = None
    if nats is not None and gateway is not None and "ring" in gw_before:
        path_before = nats.carried(gateway.pid) or {**gw_before, **sim.sent(), **nats.snapshot()}
    time.sleep(max(0.0, (t1 - time.time_ns()) / 1e9))
    after = {name: cpu_seconds(pid) for name, pid in pids.items()}
    drops_after, gw_after = sim.slow_consumer_drops(), figures()
    path_after = {**gw_after, **sim.sent(), **nats.snapshot()} if path_before and nats else None
    result = consumer.expect("result", 30.0 + plan.measure, "the consumer's window")[1]
    seconds = (t1 - t0) / 1e9
    events = {
        "lapped": result["lapped"],
        "reconnects": gw_after["reconnects"] - gw_before["reconnects"],
        "dropped by the simulator": drops_after - drops_before,
        **result["events"],
    }
    hops: dict[str, int] = {}
    if path_before is not None and path_after is not None and nats and gateway:
        nats.carry(gateway.pid, path_after)
        hops, nats_events = nats_window(path_before, path_after, result["count"])
        events.update(nats_events)
    return Window(
        rate,
        seconds,
        result["count"],
        result["lost"],
        result["reordered"],
        _sorted(result["latency"]),
        _sorted(result["to_read"]),
        _sorted(result["from_read"]),
        {name: 100 * (after[name] - before[name]) / seconds for name in pids},
        gw_after["handoff"].get("0.5", float("nan")),
        events,
        hops,
        probe_lines(gw_before, gw_after, seconds),
        engine_rates(gw_before, gw_after, seconds),
        window_lags(gw_before, gw_after),
    )


def window_lags(before: dict[str, Any], after: dict[str, Any]) -> list[int]:
    """The sink's lag samples taken between two `figures` (sorted ns)."""
    (n0, _), (n1, samples) = before.get("sink lags", (0, [])), after.get("sink lags", (0, []))
    new = min(n1 - n0, len(samples))
    return sorted(samples[len(samples) - new :]) if new > 0 else []


def run_feed(
    plan: Plan,
    lab_name: str,
    contenders: tuple[str, ...] = CONTENDERS,
    log: Callable[[str], None] = print,
) -> dict[str, list[Window]]:
    """Every contender's windows, rounds alternating (module doc); everything it made is
    gone when it returns or raises."""
    from multiprocessing import resource_tracker

    from wsgw_bench.servers import NatsServer, nats_server_binary

    # multiprocessing starts its resource tracker with the first spawned process; started
    # from the thread in the twin namespace (the direct client's), it exited at once and
    # stayed a zombie of this process: start it here.
    resource_tracker.ensure_running()
    lab = Lab(lab_name, kernel_client=True)
    windows: dict[str, list[Window]] = {c: [] for c in contenders}
    with ExitStack() as undo:
        lab.down()
        undo.callback(lab.down)
        lab.up()
        sim = Simulator(lab, plan.rates[0])
        undo.callback(sim.close)
        nats_url, monitor = None, None
        if any(CONTENDER_SPECS[c].sink == "nats" for c in contenders):
            if nats_server_binary() is None:
                log("no nats-server: the nats contenders are left out")
                contenders = tuple(c for c in contenders if CONTENDER_SPECS[c].sink != "nats")
                for name in list(windows):
                    if name not in contenders:
                        del windows[name]
            else:
                nats = NatsServer(monitor=True).start()
                undo.callback(nats.cleanup)
                undo.callback(_log_slow_consumers, nats, log)
                nats_url = nats.url
                assert nats.monitor_port is not None
                monitor = NatsMonitor(nats.monitor_port)
        for k, (round_, name) in enumerate(alternate(plan.rounds, list(contenders))):
            spec = CONTENDER_SPECS[name]
            with running(spec, lab, nats_url, f"r{k}") as (consumer, gateway):
                before: Window | None = None
                for rate in plan.rates:
                    w = measure_window(plan, rate, sim, consumer, gateway, monitor)
                    windows[name].append(w)
                    where = nats_loss_where(w, before)
                    before = w
                    log(
                        f"round {round_ + 1} {name:32} {rate:>8.0f} msg/s: got "
                        f"{w.count / w.seconds:8.0f} msg/s p50 {percentile(w.latency, 50):7.0f} "
                        f"p99 {percentile(w.latency, 99):7.0f} us"
                        + (f" (read->sink {percentile(w.sink_lag, 50):.0f})" if w.sink_lag else "")
                        + f" lost {w.lost} reordered "
                        f"{w.reordered} cpu "
                        + " ".join(f"{p} {c:.0f}%" for p, c in sorted(w.cpu.items()))
                        + "".join(f"; {cause} {n}" for cause, n in w.events.items() if n)
                        + (
                            " | " + " > ".join(f"{h} {n}" for h, n in w.hops.items())
                            if w.hops
                            else ""
                        )
                        + (f" | lost where: {where}" if where else "")
                    )
                    if os.environ.get("WSGW_FEED_PROBE"):
                        for line in w.probe:
                            log(line)
    return windows


# ---- the report -------------------------------------------------------------------------------
def rate_label(rate: float) -> str:
    return f"{rate / 1000:g}k msg/s" if rate >= 1000 else f"{rate:g} msg/s"


def measurements(plan: Plan, windows: dict[str, list[Window]]) -> list[Measurement]:
    out: list[Measurement] = []
    for rate in plan.rates:
        label = rate_label(rate)
        for metric, unit, higher, value in (
            ("delivered", "msg/s", True, lambda w: w.count / w.seconds),
            ("latency p50", "us", False, lambda w: percentile(w.latency, 50)),
            ("latency p99", "us", False, lambda w: percentile(w.latency, 99)),
            ("latency p99.9", "us", False, lambda w: percentile(w.latency, 99.9)),
            ("messages lost", "msgs", False, lambda w: float(w.lost)),
            ("messages reordered", "msgs", False, lambda w: float(w.reordered)),
            ("send -> session read p50", "us", False, lambda w: percentile(w.to_read, 50)),
            ("session read -> consumer p50", "us", False, lambda w: percentile(w.from_read, 50)),
            ("session read -> hub p50", "us", False, lambda w: w.handoff_p50),
            ("session read -> sink send p50", "us", False, lambda w: percentile(w.sink_lag, 50)),
            ("CPU gateway", "%", False, lambda w: w.cpu.get("gateway", float("nan"))),
            ("CPU consumer", "%", False, lambda w: w.cpu["consumer"]),
            ("CPU simulator", "%", False, lambda w: w.cpu["simulator"]),
        ):
            for name, ws in windows.items():
                at = [w for w in ws if w.rate == rate]
                samples = [value(w) for w in at]
                if all(math.isnan(s) for s in samples):  # NaN: not measured for this contender
                    continue
                m = Measurement(
                    SCENARIO, f"{label}: {metric}", name, unit, higher, samples, name == DIRECT
                )
                if metric == "delivered":
                    m.note = (
                        f"{len(at)} rounds of {plan.measure:g} s after {plan.warmup:g} s; "
                        f"{sum(w.count for w in at)} msgs timed"
                    )
                elif metric == "messages lost":
                    m.note = loss_causes(at)
                out.append(m)
    return out


def loss_causes(windows: list[Window]) -> str:
    """What the windows' losses came with, summed, for the note ("" when nothing did)."""
    totals: dict[str, int] = {}
    for w in windows:
        for cause, n in w.events.items():
            totals[cause] = totals.get(cause, 0) + n
    causes = [f"{cause} {n}" for cause, n in totals.items() if n]
    return ("in the windows: " + ", ".join(causes)) if causes else ""


def plot(plan: Plan, windows: dict[str, list[Window]], path: Path) -> Path:
    """p50 and p99 against the rate, one line per contender (medians over the rounds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    for ax, p in zip(axes, (50.0, 99.0), strict=True):
        for name, ws in windows.items():
            ys = [
                statistics.median(percentile(w.latency, p) for w in ws if w.rate == rate)
                for rate in plan.rates
            ]
            style = "k--" if name == DIRECT else "-"
            ax.plot(plan.rates, ys, style, marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("feed rate, msg/s (all topics)")
        ax.set_ylabel("us, exchange send -> consumer")
        ax.set_title(f"p{p:g}")
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("wsgw bench feed: latency against rate (median over rounds)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


@scenario(
    SCENARIO,
    "exchange send -> consumer's code: wsgw (ring, /v1/stream, NATS) vs a direct picows client",
    needs_root=True,
)
def bench_feed(options: BenchOptions) -> list[Measurement]:
    plan = plan_for(options)
    log = scenario_log(SCENARIO)
    windows = run_feed(plan, unique_lab_name(options, "feed"), log=log)
    if options.out is not None:
        log(f"wrote {plot(plan, windows, options.out / 'feed_latency.png')}")
    return measurements(plan, windows)


def summary(plan: Plan, windows: dict[str, list[Window]]) -> list[str]:
    """One line per contender and rate: medians over the rounds of p50, p99, the split and
    CPU, the ratio of the p50 to the direct client's when it ran, losses summed."""
    lines = []
    for rate in plan.rates:
        ref = [w for w in windows.get(DIRECT, []) if w.rate == rate]
        ref_p50 = statistics.median(percentile(w.latency, 50) for w in ref) if ref else None
        for name, ws in windows.items():
            at = [w for w in ws if w.rate == rate]
            if not at:
                continue

            def med(values: list[float]) -> float:
                return statistics.median(values)

            p50 = med([percentile(w.latency, 50) for w in at])
            ratio = f" {p50 / ref_p50:5.2f}x" if ref_p50 else ""
            split = ""
            if at[0].to_read:
                split = (
                    f" split {med([percentile(w.to_read, 50) for w in at]):.0f}"
                    f" + {med([percentile(w.from_read, 50) for w in at]):.0f} us"
                )
            if at[0].sink_lag:
                split += f" read->sink send {med([percentile(w.sink_lag, 50) for w in at]):.0f} us"
            cpu = " ".join(f"{p} {med([w.cpu[p] for w in at]):.0f}%" for p in sorted(at[0].cpu))
            lines.append(
                f"{rate_label(rate):>10} {name:42} p50 {p50:6.0f}{ratio} p99 "
                f"{med([percentile(w.latency, 99) for w in at]):6.0f} us{split} lost "
                f"{sum(w.lost for w in at)} reordered {sum(w.reordered for w in at)} cpu {cpu}"
            )
    return lines


def main(argv: list[str] | None = None) -> None:
    """`python -m wsgw_bench.feed --contenders "A;B" --rates 100,1000 --rounds 3`: a chosen set of
    contenders alternated in one run (a before/after comparison), medians printed."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m wsgw_bench.feed", description=main.__doc__)
    parser.add_argument("--contenders", default=";".join(CONTENDERS), help="names, separated by ;")
    parser.add_argument("--rates", default="100,1000,10000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--lab", default=None)
    args = parser.parse_args(argv)
    chosen = tuple(c.strip() for c in args.contenders.split(";") if c.strip())
    unknown = [c for c in chosen if c not in CONTENDER_SPECS]
    if unknown:
        parser.error(f"unknown contender {unknown[0]!r}; known: {', '.join(CONTENDER_SPECS)}")
    rates = tuple(float(r) for r in args.rates.split(","))
    plan = Plan(rates, args.warmup, args.seconds, args.rounds)
    lab = args.lab or unique_lab_name(BenchOptions(), "feed")
    windows = run_feed(plan, lab, chosen, log=scenario_log(SCENARIO))
    for line in summary(plan, windows):
        print(line, flush=True)


if __name__ == "__main__":
    main()
