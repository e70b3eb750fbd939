"""The `wsgw` command line: one module per command (group), assembled here.

shim, lab, demo, serve, db, token and consume live in this package; `bench` comes from the
checkout's wsgw_bench (cli/bench.py) and `simulate` from gateway.simulator.
"""

from __future__ import annotations

import typer

from gateway.cli import bench, consume, db, demo, lab, serve, shim, token
from gateway.simulator.cli import simulate

app = typer.Typer(
    help="wsgw: market-data WebSocket gateway over a user-space TCP/IP stack on DPDK",
    no_args_is_help=True,
)
app.add_typer(shim.app, name="shim")
app.add_typer(lab.app, name="lab")
bench.register(app)
app.command("demo")(demo.demo)
app.command("serve", help="Run the REST control plane (uvicorn)")(serve.serve)
app.add_typer(db.app, name="db")
app.add_typer(token.app, name="token")
app.command("consume", help="Tail a stream: the local ring or a gateway's /v1/stream")(
    consume.consume
)
app.command("simulate", help="Feed simulator: every dialect, faults on command")(simulate)


def main() -> None:
    app()
