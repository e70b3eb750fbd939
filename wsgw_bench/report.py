"""What `wsgw bench --out DIR` writes: the table, the JSON and PNG plots (matplotlib)."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

from wsgw_bench.core import Measurement, render_table, to_json

PERCENTILE = re.compile(r"^(?P<base>.*?)\s*(?P<p>p50|p99\.9|p999|p99)\b(?P<rest>.*)$")


def write_results(measurements: list[Measurement], out: Path, command: str) -> list[Path]:
    """table.txt, results.json and one PNG per scenario; returns the files written."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "table.txt", out / "results.json"]
    written[0].write_text(f"$ {command}\n\n{render_table(measurements)}\n")
    written[1].write_text(to_json(measurements))
    by_scenario: dict[str, list[Measurement]] = defaultdict(list)
    for m in measurements:
        by_scenario[m.scenario].append(m)
    for scenario, items in by_scenario.items():
        written.append(_plot_scenario(scenario, items, out))
    return written


def _plot_scenario(scenario: str, items: list[Measurement], out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    percentile_groups: dict[str, dict[str, dict[float, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    bars: dict[str, list[Measurement]] = defaultdict(list)
    for m in items:
        match = PERCENTILE.match(m.metric)
        if match and m.unit in ("us", "ms", "ns", "s"):
            p = {"p50": 50.0, "p99": 99.0, "p99.9": 99.9, "p999": 99.9}[match["p"]]
            key = f"{match['base']}{match['rest']}".strip() + f" ({m.unit})"
            percentile_groups[key][m.contender][p] = m.median
        else:
            bars[f"{m.metric} ({m.unit})"].append(m)
    panels = len(bars) + len(percentile_groups)
    cols = min(panels, 2) or 1
    rows = (panels + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(7 * cols, 3.6 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    index = 0
    for title, group in bars.items():
        ax = flat[index]
        index += 1
        names = [m.contender for m in group]
        medians = [m.median for m in group]
        low = [m.median - m.spread[0] for m in group]
        high = [m.spread[1] - m.median for m in group]
        colors = ["#888888" if m.reference else "#2a6fb0" for m in group]
        ax.barh(names, medians, xerr=[low, high], color=colors, capsize=3)
        ax.set_title(
            title
            + ("  (higher is better)" if group[0].higher_is_better else "  (lower is better)"),
            fontsize=9,
        )
        ax.tick_params(labelsize=8)
        ax.invert_yaxis()
        positive = [v for v in medians if v > 0]
        if positive and max(positive) / min(positive) > 100:
            ax.set_xscale("log")  # C next to Python: orders of magnitude apart
    for title, contenders in percentile_groups.items():
        ax = flat[index]
        index += 1
        for name, points in contenders.items():
            ps = sorted(points)
            ax.plot(ps, [points[p] for p in ps], marker="o", label=name)
        ax.set_xlabel("percentile", fontsize=8)
        ax.set_title(f"{title}: latency by percentile", fontsize=9)
        ax.set_yscale("log")
        ax.legend(fontsize=7)
        ax.tick_params(labelsize=8)
    for ax in flat[index:]:
        ax.axis("off")
    fig.suptitle(
        f"wsgw bench: {scenario} (grey: reference contender; bars: median, min..max)", fontsize=10
    )
    fig.tight_layout()
    path = out / f"{scenario}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
