"""ctypes declarations for the shim's core (shim_core.c, shim_port.c, wsgw_shim.h): identity,
checksums, EAL and ports. `_loader.Shim` wraps them; the Structures here mirror wsgw_shim.h
(tests/unit/test_shim_layout.py checks them against the compiler)."""

from __future__ import annotations

import ctypes
from typing import Any

_c_uint8_p = ctypes.POINTER(ctypes.c_uint8)
_c_uint16_p = ctypes.POINTER(ctypes.c_uint16)
_c_uint32_p = ctypes.POINTER(ctypes.c_uint32)


class PortConf(ctypes.Structure):
    _fields_ = [
        ("n_mbufs", ctypes.c_uint32),
        ("mbuf_cache", ctypes.c_uint32),
        ("rx_desc", ctypes.c_uint16),
        ("tx_desc", ctypes.c_uint16),
        ("mtu", ctypes.c_uint16),
        ("promiscuous", ctypes.c_uint16),
    ]


PORT_STAT_FIELDS = (
    "rx_packets",
    "rx_bytes",
    "tx_packets",
    "tx_bytes",
    "rx_missed",
    "rx_errors",
    "tx_errors",
    "rx_nombuf",
    "tx_dropped",
    "tx_nombuf",
    "tx_oversize",
    "rx_truncated",
)


class PortStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in PORT_STAT_FIELDS]


class LinkInfo(ctypes.Structure):
    _fields_ = [
        ("speed_mbps", ctypes.c_uint32),
        ("up", ctypes.c_uint16),
        ("full_duplex", ctypes.c_uint16),
    ]


# name -> (restype, argtypes); every export of wsgw_shim.h is declared here.
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_abi_version": (ctypes.c_int, []),
    "wsgw_shim_version": (ctypes.c_char_p, []),
    "wsgw_has_dpdk": (ctypes.c_int, []),
    "wsgw_dpdk_version": (ctypes.c_char_p, []),
    "wsgw_build_flags": (ctypes.c_char_p, []),
    "wsgw_source_hash": (ctypes.c_char_p, []),
    "wsgw_last_error": (ctypes.c_char_p, []),
    "wsgw_csum_partial": (ctypes.c_uint32, [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint32]),
    "wsgw_csum_fold": (ctypes.c_uint16, [ctypes.c_uint32]),
    "wsgw_eal_init": (ctypes.c_int, [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]),
    "wsgw_eal_state": (ctypes.c_int, []),
    "wsgw_eal_cleanup": (ctypes.c_int, []),
    "wsgw_thread_register": (ctypes.c_int, []),
    "wsgw_thread_unregister": (None, []),
    "wsgw_port_open": (
        ctypes.c_int,
        [ctypes.c_char_p, ctypes.POINTER(PortConf), ctypes.POINTER(ctypes.c_void_p)],
    ),
    "wsgw_port_start": (ctypes.c_int, [ctypes.c_void_p]),
    "wsgw_port_stop": (ctypes.c_int, [ctypes.c_void_p]),
    "wsgw_port_close": (None, [ctypes.c_void_p]),
    "wsgw_port_id": (ctypes.c_int, [ctypes.c_void_p]),
    "wsgw_port_mac": (ctypes.c_int, [ctypes.c_void_p, _c_uint8_p]),
    "wsgw_port_mtu": (ctypes.c_int, [ctypes.c_void_p]),
    "wsgw_port_link": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(LinkInfo)]),
    "wsgw_port_stats": (ctypes.c_int, [ctypes.c_void_p, ctypes.POINTER(PortStats)]),
    "wsgw_port_rx_burst": (
        ctypes.c_int,
        [ctypes.c_void_p, _c_uint8_p, ctypes.c_uint32, _c_uint32_p, _c_uint16_p, ctypes.c_uint16],
    ),
    "wsgw_port_tx_burst": (
        ctypes.c_int,
        [ctypes.c_void_p, _c_uint8_p, _c_uint32_p, _c_uint16_p, ctypes.c_uint16],
    ),
}
