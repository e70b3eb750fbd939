"""The session's read loop over a connection with `recv_frames()` (what the kernel and
DPDK transports have): each run of frames comes as one `MessageBatch` and its payloads go
to the dialect and the sink without a `Message` per message, max_batch at a time, in order,
control messages (acks) handled as on the per-message path."""

from __future__ import annotations

import asyncio
from typing import Any

from dataplane.ws.events import Message, MessageBatch
from gateway.sessions import State
from tests.unit.sessions.fakes import FakeConnection, FakeNetwork, generic_responder, until
from tests.unit.sessions.test_sessions_session import config, run, session


class FrameConnection(FakeConnection):
    """A FakeConnection whose queued messages come out as MessageBatches; recv() is
    refused, so the session must use the batch path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches_taken: list[int] = []

    async def recv(self) -> Message:
        raise AssertionError("the session read per message from a connection with recv_frames")

    async def recv_frames(self) -> MessageBatch:
        await self.inbox_ready()
        run = list(self.inbox)
        self.inbox.clear()
        self.batches_taken.append(len(run))
        return MessageBatch.of(run)


class FrameNetwork(FakeNetwork):
    async def connect(self, url: str, **options: Any) -> FakeConnection:
        self.attempts.append({"url": url, **options})
        await asyncio.sleep(0)
        conn = FrameConnection(self.responder, auto_pong=self.auto_pong)
        conn.options = options
        self.connections.append(conn)
        return conn


def test_a_run_of_frames_is_published_in_order_max_batch_at_a_time() -> None:
    async def scenario() -> None:
        net = FrameNetwork(generic_responder())
        s, sink, _ = session(net, config(max_batch=64))
        s.start()
        await until(lambda: s.state is State.STREAMING)  # the acks came through recv_frames
        conn = net.last
        assert isinstance(conn, FrameConnection) and conn.batches_taken
        for i in range(1, 201):
            conn.inbox.append(
                Message(b'{"topic":"%s","sim_seq":%d}' % (b"ab"[i % 2 : i % 2 + 1], i), True)
            )
        conn.push({"topic": "a", "sim_seq": 201})
        await until(lambda: s.counters.messages == 201)
        assert conn.batches_taken[-1] == 201
        assert sink.batches == 4  # 64 + 64 + 64 + 9: max_batch per publish
        messages = sink.messages()
        assert [m[2] for m in messages][:2] == [
            b'{"topic":"b","sim_seq":1}',
            b'{"topic":"a","sim_seq":2}',
        ]
        assert [m[1] for m in messages[:200]] == ["b", "a"] * 100
        assert len({m[3] for m in messages}) == 1  # one receive stamp for the run
        assert s.counters.topic_messages == {"a": 101, "b": 100}
        await s.stop()

    run(scenario())
