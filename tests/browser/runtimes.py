"""Runtimes for the browser tests: a DetachedRuntime that pretends to stream.

`SimulatedRuntime` reports a running engine, connected sessions and metrics that move with
time (message counters, RTT, latency percentiles, lcore load, port figures), named as the
dashboard reads them (api/static/js/metrics.js) and as gateway.runtime.live.LiveRuntime
exports its session counters. `SimulatedHubMetrics` adds the fan-out hub's samples
(wsgw_hub_*, wsgw_consumer_*, as gateway/hub/metrics.py names them). Together they let the
tests check that figures and charts follow the values; real runtimes replace them later.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.core import Metric as PromMetric
from prometheus_client.registry import Collector

from gateway import runtime as rt

FAIL_MARK = "fail"
FAIL_REASON = "TLS handshake failed: certificate verify failed (self-signed certificate)"


class SimulatedRuntime(rt.DetachedRuntime):
    """Sessions connect at once (those whose name contains 'fail' fail, with a reason);
    every figure the dashboard shows is reported and changes every second."""

    def __init__(self, rate_per_session: float = 1500.0) -> None:
        super().__init__()
        self.rate = rate_per_session
        self.t0 = time.monotonic()
        self._state: dict[int, rt.SessionState] = {}
        self._started_at: dict[int, float] = {}
        self._sim_lock = threading.Lock()

    def engine_status(self) -> rt.EngineStatus:
        return rt.EngineStatus(rt.EngineState.RUNNING, None, {"lcores": "1-2", "mode": "simulated"})

    def port_up(self, port: rt.PortSpec) -> rt.PortStatus:
        super().port_up(port)
        return rt.PortStatus(port.id, rt.PortState.UP)

    def port_status(self, port_id: int) -> rt.PortStatus:
        with self._lock:
            known = port_id in self.ports
        return rt.PortStatus(port_id, rt.PortState.UP if known else rt.PortState.DOWN)

    def port_counters(self, port_id: int) -> dict[str, Any] | None:
        """What api/routes/engine_ports.py reads of a running port: the engine's counters
        (named as dataplane.engine.Engine.snapshot has them), its thread's CPU time and the
        NIC's rte_eth_stats; all of them grow with time."""
        with self._lock:
            if port_id not in self.ports:
                return None
        t = time.monotonic() - self.t0
        frames = int(2000 * t)
        engine = {
            "loops": int(900 * t),
            "slow_frames": int(20 * t),
            "tx_frames": int(25 * t),
            "commands": int(t),
            "service_errors": 0,
            "flows": 2,
            "connections": 2,
            "c_polls": int(50_000 * t),
            "c_empty_polls": int(45_000 * t),
            "c_sleeps": int(40_000 * t),
            "c_sleep_ns": int(0.6e9 * t),
            "c_rx_frames": frames,
            "c_rx_bursts": frames // 4,
            "c_fast_segments": int(frames * 0.97),
            "c_fast_bytes": int(frames * 0.97) * 180,
            "c_slow_frames": int(frames * 0.03),
            "c_acks_sent": frames // 2,
            "c_dropped_slow_full": 0,
            "c_bad_ip_checksum": 0,
            "c_bad_tcp_checksum": 0,
            "c_not_ipv4": int(t) // 10,
            "c_not_for_us": int(t) // 5,
            "c_tx_dropped": 0,
            "c_rx_to_ring_bursts": frames // 4,
            "c_rx_to_ring_ns_sum": frames // 4 * 3200,
            "c_rx_to_ring_ns_max": 48_000,
            "c_fast_acks": frames // 3,
            "c_tx_data_segments": int(t),
            "c_tx_data_bytes": int(t) * 90,
            "c_rx_wakes": int(10 * t),
            "c_bench_dropped": 0,
        }
        nic = {
            "rx_packets": frames,
            "rx_bytes": frames * 180,
            "tx_packets": frames // 2,
            "tx_bytes": frames // 2 * 66,
            "rx_missed": 3,
            "rx_errors": 0,
            "tx_errors": 0,
            "rx_nombuf": 0,
            "tx_dropped": 0,
            "tx_nombuf": 0,
            "tx_oversize": 0,
            "rx_truncated": 0,
        }
        link = {"speed_mbps": 10_000, "up": 1, "full_duplex": 1}
        return {"engine": engine, "cpu_seconds": 0.42 * t, "nic": nic, "link": link}

    def start_session(self, session: rt.SessionSpec) -> rt.SessionStatus:
        with self._sim_lock:
            failed = FAIL_MARK in session.name
            self._state[session.id] = (
                rt.SessionState.FAILED if failed else rt.SessionState.CONNECTED
            )
            self._started_at[session.id] = time.monotonic()
        super().start_session(session)  # records the call and emits the event below
        return self.session_status(session.id)

    def stop_session(self, session_id: int) -> rt.SessionStatus:
        with self._sim_lock:
            if session_id in self._state:
                self._state[session_id] = rt.SessionState.STOPPED
            self._started_at.pop(session_id, None)
        super().stop_session(session_id)
        return self.session_status(session_id)

    def _emit(self, session_id: int) -> None:
        sink = self._sink
        if sink is None:
            return
        status = self.session_status(session_id)
        sink(rt.RuntimeEvent(session_id, "state", status.reason, {"state": str(status.state)}))

    def session_status(self, session_id: int) -> rt.SessionStatus:
        base = super().session_status(session_id)
        with self._sim_lock:
            state = self._state.get(session_id, rt.SessionState.STOPPED)
        reason = FAIL_REASON if state is rt.SessionState.FAILED else None
        return rt.SessionStatus(session_id, state, reason, base.since, base.topics)

    def metrics(self) -> rt.MetricsSnapshot:
        now = time.monotonic()
        t = now - self.t0
        wave = math.sin(t / 2.0)
        with self._sim_lock:
            running = {
                sid: now - at
                for sid, at in self._started_at.items()
                if self._state.get(sid) is rt.SessionState.CONNECTED
            }
        with self._lock:
            ports = list(self.ports)
            topics = {sid: list(held) for sid, held in self.topics.items()}
        metrics: list[rt.Metric] = []
        metrics += _lcores(wave)
        total_msgs = sum(self.rate * up * (1 + 0.2 * wave) for up in running.values())
        metrics += [
            rt.Metric("fastpath_segments", "counter", int(total_msgs * 0.97)),
            rt.Metric("slowpath_segments", "counter", int(total_msgs * 0.03) + 12),
        ]
        for sid, up in sorted(running.items()):
            labels = {"session": str(sid)}
            messages = int(self.rate * up * (1 + 0.2 * wave))
            metrics += [
                rt.Metric("session_messages", "counter", messages, "", labels),
                rt.Metric("session_bytes", "counter", messages * 120, "", labels),
                rt.Metric("session_rtt_seconds", "gauge", 0.0011 + 0.0004 * wave, "", labels),
                rt.Metric("session_reconnects", "counter", 1, "", labels),
                rt.Metric("session_gaps", "counter", 0, "", labels),
            ]
            # The messages split over the session's topics, the first twice the others.
            held = topics.get(sid, [])
            shares = [2.0 if i == 0 else 1.0 for i in range(len(held))]
            for topic, share in zip(held, shares, strict=True):
                count = int(messages * share / sum(shares))
                topic_labels = {"session": str(sid), "topic": topic}
                metrics.append(
                    rt.Metric("session_topic_messages", "counter", count, "", topic_labels)
                )
        for q, base in (("0.5", 40e-6), ("0.9", 95e-6), ("0.99", 310e-6)):
            metrics.append(
                rt.Metric(
                    "message_latency_seconds",
                    "gauge",
                    base * (1 + 0.3 * wave),
                    "",
                    {"quantile": q},
                )
            )
        for pid in ports:
            labels = {"port": str(pid)}
            packets = int(2000 * t)
            metrics += [
                rt.Metric("port_rx_packets", "counter", packets, "", labels),
                rt.Metric("port_tx_packets", "counter", packets // 2, "", labels),
                rt.Metric("port_rx_bytes", "counter", packets * 180, "", labels),
                rt.Metric("port_tx_bytes", "counter", packets * 66, "", labels),
                rt.Metric("port_rx_dropped", "counter", 3, "", labels),
            ]
        return rt.MetricsSnapshot(time.time(), tuple(metrics))

    def published(self) -> int:
        """Messages the sessions have received so far (what a hub would have published)."""
        return int(sum(m.value for m in self.metrics().metrics if m.name == "session_messages"))


class SimulatedHubMetrics(Collector):
    """The hub's samples for a SimulatedRuntime: what it publishes, and per consumer name
    (those in `consumers`) open streams, lag, deliveries, drops and disconnects."""

    def __init__(self, runtime: SimulatedRuntime) -> None:
        self.runtime = runtime
        self.consumers: set[str] = set()

    def collect(self) -> Iterator[PromMetric]:
        published = self.runtime.published()
        t = time.monotonic() - self.runtime.t0
        yield CounterMetricFamily("wsgw_hub_published", "published", value=published)
        yield CounterMetricFamily("wsgw_hub_batches", "batches", value=published // 20)
        yield CounterMetricFamily(
            "wsgw_hub_publish_seconds", "publish time", value=published // 20 * 4e-6
        )
        connected = GaugeMetricFamily("wsgw_consumer_connected", "streams", labels=["consumer"])
        lag = GaugeMetricFamily("wsgw_consumer_lag", "queued", labels=["consumer"])
        delivered = CounterMetricFamily("wsgw_consumer_delivered", "sent", labels=["consumer"])
        dropped = CounterMetricFamily(
            "wsgw_consumer_dropped", "lost", labels=["consumer", "reason"]
        )
        disconnects = CounterMetricFamily(
            "wsgw_consumer_disconnects", "ended", labels=["consumer", "reason"]
        )
        for name in sorted(self.consumers):
            connected.add_metric([name], 1)
            lag.add_metric([name], 5 + int(3 * math.sin(t)))
            delivered.add_metric([name], published // 2)
            dropped.add_metric([name, "queue_full"], 0)
            dropped.add_metric([name, "overload"], 0)
            disconnects.add_metric([name, "slow"], 2)
        yield from (connected, lag, delivered, dropped, disconnects)


def _lcores(wave: float) -> list[rt.Metric]:
    return [
        rt.Metric("lcore_busy_ratio", "gauge", 0.42 + 0.1 * wave, "", {"lcore": "1"}),
        rt.Metric("lcore_busy_ratio", "gauge", 0.08, "", {"lcore": "2"}),
    ]
