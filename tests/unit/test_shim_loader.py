"""The loader: missing library, wrong ABI, stale build, built without DPDK, checksums.

This tests the private `_loader` module itself, so it imports it (the one kind of module
outside dataplane/shim allowed to: see tests/unit/test_shim_imports.py)."""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.errors import (
    DpdkUnavailableError,
    ShimError,
    ShimMissingError,
    ShimStaleError,
    ShimVersionError,
)
from dataplane.shim import ABI_VERSION, _loader
from dataplane.shim._loader import Shim

SHIM_DIR = Path(_loader.__file__).parent
CC = os.environ.get("CC", "cc")


def build(tmp: Path, sources: list[Path], *extra: str) -> Path:
    out = tmp / "libwsgw_shim.so"
    subprocess.run(
        [
            CC,
            "-shared",
            "-fPIC",
            "-O1",
            "-fvisibility=hidden",
            "-I",
            str(SHIM_DIR),
            *extra,
            "-o",
            str(out),
            *map(str, sources),
        ],
        check=True,
    )
    return out


def test_loads_the_built_library() -> None:
    shim = _loader.load()
    info = shim.info()
    assert info["abi"] == ABI_VERSION
    assert info["source_hash"] == _loader.source_hash()
    assert "-Werror" in info["build_flags"]


def test_missing_library_names_the_path_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ShimMissingError, match=r"not found at .*pip install -e"):
        Shim(tmp_path / "libwsgw_shim.so")


def test_library_without_the_symbols_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "empty.c"
    src.write_text("int unrelated(void) { return 1; }\n")
    with pytest.raises(ShimVersionError, match="missing wsgw_"):
        Shim(build(tmp_path, [src]))


def test_wrong_abi_version_is_refused(tmp_path: Path) -> None:
    # The real sources with the ABI number bumped: every symbol is there, the version is not ours.
    copied = []
    for path in SHIM_DIR.glob("*.[ch]"):
        text = path.read_text().replace("#define WSGW_SHIM_ABI 1", "#define WSGW_SHIM_ABI 99")
        (tmp_path / path.name).write_text(text)
        if path.suffix == ".c":
            copied.append(tmp_path / path.name)
    lib_dir = tmp_path / "lib"
    lib_dir.mkdir()
    with pytest.raises(ShimVersionError, match="ABI 99, this wsgw expects 1"):
        Shim(build(lib_dir, copied, f"-I{tmp_path}"))


@pytest.mark.parametrize("edited", ["shim_core.c", "wsgw_ring.h", "_bind_engine.py"])
def test_stale_library_is_refused(tmp_path: Path, edited: str) -> None:
    """A C file, a header or a ctypes mirror of one edited after the build: stale."""
    for path in _loader.source_files():
        shutil.copy(path, tmp_path / path.name)
    shutil.copy(SHIM_DIR / "libwsgw_shim.so", tmp_path / "libwsgw_shim.so")
    Shim(tmp_path / "libwsgw_shim.so")  # identical sources: accepted
    with (tmp_path / edited).open("a") as f:
        f.write("\n# edited after the build\n" if edited.endswith(".py") else "\n/* edited */\n")
    with pytest.raises(ShimStaleError, match="other sources"):
        Shim(tmp_path / "libwsgw_shim.so")


def test_source_hash_covers_every_binding() -> None:
    """Every registered binding is a hashed mirror, and every binding file is registered."""
    hashed = {p.name for p in _loader.source_files()}
    assert {f"{name}.py" for name in _loader.BINDINGS} <= hashed
    on_disk = {p.stem for p in SHIM_DIR.glob("_bind_*.py")}
    assert on_disk == set(_loader.BINDINGS), "a _bind_*.py not listed in _loader.BINDINGS"


def test_library_handles_are_the_loaded_shim() -> None:
    shim = _loader.load()
    assert _loader.library() is shim.lib
    assert _loader.library(keep_gil=True) is shim.lib_keep_gil
    assert isinstance(shim.lib_keep_gil, ctypes.PyDLL)
    # every prototype is declared on both handles
    for handle in (shim.lib, shim.lib_keep_gil):
        assert handle.wsgw_ring_write.restype is ctypes.c_int64


@pytest.fixture(scope="module")
def no_dpdk_shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("nodpdk")
    return build(tmp, sorted(SHIM_DIR.glob("*.c")), "-std=gnu11", "-Wall", "-Wextra", "-Werror")


def test_built_without_dpdk_reports_it(no_dpdk_shim: Path) -> None:
    env = dict(os.environ, WSGW_SHIM_PATH=str(no_dpdk_shim))
    out = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "shim", "info"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    info = json.loads(out.stdout)
    assert info["dpdk"] is False
    assert info["dpdk_version"] is None


def test_a_build_for_benchmarks_exports_the_bench_entry_points() -> None:
    """The checkout's build (`make shim`, in place) is for benchmarks; its names are declared."""
    shim = _loader.load()
    bench = _loader.all_prototypes("BENCH_PROTOTYPES")
    assert shim.has_bench and shim.info()["bench"] is True
    assert {"wsgw_udp_flood", "wsgw_bench_fast_path", "wsgw_ring_bench_latency"} <= set(bench)
    assert "-DWSGW_BENCH=1" in shim.info()["build_flags"]


def test_a_build_without_benchmarks_exports_none_and_says_so(no_dpdk_shim: Path) -> None:
    """A build without WSGW_BENCH (a wheel's) has no benchmark entry point; asking for one
    is a ShimError that says what to build, and everything else loads."""
    shim = Shim(no_dpdk_shim)
    assert shim.has_bench is False
    bench = _loader.all_prototypes("BENCH_PROTOTYPES")
    assert bench and not [name for name in bench if hasattr(ctypes.CDLL(str(no_dpdk_shim)), name)]
    with pytest.raises(ShimError, match=r"built without benchmarks.*make shim"):
        _loader.bench_function(shim.lib, "wsgw_udp_flood")


def test_built_without_dpdk_ports_raise_a_typed_error(no_dpdk_shim: Path) -> None:
    shim = Shim(no_dpdk_shim)
    rc, handle = shim.port_open(
        "net_null0", n_mbufs=1024, mbuf_cache=0, rx_desc=64, tx_desc=64, mtu=0, promiscuous=False
    )
    assert handle == 0
    with pytest.raises(DpdkUnavailableError, match="built without DPDK"):
        shim.check(rc, "open net_null0")
    assert shim.eal_init(["wsgw"]) < 0
    assert "without DPDK" in shim.last_error()


def test_eal_refuses_a_shim_without_dpdk(no_dpdk_shim: Path) -> None:
    code = (
        "from dataplane.dpdk import Eal\n"
        "from dataplane.errors import DpdkUnavailableError\n"
        "try:\n    Eal.init()\nexcept DpdkUnavailableError as e:\n    print('refused:', e)\n"
    )
    env = dict(os.environ, WSGW_SHIM_PATH=str(no_dpdk_shim))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert "refused: the wsgw shim was built without DPDK" in out.stdout


def reference_checksum(data: bytes) -> int:
    """RFC 1071 in plain Python, the oracle for the C version."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


@pytest.mark.parametrize("length", [0, 1, 2, 3, 4, 5, 7, 20, 21, 1499, 1500, 9000])
def test_checksum_matches_rfc1071_reference(length: int) -> None:
    data = os.urandom(length)
    assert _loader.load().checksum(data) == reference_checksum(data)


def test_checksum_known_answer() -> None:
    header = bytes.fromhex("450000730000400040110000c0a80001c0a800c7")
    assert _loader.load().checksum(header) == 0xB861
