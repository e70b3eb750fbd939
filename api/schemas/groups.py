"""Feed groups (issue #19): sessions carrying one stream, arbitrated into one."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from api.schemas.common import ID_MAX, Name, PagePublic, PublicSchema, Schema, UpdateSchema

Legs = Annotated[
    list[Annotated[int, Field(ge=1, le=ID_MAX)]],
    Field(
        min_length=2,
        max_length=8,
        description="session ids, leg 0 first, each once: existing sessions of one dialect, each "
        "a leg of one group at most",
        examples=[[1, 2]],
        json_schema_extra={"uniqueItems": True},
    ),
]
HoldMs = Annotated[
    int,
    Field(
        ge=0,
        le=10_000,
        description="how long a message ahead of a hole waits for another leg to fill it; "
        "while a leg that has not passed the hole keeps delivering, the wait goes on, up to "
        "1 s (or hold_ms when longer): a lagging leg fills it, a stalled one does not",
    ),
]


class GroupCreate(Schema):
    """A group; its legs are checked against the stored sessions (422 naming `legs`): each
    exists, all have one dialect, none is a leg of another group."""

    name: Name
    legs: Legs
    hold_ms: HoldMs = 20


class GroupUpdate(UpdateSchema):
    """Fields to change, checked as on POST; the group runs anew (a fresh arbiter that
    starts where the old one left off) with them."""

    name: Name | None = None
    legs: Legs | None = None
    hold_ms: HoldMs | None = None


class LegPublic(PublicSchema):
    session_id: int
    leg: int
    won: int = Field(description="messages this leg brought first")
    late: int = Field(description="copies it brought after another leg")
    lag_p50_ns: int | None = Field(description="lag of its late copies behind the winner")
    lag_p99_ns: int | None
    live: bool = Field(description="the arbiter waits for this leg to fill holes")
    downs: int = Field(description="times the leg left streaming or lost messages")
    messages: int = Field(description="arrivals with an exchange id (won, late or held)")
    newest_id: int | None = Field(description="the exchange id of its newest arrival")
    state: str | None = Field(description="the leg session's state")


class GroupFiguresPublic(PublicSchema):
    hub_id: int = Field(
        description="the session id the group publishes under: ring topics "
        "'<hub_id>:<topic>', NATS '<prefix>.<hub_id>.<topic>', /v1/stream?group=ID"
    )
    delivered: int
    gaps: int
    lost: int
    duplicates: int
    held: int
    passed_through: int = Field(description="frames without an exchange id, from leg 0")
    path: Literal["c", "python"] = Field(
        default="python",
        description="where the group arbitrates: 'c' on the engine's feed path (identity, "
        "arbiter and ring write in C), 'python' in the runtime's loop",
    )
    dropped_unidentified: int = Field(default=0, description="frames no identity was found for")
    below_floor: int = Field(
        default=0, description="copies of what the group delivered before a change of its legs"
    )
    arbitration_ns_per_frame: float | None = Field(
        default=None,
        description="C path: identity, lock, arbiter and staging of one frame (median); "
        "a message costs one such step per leg",
    )
    engine_offers: int | None = Field(default=None, description="C path: frames offered in C")
    python_offers: int | None = Field(
        default=None, description="C path: frames offered from Python (kernel legs, odd frames)"
    )
    unread_waits: int | None = Field(
        default=None,
        description="C path: times a due hole waited for a kernel leg whose socket still "
        "held unread bytes (its read loop late)",
    )
    legs: list[LegPublic]


class GroupPublic(PublicSchema):
    id: int
    name: str
    legs: list[int]
    hold_ms: int
    hub_id: int
    created_at: datetime
    updated_at: datetime
    figures: GroupFiguresPublic | None = Field(
        description="the running group's figures (None when the runtime runs no groups)"
    )


class GroupListPublic(PagePublic[GroupPublic]):
    pass
