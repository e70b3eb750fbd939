"""The restart guarantee, end to end: `wsgw serve` killed with SIGKILL mid-stream and started
again on the same database brings back, without any API call, the DPDK port, the topics
and the running session; the simulator sees each topic subscribed exactly once; a graceful
stop exits 0 and unlinks the shared-memory ring the killed process left behind (and the
second one took over).

A restored session reconnects within milliseconds of the start, before any consumer is
there. The hub remembers a session's last gap and hands it to a /v1/stream consumer that
subscribes later, first and once, marked past with its time: the test subscribes only once
the restart gap was published, and the consumer gets that gap (reason "restart: ...") and
then data again, in order.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from dataplane.dpdk import RUNTIME_DIR
from gateway.lab import Lab
from gateway.simulator.process import simulator_command
from tests.conftest import requires_dpdk
from wsgw_bench.servers import free_port

pytestmark = [requires_dpdk, pytest.mark.dpdk]

ROOT = Path(__file__).resolve().parents[2]
TOPICS = ("btcusdt@trade", "ethusdt@trade", "solusdt@depth")
RATE = 20  # simulator messages/s per topic


def wait_for(what: str, predicate: Callable[[], bool], timeout: float, every: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(every)


class SimulatorProcess:
    """The feed simulator in the lab namespace, asked for its stats over stdin."""

    def __init__(self, lab: Lab) -> None:
        self.proc: subprocess.Popen[str] = lab.popen(
            simulator_command(lab.peer_ip, 0, RATE, stdin=True),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, name="sim-stdout", daemon=True).start()
        assert self._line(20) == "ready", "the simulator did not start"
        self.port = int(json.loads(self._line(10))["port"])

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.strip())

    def _line(self, timeout: float) -> str:
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("the simulator did not answer") from None

    def stats(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self._line(10))
        assert answer["ok"], answer
        return answer

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


class Serve:
    """One `wsgw serve` process; its log goes to a file, shown when something fails."""

    def __init__(self, env: dict[str, str], port: int, log: Path) -> None:
        self.log = log
        self.port = port
        with log.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--no-auth", "--port", str(port)],
                env=env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.api = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

    def tail(self) -> str:
        lines = self.log.read_text(errors="replace").splitlines()
        return "\n".join([line for line in lines if "uvicorn.access" not in line][-40:])

    def wait_ready(self, timeout: float = 30) -> None:
        def ready() -> bool:
            assert self.proc.poll() is None, f"serve exited early:\n{self.tail()}"
            with contextlib.suppress(httpx.HTTPError):
                return self.api.get("/readyz").status_code == 200
            return False

        wait_for("/readyz", ready, timeout)

    def post(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        response = self.api.post(path, json=body)
        assert response.status_code in (200, 201), f"POST {path}: {response.text}"
        result: dict[str, Any] = response.json()
        return result

    def stop(self) -> None:
        self.api.close()
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


class Stream:
    """A /v1/stream consumer of a subscription, with envelopes (closed with `exits`)."""

    def __init__(self, exits: contextlib.ExitStack, port: int, subscription: int) -> None:
        url = f"ws://127.0.0.1:{port}/v1/stream?subscription={subscription}&envelope=1"
        self.ws: ClientConnection = exits.enter_context(
            connect(url, open_timeout=10, max_size=None, max_queue=None)
        )
        # The hub registered the consumer before it sent this: all that follows reaches us.
        self.hello = self.frame(10)
        assert self.hello["type"] == "subscribed", self.hello

    def frame(self, timeout: float) -> dict[str, Any]:
        frame: dict[str, Any] = json.loads(self.ws.recv(timeout=timeout))
        return frame

    def frames(self, until: Callable[[list[dict[str, Any]]], bool], timeout: float) -> list[Any]:
        """Frames until `until(frames)` holds; AssertionError with what came after timeout."""
        got: list[dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        while not until(got):
            left = deadline - time.monotonic()
            try:
                assert left > 0, "timed out"
                got.append(self.frame(left))
            except (AssertionError, TimeoutError) as exc:
                kinds = [(f["type"], f.get("topic") or f.get("reason")) for f in got[-10:]]
                raise AssertionError(f"{exc}: {len(got)} frames, last {kinds}") from None
        return got

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.ws.close()


def sim_seqs(frames: list[dict[str, Any]]) -> dict[str, list[int]]:
    """The simulator's sequence numbers of the data frames, per topic."""
    seqs: dict[str, list[int]] = {t: [] for t in TOPICS}
    for frame in frames:
        if frame["type"] == "msg":
            seqs[frame["topic"]].append(int(json.loads(frame["payload"])["sim_seq"]))
    return seqs


def each_topic(count: int) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda frames: all(len(v) >= count for v in sim_seqs(frames).values())


def test_serve_killed_mid_stream_restores_everything_on_restart(lab: Lab, tmp_path: Path) -> None:
    started = time.monotonic()

    def mark(what: str) -> None:  # the timeline, printed (shown by pytest on failure)
        print(f"{time.monotonic() - started:6.2f} s  {what}", flush=True)

    gateway = f"rs{os.getpid()}"
    ring = Path("/dev/shm") / f"wsgw-{gateway}-messages"
    env = {
        **os.environ,
        "WSGW_STATE_DIR": str(tmp_path),
        "WSGW_DB__URL": f"sqlite:///{tmp_path / 'wsgw.db'}",
        "WSGW_HUB__GATEWAY": gateway,
        "WSGW_CONFIG": str(tmp_path / "absent.toml"),
        "WSGW_DPDK__HUGEPAGES": "off",
    }
    port = free_port()
    sim = SimulatorProcess(lab)
    serves: list[Serve] = []
    exits = contextlib.ExitStack()
    try:
        # 1. A first control plane, configured through the REST API.
        first = Serve(env, port, tmp_path / "serve1.log")
        serves.append(first)
        first.wait_ready()
        mark("first serve ready")
        dpdk_port = first.post(
            "/v1/ports",
            {"name": "lab", "device": lab.vdev, "ipv4": lab.gw_ip, "netmask": lab.netmask},
        )
        session = first.post(
            "/v1/sessions",
            {
                "name": "binance-lab",
                "url": f"ws://{lab.peer_ip}:{sim.port}/binance/stream",
                "dialect": "binance",
                "transport": "dpdk",
                "port_id": dpdk_port["id"],
            },
        )
        sid = int(session["id"])
        first.post(f"/v1/sessions/{sid}/start")
        sub = first.post(
            "/v1/subscriptions", {"session_id": sid, "topics": list(TOPICS), "consumer": "rs"}
        )
        before = Stream(exits, port, sub["id"])
        assert before.hello["session"] == sid
        assert before.hello["topics"] == list(TOPICS)
        frames = before.frames(each_topic(3), 30)
        mark("data on the first stream")
        assert not [f for f in frames if f["type"] == "gap"], frames
        last_before = {t: s[-1] for t, s in sim_seqs(frames).items()}

        # 2. Killed mid-stream.
        os.kill(first.proc.pid, signal.SIGKILL)
        killed_ns = time.time_ns()
        assert first.proc.wait(10) == -signal.SIGKILL
        before.close()
        assert ring.exists(), "the killed gateway's ring should be left behind"

        # 3. Started again on the same database: no API call. The restored session
        # reconnects at once; the consumer subscribes after its restart gap.
        second = Serve(env, port, tmp_path / "serve2.log")
        serves.append(second)
        mark("killed; second serve started")
        second.wait_ready()
        mark("second serve ready")

        def restart_gap() -> bool:
            events = second.api.get(f"/v1/sessions/{sid}/events", params={"limit": 200})
            return any(
                e["kind"] == "gap" and e["reason"].startswith("restart")
                for e in events.json()["data"]
            )

        wait_for("the restored session's restart gap", restart_gap, 30)
        mark("restart gap published")
        after = Stream(exits, port, sub["id"])
        assert after.hello["session"] == sid
        # A new run: another epoch, which the restart gap carries too.
        assert after.hello["epoch"] != before.hello["epoch"], (before.hello, after.hello)
        assert after.hello["topics"] == list(TOPICS)

        # 4. The late consumer is told of the restart gap first (past, with its time),
        # then gets data again, in order.
        frames = after.frames(each_topic(3), 40)
        mark("restart gap and data on the second stream")
        gaps = [f for f in frames if f["type"] == "gap"]
        assert len(gaps) == 1, gaps
        assert frames[0] is gaps[0], f"data before the gap: {frames[:3]}"
        assert gaps[0]["session"] == sid
        assert gaps[0]["reason"].startswith("restart"), gaps[0]
        assert gaps[0]["lost"] is None
        assert gaps[0]["past"] is True, gaps[0]
        assert gaps[0]["epoch"] == after.hello["epoch"], gaps[0]
        assert killed_ns < gaps[0]["ts_ns"] < time.time_ns(), gaps[0]
        assert gaps[0]["seq"] < frames[1]["seq"], frames[:2]
        seqs = sim_seqs(frames)
        for topic, numbers in seqs.items():
            assert numbers[0] > last_before[topic], (topic, last_before[topic], numbers)
            assert numbers == sorted(set(numbers)), (topic, numbers)
        hub_seqs = [f["seq"] for f in frames]
        assert hub_seqs == sorted(set(hub_seqs)), hub_seqs
        after.close()

        # 5. Nothing subscribed twice upstream: one connection, one subscriber a topic (the
        # dead process's connection is gone once the simulator's kernel learns it is dead).
        expected = {f"binance:{t}": 1 for t in TOPICS}

        def subscribed_once() -> bool:
            stats = sim.stats()
            return stats["subscribers"] == expected and len(stats["connections"]) == 1

        wait_for("one subscriber a topic at the simulator", subscribed_once, 30, every=0.5)
        mark("one subscriber a topic at the simulator")
        events = second.api.get(f"/v1/sessions/{sid}/events", params={"limit": 200}).json()
        kinds = [(e["kind"], e["reason"]) for e in events["data"]]
        assert any(k == "restored" for k, _ in kinds), kinds
        assert any(k == "gap" and r.startswith("restart") for k, r in kinds), kinds

        # 6. A graceful stop: exit 0, the ring taken over from the killed process unlinked.
        second.proc.send_signal(signal.SIGTERM)
        assert second.proc.wait(30) == 0, second.tail()
        mark("second serve stopped")
        sim.kill()
        assert not ring.exists(), f"{ring} left behind"
    except Exception as exc:  # with the control planes' logs
        logs = "\n".join(f"--- {s.log.name}\n{s.tail()}" for s in serves)
        raise AssertionError(f"{type(exc).__name__}: {exc}\n{logs}") from exc
    finally:
        exits.close()
        for serve in serves:
            serve.stop()
        sim.kill()
        ring.unlink(missing_ok=True)
        for serve in serves:  # EAL's runtime folder: removed at exit, but not by SIGKILL
            shutil.rmtree(RUNTIME_DIR / f"wsgw-{serve.proc.pid}", ignore_errors=True)
