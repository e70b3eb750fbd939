"""ctypes prototypes and mirrors for A/B arbitration (arbiter.c, wsgw_arbiter.h). Every call
keeps the GIL (a PyDLL): each is short, and a batch call (offer_columns) carries hundreds of
arrivals, so a GIL hand-over would cost more than the call."""

from __future__ import annotations

import ctypes
import struct
from typing import Any

from dataplane.shim._loader import KEEP_GIL, library

MAX_LEGS = 8
LAG_SAMPLES = 1024
NO_PREV = -(2**63)  # WSGW_ARB_NO_PREV: an unlinked message
NO_MISSING = -(2**63)  # WSGW_ARB_NO_MISSING
DELIVERED, LOST = 1, 2  # enum wsgw_arb_kind

_vp = ctypes.c_void_p
_u32, _i32, _i64, _u64 = ctypes.c_uint32, ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64


class ArbOut(ctypes.Structure):
    _fields_ = [
        ("kind", _u32),
        ("topic", _u32),
        ("this_id", _i64),
        ("after", _i64),
        ("missing", _i64),
        ("arrived_ns", _i64),
        ("payload", _vp),
        ("len", _u32),
        ("src", _i32),
        ("leg", _u32),
        ("reserved", _u32),
    ]


#: ArbOut as a struct format: a batch's outputs in one iter_unpack, not ctypes per field.
ARB_OUT_FORMAT = struct.Struct("=IIqqqqQIiII")


class ArbLegStats(ctypes.Structure):
    _fields_ = [
        ("won", _u64),
        ("late", _u64),
        ("lag_count", _u32),
        ("lag_at", _u32),
        ("live", _u32),
        ("reserved", _u32),
    ]


class ArbTotals(ctypes.Structure):
    _fields_ = [
        ("duplicates", _u64),
        ("lost", _i64),
        ("held", _u64),
        ("arena_free", _u64),
        ("topics", _u32),
        ("reserved", _u32),
    ]


#: wsgw_arb_unread_fn: (ctx, leg) -> nonzero while the leg has input not offered yet.
UNREAD_FN = ctypes.CFUNCTYPE(ctypes.c_int, _vp, _u32)


PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_arb_create": (
        ctypes.c_int,
        [_u32, _i64, _u32, _u32, _u32, _u64, ctypes.POINTER(_vp)],
    ),
    "wsgw_arb_destroy": (None, [_vp]),
    "wsgw_arb_offer": (ctypes.c_int, [_vp, _u32, _u32, _i64, _i64, ctypes.c_char_p, _u32, _i64]),
    "wsgw_arb_offer_columns": (
        ctypes.c_int,
        [_vp, _u32, _vp, _vp, _vp, _vp, _vp, ctypes.c_char_p, _vp],
    ),
    "wsgw_arb_set_live": (ctypes.c_int, [_vp, _u32, ctypes.c_int, _i64]),
    "wsgw_arb_expire": (ctypes.c_int, [_vp, _i64]),
    "wsgw_arb_restart": (ctypes.c_int, [_vp, _u32]),
    "wsgw_arb_set_max_hold": (ctypes.c_int, [_vp, _i64]),
    "wsgw_arb_set_unread_probe": (None, [_vp, UNREAD_FN, _vp]),
    "wsgw_arb_deadline": (ctypes.c_int, [_vp, ctypes.POINTER(_i64)]),
    "wsgw_arb_outputs": (_vp, [_vp]),
    "wsgw_arb_leg_stats": (ctypes.c_int, [_vp, _u32, ctypes.POINTER(ArbLegStats)]),
    "wsgw_arb_lag_samples": (ctypes.c_int, [_vp, _u32, _vp, _u32]),
    "wsgw_arb_lag_percentile": (ctypes.c_int, [_vp, _u32, ctypes.c_double, ctypes.POINTER(_i64)]),
    "wsgw_arb_totals": (None, [_vp, ctypes.POINTER(ArbTotals)]),
}


def lib() -> Any:
    """The library with this module's prototypes, every call keeping the GIL."""
    return library(KEEP_GIL)
