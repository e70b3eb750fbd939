"""/v1/host: on a built sysfs tree (binding, hugepages), and read-only on this machine
(plus real hugepages, set and restored)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from gateway.host import HostManager
from gateway.host.system import HostPaths
from gateway.settings import Settings
from tests.api.conftest import BASE_URL, Api, make_settings
from tests.host.fakesys import FakeHost

SPARE = "0000:03:00.0"
MGMT = "0000:00:03.0"
REAL_2M = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """The host routes do not touch the database: SQLite is enough."""
    return sqlite_url


def test_host_info(api: Api) -> None:
    body = api.client.get("/v1/host", headers=api.admin).json()
    assert body["cpus"]["online"] == [0, 1]
    assert body["cpus"]["isolated"] == []
    assert [n["id"] for n in body["numa_nodes"]] == [0]
    assert [p["size_kb"] for p in body["hugepages"]] == [2048, 1048576]
    assert body["numa_nodes"][0]["hugepages"][0]["node"] == 0
    assert body["cmdline"]["params"]["isolcpus"] == "1"
    assert body["cmdline"]["missing"] == ["nohz_full", "rcu_nocbs"]
    assert "nohz_full=1 rcu_nocbs=1" in body["cmdline"]["suggestion"]


def test_set_hugepages(api: Api, fake_host: FakeHost) -> None:
    r = api.client.put("/v1/host/hugepages", json={"size_kb": 2048, "count": 64}, headers=api.admin)
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["before"], body["pool"]["total"], body["warnings"]) == (0, 64, [])
    assert body["mounted"]["pagesize_kb"] == 2048
    info = api.client.get("/v1/host", headers=api.admin).json()
    assert info["hugepages"][0]["total"] == 64
    assert info["hugetlbfs_mounts"] == [body["mounted"]]
    r = api.client.put("/v1/host/hugepages", json={"size_kb": 4096, "count": 1}, headers=api.admin)
    assert r.status_code == 404
    assert r.json()["detail"].startswith("hugepage size 4096 kB not found on this host")
    r = api.client.put("/v1/host/hugepages", json={"size_kb": 2048, "count": -1}, headers=api.admin)
    assert r.status_code == 422


def test_nics_bind_unbind_refuse(api: Api, fake_host: FakeHost) -> None:
    nics = {
        n["address"]: n for n in api.client.get("/v1/host/nics", headers=api.admin).json()["data"]
    }
    assert nics[SPARE]["bindable"] is True
    assert nics[MGMT]["in_use"] is True and nics[MGMT]["bindable"] is False

    r = api.client.post(
        f"/v1/host/nics/{SPARE}/bind", json={"driver": "vfio-pci"}, headers=api.admin
    )
    assert r.status_code == 200, r.text
    assert (r.json()["changed"], r.json()["nic"]["driver"]) == (True, "vfio-pci")
    r = api.client.post(f"/v1/host/nics/{SPARE}/unbind", headers=api.admin)
    assert r.status_code == 200
    assert r.json()["nic"]["driver"] == "ixgbe"

    r = api.client.post(f"/v1/host/nics/{MGMT}/bind", headers=api.admin)
    assert r.status_code == 409
    detail = r.json()["detail"]
    assert detail.startswith(f"refusing to bind {MGMT}: interface eth0 carries")
    assert "lock yourself out" in detail
    assert fake_host.driver(MGMT) == "virtio-pci"

    r = api.client.post("/v1/host/nics/0000:42:00.0/bind", json={}, headers=api.admin)
    assert r.status_code == 404
    assert r.json() == {"detail": "PCI device 0000:42:00.0 not found"}
    r = api.client.get("/v1/host/nics/eth0x00", headers=api.admin)
    assert r.status_code == 422
    r = api.client.post(
        f"/v1/host/nics/{SPARE}/bind", json={"driver": "igb_uio"}, headers=api.admin
    )
    assert r.status_code == 422


def test_changes_disabled_is_409(tmp_path: Path, sqlite_url: str, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, sqlite_url, auth={"mode": "none"})
    app = create_app(settings, host=fake_host.manager(allow_changes=False))
    with TestClient(app, client=("127.0.0.1", 1), base_url=BASE_URL) as client:
        r = client.post(f"/v1/host/nics/{SPARE}/bind")
        assert r.status_code == 409
        assert "host changes are disabled" in r.json()["detail"]


@pytest.fixture
def real_api(tmp_path: Path, sqlite_url: str) -> Iterator[TestClient]:
    """An app on the real host (read-only use, except the hugepage test, which restores)."""
    settings = make_settings(tmp_path, sqlite_url, auth={"mode": "none"}, host={})
    real = HostManager(HostPaths(pmd_dirs=tuple(Settings().host.pmd_dirs)))
    with TestClient(
        create_app(settings, host=real), client=("127.0.0.1", 1), base_url=BASE_URL
    ) as client:
        yield client


def test_real_nic_list_shows_eth0_in_use(real_api: TestClient) -> None:
    if not Path("/sys/class/net/eth0").exists():
        pytest.skip("no eth0 here")
    nics = real_api.get("/v1/host/nics").json()["data"]
    eth0 = [n for n in nics if "eth0" in [i["name"] for i in n["interfaces"]]]
    if not eth0:
        pytest.skip("eth0 is not a PCI device here")
    assert eth0[0]["in_use"] is True
    assert eth0[0]["bindable"] is False
    assert eth0[0]["bind_refusal"].startswith("in use by the host: interface eth0 carries")


def test_real_host_info(real_api: TestClient) -> None:
    body = real_api.get("/v1/host").json()
    assert body["cpus"]["online"]
    assert set(body["cpus"]["allowed"]) <= set(body["cpus"]["online"])
    assert body["numa_nodes"]
    if REAL_2M.exists():
        pool = next(p for p in body["hugepages"] if p["size_kb"] == 2048)
        assert pool["total"] == int(REAL_2M.read_text())


def test_real_hugepages_set_through_the_api_and_restored(real_api: TestClient) -> None:
    if not (os.geteuid() == 0 and REAL_2M.exists()):
        pytest.skip("needs root and 2 MB hugepages")
    original = int(REAL_2M.read_text())
    last = original
    try:
        r = real_api.put(
            "/v1/host/hugepages", json={"size_kb": 2048, "count": original + 1, "mount": False}
        )
        assert r.status_code == 200, r.text
        last = r.json()["pool"]["total"]
        assert r.json()["before"] == original
        assert int(REAL_2M.read_text()) == last
    finally:
        if int(REAL_2M.read_text()) == last:
            REAL_2M.write_text(str(original))
    assert int(REAL_2M.read_text()) == original
