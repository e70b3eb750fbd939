"""The `wsgw` command line."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from gateway.lab import Lab, LabError, list_labs

app = typer.Typer(
    help="wsgw: market-data WebSocket gateway over a user-space TCP/IP stack on DPDK",
    no_args_is_help=True,
)
shim_app = typer.Typer(help="The C shim library", no_args_is_help=True)
lab_app = typer.Typer(
    help="The network lab: a peer namespace joined by a veth pair", no_args_is_help=True
)
app.add_typer(shim_app, name="shim")
app.add_typer(lab_app, name="lab")


def _register_bench() -> None:
    """`wsgw bench` lives in the source checkout's wsgw_bench package, which the wheel
    leaves out: without it the command only says where to get it."""
    try:
        from wsgw_bench.cli import bench
    except ModuleNotFoundError as exc:
        if exc.name != "wsgw_bench":
            raise
        app.command(
            "bench",
            help="Benchmarks (not installed: they run from a source checkout)",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(_bench_not_installed)
        return
    app.command("bench", help="Benchmarks: contenders side by side in one run, as ratios")(bench)


def _bench_not_installed() -> None:
    typer.secho(
        "error: the benchmarks are not installed; they run from a source checkout of wsgw:"
        " `make venv` there (or `pip install -e ./wsgw_bench` next to `pip install -e .`)",
        fg=typer.colors.RED,
        err=True,
    )
    raise typer.Exit(2)


_register_bench()

LabName = Annotated[
    str, typer.Option("--name", "-n", help="lab name (1-10 lower-case letters/digits)")
]


def _fail(message: str, code: int = 1) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise typer.Exit(code)


@shim_app.command("info")
def shim_info() -> None:
    """Print the shim's version, DPDK support and build flags as JSON."""
    from dataplane.errors import ShimError
    from dataplane.shim import shim_info as info

    try:
        print(json.dumps(info(), indent=2))
    except ShimError as exc:
        _fail(str(exc))


def _lab(name: str) -> Lab:
    try:
        return Lab(name)
    except ValueError as exc:
        _fail(str(exc), 2)
        raise


@lab_app.command("up")
def lab_up(name: LabName = "wsgw") -> None:
    """Create the lab (idempotent) and print its addresses."""
    lab = _lab(name)
    try:
        lab.up()
    except (LabError, OSError) as exc:
        _fail(f"lab up: {exc}")
    print(json.dumps(lab.status(), indent=2))


@lab_app.command("down")
def lab_down(name: LabName = "wsgw") -> None:
    """Remove the lab: namespace, veth pair and any process left in the namespace."""
    lab = _lab(name)
    lab.down()
    print(json.dumps({"name": name, "up": False}))


@lab_app.command("status")
def lab_status(name: Annotated[str | None, typer.Option("--name", "-n")] = None) -> None:
    """Show one lab, or every lab present on this host."""
    names = [name] if name else list_labs()
    print(json.dumps([_lab(n).status() for n in names], indent=2))


@app.command("demo")
def demo(
    name: LabName = "wsgw",
    duration: Annotated[float, typer.Option(help="seconds to run; 0 runs until Ctrl-C")] = 0.0,
    hugepages: Annotated[str, typer.Option(help="auto | on | off")] = "auto",
) -> None:
    """The whole gateway on a lab (what `make run` runs): the feed simulator in the lab's
    namespace, a DPDK port on its veth, a Binance session over wsgw's own stack, the hub, a
    ring consumer and the API with the dashboard; prints a line per second (messages/s,
    simulator-to-consumer latency, gaps, state). Falls back to the kernel transport
    without root or DPDK, and says so."""
    from gateway.demo import run_demo

    sys.exit(run_demo(name=name, duration=duration, hugepages=hugepages))


def _register_extensions() -> None:
    from gateway.cli_consume import consume
    from gateway.cli_serve import register
    from gateway.simulator.cli import simulate

    register(app)
    app.command("consume", help="Tail a stream: the local ring or a gateway's /v1/stream")(consume)
    app.command("simulate", help="Feed simulator: every dialect, faults on command")(simulate)


_register_extensions()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
