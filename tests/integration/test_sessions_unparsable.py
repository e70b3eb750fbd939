"""Frames the dialect cannot parse, from a real `websockets` server on loopback: counted,
an event (with a sample) on the first of a spell, a status flag while they go on that
clears after a quiet while, the counter in the runtime's metrics."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from websockets.asyncio.server import ServerConnection, serve

from gateway.runtime import SessionSpec
from gateway.runtime.live import LiveRuntime
from gateway.sessions import UNPARSABLE_FRAMES, RecordingSink, SessionConfig, UpstreamSession
from tests.integration.test_sessions_helpers import EventLog, fast_config, run, until


class NotJsonServer:
    """Acks every subscribe, then sends what the test queues: text frames as they are."""

    def __init__(self) -> None:
        self.outbox: asyncio.Queue[str] = asyncio.Queue()

    async def handle(self, ws: ServerConnection) -> None:
        async def send_queued() -> None:
            while True:
                await ws.send(await self.outbox.get())

        sending = asyncio.create_task(send_queued())
        try:
            async for raw in ws:  # until the client closes
                request = orjson.loads(raw)
                await ws.send(orjson.dumps({"result": None, "id": request.get("id")}).decode())
        finally:
            sending.cancel()


def test_unparsable_frames_are_counted_reported_once_per_spell_and_flagged() -> None:
    async def scenario() -> None:
        server = NotJsonServer()
        async with serve(server.handle, "127.0.0.1", 0) as ws_server:
            port = ws_server.sockets[0].getsockname()[1]
            sink = RecordingSink()
            events = EventLog()
            session = UpstreamSession(
                1, fast_config(f"ws://127.0.0.1:{port}/", "generic"), sink, on_event=events.append
            )
            session.unparsable_quiet_s = 0.5
            session.subscribe(["t"])
            session.start()
            try:
                await until(lambda: str(session.state) == "streaming")
                assert not session.receiving_unparsable
                for frame in ("not json, frame one", "<html>frame two</html>"):
                    server.outbox.put_nowait(frame)
                server.outbox.put_nowait('{"topic":"t","px":1}')
                await until(lambda: len(sink.messages("t")) == 1)
                assert session.counters.unparsable == 2
                assert session.receiving_unparsable
                (first,) = events.of(UNPARSABLE_FRAMES)
                assert first.details["sample"] == "not json, frame one"
                assert "generic dialect cannot parse" in first.reason

                await until(lambda: not session.receiving_unparsable)  # quiet: it clears
                server.outbox.put_nowait("frame three")  # a new spell: a new event
                await until(lambda: len(events.of(UNPARSABLE_FRAMES)) == 2)
                assert events.of(UNPARSABLE_FRAMES)[1].details == {
                    "sample": "frame three",
                    "count": 3,
                }
                assert session.receiving_unparsable
                assert session.snapshot()["receiving_unparsable"] is True
            finally:
                await session.stop()

    run(scenario())


def test_the_runtime_reports_the_flag_and_exports_the_counter() -> None:
    async def scenario() -> None:
        server = NotJsonServer()
        async with serve(server.handle, "127.0.0.1", 0) as ws_server:
            port = ws_server.sockets[0].getsockname()[1]

            def config(spec: SessionSpec) -> SessionConfig:
                return fast_config(spec.url, spec.dialect)

            runtime = LiveRuntime(session_config=config)
            try:
                spec = SessionSpec(7, "s7", f"ws://127.0.0.1:{port}/", "generic", "kernel", None)
                runtime.subscribe(7, ["t"])
                runtime.start_session(spec)
                await until(lambda: (runtime.session_status(7).reason or "").startswith("stream"))
                assert not runtime.session_status(7).receiving_unparsable
                server.outbox.put_nowait("garbage")

                def counted() -> dict[str, Any]:
                    return {
                        m.name: m.value
                        for m in runtime.metrics().metrics
                        if m.labels.get("session") == "7"
                    }

                await until(lambda: counted().get("session_unparsable") == 1.0)
                assert runtime.session_status(7).receiving_unparsable
            finally:
                await asyncio.to_thread(runtime.close)

    run(scenario())
