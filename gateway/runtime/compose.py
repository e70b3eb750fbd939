"""The composition root: the one place that assembles the live gateway's runtime from the
settings. `wsgw serve`, `wsgw demo` and the end-to-end tests build theirs here, so they run
what an operator runs."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from gateway.hub.config import HubConfig, create_hub
from gateway.hub.nats import JetStreamConfig, NatsConfig
from gateway.runtime.engines import DpdkEngines
from gateway.runtime.live import LiveRuntime
from gateway.settings import JetStreamSettings, Settings

if TYPE_CHECKING:
    from gateway.dialects.identity import MessageIdentity
    from gateway.fleet.node import FleetRuntime

log = logging.getLogger("wsgw.runtime")


def build_runtime(settings: Settings) -> LiveRuntime:
    """The live runtime: upstream sessions on their own loop thread, messages into the
    fan-out hub (shared-memory ring, /v1/stream, NATS), DPDK ports and their engines opened
    on demand. The hub is reachable as `runtime.hub` (what /v1/stream reads).

    With fleet.enabled, a FleetRuntime (gateway.fleet.node): it runs only the sessions
    this node leases and publishes through the fence. The C feed path writes the ring from
    the engine's poll, past the fence, so a fleet node's dpdk sessions use the Python one."""
    if settings.fleet.enabled and settings.engine.feed_path == "c":
        log.info("fleet: engine.feed_path c bypasses the fence; the python feed path is used")
        engine = settings.engine.model_copy(update={"feed_path": "python"})
        settings = settings.model_copy(update={"engine": engine})
    h = settings.hub
    # The fleet runtime is made after the hub: the NATS sink asks it for generations late.
    fleet_runtime: list[FleetRuntime] = []

    runtimes: list[LiveRuntime] = []  # the NATS sink asks it for sessions' dialects late

    def generation(session_id: int) -> int | None:
        return fleet_runtime[0].may_publish(session_id) if fleet_runtime else None

    nats = (
        NatsConfig(
            servers=tuple(h.nats.servers),
            subject_prefix=h.nats.subject_prefix,
            headers=h.nats.headers,
            generation=generation if settings.fleet.enabled else None,
            jetstream=jetstream_config(h.nats.jetstream),
            identity=lambda sid: session_identity(runtimes[0] if runtimes else None, sid),
        )
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
    if settings.fleet.enabled:
        from gateway.fleet.node import FleetRuntime  # imports this package's live runtime

        api = settings.api
        api_url = settings.fleet.api_url or f"http://{api.host}:{api.port}"
        runtime = FleetRuntime(
            hub,
            settings.fleet,
            api_url=api_url,
            engine_factory=lambda: DpdkEngines(settings),
            hub=hub,
        )
        fleet_runtime.append(runtime)
        runtimes.append(runtime)
        return runtime
    live = LiveRuntime(hub, engine_factory=lambda: DpdkEngines(settings), hub=hub)
    runtimes.append(live)
    return live


def jetstream_config(js: JetStreamSettings | None) -> JetStreamConfig | None:
    """The NATS sink's stream, from hub.nats.jetstream (validated there)."""
    if js is None:
        return None
    return js.config()


def session_identity(runtime: LiveRuntime | None, session_id: int) -> MessageIdentity | None:
    """The message identity of a running session's dialect, or of a feed group's (its hub
    id: the same on every node, so legs on several nodes publish one id per message and
    JetStream keeps one copy); None when neither runs here."""
    from gateway.dialects.identity import identity_for
    from gateway.groups.feed import GROUP_HUB_BASE

    if runtime is None:
        return None
    if session_id >= GROUP_HUB_BASE:
        group = runtime._groups.groups.get(session_id - GROUP_HUB_BASE)
        return None if group is None else identity_for(group.spec.dialect)
    session = runtime._sessions.get(session_id)
    if session is None:
        return None
    config = session.config
    return identity_for(config.dialect, config.dialect_options.get("config"))
