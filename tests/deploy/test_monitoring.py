"""Prometheus configuration and alerts, the Grafana dashboard and its provisioning, and
deploy/METRICS.md: the names they read are the names the gateway serves or is asked to."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.helpers import (
    DEPLOY,
    REPO,
    documented_metrics,
    documented_series,
    load_yaml,
    promql_metric_names,
    require_tool,
    run,
)

PROMETHEUS = DEPLOY / "prometheus"
DASHBOARD = DEPLOY / "grafana" / "wsgw-dashboard.json"
PROMTOOL = "Debian prometheus (promtool)"

#: Panels the dashboard must have, and a metric each must read.
EXPECTED_PANELS = {
    "Messages/s per session": "wsgw_session_messages_total",
    "Latency percentiles": "wsgw_latency_seconds_bucket",
    "Gaps per session": "wsgw_session_gaps_total",
    "Reconnects per session": "wsgw_session_reconnects_total",
    "Fast path / slow path": "wsgw_fastpath_segments_total",
    "Port packets/s": "wsgw_port_rx_packets_total",
    "Port drops and errors": "wsgw_port_rx_missed_total",
    "Engine loops/s and busy share": "wsgw_engine_loops_total",
    "Engine batch duration": "wsgw_engine_batch_duration_seconds_bucket",
    "HTTP requests/s": "wsgw_http_requests_total",
}


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def alert_rules() -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = []
    for group in load_yaml(PROMETHEUS / "alerts.yml")["groups"]:
        rules += group["rules"]
    return rules


# --- METRICS.md ----------------------------------------------------------------------------


def test_metrics_doc_is_well_formed() -> None:
    metrics = documented_metrics()
    assert len(metrics) >= 20
    for metric in metrics.values():
        assert metric.type in {"counter", "gauge", "histogram"}, metric
        assert metric.status in {"exported", "wanted", "Prometheus"}, metric
        if metric.type == "counter":
            assert metric.name.endswith("_total"), f"{metric.name}: counters end in _total"
        if metric.name.startswith("wsgw_"):
            assert re.fullmatch(r"wsgw_[a-z0-9_]+", metric.name)
    for name in EXPECTED_PANELS.values():
        assert name in documented_series()


def test_exported_metrics_are_served_by_the_control_plane() -> None:
    """`exported` means api/metrics.py names it today (a rename there breaks the dashboard)."""
    source = (REPO / "api" / "metrics.py").read_text(encoding="utf-8")
    for metric in documented_metrics().values():
        if metric.status == "exported":
            base = metric.name.removesuffix("_total")
            assert f'"{base}"' in source, f"{metric.name} is no longer in api/metrics.py"


# --- Prometheus ----------------------------------------------------------------------------


def test_prometheus_config_keys() -> None:
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    assert config["global"]["scrape_interval"]
    job = next(j for j in config["scrape_configs"] if j["job_name"] == "wsgw")
    assert job.get("metrics_path", "/metrics") == "/metrics"
    assert job["static_configs"][0]["targets"] == ["gateway:8080"]
    for rule_file in config["rule_files"]:
        assert (PROMETHEUS / Path(rule_file).name).is_file()


def test_promtool_check_config(tmp_path: Path) -> None:
    promtool = require_tool("promtool", PROMTOOL)
    config = load_yaml(PROMETHEUS / "prometheus.yml")
    config["rule_files"] = [str(PROMETHEUS / Path(r).name) for r in config["rule_files"]]
    copy = tmp_path / "prometheus.yml"
    copy.write_text(yaml.safe_dump(config))
    proc = run([promtool, "check", "config", str(copy)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_check_rules() -> None:
    promtool = require_tool("promtool", PROMTOOL)
    proc = run([promtool, "check", "rules", str(PROMETHEUS / "alerts.yml")])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_alerts_use_documented_metrics() -> None:
    known = documented_series()
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {"WsgwDown", "WsgwSessionGaps", "WsgwPortRxMissed"}
    for rule in rules:
        unknown = promql_metric_names(rule["expr"]) - known
        assert not unknown, f"{rule['alert']} reads {unknown}, not in METRICS.md"
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"]


# --- Grafana -------------------------------------------------------------------------------


def test_dashboard_model(dashboard: dict[str, Any]) -> None:
    assert dashboard["uid"] == "wsgw-overview" and dashboard["title"]
    assert dashboard["schemaVersion"] >= 36
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        assert panel.get("description"), f"{panel['title']}: say what it shows"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"] and target["expr"].strip()


def test_dashboard_layout_has_no_overlaps(dashboard: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]


def test_dashboard_has_the_expected_panels(dashboard: dict[str, Any]) -> None:
    by_title = {p["title"]: p for p in panels(dashboard)}
    for title, metric in EXPECTED_PANELS.items():
        assert title in by_title, f"missing panel {title!r}"
        read: set[str] = set()
        for target in by_title[title]["targets"]:
            read |= promql_metric_names(target["expr"])
        assert metric in read, f"{title!r} does not read {metric}"
    per_session = by_title["Messages/s per session"]["targets"][0]["expr"]
    assert "by (session)" in per_session
    quantiles = {
        float(q)
        for t in by_title["Latency percentiles"]["targets"]
        for q in re.findall(r"histogram_quantile\(([\d.]+)", t["expr"])
    }
    assert {0.5, 0.99, 0.999} <= quantiles
    split = " ".join(t["expr"] for t in by_title["Fast path / slow path"]["targets"])
    assert "wsgw_slowpath_frames_total" in split
    titles = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert titles == ["Overview", "Sessions", "Dataplane", "Control plane"]


def test_dashboard_uses_only_documented_metrics(dashboard: dict[str, Any]) -> None:
    known = documented_series()
    for panel in panels(dashboard):
        for target in panel["targets"]:
            unknown = promql_metric_names(target["expr"]) - known
            assert not unknown, f"{panel['title']!r} reads {unknown}, not in METRICS.md"
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]["query"]
            (metric,) = re.findall(r"label_values\((\w+)", query)
            assert metric in known, f"variable {variable['name']} reads {metric}"


def test_dashboard_promql_parses(dashboard: dict[str, Any], tmp_path: Path) -> None:
    """Each panel query as a recording rule: promtool parses the PromQL (Grafana's
    variables replaced by values of the same shape)."""
    promtool = require_tool("promtool", PROMTOOL)
    rules = []
    for panel in panels(dashboard):
        for target in panel["targets"]:
            expr = target["expr"].replace("$__rate_interval", "1m")
            expr = re.sub(r"\$\{?\w+\}?", ".*", expr)
            rules.append({"record": f"wsgw:panel{panel['id']}:{target['refId']}", "expr": expr})
    path = tmp_path / "panels.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "panels", "rules": rules}]}))
    proc = run([promtool, "check", "rules", str(path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promql_name_extraction() -> None:
    """The helper the two checks above rely on."""
    expr = (
        "histogram_quantile(0.99, sum by (le, session) (rate(wsgw_latency_seconds_bucket"
        '{instance=~"$instance", stage="rx_to_publish"}[$__rate_interval]))) > 1e-3'
        " and on (instance) up{job='wsgw'} == 1 or vector(0) offset 5m"
    )
    assert promql_metric_names(expr) == {"wsgw_latency_seconds_bucket", "up"}


def test_grafana_provisioning() -> None:
    provider = load_yaml(DEPLOY / "grafana/provisioning/dashboards/wsgw.yaml")
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"]
    sources = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yaml")
    (source,) = sources["datasources"]
    assert source["isDefault"] is True and source["access"] == "proxy"
