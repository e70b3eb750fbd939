"""The fan-out hub: the engine publishes, consumers read (ring, /v1/stream, NATS).

See gateway.hub.core for the hub, gateway.hub.protocol for the downstream stream,
gateway.hub.names for ring topic and NATS subject names.

Who owns the hub: the engine-backed runtime (it publishes from its engine thread), exposed
as its `hub` attribute, which `api.app.create_app` picks up for /v1/stream and /metrics;
`create_app(settings, runtime, hub=...)` attaches one explicitly. `create_hub(HubConfig)`
builds one with its ring and NATS sink; `Hub.close()` (after the engine stopped) ends the
streams with 1001, flushes NATS and closes the ring.
"""

from gateway.hub.config import HubConfig, create_hub
from gateway.hub.consumer import (
    Consumer,
    ConsumerClosed,
    ConsumerStats,
    DeliveryOptions,
    OverflowPolicy,
)
from gateway.hub.core import Hub, HubClosedError, HubCounters, SessionDeletedError
from gateway.hub.events import Delivery, GapNotice, Message, StreamEvent
from gateway.hub.names import RING_GAP_TOPIC, nats_subject, ring_topic, ring_topics

__all__ = [
    "RING_GAP_TOPIC",
    "Consumer",
    "ConsumerClosed",
    "ConsumerStats",
    "Delivery",
    "DeliveryOptions",
    "GapNotice",
    "Hub",
    "HubClosedError",
    "HubConfig",
    "HubCounters",
    "Message",
    "OverflowPolicy",
    "SessionDeletedError",
    "StreamEvent",
    "create_hub",
    "nats_subject",
    "ring_topic",
    "ring_topics",
]
