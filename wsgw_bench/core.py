"""Measurements, the scenario registry, the report (table and JSON)."""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dataplane.engine import Engine, EngineConfig
    from dataplane.stack.tcp import TcpConfig
    from gateway.lab import Lab


@dataclass
class Measurement:
    """Repeated samples of one metric for one contender."""

    scenario: str
    metric: str
    contender: str
    unit: str
    higher_is_better: bool
    samples: list[float] = field(default_factory=list)
    reference: bool = False  # the contender the others are compared with
    note: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.samples) if self.samples else float("nan")

    @property
    def spread(self) -> tuple[float, float]:
        return (min(self.samples), max(self.samples)) if self.samples else (0.0, 0.0)


@dataclass
class Scenario:
    name: str
    description: str
    run: Callable[[BenchOptions], list[Measurement]]
    needs_root: bool = False
    in_all: bool = True  # False: run only when named (long runs such as `soak`)


@dataclass(frozen=True)
class BenchOptions:
    quick: bool = False
    repetitions: int = 5
    lab_name: str = "bench"
    duration: float | None = None  # seconds, for scenarios that run for a time (`soak`)
    # `faultsoak`: seconds between upstream kills, between link flaps, and each flap's length
    kill_every: float | None = None
    link_down_every: float | None = None
    link_down_for: float | None = None
    restart_after: float | None = None  # seconds from a kill to the upstream's restart
    out: Path | None = None  # `--out DIR`: where a scenario may write files of its own
    rate: float | None = None  # msg/s, for scenarios that stream at a rate (`failover`)
    mtu: int = 1500  # the lab links' MTU (`ingest`: 9000 gives jumbo frames on both links)


def unique_lab_name(options: BenchOptions, prefix: str) -> str:
    """The lab name for one run: the caller's, or (for the default) one of this run's own,
    so that a run started meanwhile never takes this lab down under it."""
    if options.lab_name != BenchOptions().lab_name:
        return options.lab_name
    return f"{prefix}{uuid.uuid4().hex}"[:10]


@contextmanager
def lab_engine(
    lab: Lab, config: EngineConfig, tcp_config: TcpConfig | None = None
) -> Iterator[Engine]:
    """wsgw's engine on the lab's DPDK port with the gateway's address, started; closed,
    with the port, on the way out."""
    from dataplane.dpdk import Eal, EalConfig
    from dataplane.engine import Engine

    eal = Eal.init(EalConfig())
    with eal.open_port(lab.vdev) as port:
        engine = Engine.on_port(port, lab.gw_ip, lab.netmask, tcp_config=tcp_config, config=config)
        engine.start()
        try:
            yield engine
        finally:
            engine.close()


SCENARIOS: dict[str, Scenario] = {}


def scenario(
    name: str, description: str, *, needs_root: bool = False, in_all: bool = True
) -> Callable[
    [Callable[[BenchOptions], list[Measurement]]], Callable[[BenchOptions], list[Measurement]]
]:
    def register(
        func: Callable[[BenchOptions], list[Measurement]],
    ) -> Callable[[BenchOptions], list[Measurement]]:
        SCENARIOS[name] = Scenario(name, description, func, needs_root, in_all)
        return func

    return register


def scenario_log(name: str) -> Callable[[str], None]:
    """How a long scenario says what it is doing: `[name] line`, flushed at once."""

    def log(line: str) -> None:
        print(f"[{name}] {line}", flush=True)

    return log


def report_run(
    options: BenchOptions,
    name: str,
    summary: str,
    data: dict[str, Any],
    log: Callable[[str], None],
    *,
    allow_nan: bool = True,
) -> None:
    """A long scenario's end: its summary through `log`, and with --out the whole run as
    `<out>/<name>.json`."""
    for line in summary.splitlines():
        log(line)
    if options.out is not None:
        options.out.mkdir(parents=True, exist_ok=True)
        path = options.out / f"{name}.json"
        path.write_text(json.dumps(data, indent=2, allow_nan=allow_nan))
        log(f"wrote {path}")


def alternate(repetitions: int, contenders: list[str]) -> Iterator[tuple[int, str]]:
    """Run order: every contender once per round, rotating who goes first (noise spreads)."""
    for round_ in range(repetitions):
        shift = round_ % len(contenders)
        for name in contenders[shift:] + contenders[:shift]:
            yield round_, name


def time_per_op(
    func: Callable[[], object],
    min_seconds: float,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    """Seconds of `clock` per call (wall by default; pass time.process_time for CPU),
    calibrated: the call count grows until one timed loop lasts at least min_seconds."""
    count = 1
    while True:
        start = clock()
        for _ in range(count):
            func()
        elapsed = clock() - start
        if elapsed >= min_seconds:
            return elapsed / count
        count *= 4 if elapsed < min_seconds / 8 else 2


def ratio(m: Measurement, ref: Measurement | None) -> float | None:
    """How many times better than the reference (>1 is better, whatever the unit)."""
    if ref is None or m is ref or not m.samples or not ref.samples:
        return None
    if m.median == 0 or ref.median == 0:
        return None
    return m.median / ref.median if m.higher_is_better else ref.median / m.median


def conditions() -> dict[str, Any]:
    """What the run had, so numbers are never quoted without their conditions."""

    def read(path: str) -> str:
        try:
            return Path(path).read_text().strip()
        except OSError:
            return ""

    model = ""
    for line in read("/proc/cpuinfo").splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    hugepages = {
        p.name: read(str(p / "nr_hugepages"))
        for p in sorted(Path("/sys/kernel/mm/hugepages").glob("hugepages-*"))
    }
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": model,
        "cpus_online": read("/sys/devices/system/cpu/online"),
        "cpus_isolated": read("/sys/devices/system/cpu/isolated") or "none",
        "governor": read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") or "n/a",
        "hugepages": hugepages,
        "load_avg": os.getloadavg(),
        "python": platform.python_version(),
    }


def format_value(value: float, unit: str) -> str:
    if math.isnan(value):
        return "-"
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale and unit in ("msg/s", "pkt/s", "seg/s", "op/s", "B/s", "bit/s"):
            return f"{value / scale:.2f} {prefix}{unit}"
    return f"{value:.3g} {unit}"


def render_table(measurements: list[Measurement]) -> str:
    rows = [("scenario", "metric", "contender", "median", "min..max", "n", "vs ref")]
    groups: dict[tuple[str, str], list[Measurement]] = {}
    for m in measurements:
        groups.setdefault((m.scenario, m.metric), []).append(m)
    for (scen, metric), items in groups.items():
        ref = next((m for m in items if m.reference), None)
        for m in items:
            r = ratio(m, ref)
            low, high = m.spread
            rows.append(
                (
                    scen,
                    metric,
                    m.contender + (" (ref)" if m.reference else ""),
                    format_value(m.median, m.unit),
                    f"{format_value(low, m.unit)} .. {format_value(high, m.unit)}",
                    str(len(m.samples)),
                    f"{r:.2f}x" if r is not None else "",
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    notes = [
        f"  {m.scenario} / {m.metric} / {m.contender}: {m.note}" for m in measurements if m.note
    ]
    if notes:
        lines += ["", "notes:", *notes]
    return "\n".join(lines)


def to_json(measurements: list[Measurement]) -> str:
    out = []
    for m in measurements:
        item = asdict(m)
        item["median"] = m.median
        out.append(item)
    return json.dumps({"conditions": conditions(), "results": out}, indent=2)
