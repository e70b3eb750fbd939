"""Feed groups arbitrated in C on the engine's path (issue #19), on the lab: four DPDK legs
of one simulator group `g` (identical bytes on each), two of them in a group arbitrated in C
(their C feeds write through the group's arbiter inside the engine's poll), two in a group
on the Python path (the reference). The same faults on both: one leg skips a message (no
gap), every leg skips one (a gap of 1), one leg reset, then the other. Both groups' ring
records are the same messages in the same order, once each, with the same gap."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from dataplane.ring import RingReader, RingWriter
from gateway.groups.feed import GroupSpec, group_hub_id
from gateway.hub import Hub
from gateway.hub.names import RING_GAP_TOPIC, ring_topics
from gateway.lab import Lab
from gateway.runtime import PortSpec, SessionSpec, SessionState
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import LiveRuntime
from gateway.settings import Settings
from gateway.simulator import with_group
from gateway.simulator.process import running_simulator, send_command
from tests.conftest import requires_dpdk
from tests.integration.test_sessions_helpers import wait_for
from tests.integration.test_sessions_runtime import quick
from tests.utils.ring_records import records_of

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SIM_PORT = 9610
TOPIC = "btcusdt@trade"
C_GROUP, PY_GROUP = 7, 8
LEGS = {C_GROUP: {"A": 31, "B": 32}, PY_GROUP: {"C": 33, "D": 34}}


@pytest.fixture
def simulator(eal: Any, lab: Lab) -> Iterator[subprocess.Popen[str]]:
    with running_simulator(lab, SIM_PORT, 500, stdin=True) as proc:
        yield proc


def fed_messages(runtime: LiveRuntime) -> dict[int, float]:
    """Per session, the data messages its C feed carried."""
    return {
        int(m.labels["session"]): m.value
        for m in runtime.metrics().metrics
        if m.name == "session_fed_messages"
    }


class Consumer:
    """One group's ring records: sim_seq of each message, the gaps' JSON."""

    def __init__(self, ring: RingWriter, group_id: int) -> None:
        self.hub_id = group_hub_id(group_id)
        self.reader = RingReader.attach_fd(
            ring.fd, topics=ring_topics(self.hub_id, None), copy=True
        )
        self.records: list[Any] = []

    def pull(self) -> None:
        for event in records_of(self.reader, self.hub_id):
            if event.topic == RING_GAP_TOPIC:
                gap = orjson.loads(bytes(event.payload))
                self.records.append(("gap", gap["lost"], gap["reason"]))
            else:
                payload = bytes(event.payload)
                self.records.append((int(orjson.loads(payload)["sim_seq"]), payload))


def test_c_and_python_groups_give_the_same_records_under_faults(
    lab: Lab, simulator: subprocess.Popen[str]
) -> None:
    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring)
    settings = Settings(engine={"mode": "loop", "feed_path": "c"})  # type: ignore[arg-type]
    runtime = LiveRuntime(
        hub, hub=hub, engine_factory=lambda: DpdkEngines(settings), session_config=quick
    )
    consumers = {gid: Consumer(ring, gid) for gid in LEGS}

    def legs(gid: int) -> list[dict[str, Any]]:
        figures = runtime.group_figures(gid)
        assert figures is not None
        result: list[dict[str, Any]] = figures["legs"]
        return result

    def newest() -> int:
        return max(leg["newest_id"] or 0 for gid in LEGS for leg in legs(gid))

    def caught_up() -> None:
        """Every leg brought what the fastest one had: a fault on one is over."""
        target = newest()
        wait_for(
            lambda: all((leg["newest_id"] or 0) >= target + 100 for g in LEGS for leg in legs(g))
        )

    try:
        port = PortSpec(1, "lab", lab.vdev, lab.gw_ip, lab.netmask, None, 1500)
        runtime.port_up(port)
        runtime.set_group(GroupSpec(C_GROUP, "c", tuple(LEGS[C_GROUP].values()), "binance"))
        runtime.set_group(
            GroupSpec(PY_GROUP, "py", tuple(LEGS[PY_GROUP].values()), "binance", path="python")
        )
        for members in LEGS.values():
            for name, sid in members.items():
                url = with_group(f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream", "g", name)
                runtime.subscribe(sid, [TOPIC])
                runtime.start_session(SessionSpec(sid, name, url, "binance", "dpdk", 1))
        for members in LEGS.values():
            for sid in members.values():
                wait_for(
                    lambda sid=sid: runtime.session_status(sid).state is SessionState.CONNECTED
                )
        caught_up()
        one_leg = newest() + 300  # skipped on A and C only: the other leg brings it
        every_leg = one_leg + 50  # skipped on every leg: a gap of 1 in both groups
        for name in ("A", "C"):
            send_command(simulator, f"fault skip seq={one_leg} target=leg:g/{name}")
        for name in ("A", "B", "C", "D"):
            send_command(simulator, f"fault skip seq={every_leg} target=leg:g/{name}")
        wait_for(lambda: newest() > every_leg + 100, what="the skips")
        caught_up()
        for name in ("A", "C", "B", "D"):
            gid = C_GROUP if name in LEGS[C_GROUP] else PY_GROUP
            leg = list(LEGS[gid]).index(name)
            downs = legs(gid)[leg]["downs"]
            send_command(simulator, f"fault reset target=leg:g/{name}")
            wait_for(lambda g=gid, i=leg, d=downs: legs(g)[i]["downs"] > d, what=f"reset {name}")
            caught_up()
        for consumer in consumers.values():
            consumer.pull()
        c_fig, py_fig = runtime.group_figures(C_GROUP), runtime.group_figures(PY_GROUP)
        assert c_fig is not None and py_fig is not None
        assert (c_fig["path"], py_fig["path"]) == ("c", "python")
        # the C legs' frames went through the engine's C feed into the C group (most of
        # them: a leg's first frames after a connect are Python's until the feed arms)
        fed = fed_messages(runtime)
        messages = [leg["messages"] for leg in c_fig["legs"]]
        for sid, arrived in zip(LEGS[C_GROUP].values(), messages, strict=True):
            assert fed[sid] > arrived / 2, (fed, messages)
        assert all(fed[sid] == 0 for sid in LEGS[PY_GROUP].values())
        assert c_fig["arbitration_ns_per_frame"] is not None
        print("C group figures:", {k: v for k, v in c_fig.items() if k != "legs"})
        print("fed:", fed, "leg messages:", messages)
        c_rec, py_rec = consumers[C_GROUP].records, consumers[PY_GROUP].records
        start = max(c_rec[0][0], py_rec[0][0])
        end = min(r[0] for r in (c_rec[-1], py_rec[-1]))

        def window(records: list[Any]) -> list[Any]:
            out, inside = [], False
            for r in records:
                if r[0] != "gap":
                    inside = start <= r[0] <= end
                if inside:
                    out.append(r if r[0] != "gap" else ("gap", r[1], r[2]))
            return out

        assert window(c_rec) == window(py_rec)
        for records in (c_rec, py_rec):
            seqs = [r[0] for r in records if r[0] != "gap"]
            assert seqs == sorted(set(seqs))  # once each, in order
            assert set(range(seqs[0], seqs[-1] + 1)) - set(seqs) == {every_leg}
            gaps = [r for r in records if r[0] == "gap"]
            assert [g[1] for g in gaps] == [1]
        assert c_fig["gaps"] == 1 and c_fig["duplicates"] > 0
        assert all(leg["won"] > 0 for leg in c_fig["legs"])
    finally:
        for consumer in consumers.values():
            consumer.reader.close()
        runtime.close()
        ring.close()


def test_a_changed_c_group_goes_on_without_loss_or_copies(
    lab: Lab, simulator: subprocess.Popen[str]
) -> None:
    """A change runs the group anew: the legs' feeds, joined to the old form, hand their
    connections to Python (which offers to the new form) until a reconnect joins the new
    connection's feed to the new form. Once each, in order, no gap, throughout."""
    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring)
    settings = Settings(engine={"mode": "loop", "feed_path": "c"})  # type: ignore[arg-type]
    runtime = LiveRuntime(
        hub, hub=hub, engine_factory=lambda: DpdkEngines(settings), session_config=quick
    )
    legs = LEGS[C_GROUP]
    consumer = Consumer(ring, C_GROUP)

    def figures() -> dict[str, Any]:
        found = runtime.group_figures(C_GROUP)
        assert found is not None
        return found

    def caught_up() -> None:
        target = max(leg["newest_id"] or 0 for leg in figures()["legs"])
        wait_for(lambda: all((leg["newest_id"] or 0) >= target + 100 for leg in figures()["legs"]))

    try:
        runtime.port_up(PortSpec(1, "lab", lab.vdev, lab.gw_ip, lab.netmask, None, 1500))
        runtime.set_group(GroupSpec(C_GROUP, "c", tuple(legs.values()), "binance"))
        for name, sid in legs.items():
            url = with_group(f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream", "g", name)
            runtime.subscribe(sid, [TOPIC])
            runtime.start_session(SessionSpec(sid, name, url, "binance", "dpdk", 1))
        for sid in legs.values():
            wait_for(lambda sid=sid: runtime.session_status(sid).state is SessionState.CONNECTED)
        caught_up()
        runtime.set_group(GroupSpec(C_GROUP, "c", tuple(legs.values()), "binance", hold_ms=30))
        caught_up()  # the new form: every frame through Python, into the new C group
        assert figures()["python_offers"] > 0
        fed_before = fed_messages(runtime)
        for i, name in enumerate(legs):
            downs = figures()["legs"][i]["downs"]
            send_command(simulator, f"fault reset target=leg:g/{name}")
            wait_for(lambda i=i, d=downs: figures()["legs"][i]["downs"] > d, what=f"reset {name}")
            caught_up()
        caught_up()
        fed_after = fed_messages(runtime)
        assert all(fed_after[sid] > fed_before[sid] for sid in legs.values())  # C again
        consumer.pull()
        seqs = [r[0] for r in consumer.records if r[0] != "gap"]
        assert len(seqs) > 300
        assert seqs == list(range(seqs[0], seqs[-1] + 1))  # once each, in order
        assert [r for r in consumer.records if r[0] == "gap"] == []
    finally:
        consumer.reader.close()
        runtime.close()
        ring.close()
