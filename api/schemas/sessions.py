"""Upstream WebSocket sessions and their event log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, Self

from pydantic import AfterValidator, Field, model_validator

from api.schemas.common import ID_MAX, Name, PublicSchema, Schema, refuse_nulls
from gateway.runtime import UNPARSABLE_QUIET_S
from gateway.store.validate import check_ws_url

Url = Annotated[
    str,
    Field(
        min_length=6,
        max_length=2048,
        description="ws:// or wss:// URL of the exchange's WebSocket endpoint",
        examples=["wss://stream.example.com:9443/ws"],
    ),
    AfterValidator(check_ws_url),
]
Dialect = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        description="exchange dialect (GET /v1/sessions/dialects lists them)",
        examples=["generic"],
    ),
]
Transport = Literal["dpdk", "kernel"]
Seconds = Annotated[float, Field(gt=0, le=3600)]


class SessionBase(Schema):
    name: Name
    url: Url
    dialect: Dialect
    transport: Transport = Field(
        default="dpdk", description="dpdk: this gateway's stack on a port; kernel: OS sockets"
    )
    port_id: int | None = Field(
        default=None, ge=1, le=ID_MAX, description="the DPDK port (required for transport dpdk)"
    )
    tls_verify: bool = Field(default=True, description="verify the server's certificate")
    tls_ca_file: str | None = Field(
        default=None, max_length=1024, description="CA bundle on the gateway host (wss only)"
    )
    tls_server_name: str | None = Field(
        default=None, max_length=255, description="SNI and name to verify, if not the URL's host"
    )
    heartbeat_interval_s: Seconds = 15.0
    heartbeat_timeout_s: Seconds = 30.0
    reconnect_initial_delay_s: Annotated[float, Field(ge=0, le=3600)] = 0.5
    reconnect_max_delay_s: Annotated[float, Field(ge=0, le=3600)] = 30.0
    reconnect_multiplier: Annotated[float, Field(ge=1, le=10)] = 2.0
    reconnect_jitter: Annotated[float, Field(ge=0, le=1)] = 0.2
    reconnect_max_attempts: int | None = Field(
        default=None, ge=0, le=1_000_000, description="null: retry forever"
    )


class SessionCreate(SessionBase):
    pass


class SessionUpdate(Schema):
    """Fields to change; connection fields only while the session is stopped."""

    name: Name | None = None
    url: Url | None = None
    dialect: Dialect | None = None
    transport: Transport | None = None
    port_id: int | None = Field(default=None, ge=1, le=ID_MAX)
    tls_verify: bool | None = None
    tls_ca_file: str | None = Field(default=None, max_length=1024)
    tls_server_name: str | None = Field(default=None, max_length=255)
    heartbeat_interval_s: Seconds | None = None
    heartbeat_timeout_s: Seconds | None = None
    reconnect_initial_delay_s: Annotated[float, Field(ge=0, le=3600)] | None = None
    reconnect_max_delay_s: Annotated[float, Field(ge=0, le=3600)] | None = None
    reconnect_multiplier: Annotated[float, Field(ge=1, le=10)] | None = None
    reconnect_jitter: Annotated[float, Field(ge=0, le=1)] | None = None
    reconnect_max_attempts: int | None = Field(default=None, ge=0, le=1_000_000)

    @model_validator(mode="after")
    def _nulls(self) -> Self:
        refuse_nulls(
            self,
            frozenset({"port_id", "tls_ca_file", "tls_server_name", "reconnect_max_attempts"}),
        )
        return self


class SessionStatusPublic(PublicSchema):
    """What the runtime reports: 'configured' with a reason when no dataplane is attached."""

    state: str
    reason: str | None
    since: datetime | None
    topics: list[str]
    receiving_unparsable: bool = Field(
        default=False,
        description="the upstream sends frames the session's dialect cannot parse: they are "
        "dropped (counted in wsgw_dataplane_session_unparsable, the first of a spell is an "
        "'unparsable' event with a sample), so the session may stream while delivering "
        f"nothing; clears after {UNPARSABLE_QUIET_S:g} s without one",
    )


class SessionPublic(PublicSchema):
    id: int
    name: str
    url: str
    dialect: str
    transport: str
    port_id: int | None
    tls_verify: bool
    tls_ca_file: str | None
    tls_server_name: str | None
    heartbeat_interval_s: float
    heartbeat_timeout_s: float
    reconnect_initial_delay_s: float
    reconnect_max_delay_s: float
    reconnect_multiplier: float
    reconnect_jitter: float
    reconnect_max_attempts: int | None
    desired_state: Literal["running", "stopped"]
    created_at: datetime
    updated_at: datetime
    status: SessionStatusPublic


class SessionListPublic(PublicSchema):
    data: list[SessionPublic]
    count: int
    offset: int
    limit: int


class SessionEventPublic(PublicSchema):
    id: int
    session_id: int
    at: datetime
    kind: str
    reason: str | None
    details: dict[str, Any]


class SessionEventListPublic(PublicSchema):
    data: list[SessionEventPublic]
    count: int
    offset: int
    limit: int


class DialectListPublic(PublicSchema):
    data: list[str]
