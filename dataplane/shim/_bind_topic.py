"""ctypes prototypes and typed wrappers for topic extraction (topic.c, wsgw_topic.h).

A `TopicSpec` is a fixed-size struct filled once per dialect (no C allocation, nothing to
free). `TopicBatch` owns reusable arrays so that one call scans a whole burst of messages:
the ctypes crossing costs about a microsecond, the scan itself tens of nanoseconds, so
per-message calls would be all overhead.
"""

from __future__ import annotations

import ctypes
import functools
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from dataplane.errors import DataplaneError
from dataplane.shim._loader import library
from dataplane.shim._loader import load as load_shim

MAX_PATHS = 4
MAX_DEPTH = 4
MAX_KEY = 48
MAX_NESTING = 1024

# enum wsgw_json_kind
ABSENT, STRING, STRING_ESC, NUMBER, TRUE, FALSE, NULL, OBJECT, ARRAY = range(9)
KIND_NAMES = (
    "absent",
    "string",
    "string_esc",
    "number",
    "true",
    "false",
    "null",
    "object",
    "array",
)
# enum wsgw_topic_status
OK, PARTIAL, MALFORMED, TOO_DEEP = 0, 1, -1, -2
# flags
PATH_PRESENCE = 0x1
SPEC_STRICT = 0x1

#: A path component: an object key (str) or an array index (int).
Component = str | int


class TopicError(DataplaneError):
    """A topic spec that the scanner cannot take (too many paths, a key too long...)."""


class TopicKey(ctypes.Structure):
    _fields_ = [
        ("index", ctypes.c_uint16),
        ("is_index", ctypes.c_uint8),
        ("len", ctypes.c_uint8),
        ("name", ctypes.c_char * MAX_KEY),
    ]


class TopicPath(ctypes.Structure):
    _fields_ = [
        ("depth", ctypes.c_uint8),
        ("flags", ctypes.c_uint8),
        ("reserved", ctypes.c_uint16),
        ("keys", TopicKey * MAX_DEPTH),
    ]


class TopicSpec(ctypes.Structure):
    _fields_ = [
        ("n_paths", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("paths", TopicPath * MAX_PATHS),
    ]


class TopicSpan(ctypes.Structure):
    _fields_ = [
        ("offset", ctypes.c_uint32),
        ("length", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),
    ]


_u32p = ctypes.POINTER(ctypes.c_uint32)

PROTOTYPES: dict[str, tuple[Any, list[Any]]] = {
    "wsgw_topic_spec_size": (ctypes.c_uint32, []),
    "wsgw_topic_spec_check": (ctypes.c_int, [ctypes.POINTER(TopicSpec)]),
    "wsgw_topic_extract": (
        ctypes.c_int,
        [ctypes.POINTER(TopicSpec), ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(TopicSpan)],
    ),
    "wsgw_topic_extract_batch": (
        ctypes.c_int,
        [
            ctypes.POINTER(TopicSpec),
            ctypes.c_void_p,
            _u32p,
            _u32p,
            ctypes.c_uint32,
            ctypes.POINTER(TopicSpan),
            ctypes.POINTER(ctypes.c_int8),
        ],
    ),
}


@dataclass(frozen=True)
class Span:
    """Where one path's value sits in a message; kind ABSENT when not found."""

    offset: int
    length: int
    kind: int

    @property
    def found(self) -> bool:
        return self.kind != ABSENT


@functools.cache
def _lib() -> Any:
    """The library, once its struct wsgw_topic_spec is known to be ours (checked once)."""
    lib = library()
    size = int(lib.wsgw_topic_spec_size())
    if size != ctypes.sizeof(TopicSpec):
        raise TopicError(
            f"struct wsgw_topic_spec is {size} bytes in the shim, {ctypes.sizeof(TopicSpec)} "
            "in _bind_topic.py: rebuild the shim (`make shim`)"
        )
    return lib


def build_spec(
    paths: Sequence[Sequence[Component]],
    *,
    presence: Sequence[bool] = (),
    strict: bool = False,
) -> TopicSpec:
    """Fill the C struct for these paths; presence[i] marks path i as presence-only."""
    if not 1 <= len(paths) <= MAX_PATHS:
        raise TopicError(f"{len(paths)} paths; a spec takes 1..{MAX_PATHS}")
    spec = TopicSpec()
    spec.n_paths = len(paths)
    spec.flags = SPEC_STRICT if strict else 0
    for i, components in enumerate(paths):
        if not 1 <= len(components) <= MAX_DEPTH:
            raise TopicError(f"path {list(components)!r}: depth must be 1..{MAX_DEPTH}")
        path = spec.paths[i]
        path.depth = len(components)
        path.flags = PATH_PRESENCE if i < len(presence) and presence[i] else 0
        for d, component in enumerate(components):
            key = path.keys[d]
            if isinstance(component, int):
                if not 0 <= component <= 0xFFFF:
                    raise TopicError(f"array index {component} out of range 0..65535")
                key.is_index = 1
                key.index = component
            else:
                raw = component.encode()
                if len(raw) > MAX_KEY:
                    raise TopicError(f"key {component!r} is longer than {MAX_KEY} bytes")
                key.is_index = 0
                key.len = len(raw)
                # Byte copy: assigning to a c_char array would stop at a NUL in the key.
                ctypes.memmove(ctypes.addressof(key) + TopicKey.name.offset, raw, len(raw))
    lib = _lib()
    rc = int(lib.wsgw_topic_spec_check(ctypes.byref(spec)))
    if rc < 0:
        raise TopicError(load_shim().last_error(), -rc)
    return spec


def extract(spec: TopicSpec, message: bytes) -> tuple[int, list[Span]]:
    """Scan one message (for tests and the slow path; bursts go through TopicBatch)."""
    out = (TopicSpan * spec.n_paths)()
    status = int(_lib().wsgw_topic_extract(ctypes.byref(spec), message, len(message), out))
    if status < TOO_DEEP:
        raise TopicError(load_shim().last_error(), -status)
    return status, [Span(s.offset, s.length, s.kind) for s in out]


class TopicBatch:
    """Reusable arrays for scanning bursts of messages with one C call each."""

    def __init__(self, spec: TopicSpec, capacity: int = 256) -> None:
        self.spec = spec
        self.n_paths = int(spec.n_paths)
        self._extract = _lib().wsgw_topic_extract_batch
        self._spec_ref = ctypes.byref(spec)
        self._allocate(capacity)
        self.count = 0
        self._loaded = 0
        self._blob = b""

    def _allocate(self, capacity: int) -> None:
        self.capacity = capacity
        self._offsets = (ctypes.c_uint32 * capacity)()
        self._lengths = (ctypes.c_uint32 * capacity)()
        self._out = (TopicSpan * (capacity * self.n_paths))()
        self._status = (ctypes.c_int8 * capacity)()
        self._offsets_mv = memoryview(self._offsets).cast("B").cast("I")
        self._lengths_mv = memoryview(self._lengths).cast("B").cast("I")
        #: Per message i and path p: offset, length, kind at [(i * n_paths + p) * 3 + 0..2].
        self.spans = memoryview(self._out).cast("B").cast("I")
        #: Per message: OK, PARTIAL, MALFORMED or TOO_DEEP.
        self.status = memoryview(self._status).cast("B").cast("b")

    def run(self, messages: Sequence[bytes]) -> int:
        """Scan messages; returns how many had every path. Results in spans/status."""
        self.load(messages)
        return self.scan()

    def load(self, messages: Sequence[bytes]) -> None:
        """Lay messages out for scan() (run() does both; benchmarks time scan() alone)."""
        n = len(messages)
        if n > self.capacity:
            self._allocate(max(n, self.capacity * 2))
        self._loaded = n
        if n == 0:
            self._blob = b""
            return
        lengths = array("I", map(len, messages))
        offsets = array("I", accumulate(lengths, initial=0))
        self._lengths_mv[:n] = lengths
        self._offsets_mv[:n] = offsets[:n]
        self._blob = b"".join(messages)

    def scan(self) -> int:
        """Scan what load() laid out: one C call."""
        return self._call(self._blob, self._loaded)

    def run_buffer(
        self, buf: bytes | bytearray, offsets: Sequence[int], lengths: Sequence[int]
    ) -> int:
        """Scan messages that already sit in one buffer (a receive arena): no copy."""
        n = len(offsets)
        if len(lengths) != n:
            raise ValueError("offsets and lengths differ in length")
        if n > self.capacity:
            self._allocate(max(n, self.capacity * 2))
        for off, size in zip(offsets, lengths, strict=True):
            if off < 0 or size < 0 or off + size > len(buf):
                raise ValueError(f"message at {off}+{size} lies outside the {len(buf)}-byte buffer")
        self._offsets_mv[:n] = array("I", offsets)
        self._lengths_mv[:n] = array("I", lengths)
        if isinstance(buf, bytearray):
            view: Any = (ctypes.c_char * len(buf)).from_buffer(buf) if buf else b""
            return self._call(view, n)
        return self._call(buf, n)

    def _call(self, buf: Any, n: int) -> int:
        rc = int(
            self._extract(
                self._spec_ref, buf, self._offsets, self._lengths, n, self._out, self._status
            )
        )
        if rc < 0:
            raise TopicError(load_shim().last_error(), -rc)
        self.count = n
        return rc

    def span(self, i: int, path: int) -> Span:
        """The span of one path in message i of the last run (tests; hot code reads spans)."""
        base = (i * self.n_paths + path) * 3
        return Span(self.spans[base], self.spans[base + 1], self.spans[base + 2])
