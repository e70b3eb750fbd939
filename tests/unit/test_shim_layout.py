"""Every ctypes Structure in the repository against the C compiler: sizeof and each field's
offset, from the headers the library is built from. The Structures are discovered, not
listed by hand: every class deriving from a ctypes Structure or Union in any module of the
repository (an `ast` walk of every .py, plus the subclasses the shim's modules define at run
time) must be in MIRRORS, so a new hand mirror fails here until its C struct is named. The
`struct.Struct` formats that read a C struct in one unpack are checked the same way
(FORMAT_MIRRORS).

This tests the shim's private binding modules themselves, so it imports them (the one kind of
module outside dataplane/shim allowed to: see tests/unit/test_shim_imports.py)."""

from __future__ import annotations

import ast
import ctypes
import importlib
import inspect
import os
import re
import struct
import subprocess
from pathlib import Path

import pytest

import dataplane.shim as shim_package
from dataplane.shim import _loader

SHIM_DIR = Path(shim_package.__file__).parent
REPO = SHIM_DIR.parents[1]
HEADERS = sorted(p.name for p in SHIM_DIR.glob("wsgw_*.h"))
#: Directories of the repository that hold no code of ours.
SKIP_DIRS = {".git", ".venv", "venv", "build", "dist", "node_modules", "__pycache__"}
CTYPES_BASES = {"Structure", "Union", "BigEndianStructure", "LittleEndianStructure"}

#: "module.Class" -> the C struct it mirrors (struct NAME in one of HEADERS).
MIRRORS = {
    "dataplane.shim._bind_arbiter.ArbLegStats": "wsgw_arb_leg_stats",
    "dataplane.shim._bind_arbiter.ArbOut": "wsgw_arb_out",
    "dataplane.shim._bind_arbiter.ArbTotals": "wsgw_arb_totals",
    "dataplane.shim._bind_core.LinkInfo": "wsgw_link_info",
    "dataplane.shim._bind_core.PortConf": "wsgw_port_conf",
    "dataplane.shim._bind_core.PortStats": "wsgw_port_stats",
    "dataplane.shim._bind_engine.EngineConf": "wsgw_engine_conf",
    "dataplane.shim._bind_engine.EngineStats": "wsgw_engine_stats",
    "dataplane.shim._bind_engine.FlowStruct": "wsgw_flow",
    "dataplane.shim._bind_engine.PollResult": "wsgw_poll_result",
    "dataplane.shim._bind_feed.FeedConf": "wsgw_feed_conf",
    "dataplane.shim._bind_feed.FeedStats": "wsgw_feed_stats",
    "dataplane.shim._bind_feed.GroupConf": "wsgw_group_conf",
    "dataplane.shim._bind_feed.GroupStats": "wsgw_group_stats",
    "dataplane.shim._bind_identity.IdentityStruct": "wsgw_identity",
    "dataplane.shim._bind_ring._ReaderEntry": "wsgw_ring_reader_entry",
    "dataplane.shim._bind_ring._ReaderStats": "wsgw_ring_reader_stats",
    "dataplane.shim._bind_ring._RingInfo": "wsgw_ring_info",
    "dataplane.shim._bind_ring._View": "wsgw_ring_view",
    "dataplane.shim._bind_ring._WriterStats": "wsgw_ring_writer_stats",
    "dataplane.shim._bind_stream.StreamCtx": "wsgw_stream_ctx",
    "dataplane.shim._bind_topic.TopicKey": "wsgw_topic_key",
    "dataplane.shim._bind_topic.TopicPath": "wsgw_topic_path",
    "dataplane.shim._bind_topic.TopicSpan": "wsgw_topic_span",
    "dataplane.shim._bind_topic.TopicSpec": "wsgw_topic_spec",
    "dataplane.shim._bind_udpgen.UdpFloodResult": "wsgw_udp_flood_result",
}

#: "module.NAME" of a struct format -> (the C struct, "module.NAME" of its field names in
#: order, or of a Structure whose fields name them).
FORMAT_MIRRORS = {
    "dataplane.shim._bind_arbiter.ARB_OUT_FORMAT": (
        "wsgw_arb_out",
        "dataplane.shim._bind_arbiter.ArbOut",
    ),
    "dataplane.shim._bind_engine.FLOW_SYNC": (
        "wsgw_flow_sync",
        "dataplane.shim._bind_engine.FLOW_SYNC_FIELDS",
    ),
    "dataplane.shim._bind_engine.POLL_RESULT": (
        "wsgw_poll_result",
        "dataplane.shim._bind_engine.PollResult",
    ),
    "dataplane.shim._bind_ring.VIEW_FORMAT": ("wsgw_ring_view", "dataplane.shim._bind_ring._View"),
}


def _resolve(dotted: str) -> object:
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _python_files() -> list[Path]:
    found = []
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("."))
        found += [Path(root) / f for f in sorted(files) if f.endswith(".py")]
    return found


def _base_name(base: ast.expr) -> str | None:
    if isinstance(base, ast.Name):
        return base.id
    if isinstance(base, ast.Attribute):
        return base.attr
    return None


def structures_in_source() -> set[str]:
    """ "module.Class" of every class in the repository that derives directly from a ctypes
    Structure/Union, found by reading the source (no import: scripts and tests count too)."""
    found = set()
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        module = ".".join(path.relative_to(REPO).with_suffix("").parts)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                _base_name(base) in CTYPES_BASES for base in node.bases
            ):
                found.add(f"{module}.{node.name}")
    return found


def structures_at_run_time() -> dict[str, type[ctypes.Structure]]:
    """Every Structure subclass the shim's modules define (indirect subclasses too)."""
    found: dict[str, type[ctypes.Structure]] = {}
    for name in ("_loader", *_loader.BINDINGS):
        module = importlib.import_module(f"dataplane.shim.{name}")
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, ctypes.Structure | ctypes.Union)
                and value.__module__ == module.__name__
            ):
                found[f"{module.__name__}.{attr}"] = value
    return found


def test_every_structure_in_the_repository_is_a_listed_mirror() -> None:
    in_source = structures_in_source()
    at_run_time = set(structures_at_run_time())
    assert in_source | at_run_time == set(MIRRORS), (
        "a ctypes Structure that is not in MIRRORS (add it with its C struct), "
        "or a MIRRORS entry that no longer exists"
    )


def test_the_layout_test_checks_every_structure() -> None:
    """The count the issue asks for, pinned: 26 Structures and 4 struct formats today."""
    assert (len(MIRRORS), len(FORMAT_MIRRORS)) == (26, 4)


def _format_offsets(fmt: str) -> list[int]:
    """Offset of each field of a struct format (byte order prefix, counts like '11I')."""
    prefix = fmt[0] if fmt[0] in "@=<>!" else ""
    codes = [c for count, code in re.findall(r"(\d*)(\w)", fmt) for c in code * int(count or 1)]
    return [struct.calcsize(prefix + "".join(codes[:i])) for i in range(len(codes))]


def _probe(tmp_path: Path, probes: list[str]) -> list[int]:
    includes = "".join(f'#include "{h}"\n' for h in HEADERS)
    source = tmp_path / "layout.c"
    source.write_text(
        f"#include <stdio.h>\n#include <stddef.h>\n{includes}"
        f"int main(void) {{ {' '.join(probes)} return 0; }}\n"
    )
    exe = tmp_path / "layout"
    cc = os.environ.get("CC", "cc")
    built = subprocess.run(
        [cc, "-I", str(SHIM_DIR), str(source), "-o", str(exe)], capture_output=True, text=True
    )
    if built.returncode != 0:
        pytest.fail(f"the layout probe does not compile (a field renamed?):\n{built.stderr}")
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.split()]


def _sizeof(c_name: str) -> str:
    return f'printf("%zu\\n", sizeof(struct {c_name}));'


def _offsetof(c_name: str, field: str) -> str:
    return f'printf("%zu\\n", offsetof(struct {c_name}, {field}));'


def test_every_mirror_matches_the_compiler(tmp_path: Path) -> None:
    expected: list[tuple[str, int]] = []
    probes: list[str] = []
    for key, c_name in sorted(MIRRORS.items()):
        cls = _resolve(key)
        assert isinstance(cls, type) and issubclass(cls, ctypes.Structure)
        probes.append(_sizeof(c_name))
        expected.append((f"sizeof(struct {c_name})", ctypes.sizeof(cls)))
        for field in cls._fields_:
            name = field[0]
            if name.startswith("_"):
                continue  # padding the Python side names for itself
            probes.append(_offsetof(c_name, name))
            expected.append((f"offsetof({c_name}, {name})", getattr(cls, name).offset))
    for key, (c_name, fields_key) in sorted(FORMAT_MIRRORS.items()):
        fmt = _resolve(key)
        fmt = fmt.format if isinstance(fmt, struct.Struct) else fmt
        assert isinstance(fmt, str)
        fields = _resolve(fields_key)
        names = [f[0] for f in fields._fields_] if isinstance(fields, type) else list(fields)
        offsets = _format_offsets(fmt)
        assert len(names) == len(offsets), f"{key}: {len(offsets)} fields, {len(names)} names"
        probes.append(_sizeof(c_name))
        expected.append((f"sizeof(struct {c_name}) ({key})", struct.calcsize(fmt)))
        for name, offset in zip(names, offsets, strict=True):
            probes.append(_offsetof(c_name, name))
            expected.append((f"offsetof({c_name}, {name}) ({key})", offset))
    got = _probe(tmp_path, probes)
    wrong = [
        f"{what}: C {c} != Python {py}"
        for (what, py), c in zip(expected, got, strict=True)
        if c != py
    ]
    assert not wrong, "\n".join(wrong)


def test_the_stream_reads_words_match_the_header(tmp_path: Path) -> None:
    """wsgw_stream_read's result words per envelope (an array, not a Structure)."""
    from dataplane.shim import _bind_stream

    assert _probe(tmp_path, ['printf("%d\\n", (int)WSGW_STREAM_WORDS);']) == [_bind_stream.WORDS]
