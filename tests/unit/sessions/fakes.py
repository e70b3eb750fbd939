"""In-memory stand-ins for a session's network (no tests here): a WebSocket connection
whose server side is a small scripted responder, a connector that hands them out (or
refuses), and a resolver."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

from dataplane.ws.client import ConnectionState
from dataplane.ws.errors import ConnectionClosed, ConnectionClosedError, closed_error
from dataplane.ws.events import Message
from gateway.sessions import SessionEvent

Responder = Callable[["FakeConnection", "str | bytes"], None]


def generic_responder(refuse: frozenset[str] = frozenset()) -> Responder:
    """The generic dialect's default protocol: {"op","topics","id"} acked {"result","id"};
    topics in `refuse` get {"error": "...", "id"} instead."""

    def respond(conn: FakeConnection, data: str | bytes) -> None:
        req = orjson.loads(data)
        op, rid, topics = req.get("op"), req.get("id"), req.get("topics", [])
        bad = [t for t in topics if t in refuse]
        if op == "subscribe" and bad:
            conn.push({"error": f"unknown topic {bad[0]}", "id": rid})
            return
        if op == "subscribe":
            conn.subscribed.update(topics)
        elif op == "unsubscribe":
            conn.subscribed.difference_update(topics)
        conn.push({"result": None, "id": rid})

    return respond


def bitstamp_responder(conn: FakeConnection, data: str | bytes) -> None:
    req = orjson.loads(data)
    channel = req.get("data", {}).get("channel", "")
    if req.get("event") == "bts:subscribe":
        conn.subscribed.add(channel)
        conn.push({"event": "bts:subscription_succeeded", "channel": channel, "data": {}})


def okx_responder(conn: FakeConnection, data: str | bytes) -> None:
    if data == "ping":
        conn.push_text("pong")
        return
    req = orjson.loads(data)
    for arg in req.get("args", []):
        conn.subscribed.add(f"{arg['channel']}:{arg['instId']}")
        conn.push({"id": req["id"], "event": req["op"], "arg": arg})


class FakeConnection:
    """Implements dataplane.transports.base.WebSocketConnection in memory."""

    def __init__(self, responder: Responder | None, *, auto_pong: bool = True) -> None:
        self.responder = responder
        self.auto_pong = auto_pong
        self.inbox: deque[Message] = deque()
        self.sent: list[str | bytes] = []
        self.sent_at: list[float] = []
        self.subscribed: set[str] = set()
        self.close_calls: list[tuple[int, str]] = []
        self.pings = 0
        self.options: dict[str, Any] = {}
        self._closed: ConnectionClosed | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._lost = asyncio.get_running_loop().create_future()

    # -- the server side, for tests ----------------------------------------------------
    def push(self, obj: Any) -> None:
        self.inbox.append(Message(orjson.dumps(obj), True))
        self._wake()

    def push_text(self, text: str) -> None:
        self.inbox.append(Message(text.encode(), True))
        self._wake()

    def drop(self, code: int = 1006, reason: str = "connection lost") -> None:
        self._end(ConnectionClosedError(code, reason))

    def _end(self, error: ConnectionClosed) -> None:
        if self._closed is None:
            self._closed = error
            if not self._lost.done():
                self._lost.set_result(None)
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    # -- WebSocketConnection --------------------------------------------------------------
    @property
    def state(self) -> ConnectionState:
        return ConnectionState.OPEN if self._closed is None else ConnectionState.CLOSED

    @property
    def subprotocol(self) -> str | None:
        return None

    async def recv(self) -> Message:
        await self.inbox_ready()
        return self.inbox.popleft()

    async def inbox_ready(self) -> None:
        """Wait until a message is queued; once closed with nothing queued, raise the close."""
        while not self.inbox:
            if self._closed is not None:
                raise self._closed
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def send(self, data: str | bytes, *, text: bool | None = None) -> None:
        if self._closed is not None:
            raise self._closed
        self.sent.append(data)
        self.sent_at.append(time.monotonic())
        if self.responder is not None:
            self.responder(self, data)

    def ping(self, payload: bytes | None = None) -> asyncio.Future[float]:
        if self._closed is not None:
            raise self._closed
        self.pings += 1
        future: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        if self.auto_pong:
            asyncio.get_running_loop().call_soon(future.set_result, 0.001)
        return future

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.close_calls.append((code, reason))
        self._end(closed_error(code, reason, True))

    async def wait_closed(self) -> None:
        await asyncio.shield(self._lost)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            yield await self.recv()


class FakeNetwork:
    """connect(url, **options): a new FakeConnection, or an error while `refuse` > 0."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        auto_pong: bool = True,
        refuse: int = 0,
        refuse_hosts: frozenset[str] = frozenset(),
        error: Callable[[], BaseException] | None = None,
    ) -> None:
        self.responder = responder
        self.auto_pong = auto_pong
        self.refuse = refuse
        self.refuse_hosts = refuse_hosts
        self.error = error or (lambda: ConnectionRefusedError(111, "Connection refused"))
        self.connections: list[FakeConnection] = []
        self.attempts: list[dict[str, Any]] = []

    async def connect(self, url: str, **options: Any) -> FakeConnection:
        self.attempts.append({"url": url, **options})
        await asyncio.sleep(0)
        if self.refuse > 0 or options.get("connect_host") in self.refuse_hosts:
            self.refuse = max(0, self.refuse - 1)
            raise self.error()
        conn = FakeConnection(self.responder, auto_pong=self.auto_pong)
        conn.options = options
        self.connections.append(conn)
        return conn

    @property
    def last(self) -> FakeConnection:
        return self.connections[-1]


async def resolve_localhost(host: str, port: int, family: int) -> list[str]:
    return ["127.0.0.1"]


class EventLog(list[SessionEvent]):
    """Collects a session's events."""

    def states(self) -> list[str]:
        return [str(e.details["state"]) for e in self if e.kind == "state"]

    def of(self, kind: str) -> list[SessionEvent]:
        return [e for e in self if e.kind == kind]


async def until(predicate: Callable[[], bool], timeout: float = 3.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not met")
        await asyncio.sleep(0.002)
