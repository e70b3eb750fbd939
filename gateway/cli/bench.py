"""`wsgw bench`: the benchmarks live in the source checkout's wsgw_bench package, which the
wheel leaves out; without it the command only says where to get it."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add `bench` to app: the benchmarks when wsgw_bench is importable, else a stub."""
    try:
        from wsgw_bench.cli import bench
    except ModuleNotFoundError as exc:
        if exc.name != "wsgw_bench":
            raise
        app.command(
            "bench",
            help="Benchmarks (not installed: they run from a source checkout)",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
        )(not_installed)
        return
    app.command("bench", help="Benchmarks: contenders side by side in one run, as ratios")(bench)


def not_installed() -> None:
    typer.secho(
        "error: the benchmarks are not installed; they run from a source checkout of wsgw:"
        " `make venv` there (or `pip install -e ./wsgw_bench` next to `pip install -e .`)",
        fg=typer.colors.RED,
        err=True,
    )
    raise typer.Exit(2)
