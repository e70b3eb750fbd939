"""ctypes prototype and buffers for the /v1/stream consumer's read (stream_read.c).

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
#: info[] words (WSGW_STREAM_INFO_*).
INFO_GOT = 0
INFO_CONSUMED = 1

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_stream_read": (
        ctypes.c_int,
        [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint64,
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.c_int,
        ],
    ),
}


class StreamRead:
    """`wsgw_stream_read` with its buffers, bound once (one per source: not thread-safe).

    `read(fd)`: one recv of fd and the envelopes found, their count (info[INFO_GOT]: what
    recv returned, info[INFO_CONSUMED]: where the frames left to the caller start in `buf`).
    Envelope i is out[WORDS*i : WORDS*i+WORDS]: seq, session, recv_ts_ns, the topic's offset
    and length in `buf`, the payload's (unescaped) offset and length in `pay`. The call keeps
    the GIL (a non-blocking recv and a scan: shorter than a GIL hand-over)."""

    WORDS = WORDS

    def __init__(self, capacity: int, max_payload: int, max_msgs: int = 1024) -> None:
        self.capacity = capacity
        self.max_msgs = max_msgs
        self._buf = (ctypes.c_uint8 * capacity)()
        self._pay = (ctypes.c_uint8 * capacity)()
        self.out = (ctypes.c_uint64 * (WORDS * max_msgs))()
        self.info = (ctypes.c_int64 * 2)()
        self.buf = memoryview(self._buf).cast("B")
        self.pay = memoryview(self._pay).cast("B")
        self._fn = library(KEEP_GIL).wsgw_stream_read
        self._max_payload = max_payload
        # (a partial: no Python frame per call, fd the one argument left)
        self.read = functools.partial(
            self._fn,
            ctypes.addressof(self._buf),
            capacity,
            max_payload,
            ctypes.addressof(self._pay),
            ctypes.addressof(self.out),
            max_msgs,
            ctypes.addressof(self.info),
        )

    def scan(self, data: bytes) -> int:
        """No recv: data (at most `capacity` bytes) as if it had been read (tests)."""
        if len(data) > self.capacity:
            raise ValueError(f"{len(data)} bytes, at most {self.capacity}")
        ctypes.memmove(self._buf, data, len(data))
        return int(
            self._fn(
                ctypes.addressof(self._buf),
                len(data),
                self._max_payload,
                ctypes.addressof(self._pay),
                ctypes.addressof(self.out),
                self.max_msgs,
                ctypes.addressof(self.info),
                -1,
            )
        )
