"""Upstream WebSocket sessions and their event log."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, StrictBool

from api.schemas.common import ID_MAX, Name, PagePublic, PublicSchema, Schema, UpdateSchema
from api.schemas.fleet import Placement
from gateway.runtime import known_dialects
from gateway.sessions.config import (
    DEFAULT_HEARTBEAT_TIMEOUT_S,
    DEFAULT_PING_INTERVAL_S,
    UNPARSABLE_QUIET_S,
    ReconnectPolicy,
)
from gateway.store.validate import (
    FILE_PATH,
    HOST_NAME,
    WS_URL,
    check_file_path,
    check_host_name,
    check_ws_url,
    hide_user_info,
)

Url = Annotated[
    str,
    Field(
        min_length=6,
        max_length=2048,
        description="ws:// or wss:// URL of the exchange's WebSocket endpoint: a DNS name or "
        "IPv4 address, no user:password@, no fragment, RFC 3986 characters only",
        examples=["wss://stream.example.com:9443/ws"],
        json_schema_extra={"pattern": WS_URL.pattern},
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
        json_schema_extra={"enum": list(known_dialects())},
    ),
]
CaFile = Annotated[
    str,
    Field(
        min_length=1,
        max_length=1024,
        description="PEM CA bundle on the gateway host (wss only): it must exist and load",
        json_schema_extra={"pattern": FILE_PATH.pattern},
    ),
    AfterValidator(check_file_path),
]
ServerName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        description="SNI and name to verify, if not the URL's host (wss only)",
        json_schema_extra={"pattern": HOST_NAME.pattern},
    ),
    AfterValidator(check_host_name),
]
Transport = Literal["dpdk", "kernel"]
Seconds = Annotated[float, Field(gt=0, le=3600)]
Delay = Annotated[float, Field(ge=0, le=3600)]
Multiplier = Annotated[float, Field(ge=1, le=10)]
Jitter = Annotated[float, Field(ge=0, le=1)]
#: The session defaults live in gateway.sessions.config (the runtime's and the store's too).
RECONNECT = ReconnectPolicy()
MaxAttempts = Annotated[
    int,
    Field(ge=1, le=1_000_000, description="failed attempts in a row before giving up"),
]


class SessionBase(Schema):
    """An upstream session. Rules between fields, checked by the service (422 naming the
    field): transport dpdk needs port_id and kernel takes none; tls_ca_file and
    tls_server_name need a wss:// URL; heartbeat_timeout_s exceeds heartbeat_interval_s;
    reconnect_max_delay_s is at least reconnect_initial_delay_s."""

    name: Name
    url: Url
    dialect: Dialect
    transport: Transport = Field(
        default="dpdk", description="dpdk: this gateway's stack on a port; kernel: OS sockets"
    )
    port_id: int | None = Field(
        default=None, ge=1, le=ID_MAX, description="the DPDK port (required for transport dpdk)"
    )
    tls_verify: StrictBool = Field(default=True, description="verify the server's certificate")
    tls_ca_file: CaFile | None = None
    tls_server_name: ServerName | None = None
    heartbeat_interval_s: Seconds = DEFAULT_PING_INTERVAL_S
    heartbeat_timeout_s: Seconds = DEFAULT_HEARTBEAT_TIMEOUT_S
    reconnect_initial_delay_s: Delay = RECONNECT.initial_delay_s
    reconnect_max_delay_s: Delay = RECONNECT.max_delay_s
    reconnect_multiplier: Multiplier = RECONNECT.multiplier
    reconnect_jitter: Jitter = RECONNECT.jitter
    reconnect_max_attempts: MaxAttempts | None = Field(
        default=RECONNECT.max_attempts, description="null: forever"
    )
    placement: Placement = Field(default_factory=dict)


class SessionCreate(SessionBase):
    pass


class SessionUpdate(UpdateSchema):
    """Fields to change; connection fields only while the session is stopped. The result
    is checked as a whole, with SessionBase's rules between fields."""

    nullable = frozenset({"port_id", "tls_ca_file", "tls_server_name", "reconnect_max_attempts"})

    name: Name | None = None
    url: Url | None = None
    dialect: Dialect | None = None
    transport: Transport | None = None
    port_id: int | None = Field(default=None, ge=1, le=ID_MAX)
    tls_verify: StrictBool | None = None
    tls_ca_file: CaFile | None = None
    tls_server_name: ServerName | None = None
    heartbeat_interval_s: Seconds | None = None
    heartbeat_timeout_s: Seconds | None = None
    reconnect_initial_delay_s: Delay | None = None
    reconnect_max_delay_s: Delay | None = None
    reconnect_multiplier: Multiplier | None = None
    reconnect_jitter: Jitter | None = None
    reconnect_max_attempts: MaxAttempts | None = None
    placement: Placement | None = None


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
    url: Annotated[str, AfterValidator(hide_user_info)]
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
    placement: dict[str, str]
    created_at: datetime
    updated_at: datetime
    status: SessionStatusPublic


class SessionListPublic(PagePublic[SessionPublic]):
    pass


class SessionEventPublic(PublicSchema):
    id: int
    session_id: int
    at: datetime
    kind: str
    reason: str | None
    details: dict[str, Any]


class SessionEventListPublic(PagePublic[SessionEventPublic]):
    pass


class DialectListPublic(PublicSchema):
    data: list[str]
