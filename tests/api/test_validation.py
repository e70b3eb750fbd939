"""Validation at the door: every input that would fail when the gateway starts the port or
session fails at create/update with 422 naming the field (`loc`) and saying what to fix,
and nothing is stored. On SQLite; the database-down cases are in test_database_down.py."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.store.models import SessionRow
from tests.api.conftest import Api

NAN, INF = math.nan, math.inf


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    return sqlite_url


SESSION = {
    "name": "feed",
    "url": "wss://feed.example.com/ws",
    "dialect": "generic",
    "transport": "kernel",
}
PORT = {
    "name": "port",
    "device": "net_af_packet9,iface=veth9",
    "ipv4": "198.18.9.2",
    "netmask": "255.255.255.0",
    "gateway": "198.18.9.1",
}


@dataclass(frozen=True)
class Bad:
    """One bad input: where it goes, the field `loc` must name and words of the message."""

    method: str
    path: str  # {port}, {session}, {sub} are filled in with existing ids
    body: dict[str, Any]
    field: str
    says: str

    def __str__(self) -> str:  # the test id
        return f"{self.method} {self.path} {self.field}: {self.says}"


BAD = [
    # -- URLs: what the request line or parse_ws_url refuses at start ---------------------
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a.example/x\r\nX-Evil: 1"}, "url", "CR"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a.example/\nx"}, "url", "an LF"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a.example/a b"}, "url", "a space"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a.example/\x00"}, "url", "a NUL"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://exa\tmple.com/"}, "url", "a tab"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a.example/é"}, "url", "percent-encode"),
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "url": "ws://user:password@a.example/"},
        "url",
        "must not carry credentials",
    ),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "wss://u@a.example/"}, "url", "credentials"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a..example/"}, "url", "DNS name"),
    Bad("POST", "/v1/sessions", {**SESSION, "url": "ws://a.example:99999/"}, "url", "range"),
    Bad("PATCH", "/v1/sessions/{session}", {"url": "ws://a.example/\r\n"}, "url", "CR"),
    Bad(
        "PATCH",
        "/v1/sessions/{session}",
        {"url": "ws://admin:secret@a.example/"},
        "url",
        "credentials",
    ),
    # -- the session's other settings --------------------------------------------------------
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "reconnect_max_attempts": 0},
        "reconnect_max_attempts",
        "greater than or equal to 1",
    ),
    Bad(
        "PATCH",
        "/v1/sessions/{session}",
        {"reconnect_max_attempts": 0},
        "reconnect_max_attempts",
        "greater than or equal to 1",
    ),
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "tls_server_name": "a.example\r\nX: y"},
        "tls_server_name",
        "must be a DNS name",
    ),
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "tls_ca_file": "/etc/ssl/ca.pem\x00"},
        "tls_ca_file",
        "a NUL",
    ),
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "tls_ca_file": "/nonexistent/ca.pem"},
        "tls_ca_file",
        "not a readable file",
    ),
    Bad("POST", "/v1/sessions", {**SESSION, "dialect": "nasdaq"}, "dialect", "unknown dialect"),
    # -- a dpdk session the port cannot route (an IPv4 host; names resolve at connect) --------
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "transport": "dpdk", "port_id": "{routeless}", "url": "ws://203.0.113.5/"},
        "url",
        "outside port",
    ),
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "transport": "dpdk", "port_id": "{port}", "url": "ws://198.18.1.2:9000/"},
        "url",
        "own address",
    ),
    Bad("PATCH", "/v1/ports/{port}", {"gateway": None}, "gateway", "has no gateway"),
    # -- finite numbers only ------------------------------------------------------------------
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "heartbeat_interval_s": NAN},
        "heartbeat_interval_s",
        "finite number",
    ),
    Bad(
        "POST",
        "/v1/sessions",
        {**SESSION, "reconnect_multiplier": INF},
        "reconnect_multiplier",
        "finite number",
    ),
    Bad(
        "PATCH",
        "/v1/sessions/{session}",
        {"reconnect_jitter": -INF},
        "reconnect_jitter",
        "finite number",
    ),
    Bad("POST", "/v1/ports", {**PORT, "mtu": NAN}, "mtu", "finite number"),
    Bad("POST", "/v1/ports", {**PORT, "enabled": 0}, "enabled", "valid boolean"),
    Bad("PATCH", "/v1/sessions/{session}", {"tls_verify": "no"}, "tls_verify", "valid boolean"),
    Bad("PATCH", "/v1/ports/{port}", {"name": None}, "name", "cannot be null: leave it out"),
    Bad("PUT", "/v1/host/hugepages", {"size_kb": 2048, "count": INF}, "count", "finite number"),
    Bad(
        "POST",
        "/v1/subscriptions",
        {"session_id": 1, "topics": ["x@trade"], "consumer": "c", "queue_size": NAN},
        "queue_size",
        "finite number",
    ),
    # -- ports ---------------------------------------------------------------------------------
    Bad("POST", "/v1/ports", {**PORT, "device": "net_tap0,iface=a\x00"}, "device", "a NUL"),
    Bad("POST", "/v1/ports", {**PORT, "device": "net_tap0,iface=a b"}, "device", "a space"),
    Bad("POST", "/v1/ports", {**PORT, "device": "net_tap0,"}, "device", "not key=value"),
    Bad("POST", "/v1/ports", {**PORT, "ipv4": "0.1.2.3"}, "ipv4", "not unicast host ranges"),
    Bad("POST", "/v1/ports", {**PORT, "gateway": "198.18.10.1"}, "gateway", "outside the port"),
    Bad("POST", "/v1/ports", {**PORT, "ipv4": "198.18.9.0"}, "ipv4", "network address"),
    Bad("PATCH", "/v1/ports/{port}", {"gateway": "10.0.0.1"}, "gateway", "outside the port"),
    Bad("PATCH", "/v1/ports/{port}", {"netmask": "255.255.255.254"}, "gateway", "outside"),
    # -- subscriptions: the session's dialect (binance) must accept every topic ---------------
    Bad(
        "POST",
        "/v1/subscriptions",
        {"session_id": "{binance}", "topics": ["BTCUSDT"], "consumer": "c"},
        "topics",
        "not a stream name like btcusdt@trade",
    ),
    Bad(
        "POST",
        "/v1/subscriptions",
        {"session_id": "{binance}", "topics": ["BTCUSDT@trade", "btcusdt@trade"], "consumer": "c"},
        "topics",
        "listed already",
    ),
    Bad(
        "POST",
        "/v1/subscriptions",
        {"session_id": "{binance}", "topics": ["a\x00@trade"], "consumer": "c"},
        "topics",
        "a NUL",
    ),
    Bad(
        "PATCH",
        "/v1/subscriptions/{sub}",
        {"topics": ["btcusdt/trade"]},
        "topics",
        "not a stream name",
    ),
    # -- a dialect change that the subscribed topics do not survive ---------------------------
    Bad(
        "PATCH",
        "/v1/sessions/{binance}",
        {"dialect": "okx"},
        "dialect",
        "is refused by the session's dialect: okx",
    ),
]


@pytest.fixture
def ids(api: Api, make_port: Callable[..., dict[str, Any]]) -> dict[str, int]:
    """A port (with a gateway) and its dpdk session to an off-subnet host, a port without a
    gateway, a generic session, a binance session with a subscription."""
    port = make_port()
    routeless = make_port(gateway=None)
    headers = api.admin
    dpdk = {**SESSION, "name": "d", "transport": "dpdk", "port_id": port["id"]}
    assert (
        api.client.post(
            "/v1/sessions", json={**dpdk, "url": "ws://203.0.113.5/"}, headers=headers
        ).status_code
        == 201
    )
    session = api.client.post("/v1/sessions", json={**SESSION, "name": "g"}, headers=headers)
    binance = api.client.post(
        "/v1/sessions", json={**SESSION, "name": "b", "dialect": "binance"}, headers=headers
    )
    assert session.status_code == binance.status_code == 201, (session.text, binance.text)
    sub = api.client.post(
        "/v1/subscriptions",
        json={"session_id": binance.json()["id"], "topics": ["btcusdt@trade"], "consumer": "c"},
        headers=api.consume,
    )
    assert sub.status_code == 201, sub.text
    return {
        "port": int(port["id"]),
        "routeless": int(routeless["id"]),
        "session": session.json()["id"],
        "binance": binance.json()["id"],
        "sub": sub.json()["id"],
    }


def _fill(value: Any, ids: dict[str, int]) -> Any:
    if isinstance(value, str) and value.startswith("{") and value.endswith("}"):
        return ids[value[1:-1]]
    return value


def _stored(api: Api) -> dict[str, Any]:
    return {
        path: api.client.get(path, headers=api.both).json()["data"]
        for path in ("/v1/ports", "/v1/sessions", "/v1/subscriptions")
    }


@pytest.mark.parametrize("bad", BAD, ids=str)
def test_bad_input_is_refused_with_the_field(api: Api, ids: dict[str, int], bad: Bad) -> None:
    before = _stored(api)
    body = {key: _fill(value, ids) for key, value in bad.body.items()}
    # json.dumps writes NaN and Infinity as Python's JSON reader (and FastAPI's) takes them.
    r = api.client.request(
        bad.method,
        bad.path.format(**ids),
        content=json.dumps(body),
        headers={**api.both, "Content-Type": "application/json"},
    )
    assert r.status_code == 422, r.text
    detail = r.json()["detail"]
    assert [e["loc"] for e in detail] == [["body", bad.field]], detail
    assert bad.says in detail[0]["msg"], detail[0]["msg"]
    assert _stored(api) == before, "a refused request changed what is stored"


def test_an_ipv6_literal_is_a_kernel_session_host_not_a_dpdk_one(
    api: Api, ids: dict[str, int]
) -> None:
    """The kernel connects to [2001:db8::5] (RFC 3986 section 3.2.2); the DPDK stack speaks
    IPv4 only, so a dpdk session to it is refused at the door."""
    url = "wss://[2001:db8::5]:9443/ws"
    kernel = {**SESSION, "name": "v6", "url": url}
    r = api.client.post("/v1/sessions", json=kernel, headers=api.admin)
    assert r.status_code == 201, r.text
    assert r.json()["url"] == url
    dpdk = {**SESSION, "name": "v6d", "url": url, "transport": "dpdk", "port_id": ids["port"]}
    r = api.client.post("/v1/sessions", json=dpdk, headers=api.admin)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "url"]
    assert "IPv4 only" in r.json()["detail"][0]["msg"]


def test_the_scheme_is_case_insensitive_and_stored_lower_case(api: Api) -> None:
    """RFC 3986 section 3.1: schemes compare case-insensitively; the canonical form (the one
    stored and shown) is lower case."""
    body = {**SESSION, "name": "upper", "url": "WSS://stream.example.com:9443/ws?x=1"}
    r = api.client.post("/v1/sessions", json=body, headers=api.admin)
    assert r.status_code == 201, r.text
    assert r.json()["url"] == "wss://stream.example.com:9443/ws?x=1"


def test_topics_are_stored_as_the_dialect_spells_them(api: Api, ids: dict[str, int]) -> None:
    """binance symbols are lower case: the ring carries btcusdt@depth, so that is what the
    subscription must hold (its ring_topics filter would match nothing otherwise)."""
    body = {"session_id": ids["binance"], "topics": ["ETHUSDT@depth"], "consumer": "c"}
    r = api.client.post("/v1/subscriptions", json=body, headers=api.consume)
    assert r.status_code == 201, r.text
    assert r.json()["topics"] == ["ethusdt@depth"]
    assert r.json()["consume"]["ring_topics"][0] == f"{ids['binance']}:ethusdt@depth"
    assert api.runtime.topics[ids["binance"]] == ["btcusdt@trade", "ethusdt@depth"]


def test_dialect_change_that_respells_a_topic_is_refused(api: Api, ids: dict[str, int]) -> None:
    """generic keeps BTCUSDT@trade as written; binance would subscribe btcusdt@trade and
    the subscription's ring filter would match nothing."""
    body = {"session_id": ids["session"], "topics": ["BTCUSDT@trade"], "consumer": "c"}
    assert api.client.post("/v1/subscriptions", json=body, headers=api.consume).status_code == 201
    r = api.client.patch(
        f"/v1/sessions/{ids['session']}", json={"dialect": "binance"}, headers=api.admin
    )
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "dialect"]
    assert "as 'btcusdt@trade': change the subscription's topics" in r.json()["detail"][0]["msg"]


def test_dialect_change_that_keeps_every_topic_is_accepted(api: Api, ids: dict[str, int]) -> None:
    r = api.client.patch(
        f"/v1/sessions/{ids['binance']}", json={"dialect": "generic"}, headers=api.admin
    )
    assert r.status_code == 200, r.text
    assert r.json()["dialect"] == "generic"


@pytest.mark.parametrize(
    ("device", "other_device", "claim"),
    [
        ("net_af_packet2,iface=veth0", "net_af_packet1,iface=veth0", "interface veth0"),
        ("net_af_packet1,iface=veth7", "net_af_packet1,iface=veth0", "vdev net_af_packet1"),
        ("0000:03:00.0,txq_inline=1", "03:00.0", "pci address 0000:03:00.0"),
    ],
)
def test_one_port_per_device_and_interface(
    api: Api,
    make_port: Callable[..., dict[str, Any]],
    device: str,
    other_device: str,
    claim: str,
) -> None:
    """409 (not 422): the device is well formed on its own; it conflicts with a stored port,
    as a taken name or device does, and the answer names that port."""
    other = make_port(name="first", device=other_device)
    r = api.client.post("/v1/ports", json={**PORT, "device": device}, headers=api.admin)
    assert r.status_code == 409, r.text
    assert f"{claim} is already used by port {other['id']} (first" in r.json()["detail"]
    mine = make_port(name="second", device="net_af_packet5,iface=veth5")
    r = api.client.patch(f"/v1/ports/{mine['id']}", json={"device": device}, headers=api.admin)
    assert r.status_code == 409, r.text
    assert f"port {other['id']}" in r.json()["detail"]


def test_a_port_may_keep_its_own_device(api: Api, make_port: Callable[..., dict[str, Any]]) -> None:
    port = make_port(device="net_af_packet1,iface=veth0")
    r = api.client.patch(
        f"/v1/ports/{port['id']}",
        json={"device": "net_af_packet1,iface=veth0,qpairs=1", "mtu": 1400},
        headers=api.admin,
    )
    assert r.status_code == 200, r.text


def test_unknown_query_parameter_is_refused(api: Api) -> None:
    """?limt=10 would otherwise page with the default limit, silently."""
    r = api.client.get("/v1/ports?limt=10", headers=api.admin)
    assert r.status_code == 422, r.text
    issue = r.json()["detail"][0]
    assert issue["loc"] == ["query", "limt"]
    assert issue["msg"] == "unknown query parameter 'limt'; this route takes: limit, offset"
    assert api.client.get("/v1/ports?limit=10", headers=api.admin).status_code == 200


def test_a_fixed_path_beside_an_id_answers_405(api: Api) -> None:
    """DELETE /v1/sessions/dialects: the dialects list has no DELETE (not 'bad id')."""
    r = api.client.delete("/v1/sessions/dialects", headers=api.admin)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == "GET, OPTIONS"


@pytest.mark.parametrize(
    ("path", "allow"),
    [
        ("/v1/ports", "GET, OPTIONS, POST"),
        ("/v1/ports/1", "DELETE, GET, OPTIONS, PATCH"),
        ("/v1/sessions/1/start", "OPTIONS, POST"),
        ("/v1/host/hugepages", "OPTIONS, PUT"),
    ],
)
def test_options_and_405_name_every_method_of_the_path(api: Api, path: str, allow: str) -> None:
    """RFC 9110 section 9.3.7 (OPTIONS) and 15.5.6 (405 carries Allow). No token needed and
    none looked at: the answer is the same for anyone and holds no stored data."""
    r = api.client.options(path)
    assert (r.status_code, r.headers.get("allow"), r.content) == (204, allow, b"")
    r = api.client.request("TRACE", path, headers=api.both)
    assert r.status_code == 405, r.text
    assert r.headers["allow"] == allow
    assert "TRACE is not allowed" in r.json()["detail"]
    assert api.client.options("/v1/nothing-here").status_code == 404


def test_a_stored_url_with_credentials_is_never_shown(api: Api) -> None:
    """A row stored before user info was refused (or written around the API) keeps its
    secret out of every answer."""
    with api.control.db.session() as s:
        row = SessionRow(**{**SESSION, "url": "wss://admin:hunter2@a.example/ws"})
        s.add(row)
        s.flush()
        session_id = row.id
    r = api.client.get(f"/v1/sessions/{session_id}", headers=api.admin)
    assert r.status_code == 200, r.text
    assert r.json()["url"] == "wss://***@a.example/ws"
    assert "hunter2" not in api.client.get("/v1/sessions", headers=api.admin).text
