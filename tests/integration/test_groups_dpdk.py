"""A feed group of two DPDK legs on the lab (issue #19): both legs are sessions of a
LiveRuntime through the DPDK engine's port to the simulator process in the peer namespace
(its feed group `g`, legs A and B), arbitrated into the group's ring topics. Each leg is
reset in turn, repeatedly: the group's ring consumer sees every message once and in order,
and no gap. (A kernel leg cannot reach the lab's peer namespace: DPDK + kernel is not here.)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from dataplane.ring import RingMessage, RingReader, RingWriter
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

pytestmark = [requires_dpdk, pytest.mark.dpdk]
SIM_PORT = 9600
TOPIC = "btcusdt@trade"
LEGS = {"A": 21, "B": 22}
GROUP_ID = 5


@pytest.fixture
def simulator(eal: Any, lab: Lab) -> Iterator[subprocess.Popen[str]]:
    with running_simulator(lab, SIM_PORT, 500, stdin=True) as proc:
        yield proc


def test_two_dpdk_legs_one_reset_at_a_time_every_message_once(
    lab: Lab, simulator: subprocess.Popen[str]
) -> None:
    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring)
    settings = Settings(engine={"mode": "loop"})  # type: ignore[arg-type]
    runtime = LiveRuntime(
        hub, hub=hub, engine_factory=lambda: DpdkEngines(settings), session_config=quick
    )
    hub_id = group_hub_id(GROUP_ID)
    reader = RingReader.attach_fd(ring.fd, topics=ring_topics(hub_id, None), copy=True)
    seqs: list[int] = []
    gaps: list[dict[str, Any]] = []

    def pull() -> None:
        for event in reader.poll():
            assert type(event) is RingMessage, f"the reader was lapped: {event}"
            if event.topic == RING_GAP_TOPIC:
                if event.session_id == hub_id:
                    gaps.append(orjson.loads(bytes(event.payload)))
            else:
                seqs.append(int(orjson.loads(bytes(event.payload))["sim_seq"]))

    def legs() -> list[dict[str, Any]]:
        figures = runtime.group_figures(GROUP_ID)
        assert figures is not None
        result: list[dict[str, Any]] = figures["legs"]
        return result

    def caught_up() -> None:
        """Both legs brought what the faster one had: a fault on one is over."""
        target = max(leg["newest_id"] or 0 for leg in legs())
        wait_for(lambda: all((leg["newest_id"] or 0) >= target + 100 for leg in legs()))

    try:
        port = PortSpec(1, "lab", lab.vdev, lab.gw_ip, lab.netmask, None, 1500)
        runtime.port_up(port)
        runtime.set_group(GroupSpec(GROUP_ID, "g", tuple(LEGS.values()), "binance"))
        for name, sid in LEGS.items():
            url = with_group(f"ws://{lab.peer_ip}:{SIM_PORT}/binance/stream", "g", name)
            spec = SessionSpec(sid, name, url, "binance", "dpdk", 1)
            runtime.subscribe(sid, [TOPIC])
            runtime.start_session(spec)
        for sid in LEGS.values():
            wait_for(lambda sid=sid: runtime.session_status(sid).state is SessionState.CONNECTED)
        caught_up()
        for name in ("A", "B", "A", "B"):
            leg = list(LEGS).index(name)
            downs = legs()[leg]["downs"]
            send_command(simulator, f"fault reset target=leg:g/{name}")
            wait_for(lambda leg=leg, downs=downs: legs()[leg]["downs"] > downs, what="a reset")
            caught_up()
            pull()
        pull()
        figures = runtime.group_figures(GROUP_ID)
        assert figures is not None
        assert gaps == []
        assert len(seqs) > 400
        assert seqs == list(range(seqs[0], seqs[-1] + 1))  # once each, in order
        assert figures["gaps"] == 0 and figures["duplicates"] > 0
        assert all(leg["won"] > 0 for leg in figures["legs"])
    finally:
        reader.close()
        runtime.close()  # closes the hub
        ring.close()
