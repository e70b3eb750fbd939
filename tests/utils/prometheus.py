"""A real Prometheus (Debian's `prometheus` package) for tests: a temporary config that
scrapes the given targets every second, its data in a temporary folder, on a free port;
stopped and removed afterwards, also when the test fails."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from wsgw_bench.servers import free_port, stop_process

BINARY = "prometheus"
SCRAPE_INTERVAL_S = 1


def binary() -> str:
    """The prometheus binary's path; skips the test, saying how to get it, when missing."""
    found = shutil.which(BINARY)
    if found is None:
        pytest.skip("no prometheus binary: `apt-get install prometheus` (make deps does)")
    return found


@contextmanager
def running_prometheus(targets: list[str], job: str = "wsgw") -> Iterator[str]:
    """Prometheus scraping `targets` (host:port, /metrics) as `job`; yields its base URL once
    it answers. Its port is picked free just before it starts: a lost race is retried."""
    exe = binary()
    folder = Path(tempfile.mkdtemp(prefix="wsgw-prometheus-"))
    proc: subprocess.Popen[bytes] | None = None
    log = (folder / "prometheus.log").open("wb")
    try:
        config = folder / "prometheus.yml"
        quoted = ", ".join(f'"{t}"' for t in targets)
        config.write_text(
            "global:\n"
            f"  scrape_interval: {SCRAPE_INTERVAL_S}s\n"
            f"  evaluation_interval: {SCRAPE_INTERVAL_S}s\n"
            "scrape_configs:\n"
            f"  - job_name: {job}\n"
            f"    static_configs:\n      - targets: [{quoted}]\n"
        )
        for _attempt in range(3):
            port = free_port()
            proc = subprocess.Popen(
                [
                    exe,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={folder / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--storage.tsdb.retention.time=1h",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            url = f"http://127.0.0.1:{port}"
            if _wait_ready(url, proc):
                break
            proc.kill()
            proc.wait(10)
            proc = None
        if proc is None:
            raise RuntimeError(
                f"prometheus did not start:\n{(folder / 'prometheus.log').read_text()[-2000:]}"
            )
        yield url
    finally:
        if proc is not None:
            stop_process(proc, 15)
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_ready(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def wait_for_samples(url: str, selector: str, count: int, timeout: float = 60.0) -> None:
    """Until a series of `selector` has `count` samples over the last minute: scraped enough
    times for rate() to have something."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        answer = httpx.get(
            f"{url}/api/v1/query", params={"query": f"count_over_time({selector}[1m])"}
        ).json()
        last = answer
        result = answer.get("data", {}).get("result", [])
        if result and max(float(r["value"][1]) for r in result) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"prometheus has not scraped {selector} {count} times: {last}")
