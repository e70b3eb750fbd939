"""The wss:// part of `connect`: the TLS peer (wsgw_bench/tls_peer.py) serves a verified
wss:// echo and refuses clients that do not trust its CA; every kernel-side adapter opens
wss:// through the runner with certificate verification on; and the scenario, in --quick
mode in a lab of its own, has WSS rows for every WebSocket contender."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import math
import shutil
import ssl
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme

from tests.bench.test_scenarios import by_metric, first_notes
from tests.bench.test_scenarios import run as run_scenario
from tests.conftest import requires_dpdk
from wsgw_bench import ws_runner
from wsgw_bench.peers import WsPeer
from wsgw_bench.tls_peer import TlsPeer
from wsgw_bench.ws_runner import run_loop, run_test

KERNEL_ADAPTERS = ("picows", "aiohttp", "websockets", "wsgw-kernel")
WS_CONTENDERS = (
    "picows",
    "aiohttp",
    "websockets",
    "wsgw kernel",
    "wsgw DPDK",
    "wsgw DPDK (engine loop)",
)


def _peer_dirs() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("wsgw-tls-peer-*"))


@pytest.fixture(scope="module")
def tls_peer() -> Iterator[TlsPeer]:
    peer = TlsPeer.start(host="127.0.0.1")
    try:
        yield peer
    finally:
        peer.stop()


@pytest.fixture(scope="module")
def other_ca(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CA the TLS peer's certificate does not come from."""
    path = tmp_path_factory.mktemp("other") / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(path))
    return path


# ---- the TLS peer -----------------------------------------------------------------------
def test_peer_stops_and_cleans_up() -> None:
    before = _peer_dirs()
    peer = TlsPeer.start(host="127.0.0.1")
    assert peer.ca_file.exists() and peer.directory in _peer_dirs()
    assert peer.about.startswith("websockets ")
    peer.stop()
    assert peer.proc.poll() is not None
    assert not peer.directory.exists()
    assert _peer_dirs() == before


def test_websockets_client_echo_verified(tls_peer: TlsPeer) -> None:
    from websockets.asyncio.client import connect

    context = ssl.create_default_context(cafile=str(tls_peer.ca_file))

    async def main() -> tuple[bytes | str, str | None]:
        async with connect(f"wss://127.0.0.1:{tls_peer.port}", ssl=context) as ws:
            await ws.send(b"\x00binary\xff")
            echo = await ws.recv()
            obj = ws.transport.get_extra_info("ssl_object")
            return echo, obj.version() if obj is not None else None

    echo, version = asyncio.run(main())
    assert echo == b"\x00binary\xff"
    assert version is not None and version.startswith("TLSv1.")


def test_wsgw_kernel_echo_with_the_ca(tls_peer: TlsPeer) -> None:
    from dataplane.transports.kernel import connect_kernel

    async def main() -> tuple[bytes, bool]:
        url = f"wss://127.0.0.1:{tls_peer.port}/"
        async with connect_kernel(url, ca_file=tls_peer.ca_file) as ws:
            await ws.send(b"over TLS")
            message = await ws.recv()
            await ws.send("text too")
            text = await ws.recv()
            return bytes(message.data), text.text and bytes(text.data) == b"text too"

    data, text_ok = asyncio.run(main())
    assert data == b"over TLS"
    assert text_ok


def test_websockets_client_without_the_ca_is_refused(tls_peer: TlsPeer, other_ca: Path) -> None:
    from websockets.asyncio.client import connect

    async def attempt(context: ssl.SSLContext) -> None:
        async with connect(f"wss://127.0.0.1:{tls_peer.port}", ssl=context, open_timeout=5):
            pass

    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(attempt(ssl.create_default_context()))  # the system's CAs only
    with pytest.raises(ssl.SSLCertVerificationError):
        asyncio.run(attempt(ssl.create_default_context(cafile=str(other_ca))))


def test_wsgw_kernel_without_the_ca_is_refused(tls_peer: TlsPeer, other_ca: Path) -> None:
    from dataplane.transports.kernel import connect_kernel
    from dataplane.ws.errors import TlsCertificateError

    async def attempt(ca_file: Path | None) -> None:
        async with connect_kernel(f"wss://127.0.0.1:{tls_peer.port}/", ca_file=ca_file):
            pass

    for ca_file in (None, other_ca):
        with pytest.raises(TlsCertificateError):
            asyncio.run(attempt(ca_file))


def test_certificate_is_for_the_names_asked() -> None:
    """A name outside the certificate fails verification even with the right CA."""
    peer = TlsPeer.start(host="127.0.0.1", names=["198.18.0.9"])
    try:
        context = ssl.create_default_context(cafile=str(peer.ca_file))
        context.check_hostname = True

        async def attempt(host: str) -> None:
            _, writer = await asyncio.open_connection(
                "127.0.0.1", peer.port, ssl=context, server_hostname=host
            )
            writer.close()
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                await writer.wait_closed()

        asyncio.run(attempt("198.18.0.9"))  # in the certificate
        asyncio.run(attempt("localhost"))  # always in it
        with pytest.raises(ssl.SSLCertVerificationError):
            asyncio.run(attempt("198.18.0.10"))
    finally:
        peer.stop()


# ---- the runner: ws:// then wss:// in one run --------------------------------------------
@pytest.mark.parametrize("contender", KERNEL_ADAPTERS)
def test_runner_adapters_open_wss_verified(
    contender: str, tls_peer: TlsPeer, ws_peer: WsPeer, other_ca: Path
) -> None:
    try:
        ws_runner.make_adapter(contender)
    except ws_runner.ContenderUnavailable as exc:
        pytest.skip(str(exc))
    params = {
        "count": 4,
        "warmup": 1,
        "wss_url": f"wss://127.0.0.1:{tls_peer.port}",
        "wss_count": 5,
        "wss_warmup": 1,
    }
    url = f"ws://127.0.0.1:{ws_peer.port}"
    adapter = ws_runner.make_adapter(contender)
    wss = ws_runner.make_adapter(contender, ca_file=str(tls_peer.ca_file))
    results, _ = run_loop(run_test(adapter, "connect", url, params, wss=wss), "asyncio")
    assert results["open_ns"]["n"] == 4
    assert results["wss_open_ns"]["n"] == 5, results.get("wss_error")
    assert 0 < results["wss_open_ns"]["p50"] <= results["wss_open_ns"]["p99"]
    assert "wss_error" not in results
    # Verification is on: a CA the server's certificate is not from fails the wss:// part
    # (and only it).
    adapter = ws_runner.make_adapter(contender)
    wss = ws_runner.make_adapter(contender, ca_file=str(other_ca))
    results, _ = run_loop(run_test(adapter, "connect", url, params, wss=wss), "asyncio")
    assert results["open_ns"]["n"] == 4
    assert "wss_open_ns" not in results
    assert "certificate" in results["wss_error"].lower() or "verif" in results["wss_error"]


def test_runner_command_line_passes_the_ca(tls_peer: TlsPeer, ws_peer: WsPeer) -> None:
    params = {
        "count": 2,
        "warmup": 0,
        "wss_url": f"wss://127.0.0.1:{tls_peer.port}",
        "ca_file": str(tls_peer.ca_file),
        "wss_count": 3,
        "wss_warmup": 1,
    }
    out = io.StringIO()
    argv = ["--contender", "websockets", "--test", "connect", "--url"]
    argv += [f"ws://127.0.0.1:{ws_peer.port}", "--params", json.dumps(params)]
    argv += ["--loop", "asyncio"]
    with contextlib.redirect_stdout(out):
        ws_runner.main(argv)
    answer = json.loads(out.getvalue().strip().splitlines()[-1])
    assert answer["ok"], answer
    assert answer["results"]["open_ns"]["n"] == 2
    assert answer["results"]["wss_open_ns"]["n"] == 3


def test_wsgw_dpdk_hook_gets_the_tls_options() -> None:
    """connect_dpdk takes its options through **options: the hook passes the TLS context
    (and deflate=False) that way, as it does to connect_kernel."""
    seen: dict[str, object] = {}

    def connect_dpdk(url: str, *, engine: object, **options: object) -> None:
        seen.update(options, engine=engine)

    bound = ws_runner._bind_offered(
        connect_dpdk, {"engine": 1, "port": 2}, {"deflate": False, "ssl_context": "ctx"}
    )
    bound("wss://a")
    assert seen == {"engine": 1, "deflate": False, "ssl_context": "ctx"}


# ---- the scenario ------------------------------------------------------------------------
@requires_dpdk
@pytest.mark.dpdk
@pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
@pytest.mark.usefixtures("eal")
def test_connect_scenario_has_wss_rows() -> None:
    from wsgw_bench.ws_scenarios import connect

    before = _peer_dirs()
    results = run_scenario(connect, "w")
    assert _peer_dirs() == before, "the TLS peer's certificates were left behind"
    groups = by_metric(results)
    assert {"WSS open p50", "WSS open p99"} <= set(groups)
    notes = first_notes(results)
    for metric in ("WSS open p50", "WSS open p99"):
        group = groups[metric]
        assert set(group) >= set(WS_CONTENDERS), metric
        assert [m.contender for m in group.values() if m.reference] == ["picows"]
        for name in WS_CONTENDERS:
            m = group[name]
            assert m.samples, f"{metric} / {name}: {notes[name]}"
            assert all(math.isfinite(s) and s > 0 for s in m.samples)
    for name in WS_CONTENDERS:
        assert "wss://" not in notes[name], notes[name]  # no failure note
        assert groups["WSS open p50"][name].median <= groups["WSS open p99"][name].median
    assert "CA minted for the run" in results[0].note
    assert "not measured" not in results[0].note
