"""The fleet (gateway.fleet): nodes, session leases, placement rules."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, StringConstraints

from api.schemas.common import PublicSchema

LabelKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]{1,63}$")]
LabelValue = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_./-]{0,63}$")]
#: A session's placement rule: the labels (fleet.labels) a node must carry to run it.
Placement = Annotated[
    dict[LabelKey, LabelValue],
    Field(
        max_length=16,
        description="labels a fleet node must carry to run the session ({}: any node); "
        "ignored by a gateway that is not in a fleet",
        examples=[{"venue": "binance", "dpdk": "true"}],
        # Keys outside the label pattern are refused: the document says so too.
        json_schema_extra={"additionalProperties": False},
    ),
]


class NodePublic(PublicSchema):
    name: str
    labels: dict[str, str]
    api_url: str | None
    started_at: datetime
    heartbeat_at: datetime
    draining: bool
    alive: bool = Field(description="heartbeat within the lease time (the database's clock)")
    heartbeat_age_s: float = Field(description="seconds since its last heartbeat (the "
                                   "database's clock, not the caller's)")  # fmt: skip
    sessions: int = Field(description="live leases this node holds")


class LegsTogetherPublic(PublicSchema):
    group: int
    legs: list[int] = Field(description="the group's legs that share a node with another of "
                            "its legs (live leases)")  # fmt: skip
    nodes: list[str] = Field(description="the nodes running those legs")


class NodeListPublic(PublicSchema):
    this_node: str
    lease_s: float
    data: list[NodePublic]
    legs_together: list[LegsTogetherPublic] = Field(
        description="feed groups with legs sharing a node (too few eligible nodes to put "
        "them apart): losing that node loses those legs together"
    )


class LeasePublic(PublicSchema):
    session_id: int
    node: str
    generation: int = Field(description="grows by one at every change of owner (fencing)")
    expires_at: datetime
    live: bool


class LeaseListPublic(PublicSchema):
    data: list[LeasePublic]


class DrainPublic(PublicSchema):
    node: str
    draining: bool
    held: list[int] = Field(description="sessions this node still holds (it releases them)")
