"""`bench_ws_scan`: the WebSocket per-byte kernels, C shim against their pure-Python twins.

Part of `wsgw bench micro`. Metrics: scanning a read full of small
market-data frames (ns per frame), masking an outgoing payload (bytes per second), the
whole receive path of `WsClient` for those frames (ns per message), and the same two for
the batch path (the batch scan with its UTF-8 check; `WsClient(batch=True)`, one
`MessageBatch` per read).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from dataplane.ws.scan import (
    BackendName,
    make_batch_scanner,
    make_scanner,
    mask_py,
    resolve,
)
from wsgw_bench.core import Measurement, alternate, time_per_op

_C = "shim (C via ctypes)"
_PY = "pure Python"
_SCENARIO = "micro"


def _server_frames(count: int, size: int) -> bytes:
    """count unmasked FIN text frames of size bytes each, as a server sends them."""
    payload = (b'{"e":"trade","p":"101.5","q":"3"}' * (size // 33 + 1))[:size]
    header = bytes((0x81, size)) if size < 126 else bytes((0x81, 126)) + size.to_bytes(2, "big")
    return (header + payload) * count


def _client_on_read(
    backend: BackendName, handshake_done: bytes, batch: bool = False
) -> Callable[[bytes], None]:
    from dataplane.ws.client import WsClient
    from dataplane.ws.handshake import accept_token

    client = WsClient("bench.invalid", deflate=None, scan_backend=backend, batch=batch)
    client.initiate()
    key = client._handshake.key  # the bench plays the server
    client.receive_data(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Accept: " + accept_token(key) + b"\r\n\r\n" + handshake_done
    )
    list(client.events())

    def on_read(data: bytes) -> None:
        client.receive_data(data)
        for _event in client.events():
            pass

    return on_read


def _scan_ns_per_frame(backend: BackendName, buf: bytes, frames: int, min_s: float) -> float:
    scanner = make_scanner(backend)

    def scan_all() -> None:
        start = 0
        while start < len(buf):
            start = scanner.scan(buf, start)[1]

    return time_per_op(scan_all, min_s) / frames * 1e9


def _batch_scan_ns_per_frame(backend: BackendName, buf: bytes, frames: int, min_s: float) -> float:
    """The batch scan: frame boundaries plus the UTF-8 check of every text payload."""
    scanner = make_batch_scanner(backend)
    limit = len(buf)

    def scan_all() -> None:
        start = 0
        while start < limit:
            start = scanner.scan(buf, start, limit)[3]

    return time_per_op(scan_all, min_s) / frames * 1e9


def _mask_bytes_per_s(backend: BackendName, data: bytes, min_s: float) -> float:
    key = os.urandom(4)
    if backend == "c":
        from dataplane.shim import ws_mask_copy

        return len(data) / time_per_op(lambda: ws_mask_copy(data, key), min_s)
    return len(data) / time_per_op(lambda: mask_py(data, key), min_s)


def _client_ns_per_message(
    backend: BackendName, read: bytes, frames: int, min_s: float, batch: bool = False
) -> float:
    on_read = _client_on_read(backend, b"", batch)
    return time_per_op(lambda: on_read(read), min_s) / frames * 1e9


def bench_ws_scan(quick: bool) -> list[Measurement]:
    """C and Python side by side for scan, mask and the client's receive path."""
    min_s = 0.05 if quick else 0.3
    repetitions = 3 if quick else 5
    backends: list[BackendName] = ["c", "python"] if resolve("auto") == "c" else ["python"]
    label = {"c": _C, "python": _PY}
    frames = 640  # a 64 KiB read of 100-byte market-data frames
    read = _server_frames(frames, 100)
    payloads = {size: os.urandom(size) for size in (128, 64 * 1024)}
    metrics: list[tuple[str, str, bool, Callable[[BackendName], float]]] = [
        (
            "ws scan, 100 B frames",
            "ns/frame",
            False,
            lambda b: _scan_ns_per_frame(b, read, frames, min_s),
        ),
        *(
            (
                f"ws mask {size} B",
                "B/s",
                True,
                lambda b, data=payloads[size]: _mask_bytes_per_s(b, data, min_s),
            )
            for size in payloads
        ),
        (
            "ws client receive, 100 B text",
            "ns/msg",
            False,
            lambda b: _client_ns_per_message(b, read, frames, min_s),
        ),
        (
            "ws batch scan + UTF-8, 100 B text",
            "ns/frame",
            False,
            lambda b: _batch_scan_ns_per_frame(b, read, frames, min_s),
        ),
        (
            "ws client batch receive, 100 B text",
            "ns/msg",
            False,
            lambda b: _client_ns_per_message(b, read, frames, min_s, batch=True),
        ),
    ]
    results: list[Measurement] = []
    for metric, unit, higher, measure in metrics:
        found = {
            name: Measurement(
                _SCENARIO, metric, label[name], unit, higher, reference=name == "python"
            )
            for name in backends
        }
        for _, name in alternate(repetitions, [str(b) for b in backends]):
            backend: BackendName = "c" if name == "c" else "python"
            found[backend].samples.append(measure(backend))
        results.extend(found.values())
    return results
