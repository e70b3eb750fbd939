"""/v1/consumers: every consumer of the hub (admin): the open /v1/stream consumers, the NATS
sink and the shared-memory ring's readers (its reader table: any process, with lag and
drops), and the force-close of a stream or of a ring reader.

The figures come from gateway.hub.inventory (what the ring can and cannot say of its readers
is written there). A force-closed stream ends with 1008 (policy violation, RFC 6455 section
7.4.1) and the reason "closed by operator '<token name>'": gateway.client takes 1008 as
final and does not reconnect; another client may (revoke its token to keep it out). A
force-closed ring reader fails at its next read or wait (the SDK raises RingEvictedError);
it is named by slot and pid, so a slot reused by another reader meanwhile is left alone.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Path, Query, Request, status
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from api.deps import AdminDep
from api.routes import resource_router
from api.routes.stream import app_hub
from api.schemas.common import ID_MAX, responses
from gateway.hub.inventory import (
    RingInventory,
    close_ring_reader,
    find_consumer,
    nats_inventory,
    ring_inventory,
    stream_consumers,
)
from gateway.store.errors import NotFoundError

router = resource_router("/v1/consumers", "consumers")


class StreamConsumerPublic(BaseModel):
    id: int = Field(description="this gateway run's number for the stream (DELETE takes it)")
    name: str = Field(description="the consumer name (the metrics' label)")
    session_id: int
    topics: list[str] | None = Field(description="null: every topic of the session")
    queue_size: int
    overflow: str
    conflation_ms: int
    lag: int = Field(description="messages queued for the stream now")
    dropped: int = Field(description="messages dropped by drop_oldest since it opened")
    since: datetime


class FollowerPublic(BaseModel):
    kind: str = Field(description="stream (a consumer loop of this process) or nats")
    next_seq: int | None
    lag: int = Field(description="ring records not read yet")
    dropped: int


class RingProcessPublic(BaseModel):
    pid: int
    command: str


class RingReaderPublic(BaseModel):
    slot: int = Field(description="its slot in the ring's reader table (DELETE takes it)")
    pid: int
    name: str = Field(description="what the reader calls itself, else its process's name")
    command: str = Field(description="its command line (empty when /proc does not show it)")
    in_gateway: bool = Field(description="one of the gateway's own (a stream loop, the NATS sink)")
    next_seq: int = Field(description="the sequence it reads next")
    lag: int = Field(description="messages written that it has not read yet")
    messages: int = Field(description="messages delivered to it")
    gaps: int = Field(description="times the writer lapped it")
    dropped: int = Field(description="messages lost in those gaps")
    since: datetime
    heartbeat: datetime = Field(description="its last read or wait")
    closing: bool = Field(description="closed by an operator; it stops at its next read or wait")


class RingPublic(BaseModel):
    path: str | None = Field(description="null: a private ring (memfd) only this process reads")
    capacity_bytes: int
    last_seq: int
    oldest_seq: int
    waiters: int = Field(description="readers of any process asleep on the ring's futex now")
    writer_pid: int
    followers: list[FollowerPublic] = Field(description="the ring's readers in this process")
    readers: list[RingReaderPublic] = Field(description="the ring's reader table (any process)")
    max_readers: int = Field(description="slots in the reader table")
    processes: list[RingProcessPublic] = Field(
        description="other processes that map the ring without a slot in the reader table "
        "(read-only readers, readers beyond max_readers, tools): no lag is known for them"
    )


class NatsPublic(BaseModel):
    servers: list[str]
    connected: bool
    published: int
    pending: int = Field(description="ring records the sink has not read yet")
    dropped: dict[str, int]
    jetstream_ready: bool
    last_error: str | None


class ConsumersPublic(BaseModel):
    hub: bool = Field(description="false: no hub (no dataplane), so no consumers")
    streams: list[StreamConsumerPublic]
    nats: NatsPublic | None
    ring: RingPublic | None


ConsumerIdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="the stream's id")]
SlotPath = Annotated[int, Path(ge=0, le=1023, description="the reader's slot")]
PidQuery = Annotated[
    int, Query(ge=1, le=2**32 - 1, description="the reader's pid, as listed (guards reuse)")
]


def _ring_public(ring: RingInventory) -> RingPublic:
    fields = asdict(ring)
    fields["readers"] = [
        RingReaderPublic(
            **{k: v for k, v in asdict(r).items() if k not in ("attached_at", "heartbeat_at")},
            since=datetime.fromtimestamp(r.attached_at, UTC),
            heartbeat=datetime.fromtimestamp(r.heartbeat_at, UTC),
        )
        for r in ring.readers
    ]
    return RingPublic(**fields)


@router.get("", response_model=ConsumersPublic)
async def list_consumers(request: Request, _: AdminDep) -> ConsumersPublic:
    """The open streams (read on the API loop, where they live), the NATS sink and the ring."""
    hub = app_hub(request.app)
    if hub is None:
        return ConsumersPublic(hub=False, streams=[], nats=None, ring=None)
    streams = [
        StreamConsumerPublic(
            **{k: v for k, v in asdict(s).items() if k != "opened_at"},
            since=datetime.fromtimestamp(s.opened_at, UTC),
        )
        for s in stream_consumers(hub)
    ]
    nats = nats_inventory(hub)
    ring = await run_in_threadpool(ring_inventory, hub)
    return ConsumersPublic(
        hub=True,
        streams=streams,
        nats=None if nats is None else NatsPublic(**asdict(nats)),
        ring=None if ring is None else _ring_public(ring),
    )


@router.delete("/{consumer_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404))
async def close_consumer(consumer_id: ConsumerIdPath, request: Request, caller: AdminDep) -> None:
    """Close an open stream now: 1008, reason "closed by operator '<this token's name>'"."""
    hub = app_hub(request.app)
    consumer = None if hub is None else find_consumer(hub, consumer_id)
    if consumer is None:
        raise NotFoundError("stream consumer", consumer_id)
    consumer.force_close(caller.name)


@router.delete("/ring/{slot}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404))
async def close_ring_reader_route(
    slot: SlotPath, pid: PidQuery, request: Request, _: AdminDep
) -> None:
    """Close a ring reader of another process: its next read or wait fails (the SDK raises
    RingEvictedError). 404: no reader with that pid in that slot, or one of the gateway's
    own (close its stream instead)."""
    hub = app_hub(request.app)
    if hub is None or not close_ring_reader(hub, slot, pid):
        raise NotFoundError("ring reader", slot)
