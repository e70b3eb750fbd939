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
from dataplane.ring import RingReader, RingWriter, ring_name, ring_path
from gateway.client import Client, RingMessage
from gateway.hub import Hub
from gateway.runtime import DetachedRuntime
from tests.api.conftest import BASE_URL, WS_BASE, make_settings
from tests.host.fakesys import FakeHost
from tests.utils.consumers import IdleReader


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
    gateway = f"test-consumers-{os.getpid()}"
    ring = ring_name(gateway)  # the ring `wsgw serve` makes for this gateway name
    hub = Hub(ring=RingWriter.create(ring, 1 << 20, replace=True))
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'gw.db'}", hub={"gateway": gateway})
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


def test_a_subscriptions_ring_url_and_topics_open_the_gateways_ring(gw: Gw) -> None:
    """What the API tells a consumer is enough to read: Client.connect(ring_url, ring_topics)."""
    body = {"name": "s1", "url": "wss://feed.example.com/ws", "dialect": "generic"}
    sid = gw.control.sessions.create(body | {"transport": "kernel"}).id
    r = gw.client.post(
        "/v1/subscriptions",
        json={"session_id": sid, "consumer": "c1", "topics": ["a"]},
        headers=gw.consume,
    )
    assert r.status_code == 201, r.text
    consume = r.json()["consume"]
    assert consume["ring"] == gw.ring
    with Client.connect(consume["ring_url"], topics=consume["ring_topics"]) as client:
        gw.hub.publish(sid, "b", b"not subscribed")
        gw.hub.publish(sid, "a", b"hello")
        events = client.read(timeout=5.0)
    assert [(e.topic, bytes(e.payload)) for e in events if isinstance(e, RingMessage)] == [
        (f"{sid}:a", b"hello")
    ]


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


def test_a_reader_in_another_process_is_listed_with_its_lag_and_closed(gw: Gw) -> None:
    with IdleReader(gw.ring, "pricer") as reader:
        ring = gw.hub.ring
        assert ring is not None
        for i in range(5):
            ring.write(1, 0, b"m%d" % i)
        body = gw.consumers()["ring"]
        (row,) = [r for r in body["readers"] if r["pid"] == reader.pid]
        assert (row["name"], row["lag"], row["dropped"], row["in_gateway"]) == (
            "pricer",
            5,
            0,
            False,
        )
        assert "RingReader.attach" in row["command"]
        assert body["max_readers"] == 31
        assert reader.pid not in [p["pid"] for p in body["processes"]]  # listed above instead

        path = f"/v1/consumers/ring/{row['slot']}"
        assert (
            gw.client.delete(path, params={"pid": reader.pid + 1}, headers=gw.admin).status_code
            == 404
        )
        assert (
            gw.client.delete(path, params={"pid": reader.pid}, headers=gw.consume).status_code
            == 403
        )
        assert (
            gw.client.delete(path, params={"pid": reader.pid}, headers=gw.admin).status_code == 204
        )
        evicted = reader.read_until_evicted()
        assert evicted.startswith("evicted: ring read: this ring reader was closed")
    assert reader.pid not in [r["pid"] for r in gw.consumers()["ring"]["readers"]]


def test_the_gateways_own_readers_are_listed_but_not_closed_here(gw: Gw) -> None:
    ring = gw.hub.ring
    assert ring is not None
    with RingReader.attach(gw.ring, reader_name="in-process") as own:
        (row,) = [r for r in gw.consumers()["ring"]["readers"] if r["name"] == "in-process"]
        assert row["in_gateway"] and row["pid"] == os.getpid() and row["slot"] == own.slot
        r = gw.client.delete(
            f"/v1/consumers/ring/{row['slot']}", params={"pid": os.getpid()}, headers=gw.admin
        )
        assert r.status_code == 404


def test_a_process_mapping_the_ring_without_a_slot_is_listed_by_its_pid(gw: Gw) -> None:
    code = (
        "import mmap, sys\n"
        f"f = open('/dev/shm/{gw.ring}', 'rb')\n"
        "m = mmap.mmap(f.fileno(), 4096, prot=mmap.PROT_READ)\n"
        "print('mapped', flush=True); sys.stdin.read()\n"
    )
    tool = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert tool.stdout is not None
        assert tool.stdout.readline().strip() == "mapped"
        body = gw.consumers()["ring"]
        assert tool.pid in [p["pid"] for p in body["processes"]]
        assert tool.pid not in [r["pid"] for r in body["readers"]]
    finally:
        tool.kill()
        tool.wait()
    assert tool.pid not in [p["pid"] for p in gw.consumers()["ring"]["processes"]]


def test_without_a_hub_there_are_no_consumers(tmp_path: Path, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, f"sqlite:///{tmp_path / 'gw.db'}")
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager())
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        _, secret = app.state.control.tokens.create("ops", ["admin"])
        admin = {"Authorization": f"Bearer {secret}"}
        r = client.get("/v1/consumers", headers=admin)
        assert r.json() == {"hub": False, "streams": [], "nats": None, "ring": None}
        assert client.delete("/v1/consumers/1", headers=admin).status_code == 404
        assert client.delete("/v1/consumers/ring/0?pid=1", headers=admin).status_code == 404


@pytest.mark.parametrize("configured", [True, False])
def test_api_stream_sink_setting_reaches_the_stream_route(
    tmp_path: Path, fake_host: FakeHost, configured: bool
) -> None:
    """api.stream_sink = false keeps every /v1/stream on the router (the route reads
    app.state.stream_sink)."""
    settings = make_settings(
        tmp_path, f"sqlite:///{tmp_path / 'gw.db'}", api={"stream_sink": configured}
    )
    app = create_app(settings, DetachedRuntime(), host=fake_host.manager())
    assert app.state.stream_sink is configured
