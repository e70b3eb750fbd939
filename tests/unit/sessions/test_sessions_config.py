"""SessionConfig: validation, the control plane's spec mapped onto it, failure texts."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from dataplane.ws.errors import HandshakeRejected, TlsCertificateError
from gateway.runtime import SessionSpec
from gateway.sessions import (
    HeartbeatConfig,
    ReconnectPolicy,
    SessionConfig,
    SessionConfigError,
    TlsOptions,
    describe_failure,
)


def spec(**overrides: object) -> SessionSpec:
    values: dict[str, object] = {
        "id": 3,
        "name": "okx-main",
        "url": "wss://ws.okx.com:8443/ws/v5/public",
        "dialect": "okx",
        "transport": "kernel",
        "port_id": None,
    }
    values.update(overrides)
    return SessionSpec(**values)  # type: ignore[arg-type]


def test_from_spec_maps_every_field() -> None:
    config = SessionConfig.from_spec(
        spec(
            tls=TlsOptions(verify=True, ca_file="/etc/ca.pem", server_name="ws.okx.com"),
            heartbeat=HeartbeatConfig(
                ping_interval_s=7.0, ping_timeout_s=21.0, dead_feed_timeout_s=21.0
            ),
            reconnect=ReconnectPolicy(
                initial_delay_s=0.25, max_delay_s=9.0, multiplier=3.0, jitter=1.0, max_attempts=4
            ),
        )
    )
    assert config.url == "wss://ws.okx.com:8443/ws/v5/public"
    assert config.dialect == "okx"
    assert config.name == "okx-main"
    assert config.tls == TlsOptions(True, "/etc/ca.pem", "ws.okx.com")
    assert config.heartbeat.ping_interval_s == 7.0
    assert config.heartbeat.ping_timeout_s == 21.0
    assert config.heartbeat.dead_feed_timeout_s == 21.0
    rc = config.reconnect
    assert (rc.initial_delay_s, rc.max_delay_s, rc.multiplier, rc.jitter, rc.max_attempts) == (
        0.25,
        9.0,
        3.0,
        1.0,
        4,
    )


def test_from_spec_takes_overrides() -> None:
    config = SessionConfig.from_spec(spec(), ack_timeout_s=1.5)
    assert config.ack_timeout_s == 1.5


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ({"url": "http://example.com/"}, "ws://"),
        ({"url": "wss://example.com/#frag"}, "fragment"),
        ({"dialect": "nasdaq"}, "unknown dialect"),
        ({"transport": "rdma"}, "transport"),
    ],
)
def test_from_spec_refuses_what_cannot_work(overrides: dict[str, object], match: str) -> None:
    with pytest.raises(SessionConfigError, match=match):
        SessionConfig.from_spec(spec(**overrides))


@pytest.mark.parametrize(
    ("changes", "field", "match"),
    [
        ({"url": "ws://a.example/x y"}, "url", "Illegal target characters"),
        ({"url": "ws://u:p@a.example/"}, "url", "user info"),
        ({"extra_headers": (("X-Key", "v\r\nEvil: 1"),)}, "extra_headers", "Illegal header"),
        ({"extra_headers": (("X-Key", "v\x00"),)}, "extra_headers", "Illegal header"),
        ({"extra_headers": (("Bad Name", "v"),)}, "extra_headers", "Illegal header name"),
        ({"extra_headers": (("Host", "other"),)}, "extra_headers", "set by the WebSocket"),
    ],
)
def test_the_opening_request_is_checked_once_up_front(
    changes: dict[str, object], field: str, match: str
) -> None:
    """What the handshake would refuse at every connect (h11: no CR, LF or NUL in the
    target or a header) is refused by validate(), naming the setting."""
    config = SessionConfig("ws://a.example/", "generic")
    with pytest.raises(SessionConfigError, match=match) as refused:
        replace(config, **changes).validate()  # type: ignore[arg-type]
    assert refused.value.field == field


def test_every_refusal_names_its_setting() -> None:
    config = SessionConfig("ws://a.example/", "generic")
    cases = {
        "reconnect.max_attempts": {"reconnect": ReconnectPolicy(max_attempts=0)},
        "heartbeat.ping_timeout_s": {"heartbeat": HeartbeatConfig(ping_timeout_s=math.nan)},
        "dialect": {"dialect": "nasdaq"},
        "tls.ca_file": {"tls": TlsOptions(ca_file="ca.pem")},
    }
    for field, changes in cases.items():
        with pytest.raises(SessionConfigError) as refused:
            replace(config, **changes).validate()  # type: ignore[arg-type]
        assert refused.value.field == field


def test_tls_options_need_wss() -> None:
    with pytest.raises(SessionConfigError, match="wss"):
        SessionConfig("ws://127.0.0.1:9/", "generic", tls=TlsOptions(ca_file="ca.pem")).validate()


def test_heartbeat_values_are_checked() -> None:
    with pytest.raises(SessionConfigError, match="ping_timeout_s"):
        SessionConfig(
            "ws://127.0.0.1:9/", "generic", heartbeat=HeartbeatConfig(ping_timeout_s=0)
        ).validate()
    quiet = HeartbeatConfig(ping_interval_s=None, dead_feed_timeout_s=None)
    assert SessionConfig("ws://127.0.0.1:9/", "generic", heartbeat=quiet).validate()


def test_failure_texts_say_what_happened() -> None:
    rejected = HandshakeRejected(
        "rejected", 429, ((b"retry-after", b"7"),), b"Too many connection attempts"
    )
    text, retry_after, details = describe_failure(rejected)
    assert text == "handshake rejected with HTTP 429: Too many connection attempts"
    assert retry_after == 7.0
    assert details == {"http_status": 429, "kind": "handshake"}
    text, _, details = describe_failure(TlsCertificateError("unknown CA"))
    assert text.startswith("TLS certificate rejected")
    assert details == {"kind": "certificate", "tls": "certificate"}
    text, _, details = describe_failure(ConnectionRefusedError(111, "Connection refused"))
    assert (text, details) == ("Connection refused", {"errno": 111, "kind": "refused"})
    assert describe_failure(TimeoutError())[0] == "timed out"
