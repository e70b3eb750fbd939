"""`micro`: the shim's kernels in ns/op, next to the same work in pure Python and next to
the figures the old C client published (as notes: they were measured elsewhere)."""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Callable

from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario, time_per_op

OLD_CLIENT = {
    "lookup": "old C client: hash lookup 1.9 ns",
    "fast": "old C client: ring SP/SC 436 ns per 1460 B fragment (26.8 Gbps, 2.3 Mpps)",
}


def python_checksum(data: bytes) -> int:
    """RFC 1071 in pure Python: what the slow path would pay without the shim."""
    if len(data) % 2:
        data += b"\0"
    total: int = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _segments(size: int, count: int) -> tuple[list[bytes], int, int]:
    """In-order data segments of one flow (the fast path's common case)."""
    from dataplane.wire.ethernet import EthernetRepr
    from dataplane.wire.ipv4 import PROTO_TCP, Ipv4Repr
    from dataplane.wire.tcp import TcpFlags, TcpOptions, TcpRepr

    local, remote = 0xC6120202, 0xC6120201
    frames = []
    for i in range(count):
        tcp = TcpRepr(
            443,
            40000,
            1000 + i * size,
            5000,
            TcpFlags.ACK | TcpFlags.PSH,
            512,
            TcpOptions(timestamp=(200 + i, 7)),
            bytes(size),
        ).emit(remote, local)
        ip = Ipv4Repr(src=remote, dst=local, protocol=PROTO_TCP, payload_len=len(tcp)).emit(tcp)
        frames.append(EthernetRepr(bytes(6), bytes(6), 0x0800).emit(ip))
    return frames, local, remote


def _python_parse(frames: list[bytes], local: int, remote: int) -> None:
    from dataplane.wire.ethernet import EthernetRepr
    from dataplane.wire.ipv4 import Ipv4Repr
    from dataplane.wire.tcp import TcpRepr

    for frame in frames:
        _, payload = EthernetRepr.parse(frame)
        ip, segment = Ipv4Repr.parse(payload)
        TcpRepr.parse(segment, ip.src, ip.dst)


@scenario("micro", "shim kernels in ns/op vs pure Python (and the old C client's figures)")
def micro(options: BenchOptions) -> list[Measurement]:
    from dataplane.fastpath import FastPath, FastPathConfig, ack_template, bench_checksum_ns
    from dataplane.shim import flow_template, load

    shim = load()
    min_seconds = 0.05 if options.quick else 0.3
    iterations = 200_000 if options.quick else 2_000_000
    results: list[Measurement] = []

    for size in (64, 1460):
        data = os.urandom(size)
        contenders: dict[str, Callable[[], float]] = {
            "shim, loop in C": functools.partial(bench_checksum_ns, data, iterations),
            "shim, one ctypes call each": lambda d=data: (
                time_per_op(  # type: ignore[misc]
                    functools.partial(shim.checksum, d), min_seconds
                )
                * 1e9
            ),
            "pure Python": lambda d=data: (
                time_per_op(  # type: ignore[misc]
                    functools.partial(python_checksum, d), min_seconds
                )
                * 1e9
            ),
        }
        found = {
            name: Measurement(
                "micro",
                f"checksum {size} B",
                name,
                "ns/op",
                False,
                reference=(name == "pure Python"),
            )
            for name in contenders
        }
        for _, name in alternate(options.repetitions, list(contenders)):
            found[name].samples.append(contenders[name]())
        results += found.values()

    for size in (100, 1460):
        frames, local, remote = _segments(size, 64)
        fastpath = FastPath(local, FastPathConfig())
        try:
            slot = fastpath._engine.flow_add(remote, 443, 40000, 1 << 20)
            flow = fastpath.flow(slot)
            flow.rcv_nxt, flow.rcv_adv_right, flow.last_ack_sent = 1000, 1000 + (1 << 30), 1000
            flow.snd_una = flow.snd_nxt = 5000
            flow.snd_wnd_field, flow.rcv_wscale, flow.ts_enabled = 512, 14, 1
            flow.ts_recent, flow.rcv_space, flow.mss, flow.ack_policy = 100, 1 << 30, 1460, 0
            flow_template(flow, ack_template(bytes(6), bytes(6), local, remote, 40000, 443, True))
            flow.active = 1
            rounds = 200 if options.quick else 2000
            fast = Measurement(
                "micro",
                f"TCP receive, {size} B segment",
                "shim fast path (C)",
                "ns/op",
                False,
                note=OLD_CLIENT["fast"] if size == 1460 else "",
            )
            slow = Measurement(
                "micro",
                f"TCP receive, {size} B segment",
                "pure Python parse only (wire)",
                "ns/op",
                False,
                reference=True,
            )
            for _, name in alternate(options.repetitions, ["fast", "slow"]):
                if name == "fast":
                    fast.samples.append(fastpath.bench_fast_path(slot, frames, rounds))
                else:
                    slow.samples.append(
                        time_per_op(
                            functools.partial(_python_parse, frames, local, remote), min_seconds
                        )
                        * 1e9
                        / len(frames)
                    )
            results += [fast, slow]
            if size == 100:
                lookup = Measurement(
                    "micro",
                    "flow table lookup",
                    "shim (C)",
                    "ns/op",
                    False,
                    note=OLD_CLIENT["lookup"],
                )
                for _ in range(options.repetitions):
                    lookup.samples.append(fastpath.bench_flow_lookup(iterations * 5))
                results.append(lookup)
        finally:
            fastpath.close()
    from wsgw_bench.ws_micro import bench_ws_scan

    results += bench_ws_scan(options.quick)
    return results
