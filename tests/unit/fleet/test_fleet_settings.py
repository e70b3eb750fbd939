"""The `fleet` settings section: off by default, a node named after the host, a tick a third
of the lease; on, it needs PostgreSQL and says so when the settings load."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from pydantic import ValidationError

from gateway.settings import FleetSettings, Settings


def test_defaults() -> None:
    fleet = FleetSettings()
    assert fleet.enabled is False
    assert fleet.node == socket.gethostname()[:63]
    assert fleet.labels == {}
    assert fleet.lease_s == 3.0
    assert fleet.tick_s == pytest.approx(1.0)


def test_environment_sets_labels_as_json(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("WSGW_FLEET__LABELS", '{"venue": "binance", "dpdk": "true"}')
    monkeypatch.setenv("WSGW_FLEET__LEASE_S", "6")
    settings = Settings(state_dir=tmp_path)
    assert settings.fleet.labels == {"venue": "binance", "dpdk": "true"}
    assert settings.fleet.tick_s == pytest.approx(2.0)


@pytest.mark.parametrize("url", [None, "sqlite:////tmp/x.db"])
def test_enabled_on_sqlite_is_refused(url: str | None, tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match=r"fleet\.enabled needs PostgreSQL"):
        Settings(state_dir=tmp_path, db={"url": url}, fleet={"enabled": True})  # type: ignore[arg-type]


def test_enabled_on_postgresql_loads(tmp_path: Path) -> None:
    url = "postgresql+psycopg://wsgw@db/wsgw"
    settings = Settings(state_dir=tmp_path, db={"url": url}, fleet={"enabled": True, "node": "n1"})  # type: ignore[arg-type]
    assert settings.fleet.enabled and settings.fleet.node == "n1"


@pytest.mark.parametrize("name", ["", "a b", "x" * 64])
def test_node_names_are_checked(name: str) -> None:
    with pytest.raises(ValidationError):
        FleetSettings(node=name)
