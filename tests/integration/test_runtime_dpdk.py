"""LiveRuntime with the DPDK engines: the control plane's calls open a real DPDK port on
the lab, start an engine on it, and run a `dpdk` session through it to the simulator in the
peer namespace, in both engine modes (the session on the engine's own loop, or on the
runtime's loop with the engine on its thread); a port on an interface the host uses is
refused with a clear reason."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from gateway.lab import Lab
from gateway.runtime import (
    EngineState,
    PortSpec,
    PortState,
    RuntimeRefusedError,
    SessionSpec,
    SessionState,
)
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import STOPPED_GAP_REASON, LiveRuntime
from gateway.sessions import GapMark, Published, RecordingSink
from gateway.settings import Settings
from gateway.simulator.process import start_simulator
from tests.conftest import requires_dpdk
from tests.integration.test_sessions_helpers import check_order, wait_for
from tests.integration.test_sessions_runtime import quick

pytestmark = [requires_dpdk, pytest.mark.dpdk]
TOPICS = ["btcusdt@trade", "ethusdt@depth"]


class ThreadRecordingSink(RecordingSink):
    """Also keeps the names of the threads that published."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: set[str] = set()

    def publish_batch(self, messages: Sequence[Published]) -> None:
        self.threads.add(threading.current_thread().name)
        super().publish_batch(messages)


@pytest.mark.parametrize("mode", ["loop", "thread"])
def test_dpdk_port_and_session_through_the_runtime(eal, lab: Lab, mode: str) -> None:  # type: ignore[no-untyped-def]
    sim = start_simulator(lab, 9500, 200)
    sink = ThreadRecordingSink()
    settings = Settings(engine={"mode": mode})  # type: ignore[arg-type]
    runtime = LiveRuntime(sink, engine_factory=lambda: DpdkEngines(settings), session_config=quick)
    try:
        port = PortSpec(
            id=1,
            name="lab",
            device=lab.vdev,
            ipv4=lab.gw_ip,
            netmask=lab.netmask,
            gateway=None,
            mtu=1500,
        )
        assert runtime.port_up(port).state is PortState.UP
        assert runtime.port_status(1).state is PortState.UP
        spec = SessionSpec(
            id=7,
            name="bn",
            url=f"ws://{lab.peer_ip}:9500/binance/stream",
            dialect="binance",
            transport="dpdk",
            port_id=1,
        )
        runtime.subscribe(7, TOPICS)
        runtime.start_session(spec)
        wait_for(lambda: all(len(sink.messages(t)) >= 30 for t in TOPICS))
        assert runtime.session_status(7).state is SessionState.CONNECTED
        status = runtime.engine_status()
        assert status.state is EngineState.RUNNING
        assert status.details["port1"]["c_fast_segments"] >= 0
        latency = {
            m.labels["quantile"]: m.value
            for m in runtime.metrics().metrics
            if m.name == "message_latency_seconds"
        }
        assert set(latency) == {"0.5", "0.9", "0.99"}
        assert 0 < latency["0.5"] <= latency["0.99"] < 1.0
        # loop: the session ran on the engine's thread, where its bytes arrive; thread: on
        # the runtime's loop, the engine handing over from its own thread
        assert sink.threads == {"wsgw-engine-1" if mode == "loop" else "wsgw-sessions"}
        assert 7 in runtime.sessions_snapshot()
        runtime.stop_session(7)
        wait_for(lambda: runtime.session_status(7).state is SessionState.STOPPED)
        assert check_order(sink, TOPICS) == 0
        with pytest.raises(RuntimeRefusedError, match="refusing to open a DPDK port on lo"):
            runtime.port_up(
                PortSpec(
                    id=2,
                    name="lo",
                    device="net_af_packet_lo,iface=lo",
                    ipv4="127.0.0.2",
                    netmask="255.0.0.0",
                    gateway=None,
                    mtu=1500,
                )
            )
        assert runtime.port_status(2).state is PortState.FAILED
        # Started again: its first connection marks what went by while it was stopped.
        stopped_at = len(sink.entries())
        runtime.start_session(spec)
        wait_for(lambda: runtime.session_status(7).state is SessionState.CONNECTED)
        wait_for(lambda: len(sink.entries()) > stopped_at + 5)
        gap = sink.entries()[stopped_at]
        assert isinstance(gap, GapMark) and gap.reason == STOPPED_GAP_REASON, gap
        assert check_order(sink, TOPICS) == 1
        # Stopped, and its port taken down before the closing handshake is over: the
        # session still ends as stopped (in loop mode its loop goes with the port).
        runtime.stop_session(7)
        runtime.port_down(1)
        wait_for(lambda: runtime.session_status(7).state is SessionState.STOPPED, timeout=10)
        assert runtime.port_status(1).state is PortState.DOWN
    finally:
        runtime.close()
        sim.kill()
        sim.wait()
