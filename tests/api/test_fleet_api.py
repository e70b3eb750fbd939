"""The fleet's API on one gateway (SQLite and PostgreSQL): a session's placement rule is
validated, stored and shown (default {}); /v1/fleet answers 409 on a gateway that is not in
a fleet. The fleet itself: test_fleet_node.py, test_fleet_failover.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.api.conftest import Api


def test_placement_is_stored_shown_and_changed(
    api: Api, make_session: Callable[..., dict[str, object]]
) -> None:
    plain = make_session()
    assert plain["placement"] == {}
    placed = make_session(placement={"venue": "binance", "dpdk": "true"})
    assert placed["placement"] == {"venue": "binance", "dpdk": "true"}
    r = api.client.patch(
        f"/v1/sessions/{placed['id']}", json={"placement": {"zone": "b"}}, headers=api.admin
    )
    assert r.status_code == 200, r.text
    got = api.client.get(f"/v1/sessions/{placed['id']}", headers=api.admin).json()
    assert got["placement"] == {"zone": "b"}


@pytest.mark.parametrize(
    "placement",
    [
        {"bad key": "x"},
        {"venue": "not ok"},
        {"venue": 1},
        {f"k{i}": "v" for i in range(17)},
        ["venue"],
    ],
)
def test_placement_rules_are_validated(api: Api, placement: object) -> None:
    body = {
        "name": "s",
        "url": "wss://feed.example.com/ws",
        "dialect": "generic",
        "transport": "kernel",
        "placement": placement,
    }
    r = api.client.post("/v1/sessions", json=body, headers=api.admin)
    assert r.status_code == 422, r.text
    assert "placement" in r.text


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/fleet/nodes"),
        ("GET", "/v1/fleet/leases"),
        ("POST", "/v1/fleet/drain"),
        ("POST", "/v1/fleet/undrain"),
    ],
)
def test_fleet_routes_say_this_gateway_is_not_in_a_fleet(api: Api, method: str, path: str) -> None:
    r = api.client.request(method, path, headers=api.admin)
    assert r.status_code == 409, r.text
    assert "not in a fleet" in r.text
    assert api.client.request(method, path, headers=api.consume).status_code == 403
