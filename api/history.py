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

Prometheus (when one scrapes the gateway) keeps longer history of the same counters: with
`api.prometheus_url` set, /v1/history asks its query_range for the same keys over any time
range (`PrometheusHistory`: one query, each figure's expression tagged with its key), and
falls back to the ring when it cannot answer. `EngineLoadCollector` exports the engines'
counters and the last interval's ratios (wsgw_engine_busy_ratio, wsgw_engine_cpu_ratio).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
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


# ---- Prometheus ---------------------------------------------------------------------------
#: Points a Prometheus answer aims at when no step is asked (the charts are ~1000 px wide).
TARGET_POINTS = 360
#: rate() windows are at least this long: a Prometheus scraping every 15 s needs several
#: samples in a window, whatever the step (Grafana's $__rate_interval reasoning).
MIN_RATE_WINDOW_S = 60.0
#: Prometheus refuses more than 11,000 points per series.
MAX_POINTS = 11_000


class PrometheusError(Exception):
    """Prometheus did not answer, or answered with an error."""


def prometheus_queries(selector: str, window_s: float) -> dict[str, str]:
    """PromQL per chart key, as History.derive computes them from two readings. Counters
    match with or without their _total suffix; `selector` narrows to this gateway."""
    w = f"{max(1, round(window_s))}s"
    extra = f",{selector}" if selector else ""

    def series(name: str, labels: str = "") -> str:
        return f'{{__name__=~"{name}(_total)?"{labels}{extra}}}'

    def rate(name: str) -> str:
        return f"sum(rate({series(name)}[{w}]))"

    def bucket_quantile(q: float) -> str:
        return (
            f"histogram_quantile({q}, sum by (le) "
            f'(rate({{__name__="wsgw_http_request_duration_seconds_bucket"{extra}}}[{w}])))'
        )

    queries = {
        "msgRate": rate("wsgw_dataplane_session_messages"),
        "hubRate": rate("wsgw_hub_published"),
        "deliveredRate": rate("wsgw_consumer_delivered"),
        "httpRate": rate("wsgw_http_requests"),
        "hubPublishMean": f"{rate('wsgw_hub_publish_seconds')} / {rate('wsgw_hub_batches')}",
        "httpP50": bucket_quantile(0.5),
        "httpP99": bucket_quantile(0.99),
    }
    latency = "wsgw_dataplane_message_latency_seconds"
    for key, q in QUANTILES:  # the gateway-wide figure, else the worst session's
        overall_labels = f',quantile="{q}",session=""'
        any_labels = f',quantile="{q}"'
        overall = "max(" + series(latency, overall_labels) + ")"
        worst = "max(" + series(latency, any_labels) + ")"
        queries[key] = f"{overall} or {worst}"
    cpu = f"sum by (port, name) (rate({series('wsgw_engine_cpu_seconds')}[{w}]))"
    busy = f"sum by (port, name) (rate({series('wsgw_engine_rx_bursts')}[{w}]))"
    empty = f"sum by (port, name) (rate({series('wsgw_engine_empty_polls')}[{w}]))"
    queries["engine:cpu"] = cpu
    queries["engine:busy"] = f"{busy} / ({busy} + {empty})"
    return queries


def combined_query(queries: dict[str, str]) -> str:
    """One PromQL expression for every key: each tagged with a `wsgw_key` label, joined by
    `or` (their label sets differ, so `or` keeps them all): one round trip, not a dozen."""
    return " or ".join(
        f'label_replace({expr}, "wsgw_key", "{key}", "", "")' for key, expr in queries.items()
    )


def points_from_matrix(result: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The query_range matrix back into the ring's points: {t (ms), key: value...,
    engines: {port: {name, cpu, busy}}}, oldest first; NaN and Inf are left out."""
    points: dict[int, dict[str, Any]] = {}
    for stream in result:
        labels = stream.get("metric", {})
        key = labels.get("wsgw_key", "")
        for at, raw in stream.get("values", []):
            value = float(raw)
            if not math.isfinite(value):
                continue
            t = round(float(at) * 1000)
            point = points.setdefault(t, {"t": t, "engines": {}})
            if key.startswith("engine:"):
                port = labels.get("port", "?")
                engine = point["engines"].setdefault(
                    port, {"name": labels.get("name", ""), "cpu": None, "busy": None}
                )
                engine[key.removeprefix("engine:")] = value
            elif key:
                point[key] = value
    return [points[t] for t in sorted(points)]


def default_step(since_s: float, until_s: float, interval_s: float) -> float:
    """A step giving about TARGET_POINTS points, at least the ring's interval."""
    return max(interval_s, math.ceil((until_s - since_s) / TARGET_POINTS))


class PrometheusHistory:
    """The same points as History, asked of a Prometheus that scrapes this gateway."""

    def __init__(self, base_url: str, selector: str = "", timeout_s: float = 5.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.selector = selector
        self.timeout_s = timeout_s

    def query_range(self, since_s: float, until_s: float, step_s: float) -> list[dict[str, Any]]:
        """Blocking (run it in a thread). PrometheusError when it cannot answer."""
        window = max(MIN_RATE_WINDOW_S, 2 * step_s)
        query = combined_query(prometheus_queries(self.selector, window))
        body = urllib.parse.urlencode(
            {"query": query, "start": f"{since_s:.3f}", "end": f"{until_s:.3f}", "step": step_s}
        ).encode()
        request = urllib.request.Request(  # noqa: S310 - an http(s) URL the settings checked
            f"{self.base_url}/api/v1/query_range",
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:  # noqa: S310
                answer = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise PrometheusError(f"{self.base_url}: {_prometheus_error(exc)}") from exc
        except (OSError, ValueError) as exc:
            raise PrometheusError(f"{self.base_url}: {exc}") from exc
        if answer.get("status") != "success":
            raise PrometheusError(f"{self.base_url}: {answer.get('error', 'no success')}")
        return points_from_matrix(answer.get("data", {}).get("result", []))


def _prometheus_error(exc: urllib.error.HTTPError) -> str:
    """Prometheus says what is wrong in a JSON body ({"error": ...}); else the status."""
    try:
        return str(json.loads(exc.read()).get("error") or exc)
    except (OSError, ValueError):
        return str(exc)
