"""ctypes declarations for the engine's fast path (engine.c, wsgw_engine.h).

`FlowStruct` mirrors `struct wsgw_flow` field for field; `tests/unit/test_shim_layout.py` checks the
size and offsets against the C compiler's, so the two cannot drift apart silently.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable
from typing import Any

from dataplane.shim._loader import bench_function

_u8p = ctypes.POINTER(ctypes.c_uint8)
_u16p = ctypes.POINTER(ctypes.c_uint16)
_u32p = ctypes.POINTER(ctypes.c_uint32)
_READ_MAX = 1 << 20  # bytes a flow read copies at once

# A flow sync's bytes are copied by C from the flow's ring straight into a new bytes
# object, as C code fills one (PyBytes_FromStringAndSize(NULL, n), then its buffer):
# one copy, not a copy into a scratch buffer and another out of it (ctypes.string_at).
_new_bytes = ctypes.pythonapi.PyBytes_FromStringAndSize
_new_bytes.restype = ctypes.py_object
_new_bytes.argtypes = (ctypes.c_void_p, ctypes.c_ssize_t)
_BYTES_DATA = bytes.__basicsize__ - 1  # where a bytes object's buffer starts (CPython)


class EngineConf(ctypes.Structure):
    _fields_ = [
        ("local_ip", ctypes.c_uint32),
        ("burst", ctypes.c_uint16),
        ("max_flows", ctypes.c_uint16),
        ("slow_arena_bytes", ctypes.c_uint32),
        ("slow_max_frames", ctypes.c_uint16),
        ("verify_checksums", ctypes.c_uint16),
        ("idle_polls_before_sleep", ctypes.c_uint32),
        ("sleep_min_ns", ctypes.c_uint32),
        ("sleep_max_ns", ctypes.c_uint32),
        ("delayed_ack_ns", ctypes.c_uint32),
        ("fast_path", ctypes.c_uint16),
        ("ts_hz", ctypes.c_uint16),
        ("spin_after_tx_ns", ctypes.c_uint32),
    ]


class FlowStruct(ctypes.Structure):
    _fields_ = [
        ("remote_ip", ctypes.c_uint32),
        ("remote_port", ctypes.c_uint16),
        ("local_port", ctypes.c_uint16),
        ("rcv_nxt", ctypes.c_uint32),
        ("rcv_adv_right", ctypes.c_uint32),
        ("ts_recent", ctypes.c_uint32),
        ("last_ack_sent", ctypes.c_uint32),
        ("snd_una", ctypes.c_uint32),
        ("snd_nxt", ctypes.c_uint32),
        ("snd_wnd_field", ctypes.c_uint16),
        ("rcv_wscale", ctypes.c_uint8),
        ("ts_enabled", ctypes.c_uint8),
        ("ts_offset", ctypes.c_uint32),
        ("rcv_space", ctypes.c_uint32),
        ("mss", ctypes.c_uint32),
        ("ack_policy", ctypes.c_uint16),
        ("active", ctypes.c_uint16),
        ("ring_head", ctypes.c_uint32),
        ("ring_tail", ctypes.c_uint32),
        ("ring_size", ctypes.c_uint32),
        ("unacked_bytes", ctypes.c_uint32),
        ("ack_deadline_ns", ctypes.c_uint64),
        ("delivered_since_sync", ctypes.c_uint32),
        ("slow_pending", ctypes.c_uint16),
        ("touched", ctypes.c_uint16),
        ("fast_segments", ctypes.c_uint64),
        ("fast_bytes", ctypes.c_uint64),
        ("slow_segments", ctypes.c_uint64),
        ("acks_sent", ctypes.c_uint64),
        ("first_rx_ns", ctypes.c_uint64),
        ("ack_len", ctypes.c_uint16),
        ("unacked_segments", ctypes.c_uint16),
        ("ack_template", ctypes.c_uint8 * 68),
        ("ring", ctypes.c_void_p),
        ("snd_wl1", ctypes.c_uint32),
        ("ack_tsecr", ctypes.c_uint32),
        ("acks_advanced", ctypes.c_uint32),
        ("pure_acks", ctypes.c_uint32),
        ("tx_segments", ctypes.c_uint64),
        ("tx_bytes", ctypes.c_uint64),
        ("segments_synced", ctypes.c_uint64),
        ("_align_pad", ctypes.c_uint8 * 8),  # struct wsgw_flow is 64-byte aligned: 256 B
    ]


# struct wsgw_poll_result as one struct.unpack_from (PollResult's fields, in order).
POLL_RESULT = struct.Struct("=4I3Q")

# struct wsgw_flow_sync, read in one struct.unpack_from (its fields in order).
FLOW_SYNC = struct.Struct("=11I2H3Q2I")
FLOW_SYNC_FIELDS = (
    "bytes", "rcv_nxt", "rcv_adv_right", "ts_recent", "last_ack_sent", "segments", "acks",
    "snd_una", "snd_wl1", "ack_tsecr", "unacked_bytes", "snd_wnd_field", "slow_pending",
    "ack_deadline_ns", "first_rx_ns", "now_ns", "fed", "reserved",
)  # fmt: skip

ENGINE_STAT_FIELDS = (
    "polls", "rx_frames", "rx_bursts", "empty_polls", "sleeps", "sleep_ns",
    "fast_segments", "fast_bytes", "slow_frames", "acks_sent", "dropped_slow_full",
    "bad_ip_checksum", "bad_tcp_checksum", "not_ipv4", "not_for_us", "tx_dropped",
    "rx_to_ring_bursts", "rx_to_ring_ns_sum", "rx_to_ring_ns_max",
    "fast_acks", "tx_data_segments", "tx_data_bytes", "rx_wakes",
    "bench_dropped",
)  # fmt: skip


class EngineStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ENGINE_STAT_FIELDS]


class PollResult(ctypes.Structure):
    _fields_ = [
        ("reason", ctypes.c_uint32),
        ("slow_frames", ctypes.c_uint32),
        ("touched", ctypes.c_uint32),
        ("tx_captured", ctypes.c_uint32),
        ("now_ns", ctypes.c_uint64),
        ("rx_frames", ctypes.c_uint64),
        ("first_rx_ns", ctypes.c_uint64),
    ]


_vp = ctypes.c_void_p
PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_engine_create": (ctypes.c_int, [ctypes.POINTER(EngineConf), _vp, ctypes.POINTER(_vp)]),
    "wsgw_engine_destroy": (None, [_vp]),
    "wsgw_engine_set_fast_path": (ctypes.c_int, [_vp, ctypes.c_int]),
    "wsgw_engine_set_sleep": (
        ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
    ),
    "wsgw_engine_flow_add": (
        ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_uint16, ctypes.c_uint16, ctypes.c_uint32]
    ),
    "wsgw_engine_flow_del": (ctypes.c_int, [_vp, ctypes.c_int]),
    "wsgw_engine_flow": (ctypes.POINTER(FlowStruct), [_vp, ctypes.c_int]),
    "wsgw_engine_flow_lookup": (
        ctypes.c_int, [_vp, ctypes.c_uint32, ctypes.c_uint16, ctypes.c_uint16]
    ),
    "wsgw_engine_flow_read": (ctypes.c_uint32, [_vp, ctypes.c_int, _u8p, ctypes.c_uint32]),
    "wsgw_engine_flow_synced": (None, [_vp, ctypes.c_int]),
    "wsgw_engine_flow_sync": (
        ctypes.c_int,
        [_vp, ctypes.c_int, _vp, ctypes.c_uint32, _vp, ctypes.c_int],
    ),
    "wsgw_engine_flow_take_ack": (ctypes.c_uint64, [_vp, ctypes.c_int]),
    "wsgw_engine_flow_give_ack": (
        None, [_vp, ctypes.c_int, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint32]
    ),
    "wsgw_engine_flow_send": (
        ctypes.c_int64, [_vp, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32]
    ),
    "wsgw_engine_tx_flush": (None, [_vp]),
    "wsgw_engine_set_tx_hold": (None, [_vp, ctypes.c_int]),
    "wsgw_engine_poll": (
        ctypes.c_int, [_vp, ctypes.c_uint64, ctypes.c_uint64, ctypes.POINTER(PollResult)]
    ),
    "wsgw_engine_wake": (None, [_vp]),
    "wsgw_engine_set_extra_fd": (None, [_vp, ctypes.c_int]),
    "wsgw_engine_set_rx_fd": (None, [_vp, ctypes.c_int]),
    "wsgw_engine_expect_rx": (None, [_vp, ctypes.c_uint64]),
    "wsgw_engine_set_time": (None, [_vp, ctypes.c_uint64]),
    "wsgw_engine_now": (ctypes.c_uint64, [_vp]),
    "wsgw_engine_slow_arena": (_u8p, [_vp]),
    "wsgw_engine_slow_offsets": (_u32p, [_vp]),
    "wsgw_engine_slow_lengths": (_u16p, [_vp]),
    "wsgw_engine_touched": (_u32p, [_vp]),
    "wsgw_engine_inject": (ctypes.c_int, [_vp, _u8p, _u32p, _u16p, ctypes.c_uint32]),
    "wsgw_engine_take_tx": (
        ctypes.c_uint32, [_vp, _u8p, ctypes.c_uint32, _u32p, _u16p, ctypes.c_uint32]
    ),
    "wsgw_engine_stats": (None, [_vp, ctypes.POINTER(EngineStats)]),
    "wsgw_monotonic_ns": (ctypes.c_uint64, []),
}  # fmt: skip

#: Only in a library built for benchmarks (see setup.py); declared when present.
BENCH_PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_bench_flow_lookup": (ctypes.c_uint64, [_vp, ctypes.c_uint32]),
    "wsgw_bench_fast_path": (
        ctypes.c_uint64, [_vp, ctypes.c_int, _u8p, _u32p, _u16p, ctypes.c_uint32, ctypes.c_uint32]
    ),
    "wsgw_bench_checksum": (ctypes.c_uint64, [_u8p, ctypes.c_uint32, ctypes.c_uint32]),
    "wsgw_bench_flow_echo": (
        ctypes.c_int64,
        [_vp, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32,
         ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint64), _u8p],
    ),
}  # fmt: skip


def _frames_arrays(frames: list[bytes]) -> tuple[Any, Any, Any]:
    """One contiguous buffer plus offsets and lengths: a batch crosses in one call."""
    count = len(frames)
    blob = b"".join(frames)
    offsets = (ctypes.c_uint32 * max(count, 1))()
    lengths = (ctypes.c_uint16 * max(count, 1))()
    pos = 0
    for i, frame in enumerate(frames):
        offsets[i] = pos
        lengths[i] = len(frame)
        pos += len(frame)
    buf = (ctypes.c_uint8 * max(len(blob), 1)).from_buffer_copy(blob or b"\0")
    return buf, offsets, lengths


class EngineBinding:
    """Typed calls into one C engine. Owned by `dataplane.fastpath.FastPath`."""

    def __init__(self, lib: Any, conf: EngineConf, port_handle: int) -> None:
        self._lib = lib
        handle = ctypes.c_void_p()
        self.rc = int(
            lib.wsgw_engine_create(ctypes.byref(conf), port_handle or None, ctypes.byref(handle))
        )
        self.handle = int(handle.value or 0)
        self._result = PollResult()
        self._result_ref = ctypes.byref(self._result)
        self._poll = lib.wsgw_engine_poll
        self._read_buf = (ctypes.c_uint8 * _READ_MAX)()
        self._sync_out = ctypes.create_string_buffer(FLOW_SYNC.size)
        self._flows: dict[int, FlowStruct] = {}
        self._tx_buf = (ctypes.c_uint8 * (1 << 18))()
        self._tx_off = (ctypes.c_uint32 * 1024)()
        self._tx_len = (ctypes.c_uint16 * 1024)()
        if self.handle:  # fixed for the engine's life: no three C calls per poll
            self._slow_base = ctypes.addressof(lib.wsgw_engine_slow_arena(self.handle).contents)
            self._slow_off = lib.wsgw_engine_slow_offsets(self.handle)
            self._slow_len = lib.wsgw_engine_slow_lengths(self.handle)
            self._touched = lib.wsgw_engine_touched(self.handle)

    @property
    def _h(self) -> int:
        """The live handle; using a destroyed engine is an error, never a wild pointer."""
        if not self.handle:
            raise RuntimeError("the engine was destroyed")
        return self.handle

    def destroy(self) -> None:
        if self.handle:
            self._lib.wsgw_engine_destroy(self.handle)
            self.handle = 0

    def set_fast_path(self, enabled: bool) -> None:
        self._lib.wsgw_engine_set_fast_path(self._h, int(enabled))

    def set_sleep(self, idle_polls: int, min_ns: int, max_ns: int) -> None:
        self._lib.wsgw_engine_set_sleep(self._h, idle_polls, min_ns, max_ns)

    def flow_add(self, remote_ip: int, remote_port: int, local_port: int, ring_size: int) -> int:
        return int(
            self._lib.wsgw_engine_flow_add(
                self.handle, remote_ip, remote_port, local_port, ring_size
            )
        )

    def flow_del(self, slot: int) -> int:
        return int(self._lib.wsgw_engine_flow_del(self._h, slot))

    def flow(self, slot: int) -> FlowStruct:
        pointer = self._lib.wsgw_engine_flow(self._h, slot)
        if not pointer:
            raise KeyError(slot)
        flow: FlowStruct = pointer.contents
        return flow

    def flow_lookup(self, remote_ip: int, remote_port: int, local_port: int) -> int:
        return int(self._lib.wsgw_engine_flow_lookup(self._h, remote_ip, remote_port, local_port))

    def flow_read(self, slot: int) -> bytes:
        """Everything in the flow's ring, in one or more copies of up to 1 MiB."""
        chunks = []
        while True:
            n = int(
                self._lib.wsgw_engine_flow_read(
                    self.handle, slot, self._read_buf, len(self._read_buf)
                )
            )
            if n == 0:
                break
            chunks.append(ctypes.string_at(self._read_buf, n))
            if n < len(self._read_buf):
                break
        return b"".join(chunks)

    def flow_sync(self, slot: int, keep_space: bool = False) -> tuple[Any, ...]:
        """wsgw_engine_flow_sync: (data, *the fields of struct wsgw_flow_sync but bytes);
        data holds every byte the ring had. keep_space: they go straight to a reader (C's
        rcv_space stays)."""
        out = self._sync_out
        lib = self._lib
        flow = self._flows.get(slot)
        if flow is None:
            flow = self._flows[slot] = self.flow(slot)  # fixed in C for the engine's life
        pending = (flow.ring_head - flow.ring_tail) & 0xFFFFFFFF
        if 1 < pending <= _READ_MAX:  # (0 and 1 byte objects are shared singletons)
            data = _new_bytes(None, pending)  # uninitialised and ours alone: C fills it
            dst = id(data) + _BYTES_DATA
            if lib.wsgw_engine_flow_sync(self._h, slot, dst, pending, out, keep_space) < 0:
                raise KeyError(slot)
            fields = FLOW_SYNC.unpack_from(out)
            if fields[0] != pending:  # never: nothing else reads the ring meanwhile
                data = data[: fields[0]]
            return (data, *fields[1:-1])
        if lib.wsgw_engine_flow_sync(self._h, slot, self._read_buf, _READ_MAX, out, keep_space) < 0:
            raise KeyError(slot)
        fields = FLOW_SYNC.unpack_from(out)
        count = fields[0]
        if not count:
            return (b"", *fields[1:-1])
        data = ctypes.string_at(self._read_buf, count)
        if count == _READ_MAX:
            data += self.flow_read(slot)  # the ring held more than one read buffer
        return (data, *fields[1:-1])

    def flow_synced(self, slot: int) -> None:
        self._lib.wsgw_engine_flow_synced(self._h, slot)

    def flow_take_ack(self, slot: int) -> int:
        return int(self._lib.wsgw_engine_flow_take_ack(self._h, slot))

    def flow_give_ack(
        self, slot: int, deadline_ns: int, unacked_bytes: int, unacked_segments: int
    ) -> None:
        self._lib.wsgw_engine_flow_give_ack(
            self.handle, slot, deadline_ns, unacked_bytes, unacked_segments
        )

    def flow_sender(self, slot: int) -> Callable[[bytes, int, int], int]:
        """`send(payload, len(payload), rcv_space) -> int` for one flow:
        wsgw_engine_flow_send bound to this engine and slot (no Python frame in between):
        rcv_adv_right after the segment, or a negative errno. The first segment since the
        last flush leaves at once, later ones at the next poll or tx_flush."""
        sender: Callable[[bytes, int, int], int] = functools.partial(
            self._lib.wsgw_engine_flow_send, self._h, slot
        )
        return sender

    def tx_flush(self) -> None:
        self._lib.wsgw_engine_tx_flush(self._h)

    def set_tx_hold(self, hold: bool) -> None:
        self._lib.wsgw_engine_set_tx_hold(self._h, int(hold))

    def poll(self, deadline_ns: int, budget_ns: int) -> PollResult:
        self._poll(self._h, deadline_ns, budget_ns, self._result_ref)
        return self._result

    def poll_fields(self, deadline_ns: int, budget_ns: int) -> tuple[int, ...]:
        """`poll`, with the fields of struct wsgw_poll_result as a tuple, in order (one
        unpack instead of an attribute read each)."""
        self._poll(self._h, deadline_ns, budget_ns, self._result_ref)
        return POLL_RESULT.unpack_from(self._result)

    def wake(self) -> None:
        self._lib.wsgw_engine_wake(self._h)

    def set_extra_fd(self, fd: int) -> None:
        self._lib.wsgw_engine_set_extra_fd(self._h, fd)

    def set_rx_fd(self, fd: int) -> None:
        self._lib.wsgw_engine_set_rx_fd(self._h, fd)

    def expect_rx(self, spin_ns: int) -> None:
        self._lib.wsgw_engine_expect_rx(self._h, spin_ns)

    def set_time(self, now_ns: int) -> None:
        self._lib.wsgw_engine_set_time(self._h, now_ns)

    def clock(self) -> Callable[[], float]:
        """The engine's clock in seconds (its virtual time when set), for the code that
        acts between polls on the engine's behalf."""
        now = functools.partial(self._lib.wsgw_engine_now, self._h)

        def seconds() -> float:
            ns: int = now()
            return ns / 1e9

        return seconds

    def slow_frames(self, count: int) -> list[bytes]:
        if not count:
            return []
        self._h  # noqa: B018 (raises once destroyed)
        base, offsets, lengths = self._slow_base, self._slow_off, self._slow_len
        return [ctypes.string_at(base + offsets[i], lengths[i]) for i in range(count)]

    def touched(self, count: int) -> list[int]:
        if not count:
            return []
        self._h  # noqa: B018 (raises once destroyed)
        pointer = self._touched
        return [int(pointer[i]) for i in range(count)]

    def inject(self, frames: list[bytes]) -> int:
        if not frames:
            return 0
        buf, offsets, lengths = _frames_arrays(frames)
        return int(self._lib.wsgw_engine_inject(self._h, buf, offsets, lengths, len(frames)))

    def take_tx(self) -> list[bytes]:
        out: list[bytes] = []
        while True:
            n = int(
                self._lib.wsgw_engine_take_tx(
                    self.handle,
                    self._tx_buf,
                    len(self._tx_buf),
                    self._tx_off,
                    self._tx_len,
                    len(self._tx_off),
                )
            )
            base = ctypes.addressof(self._tx_buf)
            out += [ctypes.string_at(base + self._tx_off[i], self._tx_len[i]) for i in range(n)]
            if n < len(self._tx_off):
                return out

    def stats(self) -> dict[str, int]:
        stats = EngineStats()
        self._lib.wsgw_engine_stats(self._h, ctypes.byref(stats))
        return {name: int(getattr(stats, name)) for name in ENGINE_STAT_FIELDS}

    def bench_flow_lookup(self, iterations: int) -> int:
        return int(bench_function(self._lib, "wsgw_bench_flow_lookup")(self._h, iterations))

    def bench_fast_path(self, slot: int, frames: list[bytes], rounds: int) -> int:
        buf, offsets, lengths = _frames_arrays(frames)
        return int(
            bench_function(self._lib, "wsgw_bench_fast_path")(
                self.handle, slot, buf, offsets, lengths, len(frames), rounds
            )
        )

    def bench_flow_echo(
        self, slot: int, frame: bytes, reply_len: int, rounds: int, timeout_ns: int
    ) -> tuple[int, list[int], bytes]:
        """wsgw_bench_flow_echo: (its return code, the round trips in ns, the last reply)."""
        rtts = (ctypes.c_uint64 * max(rounds, 1))()
        reply = (ctypes.c_uint8 * max(reply_len, 1))()
        rc = int(
            bench_function(self._lib, "wsgw_bench_flow_echo")(
                self.handle, slot, frame, len(frame), reply_len, rounds, timeout_ns, rtts, reply
            )
        )
        return rc, list(rtts[: max(rc, 0)]), bytes(reply[:reply_len])


def bench_checksum(lib: Any, data: bytes, iterations: int) -> int:
    buf = (ctypes.c_uint8 * max(len(data), 1)).from_buffer_copy(data or b"\0")
    return int(bench_function(lib, "wsgw_bench_checksum")(buf, len(data), iterations))


def flow_template(flow: FlowStruct, template: bytes) -> None:
    """Write the ACK frame template into the flow (at most 68 bytes)."""
    if len(template) > 68:
        raise ValueError(f"ACK template of {len(template)} bytes, at most 68")
    ctypes.memmove(flow.ack_template, template, len(template))
    flow.ack_len = len(template)
