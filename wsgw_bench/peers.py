"""The benchmark peers: small C programs in wsgw_bench/peer/, built on demand, run in the lab.

    wspeer   a WebSocket server (echo, or a flood of sequence-numbered messages)
    wsclient a busy-polling C WebSocket client over kernel TCP: the round trip's floor
    udpsend  the kernel's UDP transmit path (sendto or sendmmsg loop)
    udpsink  counts and checks UDP datagrams (recvmmsg), driven over stdin

`build(name)` compiles wsgw_bench/peer/<name>.c with gcc into build/bench/<name> when the binary
is missing or was built from another source or with other flags (a hash beside it says
which). The peers are in C so that the client side is what a benchmark measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import IO, Any, ClassVar, Self

from dataplane.closing import Closing
from gateway.lab import Lab
from wsgw_bench.servers import stop_process

# The bench runs from the source checkout (it is not in the wheel): the repository root.
REPO = Path(__file__).resolve().parents[1]
PEER_SOURCES = Path(__file__).resolve().parent / "peer"
BUILD_DIR = REPO / "build" / "bench"
CFLAGS = ("-O2", "-Wall", "-Wextra", "-Werror", "-std=gnu11")
PROGRAMS = ("wspeer", "wsclient", "udpsend", "udpsink")


class PeerError(RuntimeError):
    """A peer did not build, did not start, or answered something unexpected."""


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")
    if not cc:
        raise PeerError("no C compiler found (apt-get install gcc) to build the bench peers")
    return cc


def build(name: str, *, build_dir: Path = BUILD_DIR) -> Path:
    """The path of the built peer `name`, compiling it first when missing or stale."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown peer {name!r} (known: {', '.join(PROGRAMS)})")
    source = PEER_SOURCES / f"{name}.c"
    cc = _compiler()
    digest = hashlib.sha256(source.read_bytes())
    digest.update(" ".join((cc, *CFLAGS)).encode())
    want = digest.hexdigest()
    target = build_dir / name
    stamp = build_dir / f"{name}.sha256"
    if target.exists() and stamp.exists() and stamp.read_text().strip() == want:
        return target
    build_dir.mkdir(parents=True, exist_ok=True)
    # Build under a private name and rename: parallel runs never see a half-written file.
    tmp = build_dir / f".{name}.{os.getpid()}"
    proc = subprocess.run(
        [cc, *CFLAGS, "-o", str(tmp), str(source)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise PeerError(f"building {source} failed:\n{proc.stderr.strip()}")
    tmp.replace(target)
    stamp_tmp = build_dir / f".{name}.sha256.{os.getpid()}"
    stamp_tmp.write_text(want + "\n")
    stamp_tmp.replace(stamp)
    return target


def build_all() -> dict[str, Path]:
    return {name: build(name) for name in PROGRAMS}


def python_module(module: str, *args: str) -> tuple[list[str], dict[str, str]]:
    """The command line and environment that run `python -m module args...` with this
    repository importable (a bench process started in a lab namespace, say); run it with
    cwd=REPO."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    return [sys.executable, "-m", module, *args], env


def _readline(stream: IO[str], timeout: float, what: str) -> str:
    """One line from a child's stdout, or PeerError after timeout seconds."""
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise PeerError(f"{what}: no answer within {timeout} s")
    line = stream.readline()
    if not line:
        raise PeerError(f"{what}: the process ended")
    return line.strip()


def _start(lab: Lab | None, cmd: list[str], what: str, **kwargs: Any) -> subprocess.Popen[str]:
    if lab is None:
        return subprocess.Popen(cmd, text=True, **kwargs)
    return lab.popen(cmd, text=True, **kwargs)


def _stop(proc: subprocess.Popen[str]) -> None:
    stop_process(proc, 3)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()


class _Process(Closing):
    """A started peer that stops (SIGTERM, then SIGKILL) on `stop()` or leaving `with`."""

    def __init__(self, proc: subprocess.Popen[str], port: int) -> None:
        self.proc = proc
        self.port = port

    def stop(self) -> None:
        _stop(self.proc)

    def close(self) -> None:
        self.stop()


def _ready_port(proc: subprocess.Popen[str], what: str) -> int:
    assert proc.stdout is not None
    try:
        line = _readline(proc.stdout, 10, what)
        if not line.startswith("ready port="):
            raise PeerError(f"{what}: expected 'ready port=N', got {line!r}")
        return int(line.removeprefix("ready port="))
    except BaseException:
        _stop(proc)
        raise


class _Program(_Process):
    """A C peer of wsgw_bench/peer, started as `program host port args...`: ready when it
    prints its port."""

    program: ClassVar[str]
    #: Arguments after host and port when start() is given none.
    default_mode: ClassVar[tuple[str, ...]] = ()
    #: Whether the program reads commands on its stdin.
    takes_commands: ClassVar[bool] = False

    @classmethod
    def start(
        cls,
        lab: Lab | None = None,
        *,
        host: str = "0.0.0.0",  # noqa: S104 - inside the lab namespace: both veth ends
        port: int = 0,
        mode: tuple[str, ...] | None = None,
    ) -> Self:
        args = [
            str(build(cls.program)),
            host,
            str(port),
            *(cls.default_mode if mode is None else mode),
        ]
        stdin = subprocess.PIPE if cls.takes_commands else None
        proc = _start(lab, args, cls.program, stdin=stdin, stdout=subprocess.PIPE)
        return cls(proc, _ready_port(proc, cls.program))


class WsPeer(_Program):
    """wsgw_bench/peer/wspeer: echo by default; the request path /flood/N/SIZE[/text] floods
    (or start it with mode=("flood", N, SIZE))."""

    program = "wspeer"
    default_mode = ("echo",)


class UdpSink(_Program):
    """wsgw_bench/peer/udpsink: `reset(count, tag)` before a run, `report()` after it."""

    program = "udpsink"
    takes_commands = True

    def _command(self, line: str) -> str:
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return _readline(self.proc.stdout, 10, f"udpsink {line.split(maxsplit=1)[0]}")

    def reset(self, count: int, tag: int) -> None:
        answer = self._command(f"reset {count} {tag}")
        if answer != "ok":
            raise PeerError(f"udpsink reset: {answer!r}")

    def report(self) -> dict[str, int]:
        answer = self._command("report")
        try:
            data = json.loads(answer)
        except json.JSONDecodeError as exc:
            raise PeerError(f"udpsink report: {answer!r}") from exc
        return {str(k): int(v) for k, v in data.items()}

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(2)
            except (OSError, subprocess.TimeoutExpired):
                pass
        super().stop()


def udpsend(
    lab: Lab | None,
    mode: str,
    dst: str,
    port: int,
    payload: int,
    count: int,
    tag: int,
    *,
    batch: int = 64,
    timeout: float = 120,
) -> dict[str, Any]:
    """Run wsgw_bench/peer/udpsend (in the lab's kernel-client namespace when lab is given)."""
    binary = build("udpsend")
    cmd = [str(binary), mode, dst, str(port), str(payload), str(count), str(tag), str(batch)]
    if lab is None:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        proc = lab.client_popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise PeerError(f"udpsend {mode} took over {timeout} s") from None
    if proc.returncode != 0:
        raise PeerError(f"udpsend {mode} failed ({proc.returncode}): {err.strip()}")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result
