"""Consumers' subscriptions to a session's topics."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Literal

from pydantic import AfterValidator, Field

from api.schemas.common import ID_MAX, PagePublic, PublicSchema, Schema, UpdateSchema
from gateway.store.validate import TOPIC, TOPIC_MAX, check_pattern, check_topics

Topics = Annotated[
    list[
        Annotated[
            str,
            Field(min_length=1, max_length=TOPIC_MAX, json_schema_extra={"pattern": TOPIC.pattern}),
        ]
    ],
    Field(
        min_length=1,
        max_length=1000,
        examples=[["btcusdt@trade", "ethusdt@trade"]],
        description="printable ASCII without spaces, each once; the session's dialect must "
        "accept each (422 naming the topic otherwise) and they are stored as it spells them",
        json_schema_extra={"uniqueItems": True},
    ),
    AfterValidator(check_topics),
]
CONSUMER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
CONSUMER_RULE = "1-128 letters, digits, '.', '_', ':', '@' or '-', starting with a letter or digit"


def check_consumer(value: str) -> str:
    return check_pattern(CONSUMER, value, "consumer", CONSUMER_RULE)


Consumer = Annotated[
    str,
    Field(
        min_length=1,
        max_length=128,
        json_schema_extra={"pattern": CONSUMER.pattern},
        description="who consumes (an application or host name)",
        examples=["pricer-1"],
    ),
    AfterValidator(check_consumer),
]
QueueSize = Annotated[int, Field(ge=1, le=1_000_000, description="messages held per consumer")]
Overflow = Literal["disconnect", "drop_oldest"]
Format = Annotated[
    Literal["raw", "normalized"],
    Field(
        description="raw: the upstream's messages as received; normalized: the gateway's "
        "normalized events (trades, book snapshots and deltas, book resets, tickers...: "
        "gateway.normalize), one per message, published as topic `norm:<topic>` "
        "(`normbin:<topic>` in binary); the session's dialect must be one of the six "
        "venues'",
    ),
]
Encoding = Annotated[
    Literal["json", "binary"],
    Field(description="the normalized events' encoding: JSON text or MessagePack arrays"),
]
ConflationMs = Annotated[
    int,
    Field(ge=0, le=60_000, description="keep the latest message per topic for this long; 0: off"),
]


class SubscriptionBase(Schema):
    topics: Topics
    consumer: Consumer
    queue_size: QueueSize = 4096
    overflow: Overflow = Field(
        default="disconnect",
        description="when the consumer's queue is full: disconnect it (no silent loss) or drop "
        "the oldest message and report a gap",
    )
    conflation_ms: ConflationMs = 0
    format: Format = "raw"
    encoding: Encoding = "json"


class SubscriptionCreate(SubscriptionBase):
    session_id: int = Field(ge=1, le=ID_MAX)


class SubscriptionUpdate(UpdateSchema):
    topics: Topics | None = None
    consumer: Consumer | None = None
    queue_size: QueueSize | None = None
    overflow: Overflow | None = None
    conflation_ms: ConflationMs | None = None
    format: Format | None = None
    encoding: Encoding | None = None


class ConsumePublic(PublicSchema):
    """How to read the messages: a WebSocket stream, or the local shared-memory ring."""

    stream_url: str
    ring: str  # the gateway's shared-memory ring (/dev/shm/<ring>)
    ring_url: str  # the same ring as the SDK opens it: Client.connect(ring_url, topics=...)
    # the filter for a ring reader: `<session>:<topic>` (a normalized subscription's:
    # `<session>:norm:<topic>`) and `$gap`
    ring_topics: list[str]


class SubscriptionPublic(PublicSchema):
    id: int
    session_id: int
    topics: list[str]
    consumer: str
    queue_size: int
    overflow: str
    conflation_ms: int
    format: str
    encoding: str
    owner_token_id: int | None = Field(
        description="the token that created it (another consume-only token may not use it); "
        "null: made without a token, usable by every consume token"
    )
    created_at: datetime
    updated_at: datetime
    consume: ConsumePublic
    upstream_subscribed: list[str] = Field(
        default_factory=list, description="topics this change subscribed upstream (first user)"
    )
    upstream_unsubscribed: list[str] = Field(
        default_factory=list, description="topics this change unsubscribed upstream (last user)"
    )


class SubscriptionListPublic(PagePublic[SubscriptionPublic]):
    pass
