"""Build the C shim (dataplane/shim) into one shared library loaded with ctypes.

The library is not a Python extension module: it is named libwsgw_shim.so and loaded by
dataplane/shim/_loader.py. It builds with DPDK when `pkg-config libdpdk` finds it and without
DPDK otherwise (the port functions then report "built without DPDK"). The build flags and a
hash of the sources (the C files and their ctypes mirrors) are compiled in, so `wsgw shim
info` can show them and the loader can tell a stale library from a current one.

The benchmark entry points (udpgen.c, the bench loops of engine.c and msgring.c) are compiled
in only for benchmarks (-DWSGW_BENCH): an in-place or editable build (a checkout, `make shim`)
has them, a wheel does not. WSGW_SHIM_BENCH=1 or 0 overrides.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

SHIM_DIR = Path("dataplane") / "shim"
LIB_NAME = "libwsgw_shim.so"
WARNINGS = ["-O2", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fvisibility=hidden"]


def shim_sources() -> list[str]:
    return sorted(str(p) for p in SHIM_DIR.glob("*.c"))


#: What the source hash covers: the C sources and the ctypes mirrors of their headers (a library
#: built before a mirror changed is stale). Equal to SOURCE_PATTERNS in dataplane/shim/_loader.py.
SOURCE_PATTERNS = ("*.c", "*.h", "_bind_*.py")


def source_hash() -> str:
    """sha256 over SOURCE_PATTERNS' files, in name order; the loader recomputes it."""
    files = {path for pattern in SOURCE_PATTERNS for path in SHIM_DIR.glob(pattern)}
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.name):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def pkg_config(*args: str) -> list[str] | None:
    if os.environ.get("WSGW_SHIM_NO_DPDK") == "1":
        return None
    try:
        out = subprocess.run(
            ["pkg-config", *args, "libdpdk"], check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return shlex.split(out)


def with_benchmarks(in_checkout: bool) -> bool:
    """Whether to export the benchmark entry points (see the module docstring)."""
    override = os.environ.get("WSGW_SHIM_BENCH")
    return override == "1" if override in ("0", "1") else in_checkout


class BuildShim(build_ext):
    """Compile the shim as a plain shared library with our own name and flags."""

    bench = False

    def run(self) -> None:
        # Decided here: build_ext clears `inplace` while it builds (and copies afterwards).
        self.bench = with_benchmarks(bool(self.inplace or self.editable_mode))
        super().run()

    def get_ext_filename(self, fullname: str) -> str:
        return str(Path(*fullname.split(".")[:-1]) / LIB_NAME)

    def build_extension(self, ext: Extension) -> None:
        cflags = pkg_config("--cflags")
        libs = pkg_config("--libs")
        extra: list[str] = []
        if cflags is not None and libs is not None:
            # DPDK's headers are not ours to hold to -Werror: include them as system headers.
            extra = ["-DWSGW_HAVE_DPDK=1"]
            for flag in cflags:
                extra.append("-isystem" + flag[2:] if flag.startswith("-I") else flag)
        if self.bench:
            extra.append("-DWSGW_BENCH=1")
        flags = [*WARNINGS, "-fPIC"]
        shown = " ".join(flags + [f for f in extra if f.startswith(("-D", "-m"))])
        defines = [
            f'-DWSGW_BUILD_FLAGS="{shown}"',
            f'-DWSGW_SOURCE_HASH="{source_hash()}"',
        ]
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        cc = os.environ.get("CC", "cc")
        cmd = [cc, *flags, *extra, *defines, "-shared", "-o", str(target), *ext.sources]
        cmd += libs or []
        self.announce(" ".join(cmd), level=2)
        subprocess.run(cmd, check=True)


setup(
    ext_modules=[Extension("dataplane.shim.libwsgw_shim", sources=shim_sources())],
    cmdclass={"build_ext": BuildShim},
)
