"""A feed group of one DPDK leg and one kernel leg on the lab (issue #19): leg A through the
DPDK engine's port on the lab's veth, leg B over OS sockets from the lab's kernel twin
namespace, both to the simulator process in the peer namespace (its feed group, legs A and
B), configured through the control plane and served by the real API server.

- A's link cut (its peer-side veth down, then up), A reset and B reset, repeatedly: the
  group's ring consumer and its /v1/stream consumer see every message once and in order,
  and no gap;
- both legs down at once (both links cut for half a second, both connections reset behind
  the cut): one gap of the group, its count the messages neither leg got, and the stream
  goes on in order after it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from websockets.sync.client import connect

from api.app import create_app
from dataplane.ring import RingReader, RingWriter
from gateway.control import ControlPlane
from gateway.groups.feed import group_hub_id
from gateway.hub import Hub
from gateway.hub.names import RING_GAP_TOPIC
from gateway.lab import Lab
from gateway.runtime import SessionState
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import LiveRuntime
from gateway.settings import Settings
from gateway.simulator import with_group
from tests.conftest import fresh_lab, requires_dpdk
from tests.integration.test_groups_helpers import create_group, group_reader
from tests.integration.test_sessions_helpers import local_settings, wait_for
from tests.integration.test_sessions_runtime import quick
from tests.utils.ring_records import records_of
from wsgw_bench.failover import GROUP, SIM_PORT, Upstream
from wsgw_bench.servers import ServerThread

pytestmark = [requires_dpdk, pytest.mark.dpdk]
TOPIC = "btcusdt@trade"
RATE = 500.0  # messages/s on the one topic


@dataclass
class Seen:
    """What one consumer got of the group's stream: sim_seqs and gap records, in order."""

    seqs: list[int] = field(default_factory=list)
    gaps: list[dict[str, Any]] = field(default_factory=list)
    events: list[tuple[str, int]] = field(default_factory=list)  # ("msg", seq) / ("gap", n)

    def message(self, payload: bytes) -> None:
        seq = int(orjson.loads(payload)["sim_seq"])
        self.seqs.append(seq)
        self.events.append(("msg", seq))

    def gap(self, record: dict[str, Any]) -> None:
        self.gaps.append(record)
        self.events.append(("gap", len(self.gaps)))


class StreamConsumer(threading.Thread):
    """/v1/stream?group=ID with envelopes, on a thread of its own until stopped."""

    def __init__(self, url: str) -> None:
        super().__init__(name="group-stream-consumer", daemon=True)
        self.url = url
        self.seen = Seen()
        self.hello: dict[str, Any] = {}
        self.error = ""
        self.ready = threading.Event()
        self._stop_reading = threading.Event()

    def run(self) -> None:
        try:
            with connect(self.url, open_timeout=10, max_size=None) as ws:
                self.hello = orjson.loads(ws.recv(timeout=10))
                self.ready.set()
                while not self._stop_reading.is_set():
                    try:
                        frame = orjson.loads(ws.recv(timeout=0.2))
                    except TimeoutError:
                        continue
                    if frame["type"] == "msg":
                        self.seen.message(frame["payload"].encode())
                    elif frame["type"] == "gap":
                        self.seen.gap(frame)
        except Exception as exc:  # reported by the test
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.ready.set()

    def stop(self) -> None:
        self._stop_reading.set()
        self.join(10)


@dataclass
class Mixed:
    lab: Lab
    upstream: Upstream
    runtime: LiveRuntime
    control: ControlPlane
    server: ServerThread
    reader: RingReader
    group_id: int
    legs: dict[str, int]  # leg name -> session id
    ring_seen: Seen = field(default_factory=Seen)

    @property
    def hub_id(self) -> int:
        return group_hub_id(self.group_id)

    def pull(self) -> None:
        for event in records_of(self.reader, self.hub_id):
            if event.topic == RING_GAP_TOPIC:
                self.ring_seen.gap(orjson.loads(bytes(event.payload)))
            else:
                self.ring_seen.message(bytes(event.payload))

    def legs_figures(self) -> list[dict[str, Any]]:
        figures = self.control.groups.figures(self.group_id)
        assert figures is not None
        legs: list[dict[str, Any]] = figures["legs"]
        return legs

    def caught_up(self) -> None:
        """Both legs streaming and past what the faster one had: a fault is over."""
        target = max(leg["newest_id"] or 0 for leg in self.legs_figures())
        wait_for(
            lambda: all(
                leg["live"] and (leg["newest_id"] or 0) >= target + 100
                for leg in self.legs_figures()
            ),
            "both legs caught up",
        )
        self.pull()

    def downs(self, leg: str) -> int:
        index = list(self.legs).index(leg)
        downs: int = self.legs_figures()[index]["downs"]
        return downs

    def reset(self, leg: str) -> None:
        downs = self.downs(leg)
        self.upstream.reset(leg)
        wait_for(lambda: self.downs(leg) > downs, f"leg {leg} reset")

    def back_after_both_reset(self, downs: list[int]) -> None:
        """Both legs went down (each past its `downs` count), came back and caught up, and
        the group's gap is in."""
        wait_for(
            lambda: all(self.downs(leg) > n for leg, n in zip(self.legs, downs, strict=True)),
            "both legs reset",
        )
        self.caught_up()
        wait_for(lambda: (self.pull(), bool(self.ring_seen.gaps))[1], "the group's gap")
        self.caught_up()

    def set_links(self, state: str) -> None:
        """Both peer-side veths (the DPDK leg's and the kernel twin's) `up` or `down`."""
        for iface in (self.lab.peer_if, self.lab.peer_client_if):
            self.lab.exec(["ip", "link", "set", iface, state])

    def cut_dpdk_link(self, seconds: float) -> None:
        self.lab.exec(["ip", "link", "set", self.lab.peer_if, "down"])
        try:
            time.sleep(seconds)
        finally:
            self.lab.exec(["ip", "link", "set", self.lab.peer_if, "up"])


@pytest.fixture
def mixed(eal: Any, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Mixed]:
    name = f"gm{abs(hash(request.node.nodeid)) % 100000}"[:10]
    with fresh_lab(name, kernel_client=True) as lab:
        upstream = Upstream(lab, RATE)
        ring = RingWriter.create(None, 1 << 24)
        hub = Hub(ring=ring)
        engine_settings = Settings(engine={"mode": "loop"})  # type: ignore[arg-type]
        server: ServerThread | None = None
        reader: RingReader | None = None
        try:
            with lab.client_threads():  # the session loop: the kernel leg's sockets in the twin
                runtime = LiveRuntime(
                    hub,
                    hub=hub,
                    engine_factory=lambda: DpdkEngines(engine_settings),
                    session_config=quick,
                )
            server = ServerThread(create_app(local_settings(tmp_path), runtime, hub=hub)).start()
            control: ControlPlane = server.config.app.state.control
            port = control.ports.create(
                {"name": "lab", "device": lab.vdev, "ipv4": lab.gw_ip, "netmask": lab.netmask}
            )
            values: dict[str, dict[str, Any]] = {
                leg: {
                    "url": with_group(f"ws://{host}:{SIM_PORT}/binance/stream", GROUP, leg),
                    "dialect": "binance",
                    "transport": transport,
                }
                for leg, transport, host in (
                    ("A", "dpdk", lab.peer_ip),
                    ("B", "kernel", lab.peer_client_ip),
                )
            }
            values["A"]["port_id"] = port.id
            group_id, legs = create_group(control, values, TOPIC, name="mixed")
            reader = group_reader(ring, group_id)
            for sid in legs.values():
                wait_for(
                    lambda sid=sid: runtime.session_status(sid).state is SessionState.CONNECTED,
                    f"session {sid} connected",
                )
            yield Mixed(lab, upstream, runtime, control, server, reader, group_id, legs)
        finally:
            if reader is not None:
                reader.close()
            if server is not None:
                server.stop()  # the control plane's shutdown closes the runtime and the hub
            else:
                runtime.close()
            ring.close()
            upstream.close()


def in_order_once(seqs: list[int]) -> bool:
    return bool(seqs) and seqs == list(range(seqs[0], seqs[0] + len(seqs)))


def test_dpdk_link_cuts_and_resets_of_either_leg_lose_and_repeat_nothing(mixed: Mixed) -> None:
    url = f"{mixed.server.ws_url}/v1/stream?group={mixed.group_id}&topics={TOPIC}&envelope=1"
    consumer = StreamConsumer(url)
    consumer.start()
    try:
        assert consumer.ready.wait(15) and not consumer.error, consumer.error
        assert consumer.hello["session"] == mixed.hub_id
        mixed.caught_up()
        for _ in range(2):
            mixed.cut_dpdk_link(1.5)
            mixed.caught_up()
            mixed.reset("A")
            mixed.caught_up()
            mixed.reset("B")
            mixed.caught_up()
        last = mixed.ring_seen.seqs[-1]
        wait_for(lambda: bool(consumer.seen.seqs) and consumer.seen.seqs[-1] >= last, "the stream")
    finally:
        consumer.stop()
    assert not consumer.error, consumer.error
    ring, stream = mixed.ring_seen, consumer.seen
    assert ring.gaps == [] and stream.gaps == [], (ring.gaps, stream.gaps)
    assert len(ring.seqs) > 1000
    assert in_order_once(ring.seqs) and in_order_once(stream.seqs)
    assert stream.seqs[0] in ring.seqs  # the stream joined later: the same stream from there
    figures = mixed.control.groups.figures(mixed.group_id)
    assert figures is not None
    assert figures["gaps"] == 0 and figures["lost"] == 0 and figures["duplicates"] > 0
    assert all(leg["won"] > 0 and leg["downs"] >= 2 for leg in figures["legs"])


def test_both_legs_down_is_one_gap_with_the_count_neither_leg_got(mixed: Mixed) -> None:
    url = f"{mixed.server.ws_url}/v1/stream?group={mixed.group_id}&topics={TOPIC}&envelope=1"
    consumer = StreamConsumer(url)
    consumer.start()
    try:
        assert consumer.ready.wait(15) and not consumer.error, consumer.error
        mixed.caught_up()
        # Both legs cut off while the stream goes on (into their connections' buffers), then
        # their connections reset behind the cut: the simulator forgets them with what it
        # held for them. (Reset alone is not enough: a topic nobody subscribes pauses in the
        # simulator, so both legs reset at once would lose nothing.) The links come back,
        # each leg finds its connection gone and reconnects.
        downs = [mixed.downs(leg) for leg in mixed.legs]
        mixed.set_links("down")
        try:
            time.sleep(0.5)
            mixed.upstream.reset_group()
        finally:
            mixed.set_links("up")
        mixed.back_after_both_reset(downs)
        last = mixed.ring_seen.seqs[-1]
        wait_for(lambda: bool(consumer.seen.seqs) and consumer.seen.seqs[-1] >= last, "the stream")
    finally:
        consumer.stop()
    assert not consumer.error, consumer.error
    for seen in (mixed.ring_seen, consumer.seen):
        (gap,) = seen.gaps
        assert gap["session"] == mixed.hub_id
        at = seen.events.index(("gap", 1))
        before = [seq for kind, seq in seen.events[:at] if kind == "msg"]
        after = [seq for kind, seq in seen.events[at + 1 :] if kind == "msg"]
        assert in_order_once(before) and in_order_once(after)
        assert gap["lost"] == after[0] - before[-1] - 1 > 0  # the messages neither leg got
    figures = mixed.control.groups.figures(mixed.group_id)
    assert figures is not None
    assert figures["gaps"] == 1 and figures["lost"] == mixed.ring_seen.gaps[0]["lost"]
