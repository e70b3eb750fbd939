"""dataplane.transports.http over a real DPDK port (issue #21's REST snapshots): each answer
of tests/integration/faulty_http.py, a kernel server in the lab's peer namespace, gives the
body or its typed error, over plain TCP and over TLS (the host's kernel has no address on
the lab's link: every byte goes through the engine); the engine runs on a thread of its
own (threaded mode; the gateway's engine-loop mode is test_books_sim_dpdk.py's)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from dataplane.engine import Engine
from dataplane.errors import RefusedError, ResetError, TransportTimeoutError
from dataplane.transports.http import (
    HttpProtocolError,
    HttpStatusError,
    TruncatedResponseError,
    http_get,
)
from dataplane.ws.errors import TlsCertificateError
from gateway.lab import Lab
from gateway.simulator.tls import ensure_certs
from tests.conftest import requires_dpdk
from tests.integration.faulty_http import levels_body

pytestmark = [requires_dpdk, pytest.mark.dpdk]
FAULTY_HTTP = str(Path(__file__).with_name("faulty_http.py"))
FIXED = b'{"lastUpdateId":7,"bids":[["1.00","2.0"]],"asks":[["1.10","3.0"]]}'
PORT = 9620
#: mode -> what http_get gives (the body, or the error's type)
OUTCOMES: dict[str, bytes | type[Exception]] = {
    "length": FIXED,
    "chunked": FIXED,
    "close": FIXED,
    "500": HttpStatusError,
    "truncated": TruncatedResponseError,
    "truncchunk": TruncatedResponseError,
    "reset": ResetError,
    "garbage": HttpProtocolError,
    "silent": TransportTimeoutError,
}


@pytest.fixture
def engine(lab_engine) -> tuple[Engine, Lab]:  # type: ignore[no-untyped-def]
    return lab_engine(time_wait=0.5)  # type: ignore[no-any-return]


@pytest.fixture
def certs(tmp_path: Path, lab: Lab) -> Path:
    ensure_certs(tmp_path / "good", [lab.peer_ip])
    ensure_certs(tmp_path / "other", [lab.peer_ip])
    return tmp_path


@contextlib.contextmanager
def serve(lab: Lab, modes: str, *extra: str, body: str = "-") -> Iterator[subprocess.Popen[str]]:
    proc = lab.popen([sys.executable, FAULTY_HTTP, lab.peer_ip, str(PORT), body, modes, *extra],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        yield proc
    finally:
        proc.kill()
        proc.wait()


async def outcome(
    url: str, engine: Engine | None, timeout: float = 1.5, **options: object
) -> bytes | type[Exception]:
    try:
        return (await http_get(url, engine=engine, timeout=timeout, **options)).body  # type: ignore[arg-type]
    except Exception as exc:
        return type(exc)


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_each_answer_gives_the_body_or_its_typed_error(
    engine: tuple[Engine, Lab], certs: Path, scheme: str
) -> None:
    eng, lab = engine
    tls = ["--tls", str(certs / "good")] if scheme == "https" else []
    options = {"ca_file": str(certs / "good" / "ca.pem")} if scheme == "https" else {}
    url = f"{scheme}://{lab.peer_ip}:{PORT}/api/v3/depth?symbol=BTCUSDT&limit=5"
    with serve(lab, ",".join(OUTCOMES), *tls):

        async def run() -> dict[str, bytes | type[Exception]]:
            return {mode: await outcome(url, eng, **options) for mode in OUTCOMES}

        assert asyncio.run(run()) == OUTCOMES


def test_nothing_listening_is_refused_and_a_500_keeps_its_status(
    engine: tuple[Engine, Lab],
) -> None:
    eng, lab = engine
    url = f"http://{lab.peer_ip}:{PORT}/api/v3/depth?symbol=BTCUSDT"
    assert asyncio.run(outcome(url, eng)) is RefusedError
    with serve(lab, "500"):
        with pytest.raises(HttpStatusError) as caught:
            asyncio.run(http_get(url, engine=eng, timeout=2))
        assert caught.value.status == 500 and b"internal" in caught.value.body


def test_a_certificate_from_another_ca_is_refused(engine: tuple[Engine, Lab], certs: Path) -> None:
    eng, lab = engine
    url = f"https://{lab.peer_ip}:{PORT}/api/v3/depth?symbol=BTCUSDT"
    with serve(lab, "length", "--tls", str(certs / "good")):
        other = str(certs / "other" / "ca.pem")
        assert asyncio.run(outcome(url, eng, ca_file=other)) is TlsCertificateError
        good = str(certs / "good" / "ca.pem")
        assert asyncio.run(outcome(url, eng, ca_file=good)) == FIXED


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_body_of_many_segments_comes_whole(
    engine: tuple[Engine, Lab], certs: Path, scheme: str
) -> None:
    """A depth-10000 snapshot (about 600 kB: hundreds of segments, the receive window
    filled and opened again), with a Content-Length and chunked."""
    eng, lab = engine
    tls = ["--tls", str(certs / "good")] if scheme == "https" else []
    options = {"ca_file": str(certs / "good" / "ca.pem")} if scheme == "https" else {}
    url = f"{scheme}://{lab.peer_ip}:{PORT}/api/v3/depth?symbol=BTCUSDT&limit=5000"
    want = levels_body(10000)
    with serve(lab, "length,chunked", *tls, body="-10000"):

        async def run() -> list[bytes | type[Exception]]:
            return [await outcome(url, eng, timeout=10, **options) for _ in range(2)]

        assert asyncio.run(run()) == [want, want]
