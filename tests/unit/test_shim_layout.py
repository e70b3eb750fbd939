"""Every ctypes Structure of the shim's bindings against the C compiler: sizeof and each
field's offset, from the headers the library is built from. A Structure that mirrors a C
struct must be listed in MIRRORS (a new one fails the test until it is), so no hand mirror
can drift from its header unseen."""

from __future__ import annotations

import ctypes
import importlib
import inspect
import os
import subprocess
from pathlib import Path

import pytest

import dataplane.shim as shim_package

SHIM_DIR = Path(shim_package.__file__).parent
HEADERS = sorted(p.name for p in SHIM_DIR.glob("wsgw_*.h"))

#: "module.Class" -> the C struct it mirrors (struct NAME in one of HEADERS).
MIRRORS = {
    "_bind_engine.EngineConf": "wsgw_engine_conf",
    "_bind_engine.FlowStruct": "wsgw_flow",
    "_bind_engine.EngineStats": "wsgw_engine_stats",
    "_bind_engine.PollResult": "wsgw_poll_result",
    "_bind_feed.FeedConf": "wsgw_feed_conf",
    "_bind_feed.FeedStats": "wsgw_feed_stats",
    "_bind_ring._RingInfo": "wsgw_ring_info",
    "_bind_ring._WriterStats": "wsgw_ring_writer_stats",
    "_bind_ring._ReaderStats": "wsgw_ring_reader_stats",
    "_bind_ring._View": "wsgw_ring_view",
    "_bind_topic.TopicKey": "wsgw_topic_key",
    "_bind_topic.TopicPath": "wsgw_topic_path",
    "_bind_topic.TopicSpec": "wsgw_topic_spec",
    "_bind_topic.TopicSpan": "wsgw_topic_span",
    "_loader.PortConf": "wsgw_port_conf",
    "_loader.PortStats": "wsgw_port_stats",
    "_loader.LinkInfo": "wsgw_link_info",
    "_bind_udpgen.UdpFloodResult": "wsgw_udp_flood_result",
    "_bind_arbiter.ArbOut": "wsgw_arb_out",
    "_bind_arbiter.ArbLegStats": "wsgw_arb_leg_stats",
    "_bind_arbiter.ArbTotals": "wsgw_arb_totals",
}


def shim_structures() -> dict[str, type[ctypes.Structure]]:
    """Every Structure subclass defined in a module of dataplane.shim."""
    found: dict[str, type[ctypes.Structure]] = {}
    for path in sorted(SHIM_DIR.glob("*.py")):  # not the library itself (an .so)
        name = path.stem
        module = importlib.import_module(f"dataplane.shim.{name}")
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, ctypes.Structure)
                and value.__module__ == module.__name__
            ):
                found[f"{name}.{attr}"] = value
    return found


def test_every_structure_is_a_listed_mirror() -> None:
    assert sorted(shim_structures()) == sorted(MIRRORS)


def test_every_mirror_matches_the_compiler(tmp_path: Path) -> None:
    structures = shim_structures()
    expected: list[tuple[str, int]] = []
    probes: list[str] = []
    for key, c_name in sorted(MIRRORS.items()):
        cls = structures[key]
        probes.append(f'printf("%zu\\n", sizeof(struct {c_name}));')
        expected.append((f"sizeof(struct {c_name})", ctypes.sizeof(cls)))
        for field in cls._fields_:
            name = field[0]
            if name.startswith("_"):
                continue  # padding the Python side names for itself
            probes.append(f'printf("%zu\\n", offsetof(struct {c_name}, {name}));')
            expected.append((f"offsetof({c_name}, {name})", getattr(cls, name).offset))
    includes = "".join(f'#include "{h}"\n' for h in HEADERS)
    probe = tmp_path / "layout.c"
    probe.write_text(
        f"#include <stdio.h>\n#include <stddef.h>\n{includes}"
        f"int main(void) {{ {' '.join(probes)} return 0; }}\n"
    )
    exe = tmp_path / "layout"
    cc = os.environ.get("CC", "cc")
    built = subprocess.run(
        [cc, "-I", str(SHIM_DIR), str(probe), "-o", str(exe)], capture_output=True, text=True
    )
    if built.returncode != 0:
        pytest.fail(f"the layout probe does not compile (a field renamed?):\n{built.stderr}")
    got = [
        int(x) for x in subprocess.run([str(exe)], capture_output=True, text=True).stdout.split()
    ]
    wrong = [
        f"{what}: C {c} != ctypes {py}"
        for (what, py), c in zip(expected, got, strict=True)
        if c != py
    ]
    assert not wrong, "\n".join(wrong)
