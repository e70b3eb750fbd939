"""`wsgw serve` in a process of its own, for the benchmarks and the tests that run several
gateways (fleet nodes, JetStream publishers): one harness, restartable (kill, then start
again on the same state: the gateway restores what it ran)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from wsgw_bench.servers import free_port

ROOT = Path(__file__).resolve().parents[1]


def wait_for(
    what: str, predicate: Callable[[], bool], timeout: float = 15, every: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


def fleet_env(db_url: str, node: str, lease_s: float, labels: dict[str, str]) -> dict[str, str]:
    """The settings of a fleet node (gateway.settings.FleetSettings) as environment."""
    return {
        "WSGW_DB__URL": db_url,
        "WSGW_FLEET__ENABLED": "true",
        "WSGW_FLEET__NODE": node,
        "WSGW_FLEET__LABELS": json.dumps(labels),
        "WSGW_FLEET__LEASE_S": str(lease_s),
    }


def jetstream_nats(url: str, stream: str, duplicate_window_s: float = 60) -> dict[str, Any]:
    """hub.nats settings publishing into a memory JetStream stream."""
    return {
        "servers": [url],
        "jetstream": {
            "stream": stream,
            "storage": "memory",
            "duplicate_window_s": duplicate_window_s,
        },
    }


class ServeGateway:
    """One `wsgw serve` (own state dir, API port and ring `/dev/shm/wsgw-<tag><name>-...`);
    its log goes to a file, shown when something fails (`tail`). `env` adds settings (a
    fleet node's: fleet_env; the database is the state dir's SQLite unless it names one);
    `nats`, the hub.nats settings, may be changed until `start`."""

    def __init__(
        self,
        name: str,
        tmp: Path,
        *,
        tag: str = "",
        env: dict[str, str] | None = None,
        nats: dict[str, Any] | None = None,
    ) -> None:
        self.name = name
        self.port = free_port()
        self.gateway = f"{tag or f'gw{os.getpid()}'}{name}"
        self.ring = Path("/dev/shm") / f"wsgw-{self.gateway}-messages"  # noqa: S108
        self.state = tmp / (f"{name}-{tag}" if tag else name)
        self.state.mkdir()
        self.log = tmp / f"{self.state.name}.log"
        self.nats = nats
        self.env = {"WSGW_DB__URL": f"sqlite:///{self.state}/wsgw.db", **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=10)

    def start(self, *, wait: bool = True) -> None:
        """Start it (again, on its state); wait: until /readyz answers."""
        env = {
            **os.environ,
            "WSGW_STATE_DIR": str(self.state),
            "WSGW_CONFIG": str(self.state / "absent.toml"),
            "WSGW_HUB__GATEWAY": self.gateway,
            "WSGW_HUB__RING_CAPACITY": str(1 << 22),
            **({"WSGW_HUB__NATS": json.dumps(self.nats)} if self.nats else {}),
            **self.env,
        }
        command = [sys.executable, "-m", "gateway.cli", "serve", "--no-auth"]
        with self.log.open("a") as out:
            self.proc = subprocess.Popen(
                [*command, "--port", str(self.port)],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = 180) -> None:
        def ready() -> bool:
            assert self.proc is not None
            assert self.proc.poll() is None, f"{self.name} exited early:\n{self.tail()}"
            with contextlib.suppress(httpx.HTTPError):
                return self.api.get("/readyz").status_code == 200
            return False

        wait_for(f"{self.name} /readyz", ready, timeout)

    def tail(self, lines: int = 30) -> str:
        text = self.log.read_text(errors="replace").splitlines()
        return "\n".join([line for line in text if "uvicorn.access" not in line][-lines:])

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.api.post(path, json=body)
        assert response.status_code in (200, 201), f"POST {path}: {response.text}"
        result: dict[str, Any] = response.json()
        return result

    def get(self, path: str) -> dict[str, Any]:
        response = self.api.get(path, params={"limit": 100} if path == "/v1/sessions" else None)
        assert response.status_code == 200, f"GET {path}: {response.text}"
        result: dict[str, Any] = response.json()
        return result

    def connected(self) -> set[int]:
        """The sessions this gateway has connected (none while it is down)."""
        with contextlib.suppress(httpx.HTTPError, ValueError, AssertionError):
            data = self.get("/v1/sessions")["data"]
            return {s["id"] for s in data if s["status"]["state"] == "connected"}
        return set()

    def stopped_by_signal(self) -> bool:
        """Every thread of the process is stopped (SIGSTOP has taken effect)."""
        assert self.proc is not None
        tasks = Path(f"/proc/{self.proc.pid}/task")
        return all(
            (t / "stat").read_text().rsplit(")", 1)[1].split()[0] == "T" for t in tasks.iterdir()
        )

    def kill(self) -> None:
        """kill -9 (start() runs it again on its state)."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)
        self.kill()
        self.api.close()
        self.ring.unlink(missing_ok=True)


def fleet_nodes(
    db_url: str, nats: dict[str, Any], tmp: Path, names: Iterable[str], lease_s: float
) -> list[ServeGateway]:
    """Fleet nodes (not started) on one database, labelled zone=lab, each with its own copy
    of the hub.nats settings `nats`."""
    return [
        ServeGateway(
            name, tmp, env=fleet_env(db_url, name, lease_s, {"zone": "lab"}), nats=dict(nats)
        )
        for name in names
    ]


@contextlib.contextmanager
def closing_with_logs(
    nodes: Sequence[ServeGateway], error: type[Exception] = AssertionError
) -> Iterator[None]:
    """Run a fleet's block: a failure in it is raised again as `error` with every node's
    log tail (a run fails on one node while the cause is often in another's log); the
    nodes (those in the list when the block ends: it may grow) are closed after."""
    try:
        yield
    except Exception as exc:
        logs = "\n".join(f"--- {n.log.name}\n{n.tail()}" for n in nodes)
        raise error(f"{type(exc).__name__}: {exc}\n{logs}") from exc
    finally:
        for node in nodes:
            node.close()


def create_sessions(
    node: ServeGateway,
    sim_port: int,
    count: int,
    topic: str,
    *,
    prefix: str = "s",
    placement: dict[str, str] | None = None,
    start: bool = True,
) -> list[int]:
    """`count` kernel Binance sessions to the simulator, each subscribed to `topic` (and
    started); returns their ids."""
    sessions = []
    for i in range(count):
        body: dict[str, Any] = {
            "name": f"{prefix}-{i}",
            "url": f"ws://127.0.0.1:{sim_port}/binance/stream",
            "dialect": "binance",
            "transport": "kernel",
            "reconnect_initial_delay_s": 0.1,
        }
        if placement is not None:
            body["placement"] = placement
        row = node.post("/v1/sessions", body)
        node.post("/v1/subscriptions", {"session_id": row["id"], "topics": [topic],
                                        "consumer": f"{prefix}{i}"})  # fmt: skip
        sessions.append(int(row["id"]))
    if start:
        for sid in sessions:
            node.post(f"/v1/sessions/{sid}/start")
    return sessions
