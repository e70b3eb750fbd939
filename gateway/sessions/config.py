"""What one upstream session is told: where to connect, how, and how hard to hold on.

Plain frozen dataclasses, checked once by `SessionConfig.validate()` so that a session never
discovers a nonsensical setting half-way through a reconnect. `SessionConfig.from_spec` maps
the control plane's `SessionSpec` (gateway.runtime) onto it; the spec carries the same
`TlsOptions`, `HeartbeatConfig` and `ReconnectPolicy`, so a setting and its default are
written once. The API schema (api/schemas/sessions.py) takes its defaults from here and the
stored rows (gateway/store/models.py) must match them (tests/unit/sessions/test_config_defaults.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from dataplane.transports.base import parse_ws_url
from dataplane.ws.client import DEFAULT_MAX_FRAME_SIZE, DEFAULT_MAX_MESSAGE_SIZE
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.handshake import ClientHandshake

if TYPE_CHECKING:
    from gateway.runtime import SessionSpec

#: A session's `receiving_unparsable` clears after this long without an unparsable frame.
UNPARSABLE_QUIET_S = 60.0
#: The heartbeat an operator's session gets unless told otherwise: a ping every 15 s, and a
#: connection with no answer or no data for 30 s is dead (the API's and the store's default).
DEFAULT_PING_INTERVAL_S = 15.0
DEFAULT_HEARTBEAT_TIMEOUT_S = 30.0

Transport = Literal["kernel", "dpdk"]
TRANSPORTS: tuple[Transport, ...] = ("kernel", "dpdk")


class SessionConfigError(ValueError):
    """A session setting that cannot work; the message says which and why, `field` names
    it as SessionConfig spells it ("url", "reconnect.max_attempts"), when one is to blame."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class TlsOptions:
    """wss:// only. verify=False turns certificate and host name checks off (lab use)."""

    verify: bool = True
    ca_file: str | None = None  # PEM bundle to trust instead of the system's CAs
    server_name: str | None = None  # SNI and certificate name, when not the URL's host


@dataclass(frozen=True)
class HeartbeatConfig:
    """How a session tells a live feed from a dead one.

    ping_interval_s: a WebSocket ping (RFC 6455 section 5.5.2) this often; None: none.
    ping_timeout_s: a ping unanswered this long, with no message either, kills the
        connection (a pong can queue behind a burst, so data also proves the path).
    dead_feed_timeout_s: no message at all for this long while topics are subscribed kills
        the connection with reason "no data". WebSocket pongs do not count: a server that
        answers pings but sends nothing is a dead feed for a market-data client.
    keepalive: send the dialect's application keepalive (OKX text "ping" every 25 s,
        Bybit {"op":"ping"} every 20 s, Bitstamp bts:heartbeat); its answers count as
        messages. keepalive_interval_s overrides the dialect's interval.
    """

    ping_interval_s: float | None = DEFAULT_PING_INTERVAL_S
    ping_timeout_s: float = DEFAULT_HEARTBEAT_TIMEOUT_S
    dead_feed_timeout_s: float | None = DEFAULT_HEARTBEAT_TIMEOUT_S
    keepalive: bool = True
    keepalive_interval_s: float | None = None


@dataclass(frozen=True)
class ReconnectPolicy:
    """Exponential backoff with jitter ("Exponential Backoff And Jitter", AWS Architecture
    Blog, 2015): attempt n waits ceiling_n = min(max_delay_s, initial_delay_s *
    multiplier**n), less a random fraction `jitter` of it. jitter=1.0 is "full jitter",
    uniform(0, ceiling_n), which spreads a crowd of clients best after an exchange outage;
    0 is plain exponential backoff. The default 0.2 is what the API has always stored for a
    session created without one.

    max_attempts: consecutive failed attempts before the session gives up (state failed);
    None retries forever. The count restarts once a connection has stayed up for
    stable_after_s, so a feed that drops every few seconds still backs off, while one that
    streamed for a while is back within initial_delay_s of its next loss. 10 s, not more:
    with 30 s an exchange restarting every 20 s kept its sessions at the 30 s cap, connected
    a third of the time (`wsgw bench faultsoak`, docs/PERFORMANCE.md).
    """

    initial_delay_s: float = 0.5
    multiplier: float = 2.0
    max_delay_s: float = 30.0
    jitter: float = 0.2
    max_attempts: int | None = None
    stable_after_s: float = 10.0


@dataclass(frozen=True)
class SessionConfig:
    """One upstream WebSocket feed: URL, dialect, transport, TLS, liveness, reconnects.

    dialect_options go to the dialect's constructor (`make_dialect(dialect, **options)`),
    e.g. {"config": GenericConfig(...)} for the generic dialect. compression offers
    permessage-deflate (RFC 7692): less bandwidth, more latency and CPU, so it is off.
    ack_timeout_s: how long a session waits in `subscribing` for acks before it streams
    anyway (and says so). max_batch: messages taken from the connection per read-loop turn.
    """

    url: str
    dialect: str
    dialect_options: Mapping[str, Any] = field(default_factory=dict)
    transport: Transport = "kernel"
    port_id: int | None = None  # the DPDK port a dpdk session leaves through
    tls: TlsOptions = field(default_factory=TlsOptions)
    heartbeat: HeartbeatConfig = field(default_factory=HeartbeatConfig)
    reconnect: ReconnectPolicy = field(default_factory=ReconnectPolicy)
    subprotocols: tuple[str, ...] = ()
    extra_headers: tuple[tuple[str, str], ...] = ()
    compression: bool = False
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE
    open_timeout_s: float = 10.0
    close_timeout_s: float = 2.0
    ack_timeout_s: float = 10.0
    max_batch: int = 256
    sequence_check: bool = False  # the dialect's exchange sequence numbers, where it has any
    name: str = ""

    def validate(self) -> SessionConfig:
        """Self, or SessionConfigError naming the first bad setting."""
        from gateway.dialects import DIALECTS

        try:
            target = parse_ws_url(self.url)
        except LocalProtocolError as exc:
            raise SessionConfigError(str(exc), "url") from None
        self._check_request(target.host, target.resource, target.port, target.secure)
        if self.dialect not in DIALECTS:
            known = ", ".join(DIALECTS)
            raise SessionConfigError(f"unknown dialect {self.dialect!r}; known: {known}", "dialect")
        if self.transport not in TRANSPORTS:
            raise SessionConfigError(
                f"transport must be kernel or dpdk, not {self.transport!r}", "transport"
            )
        if not target.secure and (self.tls.ca_file or self.tls.server_name):
            field = "tls.ca_file" if self.tls.ca_file else "tls.server_name"
            raise SessionConfigError(f"{self.url} is ws://: TLS options need wss://", field)
        hb = self.heartbeat
        _positive("heartbeat.ping_interval_s", hb.ping_interval_s, optional=True)
        _positive("heartbeat.ping_timeout_s", hb.ping_timeout_s)
        _positive("heartbeat.dead_feed_timeout_s", hb.dead_feed_timeout_s, optional=True)
        _positive("heartbeat.keepalive_interval_s", hb.keepalive_interval_s, optional=True)
        rc = self.reconnect
        _positive("reconnect.initial_delay_s", rc.initial_delay_s, zero=True)
        _positive("reconnect.max_delay_s", rc.max_delay_s, zero=True)
        _positive("reconnect.stable_after_s", rc.stable_after_s, zero=True)
        if rc.multiplier < 1 or not math.isfinite(rc.multiplier):
            raise SessionConfigError("reconnect.multiplier must be >= 1", "reconnect.multiplier")
        if not 0.0 <= rc.jitter <= 1.0:
            raise SessionConfigError(
                "reconnect.jitter must be within 0..1 (1: full jitter)", "reconnect.jitter"
            )
        if rc.max_delay_s < rc.initial_delay_s:
            raise SessionConfigError(
                "reconnect.max_delay_s is below initial_delay_s", "reconnect.max_delay_s"
            )
        if rc.max_attempts is not None and rc.max_attempts < 1:
            raise SessionConfigError(
                "reconnect.max_attempts must be >= 1 (None: forever)", "reconnect.max_attempts"
            )
        for name in ("open_timeout_s", "close_timeout_s", "ack_timeout_s"):
            _positive(name, getattr(self, name))
        if self.max_message_size < 1 or self.max_frame_size < 1 or self.max_batch < 1:
            raise SessionConfigError("max_message_size, max_frame_size, max_batch must be >= 1")
        return self

    def _check_request(self, host: str, resource: str, port: int, secure: bool) -> None:
        """The opening handshake's request, written once as every connect will write it
        (h11 refuses CR, LF and NUL in the target and in header names or values, RFC 9110
        section 5.5): a bad path or extra header fails here, not at each reconnect."""
        try:
            ClientHandshake(host, resource, port=port, secure=secure)
        except (LocalProtocolError, UnicodeError) as exc:
            raise SessionConfigError(f"url {self.url!r}: {exc}", "url") from None
        if not (self.extra_headers or self.subprotocols):
            return
        try:
            ClientHandshake(
                host,
                resource,
                port=port,
                secure=secure,
                subprotocols=self.subprotocols,
                extra_headers=self.extra_headers,
            )
        except (LocalProtocolError, UnicodeError, TypeError) as exc:
            raise SessionConfigError(
                f"extra_headers or subprotocols: {exc}", "extra_headers"
            ) from None

    @classmethod
    def from_spec(cls, spec: SessionSpec, **overrides: Any) -> SessionConfig:
        """The control plane's spec as a session config (overrides: any other field)."""
        config = cls(
            url=spec.url,
            dialect=spec.dialect,
            transport=spec.transport,  # type: ignore[arg-type]  # validated below
            port_id=spec.port_id,
            tls=spec.tls,
            heartbeat=spec.heartbeat,
            reconnect=spec.reconnect,
            name=spec.name,
        )
        return replace(config, **overrides).validate()


def _positive(
    name: str, value: float | None, *, optional: bool = False, zero: bool = False
) -> None:
    if value is None:
        if optional:
            return
        raise SessionConfigError(f"{name} must be set", name)
    if not math.isfinite(value) or value < 0 or (value == 0 and not zero):
        raise SessionConfigError(f"{name} must be {'>= 0' if zero else '> 0'}, not {value}", name)
