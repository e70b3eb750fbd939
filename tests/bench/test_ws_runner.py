"""The WebSocket contenders of the benchmarks, against the C peer on 127.0.0.1 (no root)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import types
from collections.abc import Iterator
from typing import Any

import pytest

from wsgw_bench import ws_runner
from wsgw_bench.peers import REPO, WsPeer
from wsgw_bench.ws_runner import IngestCheck, percentile, run_loop, run_test, summary

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

LIBS = [lib for lib in ("picows", "aiohttp", "websockets") if importlib.util.find_spec(lib)]


@pytest.fixture(scope="module")
def peer() -> Iterator[WsPeer]:
    peer = WsPeer.start(host="127.0.0.1")
    try:
        yield peer
    finally:
        peer.stop()


def test_percentiles_are_nearest_rank() -> None:
    values = list(range(1, 1001))
    assert percentile(values, 0.5) == 500
    assert percentile(values, 0.99) == 990
    assert percentile(values, 0.999) == 999
    assert percentile([7], 0.999) == 7
    assert percentile([], 0.5) == 0
    assert summary([3, 1, 2]) == {"n": 3, "p50": 2, "p99": 3, "p999": 3, "max": 3}


def _msg(seq: int, size: int = 16) -> bytes:
    return seq.to_bytes(8, "big") + bytes(size - 8)


def test_ingest_check_accepts_a_clean_flood() -> None:
    check = IngestCheck(16, 3)
    for seq in range(3):
        check.message(_msg(seq))
    result = check.result()
    assert result["ok"]
    assert result["received"] == 3


@pytest.mark.parametrize(
    ("seqs", "field", "value"),
    [
        ([0, 2, 3], "gaps", 1),  # 1 skipped
        ([0, 1, 1, 2], "duplicates", 1),
        ([0, 1], "gaps", 1),  # the last one never came
    ],
)
def test_ingest_check_finds_gaps_and_duplicates(seqs: list[int], field: str, value: int) -> None:
    check = IngestCheck(16, 3)
    for seq in seqs:
        check.message(_msg(seq))
    result = check.result()
    assert not result["ok"]
    assert result[field] == value


def test_ingest_check_finds_wrong_lengths() -> None:
    check = IngestCheck(16, 1)
    check.message(_msg(0, 20))
    assert check.result()["bad_length"] == 1


def _contenders() -> list[str]:
    return [*LIBS, "wsgw-kernel"]


@pytest.mark.parametrize("contender", _contenders())
def test_contender_connect_rtt_ingest(peer: WsPeer, contender: str) -> None:
    """Each test of each contender, on asyncio (uvloop is the runner's default)."""
    try:
        adapter = ws_runner.make_adapter(contender)
    except ws_runner.ContenderUnavailable as exc:
        pytest.skip(str(exc))
    url = f"ws://127.0.0.1:{peer.port}"
    opened, loop = run_loop(run_test(adapter, "connect", url, {"count": 3, "warmup": 1}), "asyncio")
    assert loop == "asyncio"
    assert opened["open_ns"]["n"] == 3
    assert opened["open_ns"]["p50"] > 0
    echo, _ = run_loop(
        run_test(adapter, "rtt", url, {"count": 20, "warmup": 5, "sizes": [64, 1024]}), "asyncio"
    )
    for size in ("64", "1024"):
        assert echo[size]["n"] == 20
        assert echo[size]["mismatches"] == 0
        assert 0 < echo[size]["p50"] <= echo[size]["p99"] <= echo[size]["max"]
    flood, _ = run_loop(
        run_test(adapter, "ingest", url, {"count": 3000, "sizes": [100, 1024]}), "asyncio"
    )
    for size in ("100", "1024"):
        assert flood[size]["ok"], flood[size]
        assert flood[size]["received"] == 3000
        assert flood[size]["msg_per_s"] > 0
        assert flood[size]["cpu_per_msg_ns"] >= 0


def test_runner_process_prints_json(peer: WsPeer) -> None:
    """The command line the scenarios run in the lab's client namespace (uvloop here)."""
    contender = LIBS[0] if LIBS else "tcp"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "wsgw_bench.ws_runner",
            "--contender",
            contender,
            "--test",
            "rtt" if LIBS else "tcp",
            "--url",
            f"ws://127.0.0.1:{peer.port}",
            "--params",
            json.dumps({"count": 10, "warmup": 2, "sizes": [64]}),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["ok"], answer
    assert answer["contender"] == contender


def test_tcp_contender(peer: WsPeer) -> None:
    adapter = ws_runner.make_adapter("tcp")
    result, _ = run_loop(
        run_test(adapter, "tcp", f"ws://127.0.0.1:{peer.port}", {"count": 5, "warmup": 1}),
        "asyncio",
    )
    assert result["open_ns"]["n"] == 5


def test_missing_library_is_a_skip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "picows", None)  # import fails as if not installed
    with pytest.raises(ws_runner.ContenderUnavailable, match="not installed"):
        ws_runner.make_adapter("picows")


# ---- the hook for wsgw's own clients ---------------------------------------------------------
def test_hook_without_the_dpdk_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "dataplane.transports.dpdk", None)
    found = {c.transport: c for c in ws_runner.wsgw_contenders()}
    assert set(found) == {"kernel", "dpdk"}
    assert found["dpdk"].connect is None
    assert not found["dpdk"].available
    assert found["dpdk"].note.startswith("skipped: ")
    if found["kernel"].available:
        assert found["kernel"].connect is not None


def test_hook_with_a_dpdk_transport(monkeypatch: pytest.MonkeyPatch, peer: WsPeer) -> None:
    """A stand-in dataplane.transports.dpdk (the kernel transport underneath): the hook
    hands it the engine by keyword and the adapter measures through it."""
    kernel = pytest.importorskip("dataplane.transports.kernel")
    seen: dict[str, Any] = {}

    def connect_dpdk(url: str, *, engine: object, deflate: bool = True) -> Any:
        seen["engine"] = engine
        return kernel.connect_kernel(url, deflate=deflate)

    fake = types.ModuleType("dataplane.transports.dpdk")
    fake.connect_dpdk = connect_dpdk  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dataplane.transports.dpdk", fake)
    engine = types.SimpleNamespace(interface=None, port=None)
    found = {c.transport: c for c in ws_runner.wsgw_contenders(engine=engine)}
    adapter = ws_runner.wsgw_adapter(found["dpdk"])
    result, _ = run_loop(
        run_test(adapter, "rtt", f"ws://127.0.0.1:{peer.port}", {"count": 5, "warmup": 1}),
        "asyncio",
    )
    assert result["64"]["n"] == 5
    assert seen["engine"] is engine


def test_hook_refuses_a_signature_it_cannot_fill(monkeypatch: pytest.MonkeyPatch) -> None:
    def connect_dpdk(url: str, *, mystery: object) -> Any:
        raise AssertionError("never called")

    fake = types.ModuleType("dataplane.transports.dpdk")
    fake.connect_dpdk = connect_dpdk  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "dataplane.transports.dpdk", fake)
    found = {c.transport: c for c in ws_runner.wsgw_contenders(engine=object())}
    adapter = ws_runner.wsgw_adapter(found["dpdk"])
    with pytest.raises(TypeError, match="mystery"):
        run_loop(run_test(adapter, "connect", "ws://127.0.0.1:1", {"count": 1}), "asyncio")


def test_the_offered_keywords_are_bound_once_before_any_connect() -> None:
    """The signature is read when the contender is made, not inside each timed open."""
    calls: list[tuple[str, dict[str, object]]] = []

    def connect_dpdk(url: str, *, engine: object, deflate: bool = True, **_: object) -> str:
        calls.append((url, {"engine": engine, "deflate": deflate}))
        return url

    bound = ws_runner._bind_offered(connect_dpdk, {"engine": 1, "deflate": False, "port": 2})
    assert bound("ws://a") == "ws://a" and bound("ws://b") == "ws://b"
    assert calls == [
        ("ws://a", {"engine": 1, "deflate": False}),
        ("ws://b", {"engine": 1, "deflate": False}),
    ]

    def needs_more(url: str, *, mystery: object) -> None:
        raise AssertionError("never called")

    with pytest.raises(TypeError, match="mystery"):
        ws_runner._bind_offered(needs_more, {"engine": 1})


def test_hook_skips_a_half_written_kernel_transport(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(
        sys.modules, "dataplane.transports.kernel", types.ModuleType("dataplane.transports.kernel")
    )
    found = {c.transport: c for c in ws_runner.wsgw_contenders()}
    assert found["kernel"].connect is None
    assert "has no connect_kernel" in found["kernel"].note
    with pytest.raises(ws_runner.ContenderUnavailable, match="connect_kernel"):
        ws_runner.wsgw_adapter(found["kernel"])
