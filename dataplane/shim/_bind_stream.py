"""ctypes prototype, Structure and buffers for the /v1/stream consumer's read (stream_read.c).

`gateway.client.stream` is the only user: its source reads the socket through `StreamRead`
when the shim loads and its WebSocket client is between messages, and takes from it the
envelopes of the C sink's exact shape; everything else of the read goes through
`dataplane.ws.WsClient` and orjson, as without the shim.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any

from dataplane.shim._loader import KEEP_GIL, library

#: Words per envelope in a read's result (WSGW_STREAM_WORDS in wsgw_stream.h).
WORDS = 7


class StreamCtx(ctypes.Structure):
    """struct wsgw_stream_ctx."""

    _fields_ = [
        ("buf", ctypes.c_void_p),
        ("pay", ctypes.c_void_p),
        ("out", ctypes.c_void_p),
        ("cap", ctypes.c_uint64),
        ("max_payload", ctypes.c_uint64),
        ("max_msgs", ctypes.c_uint32),
        ("pad_", ctypes.c_uint32),
        ("got", ctypes.c_int64),
        ("consumed", ctypes.c_uint64),
    ]


PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_stream_read": (ctypes.c_int, [ctypes.POINTER(StreamCtx), ctypes.c_int]),
}


class StreamRead:
    """`wsgw_stream_read` with its buffers, bound once (one per source: not thread-safe).

    `read(fd)`: one recv of fd and the envelopes found, their count (`ctx.got`: what recv
    returned, `ctx.consumed`: where the frames left to the caller start in `buf`). Envelope
    i is out[WORDS*i : WORDS*i+WORDS]: seq, session, recv_ts_ns, the topic's offset and
    length in `buf`, the payload's (unescaped) offset and length in `pay`.

    The call keeps the GIL (a non-blocking recv and a scan: shorter than a GIL hand-over)
    and goes through a function object without argtypes, the context as a ready pointer
    object: after an idle gap every ctypes argument conversion runs cold (~46 us for the
    eight arguments of a first version against ~35 for two, issue #16)."""

    WORDS = WORDS

    def __init__(self, capacity: int, max_payload: int, max_msgs: int = 1024) -> None:
        self.capacity = capacity
        self._buf = (ctypes.c_uint8 * capacity)()
        self._pay = (ctypes.c_uint8 * capacity)()
        self.out = (ctypes.c_uint64 * (WORDS * max_msgs))()
        self.ctx = StreamCtx(
            buf=ctypes.addressof(self._buf),
            pay=ctypes.addressof(self._pay),
            out=ctypes.addressof(self.out),
            cap=capacity,
            max_payload=max_payload,
            max_msgs=max_msgs,
        )
        self.buf = memoryview(self._buf).cast("B")
        self.pay = memoryview(self._pay).cast("B")
        lib = library(KEEP_GIL)
        # (the same symbol, declared in PROTOTYPES for the loader's checks, as a fresh
        # function object without argtypes: the int fd passes as a C int, the pointer as is)
        bare = lib._FuncPtr(("wsgw_stream_read", lib))
        self._ptr = ctypes.c_void_p(ctypes.addressof(self.ctx))
        self.read = functools.partial(bare, self._ptr)

    def scan(self, data: bytes) -> int:
        """No recv: data (at most `capacity` bytes) as if it had been read (tests)."""
        if len(data) > self.capacity:
            raise ValueError(f"{len(data)} bytes, at most {self.capacity}")
        ctypes.memmove(self._buf, data, len(data))
        self.ctx.cap = len(data)
        try:
            return int(library(KEEP_GIL).wsgw_stream_read(ctypes.byref(self.ctx), -1))
        finally:
            self.ctx.cap = self.capacity
