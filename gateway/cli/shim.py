"""`wsgw shim ...`: the C shim library."""

from __future__ import annotations

import json

import typer

from gateway.cli.common import fail

app = typer.Typer(help="The C shim library", no_args_is_help=True)


@app.command("info")
def shim_info() -> None:
    """Print the shim's version, DPDK support and build flags as JSON."""
    from dataplane.errors import ShimError
    from dataplane.shim import shim_info as info

    try:
        print(json.dumps(info(), indent=2))
    except ShimError as exc:
        fail(str(exc))
