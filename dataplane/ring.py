"""The shared-memory message ring: the engine writes, local consumer processes read.

One writer (the engine thread) appends variable-length messages to a ring in /dev/shm (or a
memfd) and never waits for anyone; each reader keeps its own position, copies what it reads
into a private arena and validates the copy, so a reader that fell a whole ring behind gets a
`Gap` with the exact number of messages it lost, then the oldest messages still there, and
never a torn one. Layout, protocol and the reasons behind them: `shim/wsgw_ring.h`.

    with RingWriter.create(ring_name("gw1", "md"), 64 << 20) as ring:
        tid = ring.register_topic("binance:btcusdt@trade")
        ring.write_batch([(session, tid, payload), ...])

    reader = RingReader.attach(ring_name("gw1", "md"), topics=["binance:*"])
    for event in reader:            # blocks; ends when the writer closes the ring
        if isinstance(event, Gap): ...
        else: handle(event.topic, event.payload)   # a memoryview, valid until the next read

How a reader waits is its `WaitPolicy`: "futex" (sleep at once, no CPU while idle, a wake-up
costs tens of microseconds on a loaded machine), "spin" (poll for `spin_us`, then sleep: no
wake-up while the feed keeps coming within spin_us) or "busy" (poll until something comes: a
whole core, the lowest latency). Spinning runs in C with the GIL released. The writer may
recommend one in the ring's header (`RingWriter.set_wait_hint`: the gateway's latency
profile); a reader opened with wait="auto" (the default) follows it, and waits on the futex
when the writer recommends nothing. `RingReader.wait_origin` says where its policy came from.

Readers are visible: each one that can write the ring's wait page takes a slot in the ring's
reader table (pid, name, position, heartbeat, gaps and lost), so the gateway lists them with
their lag (`RingWriter.readers`) and may close one (`RingWriter.close_reader`: the reader's
next read or wait raises `RingEvictedError`). The table has `MAX_READERS` slots; a reader
that finds none free reads as before, unlisted.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import re
import struct
import threading
import time
import weakref
from array import array
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, NamedTuple, TypedDict, Unpack

from dataplane.closing import Closing
from dataplane.errors import DataplaneError
from dataplane.sched import SLICE_LEASES
from dataplane.shim import (
    RING_API,
    RING_F_REPLACE,
    RING_F_START_OLDEST,
    RING_INFO_CLOSED,
    RING_INFO_LOST,
    RING_INFO_RESUME_SEQ,
    RING_INFO_TOPIC_COUNT,
    RING_INFO_WOKE_NS,
    RING_LAYOUT,
    RING_MAGIC,
    RING_MAX_READERS,
    RING_REC_HDR,
    RING_SPIN_ADAPTIVE,
    RING_SPIN_BUSY,
    RING_TOPIC_NAME_MAX,
    RING_VIEW_FORMAT,
    RING_VIEW_SIZE,
    RING_WAIT_ADAPTIVE,
    RING_WAIT_BUSY,
    RING_WAIT_FUTEX,
    RING_WAIT_NONE,
    RING_WAIT_SPIN,
    RING_WAIT_SPIN_MAX_NS,
    RingReadBuffers,
    RingWriteFn,
    ring_attach,
    ring_bench_latency,
    ring_bench_pace,
    ring_bench_read,
    ring_bench_rw,
    ring_bench_write,
    ring_close_reader,
    ring_create,
    ring_detach,
    ring_interrupt,
    ring_last_error,
    ring_next_seq,
    ring_reader_info,
    ring_reader_set_name,
    ring_reader_slot,
    ring_reader_stats,
    ring_readers,
    ring_seek,
    ring_set_filter,
    ring_set_wait_hint,
    ring_set_writer_cpu,
    ring_spin_adaptive,
    ring_topic_name,
    ring_topic_register,
    ring_versions,
    ring_wait,
    ring_wait_hint,
    ring_writer_alive,
    ring_writer_close,
    ring_writer_cpu,
    ring_writer_fd,
    ring_writer_info,
    ring_writer_stats,
)

SHM_DIR = Path("/dev/shm")  # noqa: S108 - shared memory, not a temporary file
DEFAULT_CAPACITY = 64 << 20
DEFAULT_MAX_TOPICS = 4096
MIN_CAPACITY = 4096
MAX_CAPACITY = 1 << 40
TOPIC_NAME_MAX = RING_TOPIC_NAME_MAX
MAX_BATCH = 65536
#: Size of a record header; a message of n bytes takes (32 + n) rounded up to 8 in the ring.
RECORD_HEADER = RING_REC_HDR
#: Layout constants a tool or test may need to read a ring file by hand.
MAGIC = RING_MAGIC
LAYOUT_VERSION = RING_LAYOUT
#: Slots in a ring's reader table: readers beyond that many read unlisted.
MAX_READERS = RING_MAX_READERS

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,200}")
_VIEW = struct.Struct(RING_VIEW_FORMAT)
_new_tuple = tuple.__new__
_CANCELED, _EINTR = -errno.ECANCELED, -errno.EINTR


# ---- errors -----------------------------------------------------------------------------------
class RingError(DataplaneError):
    """Base of the ring's errors; `errno` carries the C side's code."""


class RingNotFoundError(RingError):
    """No ring by that name (the gateway is not running, or uses another name)."""


class RingExistsError(RingError):
    """A ring by that name exists; `replace=True` takes it over when its writer is gone."""


class RingBusyError(RingError):
    """Another live process writes this ring."""


class RingFormatError(RingError):
    """The file is not a wsgw ring, or its header is inconsistent."""


class RingVersionError(RingFormatError):
    """A wsgw ring of a layout version this library does not read."""


class RingCorruptError(RingError):
    """A record failed validation without having been overwritten: the file was damaged."""


class RingClosedError(RingError):
    """The ring handle was closed."""


class RingEvictedError(RingError):
    """The gateway's operator closed this reader (RingWriter.close_reader): it reads no more."""


class MessageTooLargeError(RingError):
    """A message longer than the ring's max_payload (capacity / 2 - 32, at most 64 MiB)."""


class TopicError(RingError):
    """A topic name that is empty or too long, a full topic table, or a message whose topic
    id is outside the table."""


_ERRNO_CLASSES: dict[int, type[RingError]] = {
    errno.ENOENT: RingNotFoundError,
    errno.EBADF: RingNotFoundError,  # attach_fd: no such descriptor
    errno.EEXIST: RingExistsError,
    errno.EBUSY: RingBusyError,
    errno.EBADMSG: RingFormatError,
    errno.EPROTONOSUPPORT: RingVersionError,
    errno.EMSGSIZE: MessageTooLargeError,
    errno.ENAMETOOLONG: TopicError,
    errno.ENOSPC: RingError,
    errno.ECONNABORTED: RingEvictedError,
}


def _error(rc: int, what: str, override: type[RingError] | None = None) -> RingError:
    code = -rc
    text = ring_last_error() or os.strerror(code)
    cls = override or _ERRNO_CLASSES.get(code, RingError)
    return cls(f"{what}: {text}", code)


def _write_error(rc: int) -> RingError:
    if rc == -errno.EBADF:
        return RingClosedError("ring writer is closed", errno.EBADF)
    # EINVAL from a write is always a topic id outside the table.
    return _error(rc, "ring write", TopicError if rc == -errno.EINVAL else None)


def _check_library() -> None:
    api, layout = ring_versions()
    if (api, layout) != (RING_API, RING_LAYOUT):
        raise RingVersionError(
            f"the shim's ring is API {api} / layout {layout}, this wsgw expects "
            f"{RING_API} / {RING_LAYOUT}; rebuild it with `make shim`"
        )


# ---- names ------------------------------------------------------------------------------------
def ring_name(gateway: str, ring: str = "messages") -> str:
    """The conventional name of a gateway's ring: wsgw-<gateway>-<ring>."""
    name = f"wsgw-{gateway}-{ring}"
    if not _NAME.fullmatch(name):
        raise ValueError(f"invalid ring name {name!r}: letters, digits, '.', '_', '-' only")
    return name


def ring_path(name: str | os.PathLike[str]) -> Path:
    """A bare name lives in /dev/shm; anything with a slash is a path as given."""
    text = os.fspath(name)
    if "/" in text:
        return Path(text)
    if not _NAME.fullmatch(text):
        raise ValueError(f"invalid ring name {text!r}: letters, digits, '.', '_', '-' only")
    return SHM_DIR / text


def record_size(payload_len: int) -> int:
    """Bytes one message takes in the ring (for sizing a ring to hold a backlog)."""
    return (RECORD_HEADER + payload_len + 7) & ~7


# ---- wait policies ----------------------------------------------------------------------------
WaitMode = Literal["futex", "spin", "busy", "adaptive"]
WAIT_MODES: tuple[WaitMode, ...] = ("futex", "spin", "busy", "adaptive")
#: The modes that take a time (spin_us: the spin, or the adaptive policy's cap).
TIMED_MODES = ("spin", "adaptive")
#: The spin of the "spin" policy when none is given: a feed publishing at 20k msg/s and up
#: (one message every 50 us or less) then never pays a futex wake-up.
DEFAULT_SPIN_US = 100.0


@dataclass(frozen=True)
class WaitPolicy:
    """How a reader waits for the writer (see wsgw_ring.h, "Wait policies").

    - futex: sleep on the ring's futex at once (the default; no CPU while idle);
    - spin: poll for spin_us (cpu_relax), then sleep on the futex;
    - busy: poll until data, the close, an interrupt or the timeout: a whole core. Once the
      writer is gone (crashed) it stops spinning and sleeps;
    - adaptive: spin up to twice the recent wait when that is under spin_us (the cap), else
      sleep at once: a feed fast enough to be caught within the cap pays no wake-up, a slow
      one no CPU (WSGW_RING_SPIN_ADAPTIVE in wsgw_ring.h).
    `WaitPolicy.parse("spin:50")` reads the command-line form (mode[:spin_us])."""

    mode: WaitMode = "futex"
    spin_us: float = DEFAULT_SPIN_US

    def __post_init__(self) -> None:
        if self.mode not in WAIT_MODES:
            raise ValueError(f"wait mode must be one of {', '.join(WAIT_MODES)}, not {self.mode!r}")
        if not 0 < self.spin_us <= 10_000_000:
            raise ValueError(f"spin_us must be > 0 and at most 10 s, not {self.spin_us}")

    @classmethod
    def parse(cls, value: WaitPolicy | str | None) -> WaitPolicy:
        """A policy from "futex", "spin", "spin:<us>" or "busy" (None: the default)."""
        if value is None:
            return cls()
        if isinstance(value, WaitPolicy):
            return value
        mode, _, spin = value.strip().partition(":")
        if mode not in WAIT_MODES:
            raise ValueError(
                f"wait policy must be futex, spin[:us], adaptive[:us] or busy, not {value!r}"
            )
        if spin and mode not in TIMED_MODES:
            raise ValueError(f"only the spin and adaptive policies take a time ({value!r})")
        try:
            spin_us = float(spin) if spin else DEFAULT_SPIN_US
        except ValueError:
            raise ValueError(f"spin time must be microseconds, not {spin!r}") from None
        return cls(mode, spin_us)

    @property
    def spin_ns(self) -> int:
        """wsgw_ring_wait's spin_ns: 0 futex, > 0 spin then futex, < 0 busy; adaptive: its
        cap | RING_SPIN_ADAPTIVE."""
        if self.mode == "futex":
            return 0
        if self.mode == "busy":
            return RING_SPIN_BUSY
        spin = max(1, int(self.spin_us * 1000))
        return spin | RING_SPIN_ADAPTIVE if self.mode == "adaptive" else spin

    @property
    def spin_cap_us(self) -> float:
        """The longest one wait spins (us) before it sleeps: 0 futex, inf busy."""
        if self.mode == "futex":
            return 0.0
        return float("inf") if self.mode == "busy" else self.spin_us

    def __str__(self) -> str:
        return f"{self.mode}:{self.spin_us:g}" if self.mode in TIMED_MODES else self.mode

    def to_hint(self) -> tuple[int, int]:
        """(mode, spin_ns) as the ring header's wait hint stores them."""
        if self.mode in TIMED_MODES:
            spin_ns = min(max(1, int(self.spin_us * 1000)), RING_WAIT_SPIN_MAX_NS)
            return (RING_WAIT_SPIN if self.mode == "spin" else RING_WAIT_ADAPTIVE), spin_ns
        return (RING_WAIT_BUSY if self.mode == "busy" else RING_WAIT_FUTEX), 0

    @classmethod
    def from_hint(cls, mode: int, spin_ns: int) -> WaitPolicy | None:
        """The policy a ring header's wait hint names (None: the writer gave none)."""
        if mode == RING_WAIT_FUTEX:
            return cls("futex")
        if mode == RING_WAIT_BUSY:
            return cls("busy")
        if mode == RING_WAIT_SPIN:
            return cls("spin", spin_ns / 1000)
        if mode == RING_WAIT_ADAPTIVE:
            return cls("adaptive", spin_ns / 1000)
        return None


#: A reader's wait="auto": follow the writer's recommendation (the ring header's wait hint).
WAIT_AUTO = "auto"
#: Where a reader's policy came from: given by the caller, recommended by the ring's writer
#: (the gateway's latency profile), or the futex default (auto, and the writer said nothing).
WaitOrigin = Literal["given", "gateway", "default"]


def choose_wait(
    wanted: WaitPolicy | str | None, recommended: WaitPolicy | None
) -> tuple[WaitPolicy, WaitOrigin]:
    """The policy a reader uses: the one it was given, else (None or "auto") the writer's
    recommendation, else futex."""
    if wanted is None or (isinstance(wanted, str) and wanted.strip() == WAIT_AUTO):
        if recommended is not None:
            return recommended, "gateway"
        return WaitPolicy(), "default"
    return WaitPolicy.parse(wanted), "given"


# ---- events -----------------------------------------------------------------------------------
class RingMessage(NamedTuple):
    """One message. payload is a memoryview of the reader's arena, valid until its next read
    (copy it with bytes() to keep it), or bytes when the reader was opened with copy=True."""

    seq: int
    session_id: int
    topic: str
    ts_ns: int
    payload: memoryview | bytes
    topic_id: int


class Gap(NamedTuple):
    """The reader was lapped: messages first_seq .. first_seq + lost - 1 (all topics) were
    overwritten before it read them. The messages that follow are the oldest still there."""

    lost: int
    first_seq: int

    @property
    def last_seq(self) -> int:
        return self.first_seq + self.lost - 1


RingEvent = RingMessage | Gap
Payload = bytes | bytearray | memoryview


@dataclass(frozen=True)
class RingInfo:
    """A snapshot of a ring's header."""

    capacity: int
    max_payload: int
    max_topics: int
    topic_count: int
    write_pos: int
    last_seq: int  # last sequence written (0: none yet)
    oldest_seq: int  # oldest sequence still in the ring (last_seq + 1 when empty)
    closed: bool
    writer_pid: int
    instance: int  # the epoch: random, one per ring creation (RingWriter.epoch)
    created_ns: int
    waiters: int

    @classmethod
    def _from(cls, raw: dict[str, int]) -> RingInfo:
        return cls(
            capacity=raw["capacity"],
            max_payload=raw["max_payload"],
            max_topics=raw["max_topics"],
            topic_count=raw["topic_count"],
            write_pos=raw["write_pos"],
            last_seq=raw["write_seq"],
            oldest_seq=raw["tail_seq"],
            closed=bool(raw["state"] & 1),
            writer_pid=raw["writer_pid"],
            instance=raw["instance"],
            created_ns=raw["created_ns"],
            waiters=raw["waiters"],
        )


@dataclass(frozen=True)
class RingReaderSlot:
    """One reader in the ring's reader table, as the writer sees it."""

    slot: int
    pid: int
    name: str
    next_seq: int  # the sequence it expects next: it has read up to next_seq - 1
    messages: int  # delivered to it
    gaps: int  # times it was lapped
    lost: int  # messages lost in those gaps (dropped)
    attached_ns: int  # CLOCK_REALTIME
    heartbeat_ns: int  # its last read or wait, CLOCK_REALTIME
    close_requested: bool  # close_reader was called; it stops at its next read or wait

    def lag(self, last_seq: int) -> int:
        """Messages written (up to last_seq) that it has not read yet."""
        return max(0, last_seq + 1 - self.next_seq)


# ---- writer -----------------------------------------------------------------------------------
class RingWriter(Closing):
    """The producer side of a ring. Every C writer call takes the ring's writer lock (an
    uncontended spinlock): the hub writes from the sessions' threads and the engines' C
    feeds write from their polls (dataplane/feed.py)."""

    def __init__(self, handle: int, path: Path | None) -> None:
        self._handle = handle
        self.path = path
        self._fn = RingWriteFn(handle)
        info = ring_writer_info(handle)
        self.capacity = info["capacity"]
        self.max_payload = info["max_payload"]
        self.max_topics = info["max_topics"]
        #: This ring's run identifier (the header's random `instance`, one per creation):
        #: a reader that finds another epoch than it saw last knows the writer restarted.
        self.epoch: int = info["instance"]
        self._topics: dict[str, int] = {}
        self._wait_hint: WaitPolicy | None = None
        self._finalizer = weakref.finalize(self, ring_writer_close, handle, path is not None)

    @classmethod
    def create(
        cls,
        name: str | os.PathLike[str] | None,
        capacity_bytes: int = DEFAULT_CAPACITY,
        *,
        max_topics: int = DEFAULT_MAX_TOPICS,
        replace: bool = False,
        mode: int = 0o600,
    ) -> RingWriter:
        """Create the ring `name` (see ring_path), or an anonymous memfd ring when name is
        None (hand `fd` to readers). capacity_bytes: a power of two >= 4096. replace: take
        over an existing ring whose writer is gone (a live one raises RingBusyError)."""
        if (
            capacity_bytes < MIN_CAPACITY
            or capacity_bytes > MAX_CAPACITY
            or (capacity_bytes & (capacity_bytes - 1))
        ):
            raise ValueError(
                f"capacity_bytes must be a power of two from {MIN_CAPACITY} to 2**40, "
                f"not {capacity_bytes}"
            )
        _check_library()
        path = None if name is None else ring_path(name)
        rc, handle = ring_create(
            None if path is None else os.fsencode(path),
            capacity_bytes,
            max_topics,
            mode,
            RING_F_REPLACE if replace else 0,
        )
        if rc < 0:
            raise _error(rc, f"create ring {path or '(memfd)'}")
        return cls(handle, path)

    def _live(self) -> int:
        if not self._finalizer.alive:
            raise RingClosedError("ring writer is closed", errno.EBADF)
        return self._handle

    @property
    def fd(self) -> int:
        """The ring's file descriptor (to pass a memfd ring to readers); owned by the writer."""
        return ring_writer_fd(self._live())

    def register_topic(self, name: str) -> int:
        """The topic's id (> 0), registering it on first use; the same name gives the same id."""
        tid = self._topics.get(name)
        if tid is not None:
            return tid
        rc = ring_topic_register(self._live(), name.encode())
        if rc < 0:
            raise _error(rc, f"register topic {name!r}", TopicError)
        self._topics[name] = rc
        return rc

    @property
    def topics(self) -> dict[str, int]:
        return dict(self._topics)

    @property
    def handle(self) -> int:
        """The C writer, for C code that writes to this ring too (the engines' feeds): such
        code holds a reference in C, so `close` never unmaps the ring under it (its later
        writes fail)."""
        return int(self._live())

    def write(self, session_id: int, topic_id: int, payload: Payload, ts: int | None = None) -> int:
        """Append one message; returns its sequence number. ts: receive time in CLOCK_REALTIME
        ns (None: now). Prefer write_batch: one call per poll, not per message."""
        data = payload if type(payload) is bytes else bytes(payload)
        seq = self._fn.one(session_id, topic_id, ts or 0, data)
        if seq < 0:
            raise _write_error(seq)
        return seq

    def write_batch(
        self,
        items: Sequence[tuple[int, int, Payload] | tuple[int, int, Payload, int | None]],
    ) -> int:
        """Append (session_id, topic_id, payload[, ts]) items in one C call, all or none (a
        too-large message or a bad topic id raises before anything is written). Returns the
        first sequence number of the batch (for an empty batch: the next one)."""
        if not items:
            return self.last_seq + 1
        try:
            columns = tuple(zip(*items, strict=True))
        except ValueError:  # some items carry ts, some not
            columns = tuple(
                zip(*(it if len(it) == 4 else (*it, None) for it in items), strict=True)
            )
        if len(columns) == 3:
            sessions, topics, payloads = columns
            ts = None
        elif len(columns) == 4:
            sessions, topics, payloads, stamps = columns
            ts = array("Q", [t or 0 for t in stamps])
        else:
            raise ValueError("write_batch items are (session_id, topic_id, payload[, ts])")
        return self.write_columns(sessions, topics, payloads, ts)

    def write_columns(
        self,
        sessions: Sequence[int],
        topics: Sequence[int],
        payloads: Sequence[Payload],
        ts: Sequence[int] | None = None,
    ) -> int:
        """write_batch from columns (what the engine has anyway): the cheapest Python path."""
        count = len(payloads)
        if not (len(sessions) == len(topics) == count) or (ts is not None and len(ts) != count):
            raise ValueError("write_columns: columns of different lengths")
        if count == 0:
            return self.last_seq + 1
        try:
            blob = b"".join(payloads)
            first = self._fn.packed(
                blob,
                array(
                    "I", [len(p) if type(p) is bytes else memoryview(p).nbytes for p in payloads]
                ),
                array("I", sessions),
                array("I", topics),
                ts if ts is None or isinstance(ts, array) else array("Q", ts),
            )
        except OverflowError as exc:
            raise ValueError(f"write_batch: a field does not fit its type: {exc}") from exc
        if first < 0:
            raise _write_error(first)
        return first

    @property
    def last_seq(self) -> int:
        return ring_writer_info(self._live())["write_seq"]

    def info(self) -> RingInfo:
        return RingInfo._from(ring_writer_info(self._live()))

    def stats(self) -> dict[str, int]:
        """messages, bytes, batches, pads, overwritten (left the ring), wakeups."""
        return ring_writer_stats(self._live())

    def readers(self) -> list[RingReaderSlot]:
        """The readers in the ring's reader table, lowest slot first (any process). The slots
        of readers whose process is gone are freed on the way."""
        return [
            RingReaderSlot(
                slot=int(row["slot"]),
                pid=int(row["pid"]),
                name=str(row["name"]),
                next_seq=int(row["next_seq"]),
                messages=int(row["messages"]),
                gaps=int(row["gaps"]),
                lost=int(row["lost"]),
                attached_ns=int(row["attached_ns"]),
                heartbeat_ns=int(row["heartbeat_ns"]),
                close_requested=bool(int(row["flags"]) & 1),
            )
            for row in ring_readers(self._live())
        ]

    def close_reader(self, slot: int, pid: int) -> bool:
        """Ask the reader in `slot` to stop, if its pid is still `pid` (a slot is reused once
        its reader left): its next read or wait raises RingEvictedError. False: no such
        reader any more."""
        if not (0 <= slot < MAX_READERS and 0 < pid < 1 << 32):
            return False
        return ring_close_reader(self._live(), slot, pid) == 0

    def set_wait_hint(self, policy: WaitPolicy | str | None) -> None:
        """Recommend a wait policy to the readers that follow the writer's advice (wait
        "auto"; they look when they attach). None withdraws the advice."""
        hint = None if policy is None else WaitPolicy.parse(policy)
        mode, spin_ns = (RING_WAIT_NONE, 0) if hint is None else hint.to_hint()
        rc = ring_set_wait_hint(self._live(), mode, spin_ns)
        if rc < 0:
            raise _error(rc, "ring wait hint")
        self._wait_hint = hint

    def set_writer_cpu(self, cpu: int | None) -> None:
        """Publish the CPU the feed's engine is pinned to (None: withdraw it), for readers
        that wait on that CPU (RingReader.writer_cpu, Client.attach(cpu="engine"))."""
        rc = ring_set_writer_cpu(self._live(), -1 if cpu is None else cpu)
        if rc < 0:
            raise _error(rc, "ring writer cpu")

    @property
    def wait_hint(self) -> WaitPolicy | None:
        """The wait policy this writer recommends (None: none)."""
        return self._wait_hint

    def close(self, unlink: bool = True) -> None:
        """Mark the ring closed (readers drain it and stop), then unmap; unlink the file
        unless asked not to (and only while the name is still this ring's)."""
        if self._finalizer.alive:
            self._finalizer.detach()
            self._fn.close()  # the write path checks nothing itself: it now fails cleanly
            ring_writer_close(self._handle, unlink and self.path is not None)

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def __repr__(self) -> str:
        where = self.path or "memfd"
        return f"<RingWriter {where} capacity={self.capacity} closed={self.closed}>"


# ---- reader -----------------------------------------------------------------------------------
def _detach_reader(handle: int, sliced: list[int]) -> None:
    """A reader's end (close or garbage): detach, and give its waiting threads their slice."""
    ring_detach(handle)
    for tid in sliced:
        SLICE_LEASES.release(tid)
    sliced.clear()


Start = Literal["latest", "oldest"]


class AttachOptions(TypedDict, total=False):
    """The options `RingReader.attach` and `RingReader.attach_fd` take, listed once so
    that they stay the same in both; the defaults are `RingReader._open`'s.

    copy: payloads as bytes instead of views (default False). start: "latest" (only what
    comes next, the default) or "oldest" (what is still in the ring). max_batch: messages
    per read_batch at the most (default 1024). wait: how read_batch and wait wait
    (WaitPolicy or "futex", "spin[:us]", "busy"), or "auto" (the default; None says the
    same): as the ring's writer recommends, futex when it says nothing. reader_name: how the
    gateway lists this reader (default: the process's name). slice_ns: the waiting
    thread's scheduler slice (RingReader.slice_ns; None, the default: its own)."""

    copy: bool
    start: Start
    max_batch: int
    wait: WaitPolicy | str | None
    reader_name: str | None
    slice_ns: int | None


class RingReader(Closing):
    """One consumer's view of a ring. One thread reads; another may `interrupt` or `close`."""

    def __init__(
        self,
        handle: int,
        path: Path | None,
        topics: Iterable[str] | None,
        *,
        copy: bool,
        max_batch: int,
        wait: WaitPolicy | str | None = WAIT_AUTO,
        name: str | None = None,
        slice_ns: int | None = None,
    ) -> None:
        if slice_ns is not None and slice_ns <= 0:
            ring_detach(handle)
            raise ValueError(f"slice_ns must be > 0 or None, not {slice_ns}")
        #: The scheduler slice (ns) a thread asks for from its first wait on this reader
        #: until the reader closes (dataplane.sched, EEVDF): its wake-up from the futex
        #: then preempts the task running on the CPU instead of queueing behind it for up
        #: to that task's slice (1.4 ms by default). None: the thread's own slice.
        self.slice_ns = slice_ns
        #: Native ids of the threads that took this reader's slice (released on close).
        self._sliced: list[int] = []
        self._slice_tried: set[int] = set()
        try:
            #: How this reader waits, and where that came from (WaitOrigin).
            self.wait_policy, self.wait_origin = choose_wait(
                wait, WaitPolicy.from_hint(*ring_wait_hint(handle))
            )
        except ValueError:
            ring_detach(handle)
            raise
        if not 1 <= max_batch <= MAX_BATCH:
            ring_detach(handle)
            raise ValueError(f"max_batch must be 1..{MAX_BATCH}, not {max_batch}")
        self._handle = handle
        self.path = path
        self.copy = copy
        info = ring_reader_info(handle)
        self.capacity = info["capacity"]
        self.max_payload = info["max_payload"]
        self.max_topics = info["max_topics"]
        #: The ring's run identifier (RingWriter.epoch): another one at the same path
        #: means the writer (the gateway) restarted and sequence numbers began again.
        self.epoch: int = info["instance"]
        self.max_batch = max_batch
        self._buf = RingReadBuffers(handle, max_batch, max(1 << 20, self.max_payload))
        self._lock = threading.Lock()
        self._stop = False
        self._closed_seen = False
        # topic id -> name for every possible id ("" until registered; 0 is "no topic"), so
        # the per-message lookup needs no bounds check; _known: ids filled in so far.
        self._names: list[str] = [""] * self.max_topics
        self._known = 0
        self._patterns: list[str] | None = None
        self._wanted: set[int] = set()
        self._filter_upto = 0
        self._finalizer = weakref.finalize(self, _detach_reader, handle, self._sliced)
        self._refresh_topics(info["topic_count"])
        self.set_topics(topics)
        if name is not None:
            self.set_name(name)

    @property
    def writer_cpu(self) -> int | None:
        """The CPU the gateway's feed engine is pinned to, as it published it (None: none)."""
        cpu = ring_writer_cpu(self._live())
        return None if cpu < 0 else cpu

    @classmethod
    def attach(
        cls,
        name: str | os.PathLike[str],
        topics: Iterable[str] | None = None,
        **options: Unpack[AttachOptions],
    ) -> RingReader:
        """Attach to the ring `name` (see ring_path). topics: names or shell patterns
        ("binance:*") to deliver, None for all. options: see `AttachOptions`."""
        return cls._open(ring_path(name), -1, topics, **options)

    @classmethod
    def attach_fd(
        cls,
        fd: int,
        topics: Iterable[str] | None = None,
        **options: Unpack[AttachOptions],
    ) -> RingReader:
        """Attach to a ring by file descriptor (a memfd ring); the caller keeps its fd.
        topics and options: as `attach`'s."""
        return cls._open(None, fd, topics, **options)

    @classmethod
    def _open(
        cls,
        path: Path | None,
        fd: int,
        topics: Iterable[str] | None,
        *,
        copy: bool = False,
        start: Start = "latest",
        max_batch: int = 1024,
        wait: WaitPolicy | str | None = WAIT_AUTO,
        reader_name: str | None = None,
        slice_ns: int | None = None,
    ) -> RingReader:
        """attach and attach_fd: the ring at path (fd -1) or by its descriptor (path None)."""
        _check_library()
        rc, handle = ring_attach(None if path is None else os.fsencode(path), fd, cls._flags(start))
        if rc < 0:
            raise _error(rc, f"attach ring {path if path is not None else f'fd {fd}'}")
        return cls(
            handle, path, topics, copy=copy, max_batch=max_batch, wait=wait, name=reader_name,
            slice_ns=slice_ns,
        )  # fmt: skip

    @staticmethod
    def _flags(start: Start) -> int:
        if start not in ("latest", "oldest"):
            raise ValueError(f"start must be 'latest' or 'oldest', not {start!r}")
        return RING_F_START_OLDEST if start == "oldest" else 0

    def _live(self) -> int:
        if not self._finalizer.alive:
            raise RingClosedError("ring reader is closed", errno.EBADF)
        return self._handle

    # ---- the reader table -------------------------------------------------------------------
    @property
    def slot(self) -> int | None:
        """This reader's slot in the ring's reader table; None: unlisted (the file was
        read-only to it, or the table was full)."""
        index = ring_reader_slot(self._live())
        return None if index < 0 else index

    def set_name(self, name: str) -> None:
        """How the gateway lists this reader (up to 64 bytes of UTF-8; longer is cut).
        Nothing happens for an unlisted reader."""
        if ring_reader_slot(self._live()) >= 0:
            ring_reader_set_name(self._handle, name.encode()[:64])

    # ---- topics ---------------------------------------------------------------------------
    def set_topics(self, topics: Iterable[str] | None) -> None:
        """Deliver only these topic names or shell patterns (None: all). Topics the writer
        registers later are matched as they appear; none is missed in between."""
        with self._lock:
            self._patterns = None if topics is None else list(topics)
            self._apply_filter()

    def _refresh_topics(self, count: int) -> None:
        names = self._names
        for tid in range(self._known + 1, min(count, self.max_topics - 1) + 1):
            names[tid] = ring_topic_name(self._handle, tid) or ""
        self._known = max(self._known, min(count, self.max_topics - 1))

    def _matches(self, name: str) -> bool:
        assert self._patterns is not None
        return any(fnmatch.fnmatchcase(name, p) for p in self._patterns)

    def _apply_filter(self) -> None:
        """Push the filter to C for every topic known so far; ids above pass to Python,
        which decides once it has their names (messages of a topic registered meanwhile)."""
        upto = self._known
        if self._patterns is None:
            self._wanted = set()
            rc = ring_set_filter(self._handle, None, 0)
        else:
            self._wanted = {tid for tid in range(1, upto + 1) if self._matches(self._names[tid])}
            rc = ring_set_filter(self._handle, sorted(self._wanted), upto)
        if rc < 0:
            raise _error(rc, "set topic filter")
        self._filter_upto = upto

    @property
    def topics(self) -> dict[int, str]:
        """Topic id -> name, for every topic the writer registered so far."""
        self._refresh_topics(ring_reader_info(self._live())["topic_count"])
        return {tid: self._names[tid] for tid in range(1, self._known + 1)}

    # ---- reading --------------------------------------------------------------------------
    def read_batch(self, max: int | None = None, timeout: float | None = 0.0) -> list[RingEvent]:
        """Up to max messages (default max_batch), preceded by a Gap if the reader was lapped.
        timeout: 0 returns at once, None waits for data (or until the ring closes or the
        reader is interrupted), a number waits that many seconds at most."""
        limit = self.max_batch if max is None or max > self.max_batch else max
        if limit < 1:
            raise ValueError(f"max must be at least 1, not {max}")
        deadline = None if timeout is None else time.monotonic() + timeout
        fused = self.fused_wait
        while True:
            with self._lock:  # what is there now, keeping the GIL (the call is short)
                events = self._read_locked(limit)
            if events or timeout == 0 or self._stop or self._closed_seen:
                return events
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return events
            if self.slice_ns is not None:
                self.hold_slice()
            if fused:
                with self._lock:
                    self._live()
                    n = self._buf.read_wait(
                        limit, -1 if left is None else int(left * 1e9), self.wait_policy.spin_ns
                    )
                    if n == _CANCELED:
                        return events
                    if n != _EINTR:  # a signal: let Python run its handler, read on
                        events = self._events(n)
                if events or self._stop or self._closed_seen:
                    return events
                if deadline is not None and time.monotonic() >= deadline:
                    return events
            elif not self.wait(left):  # timed out or interrupted: one last look
                with self._lock:
                    return self._read_locked(limit)

    #: read_batch's wait and read in one C call (wsgw_ring_read_wait: one ctypes crossing per
    #: wake-up, none of this module's code between the wake-up and the batch). False: a
    #: wait call, then a read call, as before issue #16 (kept for before/after benchmarks).
    fused_wait = True

    @property
    def woke_ns(self) -> int:
        """CLOCK_REALTIME when the last read's wait ended in C (0: it did not wait)."""
        return self._buf.info[RING_INFO_WOKE_NS]

    def poll(self, max: int | None = None) -> list[RingEvent]:
        """What is there now, without waiting."""
        return self.read_batch(max, 0.0)

    def _read_locked(self, limit: int) -> list[RingEvent]:
        self._live()
        return self._events(self._buf.read(limit))

    def _events(self, n: int) -> list[RingEvent]:
        """The events of the read (or read_wait) that returned n, under the lock."""
        buf = self._buf
        if n < 0:
            raise _error(n, "ring read", RingCorruptError if n == -errno.EBADMSG else None)
        info = buf.info
        if info[RING_INFO_TOPIC_COUNT] > self._known:
            self._refresh_topics(info[RING_INFO_TOPIC_COUNT])
        events: list[RingEvent] = []
        lost = info[RING_INFO_LOST]
        if lost:
            events.append(Gap(lost, info[RING_INFO_RESUME_SEQ] - lost))
        if n == 0:
            if not lost and info[RING_INFO_CLOSED]:
                self._closed_seen = True
            return events
        names = self._names
        arena = buf.raw if self.copy else buf.arena  # mmap slices are bytes, views are views
        views = _VIEW.iter_unpack(buf.views[: n * RING_VIEW_SIZE])
        upto = self._filter_upto
        if self._patterns is None or self._known <= upto:
            # The hot path: one comprehension, no per-message branch.
            events += [
                _new_tuple(RingMessage, (seq, sid, names[tid], ts, arena[off : off + ln], tid))
                for seq, ts, sid, tid, off, ln in views
            ]
            return events
        # Topics registered since the C filter was set: decide those here, then update it.
        for seq, ts, sid, tid, off, ln in views:
            if tid > upto and not self._matches(names[tid]):
                continue
            events.append(
                _new_tuple(RingMessage, (seq, sid, names[tid], ts, arena[off : off + ln], tid))
            )
        self._apply_filter()
        return events

    def wait(self, timeout: float | None = None, spin: float | None = None) -> bool:
        """Block until there is something to read or the ring closed (True), or until timeout
        seconds passed or `interrupt` was called (False). None waits forever. Waits as the
        reader's wait_policy says, or spins `spin` seconds before sleeping on the ring's
        futex when spin is given (0: no spin); releases the GIL meanwhile."""
        deadline = None if timeout is None else time.monotonic() + timeout
        spin_ns = self.wait_policy.spin_ns if spin is None else int(spin * 1e9)
        if self.slice_ns is not None and timeout != 0:
            self.hold_slice()
        while True:
            if self._stop:
                return False
            left = -1 if deadline is None else max(0, int((deadline - time.monotonic()) * 1e9))
            with self._lock:
                rc = ring_wait(self._live(), left, spin_ns)
            if rc in (1, -errno.EPIPE):
                return True
            if rc in (0, -errno.ECANCELED):
                return False
            if rc != -errno.EINTR:  # a signal: let Python run its handler, then wait on
                raise _error(rc, "ring wait")

    def spin_adaptive(self) -> bool:
        """The spin of the adaptive policy (its cap: wait_policy.spin_us) without its sleep,
        for a thread that must not sleep (an event loop) while another waits for it: True
        when there is something to read (or the ring closed), False when nothing came or
        the recent wait says not to spin (wsgw_ring_spin_adaptive); releases the GIL."""
        cap_ns = max(1, int(self.wait_policy.spin_us * 1000))
        with self._lock:
            rc = ring_spin_adaptive(self._live(), cap_ns)
        if rc in (1, -errno.EPIPE):
            return True
        if rc in (0, -errno.ECANCELED, -errno.EINTR):
            return False
        raise _error(rc, "ring spin")

    def hold_slice(self) -> None:
        """The calling thread gets slice_ns (if set) until the reader ends, once per thread:
        read_batch and wait call it before they wait; a thread woken by the one that waits
        (an asyncio loop's) may call it too."""
        if self.slice_ns is None:
            return
        tid = threading.get_native_id()
        if tid in self._slice_tried:
            return
        self._slice_tried.add(tid)  # refused (old kernel, not SCHED_OTHER): not again
        with self._lock:  # close releases the held ones under the lock
            if self._finalizer.alive and SLICE_LEASES.hold(tid, self.slice_ns or 0):
                self._sliced.append(tid)

    def interrupt(self) -> None:
        """Make a wait blocked in another thread return False now (or the next wait, if none
        is running). For cancelling a wait; `close` ends the reader for good."""
        if self._finalizer.alive:
            ring_interrupt(self._handle)

    def __iter__(self) -> Iterator[RingEvent]:
        """Every event, blocking; ends when the writer closed the ring (after the last
        message), when the writer died without closing it, or when the reader is closed
        (from another thread, say)."""
        while not self._stop:
            try:
                events = self.read_batch(timeout=1.0)
                if events:
                    yield from events
                elif self._closed_seen or self._stop or not self.writer_alive():
                    return
            except RingClosedError:
                if self._stop:
                    return
                raise

    # ---- state ------------------------------------------------------------------------------
    def seek(self, start: Start) -> None:
        """Jump to the oldest message still in the ring or past the newest; not a gap."""
        with self._lock:
            rc = ring_seek(self._live(), start == "oldest")
        if rc < 0:
            raise _error(rc, "ring seek")

    @property
    def next_seq(self) -> int:
        """The sequence number this reader expects next."""
        return ring_next_seq(self._live())

    @property
    def lag(self) -> int:
        """Messages written that this reader has not read (or skipped) yet."""
        info = ring_reader_info(self._live())
        return max(0, info["write_seq"] + 1 - ring_next_seq(self._handle))

    @property
    def closed(self) -> bool:
        """True once the writer closed the ring and this reader has read everything."""
        return self._closed_seen

    def writer_alive(self) -> bool:
        """Whether a writer still holds the ring (it takes an flock for its whole life)."""
        rc = ring_writer_alive(self._live())
        if rc < 0:
            raise _error(rc, "ring writer liveness")
        return rc == 1

    def info(self) -> RingInfo:
        return RingInfo._from(ring_reader_info(self._live()))

    @property
    def wait_hint(self) -> WaitPolicy | None:
        """The wait policy the ring's writer recommends now (None: none)."""
        return WaitPolicy.from_hint(*ring_wait_hint(self._live()))

    def stats(self) -> dict[str, int]:
        """messages, bytes, gaps, lost, filtered, retries (copies discarded), waits, wakeups,
        spin_hits (waits that ended while spinning), spin_ns (time spent spinning)."""
        return ring_reader_stats(self._live())

    def close(self) -> None:
        """Detach; a wait blocked in another thread returns first. Payload views handed out
        stay valid memory (the arena is Python's) but are not refilled."""
        if not self._finalizer.alive:
            return
        self._stop = True
        self.interrupt()
        with self._lock:
            self._finalizer()

    def __repr__(self) -> str:
        where = self.path or "fd"
        return f"<RingReader {where} next_seq={self.next_seq if self._finalizer.alive else '-'}>"


# ---- benchmarks: loops that run entirely in C (so the figure is the ring's, not ctypes') ----
def bench_c_write(writer: RingWriter, payload_len: int, count: int, batch: int = 32) -> int:
    """Write count messages of payload_len bytes in batches; returns elapsed ns."""
    rc = ring_bench_write(writer._live(), payload_len, count, batch)
    if rc < 0:
        raise _error(rc, "bench write")
    return rc


def bench_c_write_read(
    writer: RingWriter, reader: RingReader, payload_len: int, count: int, batch: int = 32
) -> int:
    """Alternate a write batch and a read batch in this thread, checking order; elapsed ns."""
    with reader._lock:
        rc = ring_bench_rw(writer._live(), reader._live(), payload_len, count, batch)
    if rc < 0:
        raise _error(rc, "bench write+read")
    return rc


def bench_c_read(reader: RingReader, count: int, timeout: float) -> tuple[int, int, int, int]:
    """Busy-poll until count messages were delivered or lost: (delivered, lost, payload
    bytes, ns from the first message to the last)."""
    with reader._lock:
        rc, (delivered, lost, nbytes, ns) = ring_bench_read(
            reader._live(), count, int(timeout * 1e9)
        )
    if rc < 0 and rc != -errno.ETIMEDOUT:
        raise _error(rc, "bench read")
    return delivered, lost, nbytes, ns


@dataclass(frozen=True)
class PaceResult:
    publishes: int
    messages: int
    largest: int  # messages in the largest publish (a late wake-up makes a batch)
    elapsed_ns: int


def bench_c_pace(writer: RingWriter, payload_len: int, count: int, rate: float) -> PaceResult:
    """Publish count messages at `rate` msg/s from C (sleeping between them), each stamped
    with CLOCK_REALTIME right before it is published: the writer of a latency run."""
    if rate <= 0:
        raise ValueError(f"rate must be > 0, not {rate}")
    rc, (publishes, messages, largest, ns) = ring_bench_pace(
        writer._live(), payload_len, count, max(1, round(1e9 / rate))
    )
    if rc < 0:
        raise _error(rc, "bench pace")
    return PaceResult(publishes, messages, largest, ns)


@dataclass(frozen=True)
class LatencyResult:
    """What a reader measured from C: per-message latencies (ns, publish stamp to receipt,
    CLOCK_REALTIME on both sides) and the CPU the reading thread used meanwhile."""

    latencies_ns: list[int]
    lost: int
    wall_ns: int  # from the first receipt to the end
    cpu_ns: int  # the reading thread's CPU time over the same span
    waits: int
    wakeups: int
    spin_hits: int
    disorder: int
    timed_out: bool
    preempted: int  # involuntary context switches of the reading thread (scheduler)

    @property
    def cpu_percent(self) -> float:
        return 100.0 * self.cpu_ns / self.wall_ns if self.wall_ns else 0.0


def bench_c_latency(
    reader: RingReader, count: int, timeout: float, wait: WaitPolicy | str | None = None
) -> LatencyResult:
    """Read count messages in C with the reader's wait policy (or `wait`), timing each from
    its ts_ns to its receipt; see wsgw_ring_bench_latency."""
    policy = reader.wait_policy if wait is None else WaitPolicy.parse(wait)
    with reader._lock:
        rc, res, lat = ring_bench_latency(reader._live(), count, int(timeout * 1e9), policy.spin_ns)
    if rc < 0 and rc not in (-errno.ETIMEDOUT, -errno.EPIPE):
        raise _error(rc, "bench latency")
    _, lost, wall, cpu, waits, wakeups, hits, disorder, preempted = res
    return LatencyResult(
        lat, lost, wall, cpu, waits, wakeups, hits, disorder, rc == -errno.ETIMEDOUT, preempted
    )
