"""`wsgw bench SCENARIO|all`: run, print the table, optionally write JSON."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from wsgw_bench import core


def _load_scenarios() -> None:
    # Importing registers them.
    from wsgw_bench import (  # noqa: F401
        books,
        books_api,
        books_rest,
        conformance,
        failover,
        fanout,
        faultsoak,
        feed,
        fleet,
        floor,
        jetstream,
        micro,
        soak,
        stream,
        topic,
        udp,
        ws_scenarios,
    )
    from wsgw_bench.core import scenario
    from wsgw_bench.ring import bench_ring

    if "ring" not in core.SCENARIOS:
        scenario("ring", "shared-memory message ring: write+read ns/op, msg/s, in/cross-process")(
            bench_ring
        )


def _progress(done: int, total: int, started: float) -> str:
    """A text progress bar with elapsed time: `[#####-----] 2/4 1m05s`."""
    width = 20
    filled = width * done // max(total, 1)
    elapsed = int(time.monotonic() - started)
    bar = "#" * filled + "-" * (width - filled)
    return f"[{bar}] {done}/{total} {elapsed // 60}m{elapsed % 60:02d}s"


def bench(
    scenario: Annotated[str, typer.Argument(help="a scenario name, or 'all'")] = "all",
    quick: Annotated[bool, typer.Option(help="short runs (smoke test)")] = False,
    repetitions: Annotated[int, typer.Option("--reps", min=1, max=50)] = 5,
    json_path: Annotated[Path | None, typer.Option("--json", help="write results here")] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="write table.txt, results.json and PNG plots here")
    ] = None,
    list_only: Annotated[bool, typer.Option("--list", help="list scenarios")] = False,
    duration: Annotated[
        float | None,
        typer.Option(help="seconds, for scenarios that run for a time (soak, faultsoak)", min=1),
    ] = None,
    kill_every: Annotated[
        float | None,
        typer.Option(help="faultsoak: kill -9 and restart the upstream every S seconds", min=1),
    ] = None,
    link_down_every: Annotated[
        float | None,
        typer.Option(help="faultsoak: take the lab's peer links down every S seconds", min=1),
    ] = None,
    link_down_for: Annotated[
        float | None, typer.Option(help="faultsoak: for S seconds each time", min=0.1)
    ] = None,
    restart_after: Annotated[
        float | None,
        typer.Option(help="faultsoak: restart the killed upstream S seconds later", min=0),
    ] = None,
    rate: Annotated[
        float | None, typer.Option(help="failover: messages/s over all topics", min=1)
    ] = None,
    mtu: Annotated[
        int,
        typer.Option(
            help="ingest: MTU of the lab's links, the DPDK one and the kernel twin alike "
            "(9000: jumbo frames; the rows are named with it)",
            min=1500,
            max=9000,
        ),
    ] = 1500,
) -> None:
    _load_scenarios()
    if list_only:
        for s in core.SCENARIOS.values():
            print(f"{s.name:12} {s.description}" + ("" if s.in_all else " (not in 'all')"))
        return
    names = [n for n, s in core.SCENARIOS.items() if s.in_all] if scenario == "all" else [scenario]
    unknown = [n for n in names if n not in core.SCENARIOS]
    if unknown:
        typer.secho(
            f"unknown scenario {unknown[0]!r}; known: {', '.join(core.SCENARIOS)}",
            fg=typer.colors.RED,
            err=True,
        )
        raise typer.Exit(2)
    options = core.BenchOptions(
        quick=quick,
        repetitions=2 if quick else repetitions,
        duration=duration,
        kill_every=kill_every,
        link_down_every=link_down_every,
        link_down_for=link_down_for,
        restart_after=restart_after,
        out=out,
        rate=rate,
        mtu=mtu,
    )
    results: list[core.Measurement] = []
    cond = core.conditions()
    print("conditions: " + ", ".join(f"{k}={v}" for k, v in cond.items()))
    started = time.monotonic()
    for done, name in enumerate(names):
        s = core.SCENARIOS[name]
        if s.needs_root and os.geteuid() != 0:
            print(f"[{name}] skipped: needs root", file=sys.stderr)
            continue
        print(f"{_progress(done, len(names), started)} [{name}] {s.description} ...", flush=True)
        results += s.run(options)
    print(f"{_progress(len(names), len(names), started)} done", flush=True)
    print(core.render_table(results))
    if out is not None:
        from wsgw_bench.report import write_results

        command = "wsgw bench " + " ".join(sys.argv[2:])
        for path in write_results(results, out, command):
            print(f"wrote {path}")
    if json_path is not None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(core.to_json(results))
        print(f"results written to {json_path}")
