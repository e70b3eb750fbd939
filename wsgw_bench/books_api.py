"""GET /v1/books/{session}/{symbol}?depth=100 through the real API (issue #21: a book
snapshot read by REST in under 1 ms at depth 100).

The gateway: a ControlPlane on a hub ring, its BookManager, the FastAPI app under uvicorn
(wsgw_bench.servers.ServerThread, on uvloop as `wsgw serve` runs when it is installed). A
Coinbase session (never started) holds a normalized subscription of `level2:BTC-USD`, and
one level2 snapshot of `levels` levels a side is written to the ring as the session would:
the manager builds the book from it, as it does from the wire. The client is another
process (the server's GIL is not shared with it): keep-alive HTTP/1.1 requests one after
another, each timed from send to the whole body read, after a warm-up. Both doors are
measured, alternated in rounds: auth off (loopback) and a consume token (`Authorization:
Bearer`, what a consumer sends); with them the floor of the same HTTP path (GET /healthz)
and the app's own cost in process (through the ASGI app: no socket, no uvicorn).

    python -m wsgw_bench.books_api [--levels 2000] [--depth 100] [--requests 2000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from wsgw_bench.core import BenchOptions, Measurement, scenario

TOPIC = "level2:BTC-USD"
SYMBOL = "BTC-USD"


@dataclass
class BookApi:
    url: str
    session_id: int
    token: str
    control: Any
    app: Any


def level2_snapshot(levels: int) -> bytes:
    """A Coinbase level2 snapshot: `levels` bids below 50,000 and asks above it."""
    bids = [[f"{50_000 - (i + 1) / 100:.2f}", f"{(i % 97 + 1) / 1000:.3f}"] for i in range(levels)]
    asks = [[f"{50_000 + (i + 1) / 100:.2f}", f"{(i % 89 + 1) / 1000:.3f}"] for i in range(levels)]
    body = {"type": "snapshot", "product_id": SYMBOL, "bids": bids, "asks": asks}
    return json.dumps(body, separators=(",", ":")).encode()


@contextlib.contextmanager
def book_api(
    state_dir: Path, levels: int, *, auth: bool = True, uvloop: bool = True
) -> Iterator[BookApi]:
    """A gateway serving one `levels`-level book over uvicorn; stopped afterwards. auth
    False: auth.mode none (loopback clients, no token)."""
    from api.app import create_app
    from dataplane.ring import RingWriter
    from gateway.control import ControlPlane
    from gateway.hub import Hub
    from gateway.runtime.live import LiveRuntime
    from gateway.settings import Settings
    from wsgw_bench.servers import ServerThread

    ring = RingWriter.create(None, 1 << 24)
    hub = Hub(ring=ring)
    runtime = LiveRuntime(hub, hub=hub)
    settings = Settings(
        state_dir=state_dir,
        db={"url": f"sqlite:///{state_dir / 'wsgw.db'}"},  # type: ignore[arg-type]
        host={"sys_root": state_dir / "sys", "proc_root": state_dir / "proc"},  # type: ignore[arg-type]
        auth={"mode": "token" if auth else "none"},  # type: ignore[arg-type]
    )
    control = ControlPlane(settings, runtime)
    app = create_app(settings, runtime, control=control, hub=hub)
    try:
        server = ServerThread(app, uvloop=uvloop).start()
    except BaseException:
        ring.close()
        raise
    try:
        session = control.sessions.create(
            {"name": "cb", "url": "wss://127.0.0.1:9/", "dialect": "coinbase",
             "transport": "kernel"}
        )  # fmt: skip
        control.subscriptions.create(
            {"session_id": session.id, "topics": [TOPIC], "consumer": "bench",
             "format": "normalized"}
        )  # fmt: skip
        _, token = control.tokens.create("bench", ["consume"])
        hub.publish_batch([(session.id, TOPIC, level2_snapshot(levels), time.time_ns(), None)])
        deadline = time.monotonic() + 20
        while not getattr(control.books.view(session.id, SYMBOL, 1), "bids", None):
            if time.monotonic() > deadline:
                raise TimeoutError("the book did not appear")
            time.sleep(0.01)
        yield BookApi(server.url, session.id, token, control, app)
    finally:
        server.stop()  # shuts the control plane down: the books, the runtime, the hub
        ring.close()


def client_run(url: str, path: str, requests: int, warmup: int, token: str | None) -> list[int]:
    """In the client process: the latencies (ns) of `requests` GETs after `warmup`."""
    import httpx

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    out: list[int] = []
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        for i in range(warmup + requests):
            start = time.perf_counter_ns()
            r = client.get(path)
            body = r.content
            took = time.perf_counter_ns() - start
            if r.status_code != 200 or not body:
                raise RuntimeError(f"GET {path}: {r.status_code} {body[:200]!r}")
            if i >= warmup:
                out.append(took)
    return out


def measure(
    api: BookApi, depth: int, requests: int, warmup: int, *, token: bool, path: str = ""
) -> list[int]:
    """Run the client process once (with the consume token or none); its latencies (ns).
    path: another path to time instead of the book's (the floor: /healthz)."""
    path = path or f"/v1/books/{api.session_id}/{SYMBOL}?depth={depth}"
    command = [sys.executable, "-m", "wsgw_bench.books_api", "--client", api.url, path,
               str(requests), str(warmup), api.token if token else ""]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the client failed: {done.stderr[-2000:]}")
    latencies: list[int] = json.loads(done.stdout)
    return latencies


def app_cost(api: BookApi, depth: int, requests: int) -> list[int]:
    """The app's own cost, in process: each GET straight through the ASGI app (FastAPI,
    auth, the route's thread hop, the manager's read, the JSON), no socket, no uvicorn."""
    import asyncio

    import httpx

    path = f"/v1/books/{api.session_id}/{SYMBOL}?depth={depth}"
    headers = {"Authorization": f"Bearer {api.token}"}

    async def go() -> list[int]:
        out: list[int] = []
        transport = httpx.ASGITransport(app=api.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as c:
            for i in range(requests + 50):
                start = time.perf_counter_ns()
                r = await c.get(path, headers=headers)
                took = time.perf_counter_ns() - start
                if r.status_code != 200:
                    raise RuntimeError(f"GET {path}: {r.status_code} {r.text[:200]}")
                if i >= 50:
                    out.append(took)
        return out

    return asyncio.run(go())


def summary(latencies: list[int]) -> dict[str, float]:
    ordered = sorted(latencies)

    def at(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {
        "requests": len(ordered),
        "p50_us": at(0.50),
        "p90_us": at(0.90),
        "p99_us": at(0.99),
        "max_us": ordered[-1] / 1000,
        "mean_us": statistics.fmean(ordered) / 1000,
    }


def run(levels: int, depth: int, requests: int, rounds: int) -> dict[str, Any]:
    """Both doors, alternated over `rounds` rounds of requests/rounds each."""
    per_round = max(1, requests // rounds)
    cpu_ns = 0
    got: dict[str, list[int]] = {
        "token": [],
        "no auth": [],
        "floor: GET /healthz": [],
        "in process (ASGI)": [],
    }
    with contextlib.ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="wsgw-books-api-")))
        doors = {
            "token": stack.enter_context(book_api(tmp / "token", levels)),
            "no auth": stack.enter_context(book_api(tmp / "none", levels, auth=False)),
        }
        api = doors["token"]
        body = api.control.books.view(api.session_id, SYMBOL, depth)
        load_before = os.getloadavg()
        over_http = [*doors, "floor: GET /healthz"]
        for r in range(rounds):
            # Each round starts with another door, so that none is always first (the one
            # measured right after the in-process run, which leaves garbage behind).
            for door in over_http[r % 3 :] + over_http[: r % 3]:
                served = doors.get(door, doors["no auth"])
                path = "/healthz" if door.startswith("floor") else ""
                got[door] += measure(served, depth, per_round, 50, token=door == "token", path=path)
            cpu = time.process_time_ns()
            got["in process (ASGI)"] += app_cost(api, depth, per_round)
            cpu_ns += time.process_time_ns() - cpu
        load_after = os.getloadavg()
    return {
        "levels": levels,
        "depth": depth,
        "levels_answered": len(body.bids) + len(body.asks) if body else 0,
        "load": [round(load_before[0], 1), round(load_after[0], 1)],
        "doors": {door: summary(lat) for door, lat in got.items()},
        # CPU of the whole process (client, app, worker thread) per in-process request
        "in_process_cpu_us": round(cpu_ns / ((per_round + 50) * rounds) / 1000, 1),
    }


@scenario(
    "books_api",
    "GET /v1/books/{session}/{symbol}?depth=100 of a 2,000-level book through uvicorn, "
    "from another process: p50/p99 with a token, without auth, and the floor (GET /healthz)",
)
def bench_books_api(options: BenchOptions) -> list[Measurement]:
    result = run(2000, 100, 400 if options.quick else 2000, 2 if options.quick else 4)
    note = f"load {result['load'][0]} -> {result['load'][1]}"
    return [
        Measurement(
            "books_api",
            f"depth-100 read {q}",
            door,
            "us",
            False,
            [figures[f"{q}_us"]],
            reference=door.startswith("floor"),
            note=note,
        )
        for door, figures in result["doors"].items()
        for q in ("p50", "p99")
    ]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--client":
        url, path, requests, warmup, token = argv[1:6]
        print(json.dumps(client_run(url, path, int(requests), int(warmup), token or None)))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, default=2000, help="levels a side of the book")
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--requests", type=int, default=2000, help="per door")
    parser.add_argument("--rounds", type=int, default=4, help="alternations of the doors")
    args = parser.parse_args(argv)
    result = run(args.levels, args.depth, args.requests, args.rounds)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
