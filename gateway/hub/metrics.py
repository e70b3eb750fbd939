"""Prometheus samples of the hub, read at scrape time.

The hot paths keep plain integer counters (an increment per message, no lock); this
collector turns them into metric families when Prometheus asks, so counting costs the
engine and the consumers nothing more. Register it on the app's registry
(`registry.register(HubCollector(hub))`, which `api.app.create_app` does for its hub).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.hub.core import Hub
from gateway.hub.nats import NatsSink


class HubCollector(Collector):
    """hub: the hub, or a function returning the current one (None: no samples), for an
    app whose hub is attached after its registry was built."""

    def __init__(self, hub: Hub | Callable[[], Hub | None]) -> None:
        self._source = hub

    def collect(self) -> Iterator[Metric]:
        hub = self._source if isinstance(self._source, Hub) else self._source()
        if hub is None:
            return
        c = hub.counters
        yield _counter(
            "wsgw_hub_published",
            "Messages published: through the hub, and by the engines' C feeds into its ring",
            hub.published_total,
        )
        yield _counter("wsgw_hub_batches", "Batches published to the hub", c.batches)
        yield _counter("wsgw_hub_gaps", "Gap events published (session reconnects)", c.gaps)
        yield _counter("wsgw_hub_ring_writes", "Records written to the ring", c.ring_written)
        yield _counter(
            "wsgw_hub_ring_replaced",
            "Messages written to the ring as a gap record (too large, topic table full)",
            c.ring_replaced,
        )
        yield _counter("wsgw_hub_ring_errors", "Failed ring writes", c.ring_errors)
        yield _counter(
            "wsgw_hub_publish_seconds",
            "Time the engine thread spent in publish_batch",
            c.publish_ns / 1e9,
        )
        dropped = CounterMetricFamily(
            "wsgw_hub_handoff_dropped",
            "Messages a consumer loop lost: it fell too far behind the ring's writer",
            labels=["sink"],
        )
        totals = dict(c.handoff_dropped)
        for follower in hub.followers():
            totals[follower.name] = totals.get(follower.name, 0) + follower.dropped
        for name, n in sorted(totals.items()):
            dropped.add_metric([name], n)
        yield dropped

        consumers = hub.consumers()
        lag: dict[str, int] = {}
        for consumer in consumers:
            lag[consumer.name] = lag.get(consumer.name, 0) + consumer.lag
        connected = GaugeMetricFamily(
            "wsgw_consumer_connected", "Open downstream streams", labels=["consumer"]
        )
        lag_g = GaugeMetricFamily(
            "wsgw_consumer_lag",
            "Messages queued for a consumer (queue depth, summed over its streams)",
            labels=["consumer"],
        )
        delivered = CounterMetricFamily(
            "wsgw_consumer_delivered",
            "Messages handed to a consumer's connection",
            labels=["consumer"],
        )
        dropped_c = CounterMetricFamily(
            "wsgw_consumer_dropped",
            "Messages a consumer lost (queue_full: drop_oldest; overload: its loop fell "
            "behind the ring)",
            labels=["consumer", "reason"],
        )
        conflated = CounterMetricFamily(
            "wsgw_consumer_conflated",
            "Messages replaced by a newer value of their topic (conflation)",
            labels=["consumer"],
        )
        disconnects = CounterMetricFamily(
            "wsgw_consumer_disconnects",
            "Streams ended, by reason (slow, overload, client, shutdown, error)",
            labels=["consumer", "reason"],
        )
        for s in hub.consumer_stats():
            connected.add_metric([s.name], s.connected)
            lag_g.add_metric([s.name], lag.get(s.name, 0))
            delivered.add_metric([s.name], s.delivered)
            dropped_c.add_metric([s.name, "queue_full"], s.dropped)
            dropped_c.add_metric([s.name, "overload"], s.overload)
            conflated.add_metric([s.name], s.conflated)
            for reason, n in sorted(dict(s.disconnects).items()):
                disconnects.add_metric([s.name, reason], n)
        yield from (connected, lag_g, delivered, dropped_c, conflated, disconnects)

        sink = hub.nats
        if isinstance(sink, NatsSink):
            st = sink.stats
            yield _counter("wsgw_nats_published", "Messages published to NATS", st.published)
            nd = CounterMetricFamily(
                "wsgw_nats_dropped", "Messages that did not reach NATS", labels=["reason"]
            )
            for reason, n in sink.dropped.items():
                nd.add_metric([reason], n)
            yield nd
            yield _gauge("wsgw_nats_connected", "1 while connected to NATS", int(st.connected))
            yield _counter("wsgw_nats_reconnects", "Reconnections to NATS", st.reconnects)
            yield _counter(
                "wsgw_nats_behind_gaps",
                "$gap messages (reason nats_sink_behind) announcing records the sink skipped",
                st.behind_gaps,
            )
            yield _gauge(
                "wsgw_nats_pending",
                "Messages in the ring the sink has not read yet",
                sink.pending,
            )


def _counter(name: str, doc: str, value: float) -> CounterMetricFamily:
    return CounterMetricFamily(name, doc, value=value)


def _gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, value=value)
