"""The bus transport: a gateway's messages on NATS (gateway.hub.nats publishes them), core
NATS or a JetStream stream, read into the same events as the ring.

Subjects are `<prefix>.<session>.<topic token>` (gateway.hub.names). A message becomes a
`RingMessage` with the ring's topic name (`<session>:<topic>`) and topic_id -1; its seq and
stamp are the gateway's when the sink adds headers (`NatsConfig.headers`), else 0. Gap events
(`<prefix>.<session>.$gap`) arrive as on the ring: messages of the `$gap` topic with the gap's
JSON, which carries the gateway's epoch; a gap of another epoch than the last one seen comes
after a `Restart`. Core NATS keeps nothing: what is published while the consumer is away is
not delivered. JetStream stores it: `start_seq` resumes at a stream sequence (keep
`position`, the stream sequence of the last message delivered, and pass position + 1).

nats-py is asyncio only: it runs on a loop of its own in a thread of its own, and hands each
message over through a condition variable, so the Client's sync and async reads work as with
the other transports.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

import orjson

from dataplane.ring import RingMessage
from gateway.client.core import ClientEvent, NetworkSource, Restart, SourceUnavailableError
from gateway.hub.names import (
    NATS_GAP_TOKEN,
    RING_GAP_TOPIC,
    ring_topic,
    topic_from_token,
    topic_token,
)

#: How long connecting (and subscribing) may take before the bus counts as unavailable.
CONNECT_TIMEOUT = 5.0


class NatsSource(NetworkSource):
    """Messages of one session (or every session) from a NATS server."""

    def __init__(
        self,
        url: str,
        *,
        prefix: str = "wsgw",
        session: int | None = None,
        topics: Iterable[str] | None = None,
        jetstream: str | None = None,
        start_seq: int | None = None,
        epoch: int | None = None,
        token: str | None = None,
        connect_timeout: float = CONNECT_TIMEOUT,
    ) -> None:
        """url: nats://host:port (comma-separated for several servers). topics: upstream
        topics of `session` (None: all). jetstream: the stream's name, to read what it stored
        (from start_seq, else only what comes from now on). epoch: the run the consumer saw
        last, so that a gap of another run comes after a Restart."""
        if topics is not None and session is None:
            raise ValueError("topics need a session (subjects are per session)")
        if start_seq is not None and jetstream is None:
            raise ValueError("start_seq needs jetstream: core NATS keeps no messages")
        self.prefix = prefix
        self.session = session
        self.subject = f"{prefix}.{session if session is not None else '*'}.*"
        self._tokens = None if topics is None else {topic_token(t) for t in topics}
        self._epoch = epoch or 0
        self.position: int | None = None  # JetStream sequence of the last message delivered
        self._events: deque[ClientEvent] = deque()
        self._cond = threading.Condition()
        self._interrupted = False
        self._ended = False
        self._loop = asyncio.new_event_loop()
        self._nc: Any = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="wsgw-client-nats")
        self._thread.daemon = True
        self._thread.start()
        opening = asyncio.run_coroutine_threadsafe(
            self._open(url, jetstream, start_seq, token, connect_timeout), self._loop
        )
        try:
            opening.result(connect_timeout + 1.0)
        except Exception as exc:
            self.close()
            raise SourceUnavailableError(f"{url}: {type(exc).__name__}: {exc}") from exc

    async def _open(
        self,
        url: str,
        jetstream: str | None,
        start_seq: int | None,
        token: str | None,
        timeout: float,
    ) -> None:
        import nats
        from nats.js.api import ConsumerConfig, DeliverPolicy

        async def closed() -> None:
            with self._cond:
                self._ended = True
                self._cond.notify_all()

        self._nc = await nats.connect(
            servers=url.split(","),
            token=token,
            connect_timeout=timeout,
            allow_reconnect=True,
            max_reconnect_attempts=-1,
            closed_cb=closed,
        )
        if jetstream is None:
            await self._nc.subscribe(self.subject, cb=self._on_message)
            return
        if start_seq is not None:
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start_seq
            )
        else:
            config = ConsumerConfig(deliver_policy=DeliverPolicy.NEW)
        js = self._nc.jetstream()
        await js.subscribe(
            self.subject,
            stream=jetstream,
            cb=self._on_message,
            ordered_consumer=True,
            config=config,
        )

    async def _on_message(self, msg: Any) -> None:
        _, sid_text, token = msg.subject.rsplit(".", 2)
        if self._tokens is not None and token not in self._tokens and token != NATS_GAP_TOKEN:
            return
        sid = int(sid_text)
        events: list[ClientEvent] = []
        headers = msg.headers or {}
        seq = int(headers.get("Wsgw-Seq", 0))
        ts = int(headers.get("Wsgw-Recv-Ts", 0))
        if token == NATS_GAP_TOKEN:
            body = orjson.loads(msg.data)
            epoch = int(body.get("epoch") or "0", 16)
            if epoch and epoch != self._epoch:
                if self._epoch:
                    events.append(Restart(self._epoch, epoch))
                self._epoch = epoch
            gap_seq = body.get("seq") or seq
            gap_ts = body.get("ts_ns") or ts
            events.append(RingMessage(gap_seq, sid, RING_GAP_TOPIC, gap_ts, msg.data, -1))
        else:
            topic = ring_topic(sid, topic_from_token(token))
            events.append(RingMessage(seq, sid, topic, ts, msg.data, -1))
        with self._cond:
            if _is_js(msg):
                self.position = msg.metadata.sequence.stream
            self._events.extend(events)
            self._cond.notify_all()

    # ---- MessageSource ------------------------------------------------------------------
    def read(self, max: int | None = None, timeout: float | None = 0.0) -> list[ClientEvent]:
        with self._cond:
            if not self._events and timeout != 0:
                self._wait_locked(timeout)
            limit = min(max or 1024, len(self._events))
            return [self._events.popleft() for _ in range(limit)]

    def _wait_locked(self, timeout: float | None) -> bool:
        self._interrupted = False
        return self._cond.wait_for(
            lambda: bool(self._events) or self._ended or self._interrupted, timeout
        ) and bool(self._events)

    @property
    def epoch(self) -> int:
        """The gateway's run, from the last gap event seen (0: none seen yet)."""
        return self._epoch

    def wait(self, timeout: float | None, spin: float | None = None) -> bool:
        with self._cond:
            return bool(self._events) or self._wait_locked(timeout)

    def interrupt(self) -> None:
        with self._cond:
            self._interrupted = True
            self._cond.notify_all()

    @property
    def ended(self) -> bool:
        with self._cond:
            return self._ended and not self._events

    async def _shutdown(self) -> None:
        """Close the connection, then end what nats-py left running (JetStream's checks)."""
        if self._nc is not None:
            with contextlib.suppress(Exception):
                await self._nc.close()
        current = asyncio.current_task()
        rest = [t for t in asyncio.all_tasks() if t is not current]
        for task in rest:
            task.cancel()
        await asyncio.gather(*rest, return_exceptions=True)

    def close(self) -> None:
        if not self._loop.is_closed():
            closing = asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop)
            with contextlib.suppress(Exception):
                closing.result(5.0)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5.0)
            self._loop.close()
        with self._cond:
            self._ended = True
            self._cond.notify_all()


def _is_js(msg: Any) -> bool:
    """Whether msg came from JetStream (its reply subject is the ack subject `$JS.ACK...`)."""
    return bool(msg.reply) and str(msg.reply).startswith("$JS.ACK.")
