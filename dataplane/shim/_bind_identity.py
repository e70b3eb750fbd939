"""ctypes prototypes and the mirror of message identity in C (identity.c, wsgw_identity.h)."""

from __future__ import annotations

import ctypes
from typing import Any

from dataplane.shim._loader import KEEP_GIL, library

TOPIC_MAX = 128
NO_PREV = -(2**63)
# enum wsgw_id_dialect
DIALECTS = {"binance": 1, "bybit": 2, "okx": 3, "coinbase": 4}
# enum wsgw_id_kind
SEQUENCE, ID = 1, 2


class IdentityStruct(ctypes.Structure):
    _fields_ = [
        ("this_id", ctypes.c_int64),
        ("prev", ctypes.c_int64),
        ("kind", ctypes.c_uint32),
        ("topic_len", ctypes.c_uint32),
        ("topic", ctypes.c_char * TOPIC_MAX),
    ]


PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_identity_scan": (
        ctypes.c_int,
        [ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(IdentityStruct)],
    ),
}


def dialect_code(dialect: str) -> int:
    """The dialect's enum wsgw_id_dialect (0: C tells no identity of it)."""
    return DIALECTS.get(dialect, 0)


def scan(dialect: int, raw: bytes, out: IdentityStruct) -> bool:
    """One frame: True with out filled, False where C does not tell (Python decides)."""
    return bool(library(KEEP_GIL).wsgw_identity_scan(dialect, raw, len(raw), ctypes.byref(out)))
