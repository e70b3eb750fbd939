"""The composition root: the one place that assembles the live gateway's runtime from the
settings. `wsgw serve`, `wsgw demo` and the end-to-end tests build theirs here, so they run
what an operator runs."""

from __future__ import annotations

from gateway.hub.config import HubConfig, create_hub
from gateway.hub.nats import NatsConfig
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import LiveRuntime
from gateway.settings import Settings


def build_runtime(settings: Settings) -> LiveRuntime:
    """The live runtime: upstream sessions on their own loop thread, messages into the
    fan-out hub (shared-memory ring, /v1/stream, NATS), DPDK ports and their engines opened
    on demand. The hub is reachable as `runtime.hub` (what /v1/stream reads)."""
    h = settings.hub
    nats = (
        NatsConfig(servers=tuple(h.nats.servers), subject_prefix=h.nats.subject_prefix)
        if h.nats is not None
        else None
    )
    hub = create_hub(
        HubConfig(
            gateway=h.gateway,
            ring=h.ring,
            ring_capacity=h.ring_capacity,
            handoff_limit=h.handoff_limit,
            nats=nats,
            reader_wait=h.reader_wait,
        )
    )
    return LiveRuntime(hub, engine_factory=lambda: DpdkEngines(settings), hub=hub)
