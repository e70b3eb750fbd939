"""The feed simulator as a child process (`python -m gateway.simulator`), for the demo, the
soak benchmark and the tests: in a lab's peer namespace, or on this host without one."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from gateway.lab import Lab


def simulator_command(host: str, port: int, rate: float, *, stdin: bool = False) -> list[str]:
    """The command line; `stdin`: the simulator takes commands (stats, faults) there."""
    return [
        sys.executable,
        "-m",
        "gateway.simulator",
        "--host",
        host,
        "--port",
        str(port),
        "--rate",
        str(rate),
        "--stdin" if stdin else "--no-stdin",
    ]


def start_simulator(
    lab: Lab | None,
    port: int,
    rate: float,
    *,
    host: str | None = None,
    stdin: bool = False,
    cwd: Path | None = None,
) -> subprocess.Popen[str]:
    """Start it (on the lab's peer address in its namespace, or on `host` here) and return
    once it printed `ready`; one that does not is killed and reaped, and RuntimeError says so.
    What it prints next (a JSON line describing the server) is left for the caller."""
    address = host or (lab.peer_ip if lab is not None else "127.0.0.1")
    command = simulator_command(address, port, rate, stdin=stdin)
    stdin_pipe = subprocess.PIPE if stdin else None
    if lab is not None:
        proc = lab.popen(command, stdin=stdin_pipe, stdout=subprocess.PIPE, text=True, cwd=cwd)
    else:
        proc = subprocess.Popen(
            command, stdin=stdin_pipe, stdout=subprocess.PIPE, text=True, cwd=cwd
        )
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError("the feed simulator did not start")
    return proc


@contextmanager
def running_simulator(
    lab: Lab | None, port: int, rate: float, **options: object
) -> Iterator[subprocess.Popen[str]]:
    """start_simulator for a `with` block: killed and reaped at its end, also on failure."""
    proc = start_simulator(lab, port, rate, **options)  # type: ignore[arg-type]
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def send_command(proc: subprocess.Popen[str], line: str) -> None:
    """One command line to a simulator started with stdin=True (`fault reset ...`, `stats`)."""
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


@contextmanager
def local_simulator(rate: float) -> Iterator[int]:
    """A simulator on 127.0.0.1 at a free port, taking commands on stdin, for a `with` block;
    yields its port."""
    with running_simulator(None, 0, rate, host="127.0.0.1", stdin=True) as proc:
        assert proc.stdout is not None
        yield int(json.loads(proc.stdout.readline())["port"])
