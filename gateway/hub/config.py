"""Building a hub from configuration: the ring it writes, the NATS sink it feeds.

A settings section for this (the owner of gateway/settings.py adds it) maps one to one:

    [hub]
    gateway = "gw1"              # ring /dev/shm/wsgw-gw1-messages
    ring_capacity = 67108864     # bytes, a power of two
    handoff_limit = 262144       # messages a consumer loop may be behind the ring
    reader_wait = "futex"        # the wait policy the ring recommends (latency_profile's)
    [hub.nats]                   # absent: no NATS sink
    servers = ["nats://127.0.0.1:4222"]
    subject_prefix = "wsgw"
    [hub.nats.jetstream]         # absent: core NATS only (gateway.hub.nats.JetStreamConfig)
    stream = "WSGW"
    max_age_s = 86400            # 0: no limit; max_bytes, max_msgs: -1 no limit
    storage = "file"             # or "memory"; replicas = 1 (1-5)
    duplicate_window_s = 120     # a message id seen within it is dropped (msg_ids = true)
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.ring import DEFAULT_CAPACITY, RingWriter, ring_name
from gateway.hub.core import DEFAULT_HANDOFF_LIMIT, Hub
from gateway.hub.nats import NatsConfig, NatsSink


@dataclass(frozen=True)
class HubConfig:
    gateway: str = "wsgw"
    #: False: a private ring (an anonymous memfd) that other processes cannot attach; the
    #: hub's consumers read it all the same.
    ring: bool = True
    #: A ring name or path; default wsgw-<gateway>-messages in /dev/shm.
    ring_name: str | None = None
    ring_capacity: int = DEFAULT_CAPACITY
    handoff_limit: int = DEFAULT_HANDOFF_LIMIT
    nats: NatsConfig | None = None
    #: The wait policy the ring's header recommends to readers opened with wait "auto".
    reader_wait: str | None = None

    @property
    def ring_path_name(self) -> str:
        return self.ring_name or ring_name(self.gateway, "messages")


def create_hub(config: HubConfig) -> Hub:
    """The ring (taking over a stale one of a dead gateway), the NATS sink (started: it
    connects in the background), and the hub over them."""
    ring = (
        RingWriter.create(config.ring_path_name, config.ring_capacity, replace=True)
        if config.ring
        else None
    )
    sink = None
    try:
        if ring is not None and config.reader_wait is not None:
            ring.set_wait_hint(config.reader_wait)
        if config.nats is not None:
            sink = NatsSink(config.nats).start()
        return Hub(ring=ring, nats=sink, handoff_limit=config.handoff_limit)
    except BaseException:
        if sink is not None:
            sink.stop()
        if ring is not None:
            ring.close()
        raise
