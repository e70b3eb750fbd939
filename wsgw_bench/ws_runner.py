"""One WebSocket client contender running one benchmark test, as the `connect`, `rtt` and
`ingest` scenarios (wsgw_bench/ws_scenarios.py) need it.

    python -m wsgw_bench.ws_runner --contender picows --test rtt \\
        --url ws://198.19.7.1:7300 --params '{"count": 1000, "warmup": 100, "sizes": [64]}'

prints one JSON line: {"ok": true, "contender": ..., "version": ..., "results": {...}}, or
{"ok": false, "skip": why} when the library is missing, or {"ok": false, "error": why}.
The scenarios start it inside the lab's kernel-client namespace, so every kernel-side
contender meets the same peer (wsgw_bench/peer/wspeer.c) over the same veth pair; the DPDK
contender runs in the scenario's own process through the same `run_test`.

Each library is used the way its documentation shows: picows through its listener
callbacks (its API has no awaitable receive), the others through `await recv()`. Every
message is checked: an echo must equal what was sent, a flood must bring sequence numbers
0..N-1 in order (a gap, a duplicate or a wrong length is counted and reported).

Tests:
  tcp      TCP connect time of a plain kernel socket (`loop.sock_connect`)
  connect  WebSocket open time: TCP connect + HTTP upgrade, until the library says open;
           with "wss_url" and "ca_file" in the params, then the same for wss:// (TCP
           connect + TLS handshake + upgrade) against that URL, the server verified
           against ca_file ("wss_count"/"wss_warmup" connections, default as for ws://)
  rtt      echo round trips of each size: p50, p99, p99.9 after a warm-up
  ingest   a flood of N messages of each size: messages/s and process CPU per message
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import functools
import importlib
import importlib.metadata
import inspect
import json
import math
import socket
import ssl
import sys
import time
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

CONTENDERS = (
    "picows",
    "aiohttp",
    "websockets",
    "wsgw-kernel",
    "wsgw-kernel-batch",
    "wsgw-kernel-callbacks",
    "tcp",
)
TESTS = ("tcp", "connect", "rtt", "ingest")


class ContenderUnavailable(RuntimeError):
    """The contender's library is missing: the contender is skipped with this note."""


def percentile(sorted_values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of already sorted values (0 for none)."""
    if not sorted_values:
        return 0
    rank = max(1, math.ceil(fraction * len(sorted_values) - 1e-9))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def summary(values: list[int]) -> dict[str, int]:
    ordered = sorted(values)
    return {
        "n": len(ordered),
        "p50": percentile(ordered, 0.50),
        "p99": percentile(ordered, 0.99),
        "p999": percentile(ordered, 0.999),
        "max": ordered[-1] if ordered else 0,
    }


def describe(exc: BaseException) -> str:
    """`Type: message (at file:line)`, the line where it was raised: an assert says little
    on its own."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def flood_path(count: int, size: int) -> str:
    return f"/flood/{count}/{size}/binary"


@dataclass
class IngestCheck:
    """What a flood brought: counts, and the first/last message times."""

    size: int
    expected: int
    received: int = 0
    gaps: int = 0  # messages missing (seq jumped forward)
    duplicates: int = 0  # messages seen again (seq went back)
    bad_length: int = 0
    next_seq: int = 0
    first_ns: int = 0
    last_ns: int = 0
    first_cpu: float = 0.0
    last_cpu: float = 0.0
    head: int = 0  # messages timed as one with the first (the rest of the first batch)
    _seq: Any = None  # the C sequence check (`batch`), made on first use

    def batch(self, data: bytes, spans: bytes, count: int) -> None:
        """A run of messages as `MessageBatch` holds them (payload offset/length pairs
        into data), every sequence number and length checked in C: no Python per
        message. The clock starts after the first batch, whose other messages are then
        not counted in the rate (as message() counts none before the first)."""
        if count <= 0:
            return
        seq = self._seq
        if seq is None:
            from dataplane.shim import WsSeqCheck

            seq = self._seq = WsSeqCheck(self.size)
        if self.received == 0:
            self.first_ns = time.perf_counter_ns()
            self.first_cpu = time.process_time()
            self.head = count - 1
        state = seq.state
        state[0], state[1], state[2], state[3] = (
            self.next_seq,
            self.gaps,
            self.duplicates,
            self.bad_length,
        )
        seq.check(data, spans, count)
        self.next_seq, self.gaps, self.duplicates, self.bad_length = (
            state[0],
            state[1],
            state[2],
            state[3],
        )
        self.received += count
        if self.received >= self.expected and not self.last_ns:
            self.last_ns = time.perf_counter_ns()
            self.last_cpu = time.process_time()

    def message(self, data: bytes | bytearray | memoryview) -> None:
        if self.received == 0:
            self.first_ns = time.perf_counter_ns()
            self.first_cpu = time.process_time()
        self.received += 1
        if len(data) != self.size:
            self.bad_length += 1
        seq = int.from_bytes(data[:8], "big")
        if seq != self.next_seq:
            if seq > self.next_seq:
                self.gaps += seq - self.next_seq
            else:
                self.duplicates += 1
        self.next_seq = max(self.next_seq, seq + 1)
        if self.received == self.expected:
            self.last_ns = time.perf_counter_ns()
            self.last_cpu = time.process_time()

    def result(self) -> dict[str, Any]:
        if self.received and self.received != self.expected:
            self.last_ns = self.last_ns or time.perf_counter_ns()
            self.last_cpu = self.last_cpu or time.process_time()
        seconds = (self.last_ns - self.first_ns) / 1e9
        intervals = max(self.received - 1 - self.head, 0)
        return {
            "expected": self.expected,
            "received": self.received,
            "gaps": self.gaps + max(self.expected - self.next_seq, 0),
            "duplicates": self.duplicates,
            "bad_length": self.bad_length,
            "seconds": seconds,
            "msg_per_s": intervals / seconds if seconds > 0 else 0.0,
            "cpu_per_msg_ns": (self.last_cpu - self.first_cpu) / intervals * 1e9
            if intervals
            else 0.0,
            "ok": self.received == self.expected
            and not (self.gaps or self.duplicates or self.bad_length),
        }


def rtt_payload(seq: int, size: int) -> bytes:
    return seq.to_bytes(8, "big") + b"r" * (size - 8)


# ---- the contenders -----------------------------------------------------------------------
class Adapter(Protocol):
    name: str

    def version(self) -> str: ...

    async def open_close(self, url: str) -> int: ...

    async def rtt(self, url: str, size: int, count: int, warmup: int) -> dict[str, Any]: ...

    async def ingest(self, url: str, size: int, count: int) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...


class Connection(Protocol):
    """What the await-style adapters need of an open WebSocket."""

    async def send(self, data: bytes) -> None: ...

    async def recv(self) -> bytes | None: ...  # None once the server closed

    async def close(self) -> None: ...


def _dist(name: str) -> str:
    try:
        return f"{name} {importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return name


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ContenderUnavailable(
            f"{module} is not installed (pip install -e ./wsgw_bench): {exc}"
        ) from exc


def tls_context(ca_file: str | None) -> ssl.SSLContext | None:
    """The client context a library is given for wss://: the default one (certificate and
    host name verified) trusting ca_file. Made once per adapter, before anything is timed,
    as an application keeps it; None without a ca_file (plain ws://)."""
    return ssl.create_default_context(cafile=ca_file) if ca_file else None


class AwaitAdapter:
    """A library with `await send()` / `await recv()`: one loop body for all of them."""

    def __init__(self, name: str, version: str, opener: Callable[[str], Awaitable[Connection]]):
        self.name = name
        self._version = version
        self._open = opener

    def version(self) -> str:
        return self._version

    async def open_close(self, url: str) -> int:
        start = time.perf_counter_ns()
        conn = await self._open(url)
        elapsed = time.perf_counter_ns() - start
        await conn.close()
        return elapsed

    async def rtt(self, url: str, size: int, count: int, warmup: int) -> dict[str, Any]:
        conn = await self._open(url)
        samples: list[int] = []
        mismatches = 0
        try:
            for seq in range(warmup + count):
                payload = rtt_payload(seq, size)
                start = time.perf_counter_ns()
                await conn.send(payload)
                echo = await conn.recv()
                elapsed = time.perf_counter_ns() - start
                if echo != payload:
                    mismatches += 1
                    if echo is None:
                        break
                if seq >= warmup:
                    samples.append(elapsed)
        finally:
            await conn.close()
        return {**summary(samples), "mismatches": mismatches}

    async def ingest(self, url: str, size: int, count: int) -> dict[str, Any]:
        check = IngestCheck(size, count)
        conn = await self._open(url + flood_path(count, size))
        try:
            while (data := await conn.recv()) is not None:
                check.message(data)
        finally:
            await conn.close()
        return check.result()

    async def aclose(self) -> None:
        return None


class _ClosingConn:
    """A connection whose send, recv and close are awaited as they are, and whose recv
    raises closed_ok once the server closed normally; subclasses turn a message into bytes."""

    def __init__(self, ws: Any, closed_ok: type[BaseException]) -> None:
        self._ws = ws
        self._closed_ok = closed_ok

    async def send(self, data: bytes) -> None:
        await self._ws.send(data)

    async def recv(self) -> bytes | None:
        try:
            message = await self._ws.recv()
        except self._closed_ok:
            return None
        return self._payload(message)

    @staticmethod
    def _payload(message: Any) -> bytes:
        raise NotImplementedError

    async def close(self) -> None:
        await self._ws.close()


# -- websockets (the asyncio implementation) --
class _WebsocketsConn(_ClosingConn):
    @staticmethod
    def _payload(message: Any) -> bytes:
        return message if isinstance(message, bytes) else message.encode()


def websockets_adapter(ssl_context: ssl.SSLContext | None = None) -> AwaitAdapter:
    client = _require("websockets.asyncio.client")
    exceptions = _require("websockets.exceptions")
    tls = {"ssl": ssl_context} if ssl_context is not None else {}

    async def opener(url: str) -> Connection:
        ws = await client.connect(
            url, compression=None, max_size=None, ping_interval=None, proxy=None, **tls
        )
        return _WebsocketsConn(ws, exceptions.ConnectionClosedOK)

    return AwaitAdapter("websockets", _dist("websockets"), opener)


# -- aiohttp --
class _AiohttpConn:
    def __init__(self, ws: Any, aiohttp: Any) -> None:
        self._ws = ws
        self._types = aiohttp.WSMsgType

    async def send(self, data: bytes) -> None:
        await self._ws.send_bytes(data)

    async def recv(self) -> bytes | None:
        msg = await self._ws.receive()
        if msg.type == self._types.BINARY:
            return bytes(msg.data)
        if msg.type == self._types.TEXT:
            return str(msg.data).encode()
        if msg.type == self._types.ERROR:
            raise RuntimeError(f"aiohttp: {msg.data!r}")
        return None  # CLOSE, CLOSING, CLOSED

    async def close(self) -> None:
        await self._ws.close()


class AiohttpAdapter(AwaitAdapter):
    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._aiohttp = _require("aiohttp")
        self._session: Any = None
        self._tls = {"ssl": ssl_context} if ssl_context is not None else {}
        super().__init__("aiohttp", _dist("aiohttp"), self._opener)

    async def _opener(self, url: str) -> Connection:
        if self._session is None:  # one session, as an application keeps it
            self._session = self._aiohttp.ClientSession()
        ws = await self._session.ws_connect(
            url, compress=0, max_msg_size=0, autoping=True, **self._tls
        )
        return _AiohttpConn(ws, self._aiohttp)

    async def aclose(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


# -- the wsgw transports (kernel here; the DPDK one from the scenario's process) --
class _WsgwConn(_ClosingConn):
    @staticmethod
    def _payload(message: Any) -> bytes:
        return bytes(message.data)


ConnectFn = Callable[[str], Awaitable[Any]]


@dataclass(frozen=True)
class WsgwContender:
    """One of wsgw's own clients, as the hook finds it."""

    name: str  # "wsgw kernel", "wsgw DPDK", "wsgw DPDK (engine loop)"
    transport: str  # "kernel" | "dpdk" | "dpdk-loop" (run on the engine's own event loop)
    connect: ConnectFn | None  # async (url) -> an open WebSocketConnection; None: skipped
    note: str
    available: bool  # the code is there (the DPDK one still needs an engine to connect)


def _bind_offered(
    fn: Callable[..., Any], offered: dict[str, Any], options: dict[str, Any] | None = None
) -> Callable[[str], Any]:
    """fn with the offered keywords its signature names bound, as `url -> fn(url, ...)`,
    and the options (connect options such as `deflate` and `ssl_context`) also when it
    takes them through `**options`; refuse unknown required ones. Done once per contender,
    not once per connect: the signature look-up would be timed as part of every open."""
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    kwargs = {k: v for k, v in offered.items() if k in params}
    kwargs.update({k: v for k, v in (options or {}).items() if takes_any or k in params})
    missing = [
        name
        for name, p in list(params.items())[1:]
        if p.default is inspect.Parameter.empty
        and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
        and name not in kwargs
    ]
    if missing:
        raise TypeError(f"{fn.__qualname__} needs {missing}, which the benchmark cannot give")
    return functools.partial(fn, **kwargs)


def _load(module: str, attr: str) -> tuple[Any, str]:
    """(module.attr, "") or (None, why not): code another engineer is still writing may
    be missing, half-written or broken, and its contender is then skipped, not fatal."""
    try:
        loaded = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name == module:
            return None, f"{module} is not written yet"
        return None, f"{module} does not import ({exc})"
    except Exception as exc:
        return None, f"{module} does not import ({describe(exc)})"
    found = getattr(loaded, attr, None)
    if found is None:
        return None, f"{module} has no {attr}"
    return found, ""


def wsgw_contenders(engine: Any = None, *, ca_file: str | None = None) -> list[WsgwContender]:
    """The hook for wsgw's own WebSocket clients: `dataplane.transports.kernel` (an OS
    socket) and `dataplane.transports.dpdk` (the user-space stack), each as an async
    connect function, or skipped with a note when its code is missing.

    The DPDK transport is expected to export `connect_dpdk(url, ...)` returning an open
    `WebSocketConnection` (like `connect_kernel`); its keywords are matched by name to
    what the benchmark has: `engine` (a running `dataplane.engine.Engine`), `interface`,
    `port`, and the connect options `deflate=False` (and `ssl_context`, see below), these
    also through `**options`. Pass `engine` to get a usable connect function for it.

    With ca_file, the connect functions are for wss:// URLs: they pass `ssl_context`, the
    context wsgw itself makes from a `ca_file=` (`dataplane.ws.tls.client_context`, ALPN
    http/1.1), made once here as the libraries' contexts are (`tls_context`): given
    `ca_file=`, wsgw keeps one context per CA file but reads the file on every connect to
    see that it is the same one, which the libraries given a context do not.

    The DPDK transport comes twice: "wsgw DPDK" (the engine on its own thread, the
    client on any loop) and "wsgw DPDK (engine loop)" (transport "dpdk-loop": the same
    connect function, awaited on `asyncio.Runner(loop_factory=engine.loop_factory)`, so the
    stack, the WebSocket and the client share one thread); the caller picks the loop.
    """
    found: list[WsgwContender] = []
    closed_ok, note = _load("dataplane.ws.errors", "ConnectionClosedOK")
    options: dict[str, Any] = {"deflate": False}
    if ca_file:
        client_context, _ = _load("dataplane.ws.tls", "client_context")
        options["ssl_context"] = (
            client_context(ca_file, alpn_protocols=["http/1.1"])
            if client_context is not None
            else tls_context(ca_file)
        )
    connect_kernel, kernel_note = _load("dataplane.transports.kernel", "connect_kernel")
    if connect_kernel is not None and closed_ok is not None:

        async def kernel_connect(url: str) -> Any:
            return _WsgwConn(await connect_kernel(url, **options), closed_ok)

        found.append(WsgwContender("wsgw kernel", "kernel", kernel_connect, "", True))
    else:
        found.append(
            WsgwContender("wsgw kernel", "kernel", None, f"skipped: {kernel_note or note}", False)
        )
    connect_dpdk, dpdk_note = _load("dataplane.transports.dpdk", "connect_dpdk")
    if connect_dpdk is None or closed_ok is None:  # (no engine-loop row without it either)
        found.append(
            WsgwContender("wsgw DPDK", "dpdk", None, f"skipped: {dpdk_note or note}", False)
        )
        return found
    _, loop_note = _load("dataplane.loop", "EngineEventLoop")
    if engine is None:
        found.append(WsgwContender("wsgw DPDK", "dpdk", None, "needs a DPDK engine", True))
        found.append(
            WsgwContender(
                "wsgw DPDK (engine loop)",
                "dpdk-loop",
                None,
                f"skipped: {loop_note}" if loop_note else "needs a DPDK engine",
                not loop_note,
            )
        )
        return found
    offered = {
        "engine": engine,
        "interface": getattr(engine, "interface", None),
        "port": getattr(engine, "port", None),
    }

    try:
        open_dpdk = _bind_offered(connect_dpdk, offered, options)
    except TypeError as exc:
        refused = exc  # raised by the connects: the contender fails with it, not the hook

        def open_dpdk(url: str) -> Any:
            raise refused

    async def dpdk_connect(url: str) -> Any:
        return _WsgwConn(await open_dpdk(url), closed_ok)

    found.append(WsgwContender("wsgw DPDK", "dpdk", dpdk_connect, "", True))
    if loop_note:
        found.append(
            WsgwContender(
                "wsgw DPDK (engine loop)", "dpdk-loop", None, f"skipped: {loop_note}", False
            )
        )
    else:
        found.append(WsgwContender("wsgw DPDK (engine loop)", "dpdk-loop", dpdk_connect, "", True))
    return found


def wsgw_adapter(contender: WsgwContender) -> AwaitAdapter:
    if contender.connect is None:
        raise ContenderUnavailable(contender.note)
    version = _dist("wsgw") + f" ({contender.transport} transport)"
    if contender.name.endswith(BATCH_SUFFIX):
        return WsgwBatchAdapter(contender.name, version + ", batch receive", contender.connect)
    if contender.name.endswith(CALLBACKS_MARK):
        return WsgwCallbackAdapter(contender.name, version + ", message handler", contender.connect)
    return AwaitAdapter(contender.name, version, contender.connect)


# -- wsgw's batch receive: the same clients, ingest through `recv_frames` --
BATCH_SUFFIX = " (batch)"


def wsgw_batch_contenders(engine: Any = None, *, ca_file: str | None = None) -> list[WsgwContender]:
    """ "wsgw kernel (batch)" and "wsgw DPDK (batch)": wsgw's clients from
    `wsgw_contenders`, measured through the batch receive API (`recv_frames`: one
    `MessageBatch` per run of frames, sequence numbers checked in C). `wsgw_adapter`
    gives a `WsgwBatchAdapter` for them; the kernel one runs as "wsgw-kernel-batch"."""
    return [
        dataclasses.replace(c, name=c.name + BATCH_SUFFIX)
        for c in wsgw_contenders(engine, ca_file=ca_file)
    ]


class WsgwBatchAdapter(AwaitAdapter):
    """A wsgw client whose ingest takes whole `MessageBatch`es and checks them in C; the
    other tests (connect, rtt) are the per-message adapter's."""

    async def ingest(self, url: str, size: int, count: int) -> dict[str, Any]:
        from dataplane.ws.errors import ConnectionClosedOK

        check = IngestCheck(size, count)
        conn = await self._open(url + flood_path(count, size))
        ws = getattr(conn, "_ws", None)
        if ws is None or not hasattr(ws, "recv_frames"):
            await conn.close()
            raise ContenderUnavailable(f"{self.name}: the connection has no recv_frames()")
        take = check.batch
        try:
            while True:
                try:
                    batch = await ws.recv_frames()
                except ConnectionClosedOK:
                    break
                take(batch.data, batch.spans, len(batch))
        finally:
            await conn.close()
        return check.result()


# -- wsgw's message handler: round trips driven from a callback, as picows's are --
CALLBACKS_MARK = "callbacks)"  # how their names end


def wsgw_callback_contenders(
    engine: Any = None, *, ca_file: str | None = None
) -> list[WsgwContender]:
    """ "wsgw kernel (callbacks)", "wsgw DPDK (callbacks)" and "wsgw DPDK (engine loop,
    callbacks)": wsgw's clients from `wsgw_contenders` with each message handed to a
    callback (`set_message_handler`) that answers with `send_nowait`, the way picows's
    listener is measured; `wsgw_adapter` gives a `WsgwCallbackAdapter` for them."""
    out = []
    for c in wsgw_contenders(engine, ca_file=ca_file):
        name = c.name[:-1] + ", callbacks)" if c.name.endswith(")") else c.name + " (callbacks)"
        out.append(dataclasses.replace(c, name=name))
    return out


class WsgwCallbackAdapter(AwaitAdapter):
    """A wsgw client whose round trips run in its message handler: the echo is handed to
    the callback inside the read that brought it, which times it and sends the next
    message at once (no task wakes up), exactly as `PicowsAdapter.rtt` drives picows's
    listener. The other tests (connect, ingest) are the per-message adapter's."""

    async def rtt(self, url: str, size: int, count: int, warmup: int) -> dict[str, Any]:
        conn = await self._open(url)
        ws = conn._ws  # type: ignore[attr-defined]
        total = warmup + count
        state: dict[str, Any] = {"seq": 0, "payload": b"", "sent_at": 0, "mismatches": 0}
        samples: list[int] = []
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def fire() -> None:
            state["payload"] = rtt_payload(state["seq"], size)
            state["sent_at"] = time.perf_counter_ns()
            ws.send_nowait(state["payload"])

        def on_echo(message: Any) -> None:
            elapsed = time.perf_counter_ns() - state["sent_at"]
            if message.data != state["payload"]:
                state["mismatches"] += 1
            if state["seq"] >= warmup:
                samples.append(elapsed)
            state["seq"] += 1
            if state["seq"] < total:
                fire()
            elif not done.done():
                done.set_result(None)

        ws.set_message_handler(on_echo)
        closed = asyncio.ensure_future(ws.wait_closed())
        try:
            fire()
            async with asyncio.timeout(600):
                await asyncio.wait((done, closed), return_when=asyncio.FIRST_COMPLETED)
        finally:
            closed.cancel()
            if not ws.error:
                ws.set_message_handler(None)
            await conn.close()
        lost = total - state["seq"]
        return {**summary(samples), "mismatches": state["mismatches"] + lost}


# -- picows: callbacks, as its API is meant to be used --
class PicowsAdapter:
    """picows hands each frame to `WSListener.on_ws_frame`; the round trips are driven
    from that callback (send the next message when the echo arrives), the flood is
    checked there, and a future says when the test is over."""

    name = "picows"

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._picows = _require("picows")
        self._tls = {"ssl_context": ssl_context} if ssl_context is not None else {}

    def version(self) -> str:
        return _dist("picows")

    def _listener(self, on_data: Callable[[Any, Any], None]) -> Any:
        """A listener calling on_data(transport, frame) for binary frames; `.done` is
        set once the connection is gone. A close frame is answered, then TCP dropped."""
        picows = self._picows
        binary, close = picows.WSMsgType.BINARY, picows.WSMsgType.CLOSE

        class Listener(picows.WSListener):  # type: ignore[misc, name-defined]
            def __init__(self) -> None:
                super().__init__()
                self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

            def on_ws_frame(self, transport: Any, frame: Any) -> None:
                kind = frame.msg_type
                if kind == binary:
                    on_data(transport, frame)
                elif kind == close:
                    if not transport.is_close_frame_sent:
                        transport.send_close(picows.WSCloseCode.OK)
                    transport.disconnect()

            def on_ws_disconnected(self, transport: Any) -> None:
                self.finish()

            def finish(self) -> None:
                if not self.done.done():
                    self.done.set_result(None)

        return Listener()

    async def _connect(self, url: str, listener: Any) -> Any:
        transport, _ = await self._picows.ws_connect(
            lambda: listener,
            url,
            websocket_handshake_timeout=10,
            max_frame_size=1 << 30,
            **self._tls,
        )
        return transport

    async def _close(self, transport: Any) -> None:
        if not transport.is_close_frame_sent:
            transport.send_close(self._picows.WSCloseCode.OK)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(10):
                await transport.wait_disconnected()
        transport.disconnect(graceful=False)

    async def open_close(self, url: str) -> int:
        listener = self._listener(lambda transport, frame: None)
        start = time.perf_counter_ns()
        transport = await self._connect(url, listener)
        elapsed = time.perf_counter_ns() - start
        await self._close(transport)
        return elapsed

    async def rtt(self, url: str, size: int, count: int, warmup: int) -> dict[str, Any]:
        binary = self._picows.WSMsgType.BINARY
        total = warmup + count
        state: dict[str, Any] = {"seq": 0, "payload": b"", "sent_at": 0, "mismatches": 0}
        samples: list[int] = []

        def fire(transport: Any) -> None:
            state["payload"] = rtt_payload(state["seq"], size)
            state["sent_at"] = time.perf_counter_ns()
            transport.send(binary, state["payload"])

        def on_echo(transport: Any, frame: Any) -> None:
            elapsed = time.perf_counter_ns() - state["sent_at"]
            if frame.get_payload_as_bytes() != state["payload"]:
                state["mismatches"] += 1
            if state["seq"] >= warmup:
                samples.append(elapsed)
            state["seq"] += 1
            if state["seq"] < total:
                fire(transport)
            else:
                listener.finish()

        listener = self._listener(on_echo)
        transport = await self._connect(url, listener)
        try:
            fire(transport)
            async with asyncio.timeout(600):
                await listener.done
        finally:
            await self._close(transport)
        lost = total - state["seq"]
        return {**summary(samples), "mismatches": state["mismatches"] + lost}

    async def ingest(self, url: str, size: int, count: int) -> dict[str, Any]:
        check = IngestCheck(size, count)
        message = check.message
        listener = self._listener(
            lambda transport, frame: message(frame.get_payload_as_memoryview())
        )
        transport = await self._connect(url + flood_path(count, size), listener)
        try:
            async with asyncio.timeout(600):
                await listener.done
        finally:
            await self._close(transport)
        return check.result()

    async def aclose(self) -> None:
        return None


# -- a plain kernel TCP connect: what every kernel-side library pays before its upgrade --
class TcpAdapter:
    name = "tcp"

    def version(self) -> str:
        return "kernel socket"

    async def open_close(self, url: str) -> int:
        parts = urlsplit(url)
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            start = time.perf_counter_ns()
            await loop.sock_connect(sock, (parts.hostname, parts.port or 80))
            return time.perf_counter_ns() - start
        finally:
            sock.close()

    async def rtt(self, url: str, size: int, count: int, warmup: int) -> dict[str, Any]:
        raise ContenderUnavailable("tcp measures connect only")

    async def ingest(self, url: str, size: int, count: int) -> dict[str, Any]:
        raise ContenderUnavailable("tcp measures connect only")

    async def aclose(self) -> None:
        return None


def make_adapter(contender: str, ca_file: str | None = None) -> Adapter:
    """The contender's adapter; with ca_file, one for wss:// URLs whose server is verified
    against ca_file (the plain TCP one has no TLS and ignores it)."""
    if contender == "picows":
        return PicowsAdapter(tls_context(ca_file))
    if contender == "aiohttp":
        return AiohttpAdapter(tls_context(ca_file))
    if contender == "websockets":
        return websockets_adapter(tls_context(ca_file))
    if contender == "tcp":
        return TcpAdapter()
    if contender == "wsgw-kernel":
        kernel = next(c for c in wsgw_contenders(ca_file=ca_file) if c.transport == "kernel")
        return wsgw_adapter(kernel)
    if contender == "wsgw-kernel-batch":
        found = wsgw_batch_contenders(ca_file=ca_file)
        return wsgw_adapter(next(c for c in found if c.transport == "kernel"))
    if contender == "wsgw-kernel-callbacks":
        found = wsgw_callback_contenders(ca_file=ca_file)
        return wsgw_adapter(next(c for c in found if c.transport == "kernel"))
    raise ValueError(f"unknown contender {contender!r} (known: {', '.join(CONTENDERS)})")


# ---- the tests ---------------------------------------------------------------------------
async def _open_times(adapter: Adapter, url: str, count: int, warmup: int) -> dict[str, int]:
    samples = []
    for i in range(warmup + count):
        elapsed = await adapter.open_close(url)
        if i >= warmup:
            samples.append(elapsed)
    return summary(samples)


async def run_test(
    adapter: Adapter,
    test: str,
    url: str,
    params: dict[str, Any],
    *,
    wss: Adapter | None = None,
) -> dict[str, Any]:
    """Run one test; the result dict is what the runner prints under "results".

    connect: with wss (the contender's adapter for wss://, see `make_adapter`) and
    params["wss_url"], the wss:// open times follow the ws:// ones, as "wss_open_ns"; when
    they fail, "wss_error" says why and the ws:// times stand."""
    try:
        if test in ("tcp", "connect"):
            count, warmup = int(params.get("count", 20)), int(params.get("warmup", 3))
            results: dict[str, Any] = {"open_ns": await _open_times(adapter, url, count, warmup)}
            wss_url = params.get("wss_url")
            if test == "connect" and wss is not None and wss_url:
                wss_count = int(params.get("wss_count", count))
                wss_warmup = int(params.get("wss_warmup", warmup))
                try:
                    results["wss_open_ns"] = await _open_times(
                        wss, str(wss_url), wss_count, wss_warmup
                    )
                except Exception as exc:
                    results["wss_error"] = describe(exc)
            return results
        if test == "rtt":
            count, warmup = int(params.get("count", 1000)), int(params.get("warmup", 100))
            return {
                str(size): await adapter.rtt(url, int(size), count, warmup)
                for size in params.get("sizes", [64])
            }
        if test == "ingest":
            count = int(params.get("count", 10000))
            floor_bytes = int(params.get("bytes", 0))
            return {
                str(size): await adapter.ingest(
                    url, int(size), max(count, floor_bytes // (int(size) + 2))
                )
                for size in params.get("sizes", [100])
            }
        raise ValueError(f"unknown test {test!r} (known: {', '.join(TESTS)})")
    finally:
        try:
            await adapter.aclose()
        finally:
            if wss is not None:
                await wss.aclose()


def run_loop(main: Awaitable[dict[str, Any]], loop: str) -> tuple[dict[str, Any], str]:
    """Run on uvloop (the default, when installed) or asyncio; returns (result, loop used)."""
    if loop == "uvloop":
        try:
            uvloop = importlib.import_module("uvloop")
        except ImportError:
            loop = "asyncio"
        else:

            async def wrapped() -> dict[str, Any]:
                return await main

            return uvloop.run(wrapped()), _dist("uvloop")

    async def plain() -> dict[str, Any]:
        return await main

    return asyncio.run(plain()), "asyncio"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contender", required=True, choices=CONTENDERS)
    parser.add_argument("--test", required=True, choices=TESTS)
    parser.add_argument("--url", required=True, help="ws://host:port (no path)")
    parser.add_argument(
        "--params",
        default="{}",
        help="JSON: count, warmup, sizes; for connect also wss_url, ca_file, wss_count, wss_warmup",
    )
    parser.add_argument("--loop", default="uvloop", choices=("uvloop", "asyncio"))
    args = parser.parse_args(argv)
    out: dict[str, Any] = {"contender": args.contender, "test": args.test}
    try:
        params = json.loads(args.params)
        adapter = make_adapter(args.contender)
        out["version"] = adapter.version()
        wss: Adapter | None = None
        wss_error = ""
        if args.test == "connect" and params.get("wss_url") and params.get("ca_file"):
            try:
                wss = make_adapter(args.contender, ca_file=str(params["ca_file"]))
            except Exception as exc:  # the ws:// times still count
                wss_error = describe(exc)
        results, loop = run_loop(run_test(adapter, args.test, args.url, params, wss=wss), args.loop)
        if wss_error:
            results["wss_error"] = wss_error
        out.update(ok=True, results=results, loop=loop)
    except ContenderUnavailable as exc:
        out.update(ok=False, skip=str(exc))
    except Exception as exc:
        out.update(ok=False, error=describe(exc))
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
