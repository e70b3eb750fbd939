"""The dashboard's arithmetic, run in the browser: the Prometheus text parser, counter
rates across a reset, histogram quantiles and the formatters."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.browser.conftest import Dashboard, Server

pytest.importorskip("playwright.sync_api", reason="the playwright package is missing")

EXPOSITION = r"""
# HELP x_total things
# TYPE x_total counter
x_total{a="b\"c",d="e\nf"} 3
x_total{a="z",d=""} 4 1700000000000
# TYPE y gauge
y NaN
z +Inf
h_bucket{le="0.1"} 5
h_bucket{le="0.5"} 10
h_bucket{le="+Inf"} 10
not a sample line
"""

SCRIPT = """async (text) => {
  const p = await import("/ui/js/prom.js");
  const d = await import("/ui/js/dom.js");
  const snap = p.parsePrometheus(text);
  const x = p.find(snap, "x");
  const prev = p.parsePrometheus('c_total{s="1"} 10\\nc_total{s="2"} 5');
  const cur = p.parsePrometheus('c_total{s="1"} 4\\nc_total{s="2"} 9');
  return {
    xCount: x.length,
    label: x[0].labels.a,
    newline: x[0].labels.d,
    sum: p.sum(snap, "x"),
    sumWhere: p.sum(snap, "x", {a: "z"}),
    missing: p.sum(snap, "nope"),
    yIsNaN: Number.isNaN(p.find(snap, "y")[0].value),
    zInf: p.find(snap, "z")[0].value === Infinity,
    byLabel: p.byLabel(snap, "x", "a"),
    reset: p.rate(prev, cur, 2, "c", {s: "1"}),
    rate2: p.rate(prev, cur, 2, "c", {s: "2"}),
    q50: p.histogramQuantile(0.5, null, snap, "h"),
    q75: p.histogramQuantile(0.75, null, snap, "h"),
    qNone: p.histogramQuantile(0.5, snap, snap, "h"),
    ms: d.fmtSeconds(0.2),
    ms2: d.fmtSeconds(0.0123),
    us: d.fmtSeconds(0.00004),
    cpus: d.fmtCpuList([5, 0, 1, 2]),
    count: d.fmtCount(1234567),
    small: d.fmtCount(0.5),
  };
}"""


def test_prometheus_parsing_and_arithmetic(
    server: Server, open_dashboard: Callable[..., Dashboard]
) -> None:
    d = open_dashboard(server)
    d.open()
    r: dict[str, Any] = d.page.evaluate(SCRIPT, EXPOSITION)
    assert r["xCount"] == 2
    assert r["label"] == 'b"c'
    assert r["newline"] == "e\nf"
    assert r["sum"] == 7
    assert r["sumWhere"] == 4
    assert r["missing"] is None  # not reported, not zero
    assert r["yIsNaN"] and r["zInf"]
    assert r["byLabel"] == {'b"c': 3, "z": 4}
    assert r["reset"] == 2  # 10 -> 4 is a restart: 4 new in 2 s
    assert r["rate2"] == 2
    assert r["q50"] == pytest.approx(0.1)
    assert r["q75"] == pytest.approx(0.3)
    assert r["qNone"] is None  # no observation in the interval
    assert (r["ms"], r["ms2"], r["us"]) == ("200 ms", "12.3 ms", "40 µs")
    assert r["cpus"] == "0-2,5"
    assert (r["count"], r["small"]) == ("1.23M", "0.5")
    assert d.errors == []
