"""The consumer SDK: a gateway's messages over its ring, /v1/stream or NATS (see core)."""

from dataplane.ring import Gap, RingMessage, WaitOrigin, WaitPolicy
from gateway.client.core import (
    Client,
    ClientEvent,
    MessagesLostError,
    MessageSource,
    NormalizedMessage,
    Restart,
    SourceUnavailableError,
    StreamClosedError,
    decode_normalized,
)
from gateway.client.ring import RingSource

__all__ = [
    "Client",
    "ClientEvent",
    "Gap",
    "MessageSource",
    "MessagesLostError",
    "NormalizedMessage",
    "Restart",
    "RingMessage",
    "RingSource",
    "SourceUnavailableError",
    "StreamClosedError",
    "WaitOrigin",
    "WaitPolicy",
    "decode_normalized",
]
