"""/v1/consumers: the open streams, the NATS sink and the ring's readers, and the operator's
force-close (TestClient, real SQLite, a real hub on a named ring, a real reader process)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from api.app import create_app
from dataplane.ring import RingWriter, ring_path
from gateway.hub import Hub
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, WS_BASE, make_settings
from tests.host.fakesys import FakeHost


class Gw:
    def __init__(self, client: TestClient, hub: Hub, ring: str, tokens: dict[str, Any]) -> None:
        self.client, self.hub, self.ring = client, hub, ring
        self.admin, self.consume = tokens["admin"], tokens["consume"]
        self.control: Any = client.app.state.control  # type: ignore[attr-defined]

    def consumers(self) -> dict[str, Any]:
        r = self.client.get("/v1/consumers", headers=self.admin)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


@pytest.fixture
def gw(tmp_path: Path, fake_host: FakeHost) -> Iterator[Gw]:
    ring = f"wsgw-test-consumers-{os.getpid()}"
    hub = Hub(ring=RingWriter.create(ring, 1 << 20, replace=True))
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'gw.db'}")
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager(), hub=hub)
    try:
        with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
            tokens = {}
            for name, scope in (("ops", "admin"), ("consume", "consume")):
                _, secret = app.state.control.tokens.create(name, [scope])
                tokens[name if scope == "consume" else "admin"] = {
                    "Authorization": f"Bearer {secret}"
                }
            yield Gw(client, hub, ring, tokens)
    finally:
        hub.close()
        ring_path(ring).unlink(missing_ok=True)


def test_a_stream_is_listed_and_an_operator_closes_it_with_1008(gw: Gw) -> None:
    body = {"name": "s1", "url": "wss://feed.example.com/ws", "dialect": "generic"}
    sid = gw.control.sessions.create(body | {"transport": "kernel"}).id
    assert gw.consumers()["streams"] == []
    query = f"session={sid}&topics=a,b&consumer=alice&envelope=1&overflow=drop_oldest"
    with gw.client.websocket_connect(f"{WS_BASE}/v1/stream?{query}", headers=gw.consume) as ws:
        assert orjson.loads(ws.receive_text())["type"] == "subscribed"
        listed = gw.consumers()
        (stream,) = listed["streams"]
        assert stream["name"] == "alice"
        assert (stream["session_id"], stream["topics"]) == (sid, ["a", "b"])
        assert (stream["overflow"], stream["lag"], stream["dropped"]) == ("drop_oldest", 0, 0)
        assert stream["since"]
        ring = listed["ring"]
        assert ring["path"] == str(ring_path(gw.ring))
        assert [f["kind"] for f in ring["followers"]] == ["stream"]  # this stream's loop
        assert listed["nats"] is None

        r = gw.client.delete(f"/v1/consumers/{stream['id']}", headers=gw.admin)
        assert r.status_code == 204, r.text
        with pytest.raises(WebSocketDisconnect) as closed:
            ws.receive_text()
    assert (closed.value.code, closed.value.reason) == (1008, "closed by operator 'ops'")
    assert gw.consumers()["streams"] == []
    r = gw.client.delete(f"/v1/consumers/{stream['id']}", headers=gw.admin)
    assert r.status_code == 404
    assert r.json()["detail"] == f"stream consumer {stream['id']} not found"


def test_a_reader_in_another_process_is_listed_by_its_pid(gw: Gw) -> None:
    code = (
        "import sys; from dataplane.ring import RingReader; "
        f"r = RingReader.attach({gw.ring!r}); print('attached', flush=True); sys.stdin.read()"
    )
    reader = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert reader.stdout is not None
        assert reader.stdout.readline().strip() == "attached"
        processes = gw.consumers()["ring"]["processes"]
        assert reader.pid in [p["pid"] for p in processes]
        assert (
            "RingReader.attach" in next(p for p in processes if p["pid"] == reader.pid)["command"]
        )
    finally:
        reader.kill()
        reader.wait()
    assert reader.pid not in [p["pid"] for p in gw.consumers()["ring"]["processes"]]


def test_without_a_hub_there_are_no_consumers(tmp_path: Path, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'gw.db'}")
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager())
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        _, secret = app.state.control.tokens.create("ops", ["admin"])
        admin = {"Authorization": f"Bearer {secret}"}
        r = client.get("/v1/consumers", headers=admin)
        assert r.json() == {"hub": False, "streams": [], "nats": None, "ring": None}
        assert client.delete("/v1/consumers/1", headers=admin).status_code == 404
