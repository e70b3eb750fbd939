"""Fixtures for the control plane: a database (SQLite file, or a throwaway PostgreSQL
cluster), an app on a fake host with a DetachedRuntime, and tokens per scope."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from api.app import create_app
from gateway.control import ControlPlane
from gateway.runtime import DetachedRuntime, build_runtime
from gateway.settings import Settings
from gateway.simulator.process import local_simulator
from tests.host.fakesys import FakeHost
from wsgw_bench.servers import PgServer, PostgresUnavailable, postgres_server

#: The Host TestClient sends: a loopback name, which the API always serves.
BASE_URL = "http://localhost"
#: TestClient.websocket_connect joins a path to ws://testserver: give it this base instead.
WS_BASE = "ws://localhost"


@pytest.fixture
def simulator(request: pytest.FixtureRequest) -> Iterator[int]:
    """The feed simulator on loopback (yields its port), at the test module's SIM_RATE
    messages per second (100 when the module sets none)."""
    with local_simulator(getattr(request.module, "SIM_RATE", 100)) as port:
        yield port


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer]:
    """The cluster the PostgreSQL tests share."""
    with pg_cluster() as server:
        yield server


@contextmanager
def pg_cluster() -> Iterator[PgServer]:
    """A throwaway PostgreSQL (wsgw_bench.servers.postgres_server); the test is skipped
    where none can run."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(postgres_server())
        except PostgresUnavailable as exc:
            pytest.skip(str(exc))
        yield server


@pytest.fixture
def pg_url(pg_server: PgServer) -> Iterator[str]:
    """A fresh database on the shared cluster, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    pg_server.execute(f"CREATE DATABASE {name}")
    try:
        yield pg_server.url(name)
    finally:
        pg_server.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'state' / 'wsgw.db'}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each test that takes this runs on a SQLite file and on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'wsgw.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def host_with_nics(root: Path) -> FakeHost:
    """A fake host with a spare NIC (ens3: down, no address, DPDK may take it) and the
    management NIC (eth0: virtio, up, the default route, which DPDK must never take)."""
    host = FakeHost(root)
    host.add_nic("0000:03:00.0", ifname="ens3")
    host.add_nic(
        "0000:00:03.0",
        0x1AF4,
        0x1041,
        "virtio-pci",
        "eth0",
        up=True,
        addresses=["192.0.2.2/24"],
        routes=["default", "192.0.2.0/24"],
        iommu_group=3,
        virtio_child=True,
    )
    return host


@pytest.fixture
def fake_host(tmp_path: Path) -> FakeHost:
    return host_with_nics(tmp_path / "host")


def make_settings(tmp_path: Path, url: str, **overrides: object) -> Settings:
    data: dict[str, object] = {
        "state_dir": tmp_path / "state",
        "db": {"url": url},
        "host": {"sys_root": tmp_path / "host/sys", "proc_root": tmp_path / "host/proc"},
    }
    data.update(overrides)
    return Settings(**data)  # type: ignore[arg-type]


@pytest.fixture
def make_plane(pg_url: str, tmp_path: Path) -> Iterator[Callable[..., ControlPlane]]:
    """make_plane(name, **settings): a ControlPlane on the test's PostgreSQL database with its
    own state under tmp_path/name and the runtime its settings build (a fleet node's when
    they enable the fleet); every one shut down after the test, newest first."""
    planes: list[ControlPlane] = []

    def make(name: str, **overrides: object) -> ControlPlane:
        settings = make_settings(tmp_path / name, pg_url, **overrides)
        plane = ControlPlane(settings, build_runtime(settings))
        planes.append(plane)
        return plane

    try:
        yield make
    finally:
        for plane in reversed(planes):
            plane.shutdown()


@pytest.fixture
def settings(tmp_path: Path, db_url: str) -> Settings:
    return make_settings(tmp_path, db_url)


@pytest.fixture
def runtime() -> DetachedRuntime:
    return DetachedRuntime()


@pytest.fixture
def app(settings: Settings, runtime: DetachedRuntime, fake_host: FakeHost) -> FastAPI:
    return create_app(settings, runtime, host=fake_host.manager())


@dataclass
class Api:
    """A started app with a client and tokens for each scope."""

    app: FastAPI
    client: TestClient
    runtime: DetachedRuntime
    admin: dict[str, str]
    consume: dict[str, str]
    both: dict[str, str]

    @property
    def control(self):  # type: ignore[no-untyped-def]
        return self.app.state.control


def _bearer(app: FastAPI, name: str, scopes: list[str]) -> dict[str, str]:
    _, secret = app.state.control.tokens.create(name, scopes)
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def api(app: FastAPI, runtime: DetachedRuntime) -> Iterator[Api]:
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        yield Api(
            app,
            client,
            runtime,
            _bearer(app, "admin", ["admin"]),
            _bearer(app, "consumer", ["consume"]),
            _bearer(app, "both", ["admin", "consume"]),
        )


def messages(response: Any) -> str:
    """A 422 answer's validation messages, joined: what a client is shown."""
    return " | ".join(e["msg"] for e in response.json()["detail"])


def stream_close(client: TestClient, path: str, headers: dict[str, str]) -> tuple[int, str]:
    """Open /v1/stream at `path` and read: the server closes it. Its close code and reason."""
    with (
        client.websocket_connect(WS_BASE + path, headers=headers) as ws,
        pytest.raises(WebSocketDisconnect) as closed,
    ):
        ws.receive_text()
    return closed.value.code, closed.value.reason


def created(api: Api, path: str, body: dict[str, object]) -> dict[str, object]:
    """POST `body` to `path` as admin; it must be created (201). The new resource."""
    r = api.client.post(path, json=body, headers=api.admin)
    assert r.status_code == 201, r.text
    result: dict[str, object] = r.json()
    return result


@pytest.fixture
def make_port(api: Api) -> Callable[..., dict[str, object]]:
    counter = iter(range(1, 1000))

    def make(**fields: object) -> dict[str, object]:
        n = next(counter)
        body: dict[str, object] = {
            "name": f"p{n}",
            "device": f"net_af_packet{n},iface=veth{n}",
            "ipv4": f"198.18.{n}.2",
            "netmask": "255.255.255.0",
            "gateway": f"198.18.{n}.1",
        }
        return created(api, "/v1/ports", {**body, **fields})

    return make


@pytest.fixture
def make_session(api: Api) -> Callable[..., dict[str, object]]:
    counter = iter(range(1, 1000))

    def make(**fields: object) -> dict[str, object]:
        body: dict[str, object] = {
            "name": f"s{next(counter)}",
            "url": "wss://feed.example.com/ws",
            "dialect": "generic",
            "transport": "kernel",
        }
        return created(api, "/v1/sessions", {**body, **fields})

    return make
