"""`wsgw lab ...`: the network lab (gateway.lab), a peer namespace joined by a veth pair."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from gateway.cli.common import LabName, fail
from gateway.lab import ETHERNET_MTU, Lab, LabError, list_labs

app = typer.Typer(
    help="The network lab: a peer namespace joined by a veth pair", no_args_is_help=True
)


def _lab(name: str, mtu: int = ETHERNET_MTU) -> Lab:
    try:
        return Lab(name, mtu=mtu)
    except ValueError as exc:
        fail(str(exc), 2)


@app.command("up")
def lab_up(
    name: LabName = "wsgw",
    mtu: Annotated[
        int,
        typer.Option(help="MTU of every veth end (9000: jumbo frames; open the port with it)"),
    ] = ETHERNET_MTU,
) -> None:
    """Create the lab (idempotent) and print its addresses."""
    lab = _lab(name, mtu)
    try:
        lab.up()
    except (LabError, OSError) as exc:
        fail(f"lab up: {exc}")
    print(json.dumps(lab.status(), indent=2))


@app.command("down")
def lab_down(name: LabName = "wsgw") -> None:
    """Remove the lab: namespace, veth pair and any process left in the namespace."""
    lab = _lab(name)
    lab.down()
    print(json.dumps({"name": name, "up": False}))


@app.command("status")
def lab_status(name: Annotated[str | None, typer.Option("--name", "-n")] = None) -> None:
    """Show one lab, or every lab present on this host; exits 1 when the named lab does
    not exist (a script can test for it)."""
    names = [name] if name else list_labs()
    labs = [_lab(n) for n in names]
    if name and not labs[0].exists():
        fail(f"no lab named {name!r} on this host (present: {', '.join(list_labs()) or 'none'})")
    print(json.dumps([lab.status() for lab in labs], indent=2))
