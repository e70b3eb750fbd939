"""`wsgw simulate`: run the feed simulator until SIGINT/SIGTERM (or --duration).

stdout: the line `ready` once listening, then one JSON line describing the server (url,
port, dialects, the CA file for wss), then one JSON line per stdin command answered.
stdin: control commands, one per line, JSON (`{"cmd": "fault", "kind": "drop", "after":
10}`) or words (`fault drop after=10 target=all`, `rate rate=1000`, `emit topic=btcusdt@trade
count=5`, `stats`). The same commands work over HTTP on the WebSocket port:
`GET /_sim/stats`, `GET /_sim/command?cmd=fault&kind=stall&seconds=3`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway.simulator.faults import Fault, FaultError
from gateway.simulator.server import DIALECTS, SimConfig, Simulator


def parse_command(line: str) -> dict[str, Any]:
    """A stdin line: JSON, or words `cmd [kind] key=value ...`."""
    line = line.strip()
    if line.startswith("{"):
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError("a command must be a JSON object")
        return value
    words = line.split()
    if not words:
        return {}
    cmd: dict[str, Any] = {"cmd": words[0]}
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep:
            cmd[key] = value
        elif words[0] == "fault" and "kind" not in cmd:
            cmd["kind"] = word
        else:
            raise ValueError(f"{word!r} is not key=value")
    return cmd


async def _stdin_commands(sim: Simulator) -> None:
    """Answer commands from stdin; a stdin that is not a pipe or a terminal is ignored."""
    loop = asyncio.get_running_loop()
    try:
        mode = os.fstat(sys.stdin.fileno()).st_mode
    except (OSError, ValueError, AttributeError):
        return
    # Only pipes, sockets and terminals: uvloop aborts on other files (/dev/null).
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or sys.stdin.isatty()):
        return
    reader = asyncio.StreamReader()
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (ValueError, OSError):
        return
    while line := await reader.readline():
        try:
            cmd = parse_command(line.decode("utf-8", "replace"))
        except ValueError as exc:
            answer: dict[str, Any] = {"ok": False, "error": str(exc)}
        else:
            if not cmd:
                continue
            answer = sim.command(cmd)
        print(json.dumps(answer), flush=True)


async def run(config: SimConfig, duration: float, stdin: bool) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with Simulator(config) as sim:
        print("ready", flush=True)
        info = {
            "url": sim.url(),
            "port": sim.port,
            "dialects": {name: sim.url(name) for name in DIALECTS},
            "ca": str(sim.tls.ca) if sim.tls else None,
        }
        print(json.dumps(info), flush=True)
        tasks: list[asyncio.Task[Any]] = [loop.create_task(stop.wait())]
        if duration > 0:
            tasks.append(loop.create_task(asyncio.sleep(duration)))
        reader = loop.create_task(_stdin_commands(sim)) if stdin else None
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in [*tasks, reader]:
            if task is not None:
                task.cancel()


def simulate(
    host: Annotated[str, typer.Option(help="address to bind (in a lab: 198.18.N.1)")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port (0: any free port)")] = 9443,
    dialect: Annotated[
        str, typer.Option(help=f"dialect of paths without a dialect prefix: {', '.join(DIALECTS)}")
    ] = "binance",
    rate: Annotated[float, typer.Option(help="messages/s per topic (0: bursts/emits only)")] = 10.0,
    total_rate: Annotated[float, typer.Option(help="messages/s over all topics (0: no cap)")] = 0.0,
    burst_size: Annotated[int, typer.Option(help="extra messages per topic per burst")] = 0,
    burst_interval: Annotated[float, typer.Option(help="seconds between bursts")] = 0.0,
    ping_interval: Annotated[float, typer.Option(help="server pings, s (0: none)")] = 20.0,
    ping_timeout: Annotated[float, typer.Option(help="pong wait, s (0: forever)")] = 20.0,
    heartbeat_interval: Annotated[float, typer.Option(help="app heartbeats, s")] = 1.0,
    tls: Annotated[bool, typer.Option("--tls/--no-tls", help="serve wss://")] = False,
    cert_dir: Annotated[
        Path, typer.Option(help="where ca.pem, server.pem, server.key are (made if missing)")
    ] = Path("sim-certs"),
    symbols: Annotated[str, typer.Option(help="comma-separated symbols served (all: any)")] = "",
    fault: Annotated[
        list[str] | None,
        typer.Option(help="fault armed on every connection, e.g. drop:after=100 (repeatable)"),
    ] = None,
    enforce_limits: Annotated[
        bool, typer.Option(help="close connections that break the exchange's limits")
    ] = False,
    max_backlog: Annotated[
        int, typer.Option(help="held messages before a slow consumer is dropped")
    ] = 100_000,
    duration: Annotated[float, typer.Option(help="stop after this many seconds (0: never)")] = 0.0,
    stdin: Annotated[
        bool, typer.Option("--stdin/--no-stdin", help="read commands from stdin")
    ] = True,
    log_level: Annotated[str, typer.Option(help="debug, info, warning")] = "warning",
) -> None:
    """Serve synthetic market data in every exchange dialect, with faults on command."""
    logging.basicConfig(
        level=log_level.upper(), stream=sys.stderr, format="%(asctime)s %(message)s"
    )
    try:
        faults = tuple(Fault.parse(f) for f in fault or [])
        config = SimConfig(
            host=host,
            port=port,
            dialect=dialect,
            rate=rate,
            total_rate=total_rate or None,
            burst_size=burst_size,
            burst_interval=burst_interval,
            ping_interval=ping_interval or None,
            ping_timeout=ping_timeout or None,
            heartbeat_interval=heartbeat_interval,
            tls=tls,
            cert_dir=cert_dir,
            symbols=tuple(s for s in symbols.split(",") if s) or None,
            faults=faults,
            enforce_limits=enforce_limits,
            max_backlog=max_backlog,
        )
    except (FaultError, ValueError) as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    try:
        import uvloop

        uvloop.run(run(config, duration, stdin))
    except ImportError:
        asyncio.run(run(config, duration, stdin))
    except OSError as exc:
        typer.secho(f"error: {exc}", fg=typer.colors.RED, err=True)
        raise typer.Exit(1) from None


def main() -> None:
    typer.run(simulate)
