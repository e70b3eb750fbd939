"""/v1/stream?session=ID&topics=: topics as the session's dialect spells them, and a stream
opening while its session is deleted (TestClient, real SQLite, a real hub)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from api.app import create_app
from gateway.hub import Hub
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, WS_BASE, make_settings, stream_close
from tests.host.fakesys import FakeHost


class Client:
    def __init__(self, client: TestClient, hub: Hub, consume: dict[str, str]) -> None:
        self.client, self.hub, self.consume = client, hub, consume
        self.control: Any = client.app.state.control  # type: ignore[attr-defined]

    def session(self, dialect: str) -> int:
        body = {"name": f"s-{dialect}", "url": "wss://feed.example.com/ws"}
        body |= {"dialect": dialect, "transport": "kernel"}
        sid: int = self.control.sessions.create(body).id
        return sid

    def close_of(self, query: str) -> tuple[int, str]:
        return stream_close(self.client, f"/v1/stream?{query}", self.consume)


@pytest.fixture
def gw(tmp_path: Path, fake_host: FakeHost) -> Iterator[Client]:
    hub = Hub()
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'gw.db'}")
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager(), hub=hub)
    try:
        with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
            _, secret = app.state.control.tokens.create("reader", ["consume"])
            yield Client(client, hub, {"Authorization": f"Bearer {secret}"})
    finally:
        hub.close()


def test_stream_topics_are_respelled_by_the_sessions_dialect(gw: Client) -> None:
    sid = gw.session("binance")
    url = f"{WS_BASE}/v1/stream?session={sid}&topics=BTCUSDT@trade&envelope=1"
    with gw.client.websocket_connect(url, headers=gw.consume) as ws:
        hello = orjson.loads(ws.receive_text())
        assert hello["topics"] == ["btcusdt@trade"]
        deadline = time.monotonic() + 10
        while not gw.hub.consumers():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        gw.hub.publish(sid, "btcusdt@trade", b'{"p":1}')  # as the session publishes it
        message = orjson.loads(ws.receive_text())
        assert (message["topic"], message["payload"]) == ("btcusdt@trade", '{"p":1}')
        gw.hub.forget_session(sid)  # the server ends the stream: no teardown race
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
        assert closed.value.code == 4410


def test_stream_topics_the_dialect_refuses_close_4400_naming_the_topic(gw: Client) -> None:
    sid = gw.session("binance")
    code, reason = gw.close_of(f"session={sid}&topics=btcusdt@trade,ticker:BTC-USD")
    assert code == 4400
    assert reason.startswith("topic 'ticker:BTC-USD' is refused by the session's dialect")
    code, reason = gw.close_of(f"session={sid}&topics=btcusdt@trade,BTCUSDT@trade")
    assert code == 4400 and "'BTCUSDT@trade'" in reason
    assert not gw.hub.consumers()
    generic = gw.session("generic")  # a dialect that takes any topic as it is
    url = f"{WS_BASE}/v1/stream?session={generic}&topics=ticker:BTC-USD&envelope=1"
    with gw.client.websocket_connect(url, headers=gw.consume) as ws:
        assert orjson.loads(ws.receive_text())["topics"] == ["ticker:BTC-USD"]
        gw.hub.forget_session(generic)  # the server ends the stream: no teardown race
        with pytest.raises(WebSocketDisconnect):
            ws.receive_text()


def test_a_session_deleted_after_its_row_was_read_closes_4410(gw: Client) -> None:
    sid = gw.session("generic")
    gw.hub.forget_session(sid)  # the DELETE cut its consumers; the row is still there
    assert gw.close_of(f"session={sid}") == (4410, f"session {sid} was deleted")

    async def direct() -> None:
        from gateway.hub import SessionDeletedError

        with pytest.raises(SessionDeletedError, match=f"session {sid} was deleted"):
            gw.hub.subscribe(sid, None)
        gw.hub.subscribe(sid + 1, None).close()  # other sessions are served

    asyncio.run(direct())
