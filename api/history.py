"""Recent history of the figures the dashboard charts, kept in memory, and the engines' load.

The dashboard polls /metrics every second and keeps two minutes; an operator who opens it
after an incident needs the hour before. `History` samples the app's own metrics registry
(what /metrics would answer) and each port's engine counters every `interval_s` (5 s) and
keeps `retention_s` (1 h) of points, in memory: a restart starts it empty. Each point holds
the rates and gauges the Charts page draws, under the same keys as the page's own points
(msgRate, hubRate, deliveredRate, lat50/90/99, hubPublishMean, httpRate, httpP50/99), and
per port the engine's load: `cpu` (engine thread CPU seconds per second, its lcore's load)
and `busy` (RX bursts that brought frames over all RX bursts: the share of polls that found
work; an engine that busy-polls shows 100 % CPU whatever its traffic, this ratio does not).

Prometheus (when one scrapes the gateway) keeps longer history of the same counters; the
dashboard does not query it: a `metrics.prometheus_url` setting would be the place to add
that. `EngineLoadCollector` exports the engines' counters and the last interval's ratios
(wsgw_engine_busy_ratio, wsgw_engine_cpu_ratio) for it.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.concurrency import run_in_threadpool

from gateway.control import ControlPlane

log = logging.getLogger("wsgw.api.history")

DEFAULT_INTERVAL_S = 5.0
DEFAULT_RETENTION_S = 3600.0
QUANTILES = (("lat50", "0.5"), ("lat90", "0.9"), ("lat99", "0.99"))

Samples = dict[str, list[tuple[dict[str, str], float]]]


@dataclass(frozen=True)
class EngineTotals:
    """One port's engine counters at one time."""

    name: str
    cpu_seconds: float | None
    rx_bursts: int | None  # RX bursts that brought frames
    empty_polls: int | None  # RX bursts that brought nothing


@dataclass
class Reading:
    """What one sampling read: the registry's samples and the engines' counters."""

    at: float  # time.time()
    samples: Samples
    engines: dict[int, EngineTotals] = field(default_factory=dict)


def _read_registry(registry: CollectorRegistry, skip: Iterable[object]) -> Samples:
    out: Samples = {}
    skipped = set(map(id, skip))
    for collector in list(registry._collector_to_names):
        if id(collector) in skipped:
            continue
        try:
            families = list(collector.collect())
        except Exception as exc:  # one collector failing (the database away) spoils no other
            log.debug("history: collector %r failed: %s", collector, exc)
            continue
        for family in families:
            for s in family.samples:
                out.setdefault(s.name, []).append((dict(s.labels), float(s.value)))
    return out


def _total(samples: Samples, name: str) -> float | None:
    """The sum over labels of a counter (either spelling), None when absent."""
    found = samples.get(f"{name}_total", samples.get(name))
    return None if found is None else sum(v for _, v in found)


def _delta_rate(prev: Reading, cur: Reading, name: str) -> float | None:
    a, b = _total(prev.samples, name), _total(cur.samples, name)
    dt = cur.at - prev.at
    if a is None or b is None or dt <= 0:
        return None
    return max(0.0, b - a) / dt  # a reset (b < a) reads as 0 for one point, not negative


def _latency(samples: Samples) -> dict[str, float]:
    """The gateway-wide quantiles, else the worst session's (as metrics.js reads them)."""
    found = samples.get("wsgw_dataplane_message_latency_seconds", [])
    out: dict[str, float] = {}
    for key, q in QUANTILES:
        values = [v for labels, v in found if labels.get("quantile") == q]
        overall = [
            v for labels, v in found if labels.get("quantile") == q and "session" not in labels
        ]
        if overall or values:
            out[key] = (overall or [max(values)])[0]
    return out


def _histogram_quantile(q: float, prev: Samples, cur: Samples, name: str) -> float | None:
    """A quantile of what a histogram counted between two readings (linear in a bucket)."""

    def buckets(samples: Samples) -> dict[float, float]:
        out: dict[float, float] = {}
        for labels, v in samples.get(f"{name}_bucket", []):
            le = float(labels["le"])
            out[le] = out.get(le, 0.0) + v
        return out

    a, b = buckets(prev), buckets(cur)
    bounds = sorted(b)
    counts = [b[le] - a.get(le, 0.0) for le in bounds]
    if not counts or counts[-1] <= 0:
        return None
    target = q * counts[-1]
    lower, below = 0.0, 0.0
    for le, count in zip(bounds, counts, strict=True):
        if count >= target:
            if math.isinf(le):
                return lower
            inside = count - below
            return lower + (le - lower) * ((target - below) / inside if inside > 0 else 1.0)
        lower, below = le, count
    return None


def _engine_point(prev: EngineTotals, cur: EngineTotals, dt: float) -> dict[str, Any]:
    point: dict[str, Any] = {"name": cur.name, "cpu": None, "busy": None}
    if prev.cpu_seconds is not None and cur.cpu_seconds is not None and dt > 0:
        point["cpu"] = max(0.0, cur.cpu_seconds - prev.cpu_seconds) / dt
    if None not in (prev.rx_bursts, cur.rx_bursts, prev.empty_polls, cur.empty_polls):
        busy = max(0, (cur.rx_bursts or 0) - (prev.rx_bursts or 0))
        empty = max(0, (cur.empty_polls or 0) - (prev.empty_polls or 0))
        point["busy"] = busy / (busy + empty) if busy + empty else None
    return point


def derive(prev: Reading, cur: Reading) -> dict[str, Any]:
    """One chart point from two readings: {t (ms), the chart keys..., engines: {port: ...}}."""
    point: dict[str, Any] = {"t": round(cur.at * 1000)}
    for key, name in (
        ("msgRate", "wsgw_dataplane_session_messages"),
        ("hubRate", "wsgw_hub_published"),
        ("deliveredRate", "wsgw_consumer_delivered"),
        ("httpRate", "wsgw_http_requests"),
    ):
        value = _delta_rate(prev, cur, name)
        if value is not None:
            point[key] = value
    seconds = _delta_rate(prev, cur, "wsgw_hub_publish_seconds")
    batches = _delta_rate(prev, cur, "wsgw_hub_batches")
    if seconds is not None and batches:
        point["hubPublishMean"] = seconds / batches
    point.update(_latency(cur.samples))
    for key, q in (("httpP50", 0.5), ("httpP99", 0.99)):
        value = _histogram_quantile(
            q, prev.samples, cur.samples, "wsgw_http_request_duration_seconds"
        )
        if value is not None:
            point[key] = value
    dt = cur.at - prev.at
    point["engines"] = {
        str(port): _engine_point(prev.engines[port], totals, dt)
        for port, totals in cur.engines.items()
        if port in prev.engines
    }
    return point


def read_engines(control: ControlPlane) -> dict[int, EngineTotals]:
    """Each configured port's engine counters (ports without an engine are left out)."""
    out: dict[int, EngineTotals] = {}
    offset = 0
    while True:
        page = control.ports.page(offset, 500)
        for port in page.items:
            counters = control.runtime.port_counters(port.id)
            if not counters:
                continue
            engine = counters.get("engine") or {}
            cpu = counters.get("cpu_seconds")
            out[port.id] = EngineTotals(
                port.name,
                None if cpu is None else float(cpu),
                engine.get("c_rx_bursts"),
                engine.get("c_empty_polls"),
            )
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return out


class History:
    """The sampler and its ring of points. `sample()` is blocking (run it in a thread);
    `run()` is the app's background task."""

    def __init__(
        self,
        control: ControlPlane,
        registry: CollectorRegistry,
        *,
        interval_s: float = DEFAULT_INTERVAL_S,
        retention_s: float = DEFAULT_RETENTION_S,
    ) -> None:
        self.control = control
        self.registry = registry
        self.interval_s = interval_s
        self.retention_s = retention_s
        self.points: deque[dict[str, Any]] = deque(maxlen=max(2, int(retention_s / interval_s)))
        self.collector = EngineLoadCollector(self)
        self._last: Reading | None = None
        self._lock = threading.Lock()
        self._task: asyncio.Task[None] | None = None

    def sample(self, now: float | None = None) -> dict[str, Any] | None:
        """Read once; the point against the previous reading (None on the first)."""
        samples = _read_registry(self.registry, [self.collector])
        try:
            engines = read_engines(self.control)
        except Exception as exc:  # the database away: the registry's figures still count
            log.debug("history: engine counters not read: %s", exc)
            engines = {}
        cur = Reading(time.time() if now is None else now, samples, engines)
        with self._lock:
            prev, self._last = self._last, cur
            if prev is None:
                return None
            point = derive(prev, cur)
            self.points.append(point)
            return point

    def between(self, since_ms: float, until_ms: float) -> list[dict[str, Any]]:
        with self._lock:
            points = list(self.points)
        times = [p["t"] for p in points]
        return points[bisect.bisect_left(times, since_ms) : bisect.bisect_right(times, until_ms)]

    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return self.points[-1] if self.points else None

    def last_engines(self) -> dict[int, EngineTotals]:
        with self._lock:
            return dict(self._last.engines) if self._last else {}

    async def run(self) -> None:
        while True:
            try:
                await run_in_threadpool(self.sample)
            except Exception:
                log.exception("history sample failed")
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        """Sample on the running loop (the app's lifespan; a test client may run the app's
        lifespan on a loop of its own each time)."""
        loop = asyncio.get_running_loop()
        task = self._task
        if task is not None and not task.done():
            if task.get_loop() is loop:
                return
            _cancel_elsewhere(task)
        self._task = loop.create_task(self.run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is None:
            return
        if task.get_loop() is not asyncio.get_running_loop():
            _cancel_elsewhere(task)
            return
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def _cancel_elsewhere(task: asyncio.Task[None]) -> None:
    with contextlib.suppress(RuntimeError):  # that loop is closed: the task is gone with it
        task.get_loop().call_soon_threadsafe(task.cancel)


class EngineLoadCollector:
    """Each engine's counters and the last sampling interval's load, for Prometheus:
    wsgw_engine_cpu_seconds, wsgw_engine_rx_bursts, wsgw_engine_empty_polls (counters:
    rate() them over any window) and wsgw_engine_cpu_ratio, wsgw_engine_busy_ratio (gauges,
    0..1, over the History's interval), all labelled port (id) and name."""

    def __init__(self, history: History) -> None:
        self.history = history

    def collect(self) -> Iterator[Metric]:
        labels = ["port", "name"]
        cpu = CounterMetricFamily(
            "wsgw_engine_cpu_seconds", "CPU time the engine thread has used", labels=labels
        )
        bursts = CounterMetricFamily(
            "wsgw_engine_rx_bursts", "RX bursts that brought frames", labels=labels
        )
        empty = CounterMetricFamily(
            "wsgw_engine_empty_polls", "RX bursts that brought nothing", labels=labels
        )
        cpu_ratio = GaugeMetricFamily(
            "wsgw_engine_cpu_ratio",
            "Engine thread CPU seconds per second over the last sampling interval (its lcore's "
            "load; a busy-polling engine reads ~1 whatever its traffic)",
            labels=labels,
        )
        busy_ratio = GaugeMetricFamily(
            "wsgw_engine_busy_ratio",
            "RX bursts with frames over all RX bursts in the last sampling interval (the "
            "share of polls that found work)",
            labels=labels,
        )
        for port, totals in sorted(self.history.last_engines().items()):
            values = [str(port), totals.name]
            if totals.cpu_seconds is not None:
                cpu.add_metric(values, totals.cpu_seconds)
            if totals.rx_bursts is not None:
                bursts.add_metric(values, totals.rx_bursts)
            if totals.empty_polls is not None:
                empty.add_metric(values, totals.empty_polls)
        latest = self.history.latest() or {}
        for port, load in sorted(latest.get("engines", {}).items()):
            values = [port, load["name"]]
            if load["cpu"] is not None:
                cpu_ratio.add_metric(values, load["cpu"])
            if load["busy"] is not None:
                busy_ratio.add_metric(values, load["busy"])
        yield from (cpu, bursts, empty, cpu_ratio, busy_ratio)
