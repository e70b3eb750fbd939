"""Prometheus metrics, one registry per app (tests build many apps in one process).

Requests are counted and timed per route template (`/v1/ports/{port_id}`, never the raw
path, so the label set stays bounded). Sessions are counted by runtime and wanted state at
scrape time, and the runtime's own snapshot is exported as wsgw_dataplane_* samples.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gateway.control import ControlPlane
from gateway.runtime import SessionState
from gateway.store.db import DATABASE_UNAVAILABLE

_NAME_OK = re.compile(r"[^a-zA-Z0-9_]")
# The *_created series double the output and no dashboard of ours reads them.
disable_created_metrics()  # type: ignore[no-untyped-call]


class GatewayCollector(Collector):
    """Samples read at scrape time from the control plane and its runtime."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control

    def collect(self) -> Iterator[Metric]:
        sessions = GaugeMetricFamily(
            "wsgw_sessions",
            "Upstream sessions by runtime state and wanted state",
            labels=["state", "desired_state"],
        )
        # A scrape during a database outage still shows the dataplane, and says so.
        database = GaugeMetricFamily("wsgw_database_up", "1 when the database answered")
        try:
            counts = self.control.sessions.count_by_state() if self.control.started else {}
        except DATABASE_UNAVAILABLE:
            database.add_metric([], 0)
        else:
            database.add_metric([], 1)
            for state in SessionState:
                for desired in ("running", "stopped"):
                    key = (str(state), desired)
                    sessions.add_metric([str(state), desired], counts.get(key, 0))
            yield sessions
        yield database
        engine = self.control.runtime.engine_status()
        info = GaugeMetricFamily(
            "wsgw_engine_state", "1 for the dataplane engine's current state", labels=["state"]
        )
        info.add_metric([str(engine.state)], 1)
        yield info
        yield self._profile_info()
        yield from self._runtime_metrics()

    def _profile_info(self) -> Metric:
        """The latency profile and what it set, as an info metric (value 1)."""
        settings = self.control.settings
        profile = GaugeMetricFamily(
            "wsgw_latency_profile_info",
            "The gateway's latency profile: the engine's poll mode, the readers' wait policy",
            labels=["profile", "poll_mode", "reader_wait"],
        )
        profile.add_metric(
            [settings.latency_profile, settings.engine.poll_mode, settings.hub.reader_wait or ""],
            1,
        )
        return profile

    def _runtime_metrics(self) -> Iterable[Metric]:
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for sample in self.control.runtime.metrics().metrics:
            name = "wsgw_dataplane_" + _NAME_OK.sub("_", sample.name)
            labels = sorted(sample.labels)
            family = families.get(name)
            if family is None:
                cls = CounterMetricFamily if sample.kind == "counter" else GaugeMetricFamily
                family = cls(name, sample.help or sample.name, labels=labels)
                families[name] = family
            family.add_metric([sample.labels[k] for k in labels], sample.value)
        return families.values()


class HttpMetrics:
    """ASGI middleware counting and timing HTTP requests by route template."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry) -> None:
        self.app = app
        self.requests = Counter(
            "wsgw_http_requests",
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "wsgw_http_request_duration_seconds",
            "Time to answer an HTTP request",
            ["method", "route"],
            registry=registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        code = 500
        start = time.perf_counter()

        async def send_wrapper(message: Message) -> None:
            nonlocal code
            if message["type"] == "http.response.start":
                code = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = _route_template(scope)
            method = str(scope.get("method", ""))
            self.requests.labels(method, route, str(code)).inc()
            self.latency.labels(method, route).observe(time.perf_counter() - start)


def _route_template(scope: Scope) -> str:
    """The matched route's path template; the router records the route in the scope."""
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    return str(path) if path else "unmatched"


class BooksCollector(Collector):
    """The local books (gateway.books.manager): resyncs by reason, books by state."""

    def __init__(self, control: ControlPlane) -> None:
        self.control = control

    def collect(self) -> Iterator[Metric]:
        books = self.control.books
        resyncs = CounterMetricFamily(
            "wsgw_books_resyncs",
            "Local books found wrong and resynchronized, by session, venue and reason",
            labels=["session", "venue", "reason"],
        )
        for (sid, venue, reason), count in sorted(books.resync_counts().items()):
            resyncs.add_metric([str(sid), venue, reason], count)
        yield resyncs
        states = GaugeMetricFamily(
            "wsgw_books",
            "Local books by session and state (synced, stale)",
            labels=["session", "state"],
        )
        for (sid, state), count in sorted(books.book_states().items()):
            states.add_metric([str(sid), state], count)
        yield states
        fetches = CounterMetricFamily(
            "wsgw_books_snapshot_fetches",
            "REST book snapshots fetched, by venue and result (ok, failed)",
            labels=["venue", "result"],
        )
        for (venue, result), count in sorted(books.fetches.items()):
            fetches.add_metric([venue, result], count)
        yield fetches
        published = CounterMetricFamily(
            "wsgw_books_normalized_published", "Normalized events published to the hub"
        )
        published.add_metric([], books.published)
        yield published
