"""Load libwsgw_shim.so and declare every prototype: the one place that opens the library.
Nothing outside dataplane/shim/ imports ctypes, and nothing outside it imports this module or a
binding: the package's `__init__` is the public surface. Each C area declares its prototypes
(and its Structures) in `_bind_<area>.py`, listed in BINDINGS and merged here at load time;
bindings get the library handle from `library()` (or a `Shim` from `load()`), never by opening
the file themselves.

The library is found beside this file (the package build puts it there) or at the path in
WSGW_SHIM_PATH. Loading checks, in order: the file exists, it exports the known symbols,
its ABI version equals ours, and, when the sources sit beside it (a source checkout or an
editable install), that it was built from those very sources: the C files and the ctypes
mirrors of their headers (SOURCE_PATTERNS). Each failure is a typed `ShimError` that says
what to run.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib
import logging
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.errors import (
    DataplaneError,
    DpdkUnavailableError,
    ShimError,
    ShimMissingError,
    ShimStaleError,
    ShimVersionError,
)
from dataplane.shim._bind_core import PORT_STAT_FIELDS, LinkInfo, PortConf, PortStats

#: Must equal WSGW_SHIM_ABI in wsgw_shim.h.
ABI_VERSION = 1
LIB_NAME = "libwsgw_shim.so"
SHIM_DIR = Path(__file__).resolve().parent
REBUILD_HINT = "rebuild it with `pip install -e .` (or `make shim`)"
#: The binding modules, one per C area, in the order their prototypes are merged. A new C
#: area adds its `_bind_<area>.py` here (nothing is found by looking at the disk).
BINDINGS = (
    "_bind_arbiter",
    "_bind_book",
    "_bind_core",
    "_bind_engine",
    "_bind_feed",
    "_bind_identity",
    "_bind_nats",
    "_bind_ring",
    "_bind_ringnotify",
    "_bind_sink",
    "_bind_stream",
    "_bind_topic",
    "_bind_udpgen",
    "_bind_ws",
)
#: What the source hash covers (setup.py hashes the same set): the C sources and the Python
#: mirrors of their headers, so a library built before a mirror changed counts as stale.
SOURCE_PATTERNS = ("*.c", "*.h", "_bind_*.py")

_LITTLE_ENDIAN = sys.byteorder == "little"


def all_prototypes(table: str = "PROTOTYPES") -> dict[str, tuple[Any, list[Any]]]:
    """The prototypes of every binding in BINDINGS (each module's PROTOTYPES dict): one C
    area, one binding module, one line in BINDINGS. table="BENCH_PROTOTYPES": the benchmark
    entry points, only in a library built for benchmarks (see setup.py)."""
    merged: dict[str, tuple[Any, list[Any]]] = {}
    for name in BINDINGS:
        merged.update(getattr(importlib.import_module(f"dataplane.shim.{name}"), table, {}))
    return merged


def bench_function(lib: ctypes.CDLL, name: str) -> Any:
    """A benchmark entry point of lib, or a ShimError that says how to get one."""
    try:
        return getattr(lib, name)
    except AttributeError:
        raise ShimError(
            f"{name}: this shim was built without benchmarks (a wheel's build); build a "
            "checkout's with `make shim` (or WSGW_SHIM_BENCH=1 pip install .)"
        ) from None


def library_path() -> Path:
    override = os.environ.get("WSGW_SHIM_PATH")
    return Path(override) if override else SHIM_DIR / LIB_NAME


def source_files(directory: Path = SHIM_DIR) -> list[Path]:
    """The files the source hash covers, in name order."""
    found = {path for pattern in SOURCE_PATTERNS for path in directory.glob(pattern)}
    return sorted(found, key=lambda p: p.name)


def source_hash(directory: Path = SHIM_DIR) -> str | None:
    """Hash of the sources as setup.py computes it, or None when no C sources are here."""
    files = source_files(directory)
    if not any(path.suffix == ".c" for path in files):
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass(frozen=True)
class RxArena:
    """Caller-owned buffers one RX burst is copied into (frames back to back)."""

    data: Any  # ctypes array of uint8
    offsets: Any  # ctypes array of uint32
    lengths: Any  # ctypes array of uint16
    capacity: int
    max_frames: int

    def frames(self, count: int) -> list[bytes]:
        raw = memoryview(self.data).cast("B")
        return [
            bytes(raw[self.offsets[i] : self.offsets[i] + self.lengths[i]]) for i in range(count)
        ]


class Shim:
    """Typed access to libwsgw_shim.so. Get it from `load()`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.exists():
            raise ShimMissingError(f"wsgw shim library not found at {path}: {REBUILD_HINT}")
        try:
            self._lib = ctypes.CDLL(str(path))
            # The same library again as a PyDLL: its calls keep the GIL, for the short
            # per-batch calls where a GIL hand-over costs more than the call (see _bind_ring).
            self._lib_keep_gil = ctypes.PyDLL(str(path))
        except OSError as exc:
            raise ShimError(f"cannot load wsgw shim {path}: {exc}") from exc
        prototypes = all_prototypes()
        missing = [name for name in prototypes if not hasattr(self._lib, name)]
        if missing:
            raise ShimVersionError(
                f"{path} is not a wsgw shim of ABI {ABI_VERSION}: missing "
                f"{', '.join(missing[:5])}; {REBUILD_HINT}"
            )
        bench = all_prototypes("BENCH_PROTOTYPES")
        #: Built for benchmarks (setup.py): the benchmark entry points are there.
        self.has_bench = all(hasattr(self._lib, name) for name in bench)
        if self.has_bench:
            prototypes = {**prototypes, **bench}
        for handle in (self._lib, self._lib_keep_gil):
            for name, (restype, argtypes) in prototypes.items():
                func = getattr(handle, name)
                func.restype = restype
                func.argtypes = argtypes
        found = int(self._lib.wsgw_abi_version())
        if found != ABI_VERSION:
            raise ShimVersionError(
                f"{path} has shim ABI {found}, this wsgw expects {ABI_VERSION}; {REBUILD_HINT}"
            )
        # Sources beside the library (a checkout or an editable install): it must be
        # built from exactly those. An installed wheel carries the same sources, so the
        # check holds there too.
        expected = source_hash(path.parent)
        if expected is not None:
            built = self._lib.wsgw_source_hash().decode()
            if built != expected:
                raise ShimStaleError(
                    f"{path} was built from other sources (C files, ctypes mirrors) than "
                    f"those in {path.parent} (built {built[:12]}, sources {expected[:12]}); "
                    f"{REBUILD_HINT}"
                )

    @property
    def lib(self) -> ctypes.CDLL:
        """The loaded library; its calls release the GIL."""
        return self._lib

    @property
    def lib_keep_gil(self) -> ctypes.CDLL:
        """The same library as a PyDLL, every prototype declared; its calls keep the GIL."""
        return self._lib_keep_gil

    # ---- identity ------------------------------------------------------------------
    @property
    def has_dpdk(self) -> bool:
        return bool(self._lib.wsgw_has_dpdk())

    def info(self) -> dict[str, Any]:
        lib = self._lib
        return {
            "shim_version": lib.wsgw_shim_version().decode(),
            "abi": int(lib.wsgw_abi_version()),
            "path": str(self.path),
            "dpdk": self.has_dpdk,
            "bench": self.has_bench,
            "dpdk_version": lib.wsgw_dpdk_version().decode() or None,
            "build_flags": lib.wsgw_build_flags().decode(),
            "source_hash": lib.wsgw_source_hash().decode(),
        }

    def last_error(self) -> str:
        return str(self._lib.wsgw_last_error().decode(errors="replace"))

    def check(self, rc: int, what: str, error: type[DataplaneError] = DataplaneError) -> int:
        """Turn a negative errno from C into a typed exception carrying the C-side text."""
        if rc >= 0:
            return rc
        text = self.last_error() or os.strerror(-rc)
        if not self.has_dpdk:
            raise DpdkUnavailableError(f"{what}: {text}", -rc)
        raise error(f"{what}: {text}", -rc)

    # ---- checksums (RFC 1071) ----------------------------------------------------------
    def csum_partial(self, data: bytes, partial: int = 0) -> int:
        """Unfolded one's-complement sum; chain even-length pieces (a pseudo header first)."""
        return int(self._lib.wsgw_csum_partial(data, len(data), partial))

    def checksum(self, data: bytes, partial: int = 0) -> int:
        """The Internet checksum of data (plus partial), as read with struct '!H'."""
        folded = int(
            self._lib.wsgw_csum_fold(self._lib.wsgw_csum_partial(data, len(data), partial))
        )
        return ((folded & 0xFF) << 8 | folded >> 8) if _LITTLE_ENDIAN else folded

    # ---- EAL -------------------------------------------------------------------------
    def eal_init(self, args: list[str]) -> int:
        argv = (ctypes.c_char_p * (len(args) + 1))(*[a.encode() for a in args], None)
        return int(self._lib.wsgw_eal_init(len(args), argv))

    def eal_state(self) -> int:
        return int(self._lib.wsgw_eal_state())

    def eal_cleanup(self) -> int:
        return int(self._lib.wsgw_eal_cleanup())

    def thread_register(self) -> int:
        """lcore id (>= 0) for the calling thread, or -errno."""
        return int(self._lib.wsgw_thread_register())

    def thread_unregister(self) -> None:
        self._lib.wsgw_thread_unregister()

    # ---- ports -------------------------------------------------------------------------
    def port_open(
        self,
        devargs: str,
        *,
        n_mbufs: int,
        mbuf_cache: int,
        rx_desc: int,
        tx_desc: int,
        mtu: int,
        promiscuous: bool,
    ) -> tuple[int, int]:
        """Returns (rc, handle); handle is 0 when rc < 0."""
        conf = PortConf(n_mbufs, mbuf_cache, rx_desc, tx_desc, mtu, int(promiscuous))
        handle = ctypes.c_void_p()
        rc = int(
            self._lib.wsgw_port_open(devargs.encode(), ctypes.byref(conf), ctypes.byref(handle))
        )
        return rc, int(handle.value or 0)

    def port_start(self, handle: int) -> int:
        return int(self._lib.wsgw_port_start(handle))

    def port_stop(self, handle: int) -> int:
        return int(self._lib.wsgw_port_stop(handle))

    def port_close(self, handle: int) -> None:
        self._lib.wsgw_port_close(handle)

    def port_id(self, handle: int) -> int:
        return int(self._lib.wsgw_port_id(handle))

    def port_mac(self, handle: int) -> tuple[int, bytes]:
        mac = (ctypes.c_uint8 * 6)()
        rc = int(self._lib.wsgw_port_mac(handle, mac))
        return rc, bytes(mac)

    def port_mtu(self, handle: int) -> int:
        return int(self._lib.wsgw_port_mtu(handle))

    def port_link(self, handle: int) -> tuple[int, dict[str, int]]:
        info = LinkInfo()
        rc = int(self._lib.wsgw_port_link(handle, ctypes.byref(info)))
        return rc, {"speed_mbps": info.speed_mbps, "up": info.up, "full_duplex": info.full_duplex}

    def port_stats(self, handle: int) -> tuple[int, dict[str, int]]:
        stats = PortStats()
        rc = int(self._lib.wsgw_port_stats(handle, ctypes.byref(stats)))
        return rc, {name: int(getattr(stats, name)) for name in PORT_STAT_FIELDS}

    @staticmethod
    def rx_arena(max_frames: int, frame_size: int = 2048) -> RxArena:
        capacity = max_frames * frame_size
        return RxArena(
            data=(ctypes.c_uint8 * capacity)(),
            offsets=(ctypes.c_uint32 * max_frames)(),
            lengths=(ctypes.c_uint16 * max_frames)(),
            capacity=capacity,
            max_frames=max_frames,
        )

    def port_rx_burst(self, handle: int, arena: RxArena, max_frames: int | None = None) -> int:
        limit = arena.max_frames if max_frames is None else min(max_frames, arena.max_frames)
        return int(
            self._lib.wsgw_port_rx_burst(
                handle, arena.data, arena.capacity, arena.offsets, arena.lengths, limit
            )
        )

    def port_tx_burst(self, handle: int, frames: list[bytes]) -> int:
        """Send frames in one call; returns how many the PMD took."""
        count = len(frames)
        if count == 0:
            return 0
        blob = b"".join(frames)
        offsets = (ctypes.c_uint32 * count)()
        lengths = (ctypes.c_uint16 * count)()
        pos = 0
        for i, frame in enumerate(frames):
            offsets[i] = pos
            lengths[i] = len(frame)
            pos += len(frame)
        buf = (ctypes.c_uint8 * len(blob)).from_buffer_copy(blob)
        return int(self._lib.wsgw_port_tx_burst(handle, buf, offsets, lengths, count))


_lock = threading.Lock()
_cached: dict[Path, Shim] = {}


def load(path: Path | None = None) -> Shim:
    """The shim library at path (default: beside this file, or WSGW_SHIM_PATH), loaded once."""
    target = (path or library_path()).resolve()
    with _lock:
        shim = _cached.get(target)
        if shim is None:
            shim = Shim(target)
            _cached[target] = shim
        return shim


@functools.cache
def available(fallback: str) -> bool:
    """Whether the default shim loads here, asked once per process and caller (a library
    does not come and go). A caller with a pure-Python twin names it (fallback: what serves
    instead), and a shim that does not load is logged once with why, not silently."""
    try:
        load()
    except Exception as exc:
        logging.getLogger("wsgw.shim").warning("%s: %s", fallback, exc)
        return False
    return True


#: `library(KEEP_GIL)`: the PyDLL handle. Positional, since a cached call with a keyword
#: argument costs a few hundred ns more, and the ring calls this per call.
KEEP_GIL = True


@functools.cache  # a C-level cache: the per-call cost of a wrapper that calls this stays low
def library(keep_gil: bool = False) -> ctypes.CDLL:
    """The default shim's library handle (see `load`), every prototype declared: the one way
    bindings and callers get it. keep_gil: the PyDLL handle, whose calls keep the GIL.
    Hot paths bind the function objects they call once (`library().wsgw_x`)."""
    shim = load()
    return shim.lib_keep_gil if keep_gil else shim.lib


def shim_info() -> dict[str, Any]:
    return load().info()
