"""/v1/ports: CRUD, validation messages, conflicts, what the runtime is asked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.conftest import Api, messages

VALID = {
    "name": "lab",
    "device": "net_af_packet0,iface=wsgw0",
    "ipv4": "198.18.0.2",
    "netmask": "255.255.255.0",
    "gateway": "198.18.0.1",
}


def test_create_get_list_update_delete(api: Api) -> None:
    r = api.client.post("/v1/ports", json=VALID, headers=api.admin)
    assert r.status_code == 201, r.text
    port = r.json()
    assert port["name"] == "lab"
    assert port["mtu"] == 1500
    assert port["enabled"] is True
    assert port["status"] == {"state": "configured", "reason": "dataplane not attached"}
    assert api.runtime.ports[port["id"]].device == "net_af_packet0,iface=wsgw0"

    r = api.client.get(f"/v1/ports/{port['id']}", headers=api.admin)
    assert r.status_code == 200
    assert r.json()["device"] == VALID["device"]

    r = api.client.get("/v1/ports", headers=api.admin)
    assert r.json()["count"] == 1
    assert [p["id"] for p in r.json()["data"]] == [port["id"]]

    r = api.client.patch(f"/v1/ports/{port['id']}", json={"mtu": 9000}, headers=api.admin)
    assert r.status_code == 200, r.text
    assert r.json()["mtu"] == 9000
    assert api.runtime.ports[port["id"]].mtu == 9000  # reopened with the new MTU
    assert ("port_down", port["id"]) in api.runtime.calls

    r = api.client.patch(f"/v1/ports/{port['id']}", json={"enabled": False}, headers=api.admin)
    assert r.json()["enabled"] is False
    assert port["id"] not in api.runtime.ports

    r = api.client.delete(f"/v1/ports/{port['id']}", headers=api.admin)
    assert r.status_code == 204
    r = api.client.get(f"/v1/ports/{port['id']}", headers=api.admin)
    assert r.status_code == 404
    assert r.json() == {"detail": f"port {port['id']} not found"}


def test_pci_address_is_normalised(api: Api) -> None:
    r = api.client.post("/v1/ports", json={**VALID, "device": "03:00.0"}, headers=api.admin)
    assert r.status_code == 201, r.text
    assert r.json()["device"] == "0000:03:00.0"


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("netmask", "255.0.255.0", "netmask 255.0.255.0 is not contiguous"),
        ("netmask", "255.255.255", "is not a dotted IPv4 netmask"),
        ("ipv4", "198.18.0.300", "is not a dotted IPv4 address"),
        ("ipv4", "198.18.0.0", "is the network address of 198.18.0.0/24"),
        ("ipv4", "127.0.0.1", "cannot be a host address"),
        ("gateway", "10.0.0.1", "gateway 10.0.0.1 is outside the port's subnet 198.18.0.0/24"),
        ("gateway", "198.18.0.2", "is the port's own address"),
        ("device", "eth0", "neither a PCI address"),
        ("device", "net_tap0,iface", "is not key=value"),
        ("name", "has space", "must be 1-64 letters"),
        ("mtu", 100, "greater than or equal to 576"),
    ],
)
def test_validation_says_what_to_fix(api: Api, field: str, value: object, expected: str) -> None:
    r = api.client.post("/v1/ports", json={**VALID, field: value}, headers=api.admin)
    assert r.status_code == 422
    assert expected in messages(r), messages(r)


def test_unknown_field_is_refused(api: Api) -> None:
    r = api.client.post("/v1/ports", json={**VALID, "speed": 10}, headers=api.admin)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "speed"]


def test_update_is_checked_as_a_whole(api: Api, make_port: Callable[..., dict[str, Any]]) -> None:
    port = make_port()
    r = api.client.patch(
        f"/v1/ports/{port['id']}", json={"gateway": "203.0.113.1"}, headers=api.admin
    )
    assert r.status_code == 422
    assert "outside the port's subnet" in messages(r)
    r = api.client.patch(f"/v1/ports/{port['id']}", json={"name": None}, headers=api.admin)
    assert r.status_code == 422
    assert "name cannot be null" in messages(r)
    r = api.client.patch(f"/v1/ports/{port['id']}", json={"gateway": None}, headers=api.admin)
    assert r.status_code == 200
    assert r.json()["gateway"] is None


def test_name_and_device_are_unique(api: Api, make_port: Callable[..., dict[str, Any]]) -> None:
    port = make_port(name="one", device="net_tap0,iface=tap0")
    r = api.client.post("/v1/ports", json={**VALID, "name": "one"}, headers=api.admin)
    assert r.status_code == 409
    assert r.json()["detail"] == f"port name 'one' is taken by port {port['id']}"
    r = api.client.post(
        "/v1/ports", json={**VALID, "device": "net_tap0,iface=tap0"}, headers=api.admin
    )
    assert r.status_code == 409
    assert "is already port" in r.json()["detail"]


def test_port_used_by_a_session_cannot_be_deleted(
    api: Api,
    make_port: Callable[..., dict[str, Any]],
    make_session: Callable[..., dict[str, Any]],
) -> None:
    port = make_port()
    session = make_session(transport="dpdk", port_id=port["id"])
    r = api.client.delete(f"/v1/ports/{port['id']}", headers=api.admin)
    assert r.status_code == 409
    assert f"used by session(s) {session['id']}" in r.json()["detail"]
    api.client.post(f"/v1/sessions/{session['id']}/start", headers=api.admin)
    r = api.client.patch(f"/v1/ports/{port['id']}", json={"enabled": False}, headers=api.admin)
    assert r.status_code == 409
    assert "carries running session(s)" in r.json()["detail"]


def test_pagination(api: Api, make_port: Callable[..., dict[str, Any]]) -> None:
    ids = [make_port()["id"] for _ in range(5)]
    r = api.client.get("/v1/ports?offset=1&limit=2", headers=api.admin)
    body = r.json()
    assert (body["count"], body["offset"], body["limit"]) == (5, 1, 2)
    assert [p["id"] for p in body["data"]] == ids[1:3]
    r = api.client.get("/v1/ports?limit=501", headers=api.admin)
    assert r.status_code == 422
    assert "above the maximum page size 500" in messages(r)
    r = api.client.get("/v1/ports?offset=-1", headers=api.admin)
    assert r.status_code == 422


def test_runtime_refusal_is_409_and_nothing_is_stored(api: Api) -> None:
    from gateway.runtime import PortSpec, PortStatus, RuntimeRefusedError

    def refuse(port: PortSpec) -> PortStatus:
        raise RuntimeRefusedError(f"interface of {port.device} carries the default route")

    api.runtime.port_up = refuse  # type: ignore[method-assign]
    r = api.client.post("/v1/ports", json=VALID, headers=api.admin)
    assert r.status_code == 409
    assert r.json()["detail"].startswith("the dataplane refused: interface of")
    assert api.client.get("/v1/ports", headers=api.admin).json()["count"] == 0


def test_a_refused_reopen_restores_the_old_port(
    api: Api, make_port: Callable[..., dict[str, Any]]
) -> None:
    from gateway.runtime import DetachedRuntime, PortSpec, PortStatus, RuntimeRefusedError

    port = make_port(mtu=1500)
    original_up = api.runtime.port_up

    def refuse_jumbo(spec: PortSpec) -> PortStatus:
        if spec.mtu > 1500:
            raise RuntimeRefusedError("the NIC does not take an MTU above 1500")
        return DetachedRuntime.port_up(api.runtime, spec)

    api.runtime.port_up = refuse_jumbo  # type: ignore[method-assign]
    r = api.client.patch(f"/v1/ports/{port['id']}", json={"mtu": 9000}, headers=api.admin)
    assert r.status_code == 409
    assert "MTU above 1500" in r.json()["detail"]
    assert api.runtime.ports[port["id"]].mtu == 1500  # reopened as it was
    assert api.client.get(f"/v1/ports/{port['id']}", headers=api.admin).json()["mtu"] == 1500
    api.runtime.port_up = original_up  # type: ignore[method-assign]
