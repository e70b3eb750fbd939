"""The wss:// peer of the `connect` scenario: a TLS WebSocket echo server.

    python -m wsgw_bench.tls_peer HOST PORT CERT KEY

serves wss:// on HOST:PORT (PORT 0: any free port) with the certificate chain CERT and its
key KEY, echoes every message, prints `ready port=N server websockets 16.0 on uvloop
0.23.0` (the port, what it runs) once it listens, and runs until killed.

The C peer (wsgw_bench/peer/wspeer.c) speaks plain ws:// only, so the TLS peer is the
`websockets` library's asyncio server (on uvloop when installed), with permessage-deflate
off. Every wss:// contender meets this same process, so its own cost is the same for all.

`TlsPeer.start(lab)` mints a throwaway CA and a server certificate for the lab's two peer
addresses (both veth ends: the DPDK side's and the kernel client's) with
`gateway.simulator.tls.ensure_certs` in a temporary directory, starts the server in the
lab's peer namespace on 0.0.0.0, and removes the directory on `stop()`. Clients verify the
server against `TlsPeer.ca_file`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gateway.lab import Lab
from gateway.simulator.tls import TlsFiles, ensure_certs
from wsgw_bench.peers import (
    REPO,
    PeerError,
    _Process,
    _readline,
    _start,
    _stop,
    python_module,
)

__all__ = ["TlsPeer", "main"]


def _dist(name: str) -> str:
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


class TlsPeer(_Process):
    """The TLS echo server, started (`start`) and stopped (`stop`, or leaving `with`)."""

    def __init__(
        self, proc: subprocess.Popen[str], port: int, files: TlsFiles, directory: Path, about: str
    ) -> None:
        super().__init__(proc, port)
        self.files = files
        self.directory = directory
        self.about = about  # e.g. "websockets 16.0 on uvloop 0.23.0"

    @property
    def ca_file(self) -> Path:
        return self.files.ca

    @classmethod
    def start(
        cls,
        lab: Lab | None = None,
        *,
        host: str = "0.0.0.0",  # noqa: S104 - inside the lab namespace: both veth ends
        port: int = 0,
        names: Sequence[str] = (),
    ) -> TlsPeer:
        """Start the server (in lab's peer namespace when given); names: the addresses or
        host names the certificate is for (default: both of the lab's peer addresses;
        localhost and 127.0.0.1 are always in it)."""
        if not names:
            names = [lab.peer_ip, lab.peer_client_ip] if lab is not None else ["127.0.0.1"]
        directory = Path(tempfile.mkdtemp(prefix="wsgw-tls-peer-"))
        try:
            files = ensure_certs(directory, list(names))
            cmd, env = python_module(
                "wsgw_bench.tls_peer", host, str(port), str(files.cert), str(files.key)
            )
            proc = _start(lab, cmd, "tls peer", stdout=subprocess.PIPE, cwd=str(REPO), env=env)
            try:
                assert proc.stdout is not None
                line = _readline(proc.stdout, 20, "tls peer")
                ready, _, about = line.partition(" server ")
                if not ready.startswith("ready port=") or not about:
                    raise PeerError(f"tls peer: expected 'ready port=N server ...', got {line!r}")
                bound = int(ready.removeprefix("ready port="))
            except BaseException:
                _stop(proc)
                raise
        except BaseException:
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return cls(proc, bound, files, directory, about)

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)


# ---- the server process ------------------------------------------------------------------
async def serve(host: str, port: int, files: TlsFiles, about: str) -> None:
    from websockets.asyncio.server import ServerConnection
    from websockets.asyncio.server import serve as ws_serve

    async def echo(ws: ServerConnection) -> None:
        async for message in ws:
            await ws.send(message)

    async with ws_serve(
        echo,
        host,
        port,
        ssl=files.server_context(),
        compression=None,
        max_size=None,
        ping_interval=None,
    ) as server:
        bound = next(iter(server.sockets)).getsockname()[1]
        print(f"ready port={bound} server {about}", flush=True)
        await asyncio.get_running_loop().create_future()  # until killed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("host")
    parser.add_argument("port", type=int)
    parser.add_argument("cert", type=Path, help="the server's certificate chain (PEM)")
    parser.add_argument("key", type=Path, help="its private key (PEM)")
    args = parser.parse_args(argv)
    files = TlsFiles(args.cert.parent / "ca.pem", args.cert, args.key)
    runner: Any
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        about = f"{_dist('websockets')} on asyncio"
        runner = asyncio.run
    else:
        about = f"{_dist('websockets')} on {_dist('uvloop')}"
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(serve(args.host, args.port, files, about))
    return 0


if __name__ == "__main__":
    sys.exit(main())
