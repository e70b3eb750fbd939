"""ctypes declarations for the UDP generator (udpgen.c), used by `wsgw bench udp-pps`; in a
library built for benchmarks only (see setup.py).

`udp_flood` sends `count` copies of one Ethernet/IPv4/UDP frame on a DPDK port from C, a
sequence number and the UDP checksum stamped into each; `udp_frame` builds one frame the
same way (any build: tests check the C checksum against Python's with it).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Any

from dataplane.shim._loader import bench_function

_u8p = ctypes.POINTER(ctypes.c_uint8)


class UdpFloodResult(ctypes.Structure):
    _fields_ = [
        ("sent", ctypes.c_uint64),
        ("refused", ctypes.c_uint64),
        ("nombuf", ctypes.c_uint64),
        ("bursts", ctypes.c_uint64),
        ("ns", ctypes.c_uint64),
    ]


PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {}
#: Only in a library built for benchmarks (see setup.py); declared when present.
BENCH_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_udp_frame": (
        ctypes.c_int, [_u8p, ctypes.c_uint16, ctypes.c_uint64, ctypes.c_int, _u8p]
    ),
    "wsgw_udp_flood": (
        ctypes.c_int,
        [
            ctypes.c_void_p, _u8p, ctypes.c_uint16, ctypes.c_uint64, ctypes.c_uint16,
            ctypes.c_uint64, ctypes.c_int, ctypes.c_uint64, ctypes.POINTER(UdpFloodResult),
        ],
    ),
}  # fmt: skip


@dataclass(frozen=True)
class FloodResult:
    sent: int  # frames the PMD took
    refused: int  # frames the PMD handed back (offered again)
    nombuf: int  # failed bulk allocations (retried)
    bursts: int  # rte_eth_tx_burst calls
    ns: int  # elapsed

    @property
    def pps(self) -> float:
        return self.sent / self.ns * 1e9 if self.ns else 0.0


def _template(frame: bytes) -> Any:
    if not 0 < len(frame) <= 0xFFFF:
        raise ValueError(f"a frame of {len(frame)} bytes")
    return (ctypes.c_uint8 * len(frame)).from_buffer_copy(frame)


def udp_frame(lib: Any, template: bytes, seq: int, checksum: bool = True) -> tuple[int, bytes]:
    """(rc, frame): the template with seq and the UDP checksum written, as the flood does."""
    out = (ctypes.c_uint8 * len(template))()
    rc = int(
        bench_function(lib, "wsgw_udp_frame")(
            _template(template), len(template), seq, int(checksum), out
        )
    )
    return rc, bytes(out) if rc >= 0 else b""


def udp_flood(
    lib: Any,
    port_handle: int,
    template: bytes,
    count: int,
    *,
    burst: int = 32,
    first_seq: int = 0,
    checksum: bool = True,
    timeout_ns: int = 0,
) -> tuple[int, FloodResult]:
    """(rc, result): send count frames on the port (GIL released for the whole run)."""
    result = UdpFloodResult()
    rc = int(
        bench_function(lib, "wsgw_udp_flood")(
            port_handle,
            _template(template),
            len(template),
            count,
            burst,
            first_seq,
            int(checksum),
            timeout_ns,
            ctypes.byref(result),
        )
    )
    return rc, FloodResult(
        int(result.sent), int(result.refused), int(result.nombuf), int(result.bursts),
        int(result.ns),
    )  # fmt: skip
