"""The API's doors (issue #17): Host allow-list, Origin and Content-Type checks, a body
limit with authentication before the body, a failed-authentication rate limit, bearer
secrets kept out of the logs, revoked tokens' streams closed, /readyz detail for admins.

TestClient where the app decides alone; a real uvicorn (a thread, or `wsgw serve` as a
process) where the server is part of the behaviour: the access log, a body that streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from pydantic import ValidationError
from starlette.testclient import WebSocketDenialResponse
from starlette.websockets import WebSocketDisconnect

from api.app import create_app
from api.auth import AuthFailureLimiter, UnsafeSettingsError
from api.security import SecretRedactingFilter, redact_secrets
from gateway.hub import Hub
from gateway.runtime import DetachedRuntime
from gateway.settings import Settings
from tests.api.conftest import BASE_URL, WS_BASE, make_settings
from tests.api.test_cli import SERVE, first_answer, kill_if_running, serve_env, stop_gracefully
from tests.host.fakesys import FakeHost
from wsgw_bench.servers import ServerThread, free_port, gateway_app

EVIL = "https://evil.example"
SESSION = {
    "name": "s1",
    "url": "wss://feed.example.com/ws",
    "dialect": "generic",
    "transport": "kernel",
}


@pytest.fixture
def db_url(sqlite_url: str) -> str:
    """The doors do not depend on the database: SQLite (revoked_tokens runs on both)."""
    return sqlite_url


@dataclass
class Door:
    """An app with auth on ('token') or off ('none'), a loopback client, and the headers
    of an admin and of a consumer (empty with auth off)."""

    app: FastAPI
    client: TestClient
    mode: str
    admin: dict[str, str]
    consume: dict[str, str]


def _start(app: FastAPI, mode: str, client: tuple[str, int] = ("127.0.0.1", 50000)) -> Door:
    tc = TestClient(app, client=client, base_url=BASE_URL).__enter__()
    admin: dict[str, str] = {}
    consume: dict[str, str] = {}
    if mode == "token":
        control = app.state.control
        admin = {"Authorization": f"Bearer {control.tokens.create('admin', ['admin'])[1]}"}
        consume = {"Authorization": f"Bearer {control.tokens.create('c', ['consume'])[1]}"}
    return Door(app, tc, mode, admin, consume)


@pytest.fixture(params=["token", "none"], ids=["auth-on", "auth-off"])
def door(
    request: pytest.FixtureRequest, tmp_path: Path, db_url: str, fake_host: FakeHost
) -> Iterator[Door]:
    settings = make_settings(tmp_path, db_url, auth={"mode": request.param})
    d = _start(create_app(settings, DetachedRuntime(), host=fake_host.manager()), request.param)
    try:
        yield d
    finally:
        d.client.__exit__(None, None, None)


def _session(door: Door) -> int:
    r = door.client.post("/v1/sessions", json=SESSION, headers=door.admin)
    assert r.status_code == 201, r.text
    sid: int = r.json()["id"]
    assert door.client.post(f"/v1/sessions/{sid}/start", headers=door.admin).status_code == 200
    return sid


def _desired(door: Door, sid: int) -> str:
    state: str = door.client.get(f"/v1/sessions/{sid}", headers=door.admin).json()["desired_state"]
    return state


# ---- settings ------------------------------------------------------------------------------
def test_trusted_hosts_are_loopback_names_listen_address_and_the_list() -> None:
    assert Settings(api={"host": "127.0.0.1"}).api.trusted_hosts() == [  # type: ignore[arg-type]
        "localhost", "127.0.0.1", "[::1]",
    ]  # fmt: skip
    api = Settings(api={"host": "10.1.2.3", "allowed_hosts": ["GW.example", "*.svc"]}).api  # type: ignore[arg-type]
    assert api.trusted_hosts() == [
        "localhost",
        "127.0.0.1",
        "[::1]",
        "10.1.2.3",
        "gw.example",
        "*.svc",
    ]
    assert "0.0.0.0" not in Settings(api={"host": "0.0.0.0"}).api.trusted_hosts()  # type: ignore[arg-type]
    assert "[fd00::1]" in Settings(api={"host": "fd00::1"}).api.trusted_hosts()  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("allowed_hosts", ["http://gw.example"]),
        ("allowed_hosts", ["gw.example:8080"]),
        ("allowed_hosts", ["gw.*.example"]),
        ("allowed_origins", ["gw.example"]),
        ("allowed_origins", ["https://gw.example/path"]),
        ("max_body_bytes", 10),
    ],
)
def test_bad_security_settings_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError, match=field):
        Settings(api={field: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("field", ["allowed_hosts", "allowed_origins", "cors_origins"])
def test_auth_off_refuses_any_host_or_origin(tmp_path: Path, sqlite_url: str, field: str) -> None:
    settings = make_settings(tmp_path, sqlite_url, auth={"mode": "none"}, api={field: ["*"]})
    with pytest.raises(UnsafeSettingsError, match=f"api.{field}"):
        create_app(settings)


# ---- Host ------------------------------------------------------------------------------------
def test_a_host_not_allowed_is_refused(door: Door) -> None:
    """DNS rebinding: a page on evil.example whose name resolves to 127.0.0.1 sends
    Host: evil.example; the API does not answer it, not even its health."""
    for host in ("localhost:8080", "127.0.0.1:8080", "[::1]:8080", "localhost"):
        assert door.client.get("/healthz", headers={"Host": host}).status_code == 200, host
    for path in ("/healthz", "/v1/sessions", "/"):
        r = door.client.get(path, headers={"Host": "evil.example:8080", **door.admin})
        assert (r.status_code, r.text) == (400, "Invalid host header"), path
    r = door.client.post(
        "/v1/sessions", json=SESSION, headers={"Host": "evil.example", **door.admin}
    )
    assert r.status_code == 400
    assert door.client.get("/v1/sessions", headers=door.admin).json()["count"] == 0
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        door.client.websocket_connect(
            "ws://evil.example/v1/stream?session=1", headers=door.consume
        ),
    ):
        pass
    assert denied.value.status_code == 400


def test_allowed_hosts_add_names(tmp_path: Path, db_url: str, fake_host: FakeHost) -> None:
    settings = make_settings(tmp_path, db_url, api={"allowed_hosts": ["gw.example", "*.svc.local"]})
    with TestClient(create_app(settings, host=fake_host.manager()), base_url=BASE_URL) as client:
        for host, code in [("gw.example", 200), ("a.svc.local:80", 200), ("svc.local", 400),
                           ("other.example", 400)]:  # fmt: skip
            assert client.get("/healthz", headers={"Host": host}).status_code == code, host
    settings = make_settings(tmp_path, db_url, api={"allowed_hosts": ["*"]})
    with TestClient(create_app(settings, host=fake_host.manager()), base_url=BASE_URL) as client:
        assert client.get("/healthz", headers={"Host": "anything.example"}).status_code == 200


# ---- Origin and Content-Type -----------------------------------------------------------------
def test_cross_site_simple_post_cannot_stop_a_session(door: Door) -> None:
    """The issue's case: a page elsewhere posts text/plain (no CORS preflight) to stop a
    session. Refused by its Origin (403), and without an Origin by its type (415)."""
    sid = _session(door)
    r = door.client.post(
        f"/v1/sessions/{sid}/stop",
        content=b"{}",
        headers={"Origin": EVIL, "Content-Type": "text/plain", **door.admin},
    )
    assert r.status_code == 403
    assert "origin 'https://evil.example' may not change state" in r.json()["detail"]
    for content_type in (
        "text/plain",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
    ):
        r = door.client.post(
            f"/v1/sessions/{sid}/stop",
            content=b"a=b",
            headers={"Content-Type": content_type, **door.admin},
        )
        assert r.status_code == 415, content_type
        assert "send Content-Type application/json" in r.json()["detail"]
    assert _desired(door, sid) == "running"
    for method in ("PUT", "PATCH", "DELETE"):
        r = door.client.request(
            method, f"/v1/sessions/{sid}", headers={"Origin": EVIL, **door.admin}
        )
        assert r.status_code == 403, method
    assert _desired(door, sid) == "running"


def test_same_origin_and_no_origin_may_change_state(door: Door) -> None:
    sid = _session(door)
    own = {"Origin": "http://localhost", **door.admin}  # the dashboard, served from the API
    r = door.client.post(f"/v1/sessions/{sid}/stop", headers=own)
    assert r.status_code == 200, r.text
    r = door.client.patch(f"/v1/sessions/{sid}", json={"heartbeat_interval_s": 5}, headers=own)
    assert r.status_code == 200, r.text
    no_origin = {"Content-Type": "application/json", **door.admin}  # curl, an SDK
    r = door.client.post(f"/v1/sessions/{sid}/start", headers=no_origin)
    assert r.status_code == 200
    # Reads are left to CORS: the browser keeps the answer from the other origin's page.
    r = door.client.get("/v1/sessions", headers={"Origin": EVIL, **door.admin})
    assert r.status_code == 200


def test_listed_origins_may_change_state(tmp_path: Path, db_url: str, fake_host: FakeHost) -> None:
    settings = make_settings(
        tmp_path, db_url, auth={"mode": "none"},
        api={"allowed_origins": ["https://ops.example"], "cors_origins": ["https://grafana.example"]},
    )  # fmt: skip
    door = _start(create_app(settings, host=fake_host.manager()), "none")
    try:
        for origin, code in [("https://ops.example", 201), ("https://grafana.example", 201),
                             ("http://ops.example", 403), ("null", 403)]:  # fmt: skip
            body = {**SESSION, "name": f"s{code}{len(origin)}"}
            r = door.client.post("/v1/sessions", json=body, headers={"Origin": origin})
            assert r.status_code == code, origin
    finally:
        door.client.__exit__(None, None, None)


def test_stream_refuses_another_origin(door: Door) -> None:
    with (
        pytest.raises(WebSocketDenialResponse) as denied,
        door.client.websocket_connect(
            f"{WS_BASE}/v1/stream?session=1", headers={"Origin": EVIL, **door.consume}
        ),
    ):
        pass
    assert denied.value.status_code == 403
    # The API's own origin gets through the door (then: no session 1 here).
    with (
        door.client.websocket_connect(
            f"{WS_BASE}/v1/stream?session=1", headers={"Origin": "http://localhost", **door.consume}
        ) as ws,
        pytest.raises(WebSocketDisconnect) as closed,
    ):
        ws.receive_text()
    assert closed.value.code == 4404


# ---- body: authentication first, size limit ----------------------------------------------------
@dataclass
class Exchange:
    status: int
    headers: dict[str, str]
    body: bytes
    reads: int  # how many times the app called receive()


def _asgi(app: FastAPI, method: str, path: str, headers: dict[str, str], chunks: list[bytes],
          client: str = "127.0.0.1") -> Exchange:  # fmt: skip
    """One request straight through the ASGI app, its body given chunk by chunk, counting
    what the app reads of it."""
    reads = 0
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        nonlocal reads
        reads += 1
        if reads <= len(chunks):
            return {"type": "http.request", "body": chunks[reads - 1], "more_body": True}
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    raw = [(k.lower().encode(), v.encode()) for k, v in {"host": "localhost", **headers}.items()]
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": raw, "client": (client, 5000), "server": ("127.0.0.1", 8080),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    heads = {k.decode(): v.decode() for k, v in start["headers"]}
    return Exchange(start["status"], heads, body, reads)


def test_unauthenticated_body_is_refused_unread(
    tmp_path: Path, db_url: str, fake_host: FakeHost
) -> None:
    """FastAPI reads and parses a body before it resolves dependencies: the body guard
    authenticates first, so not one chunk of a stranger's body is read."""
    door = _start(create_app(make_settings(tmp_path, db_url), host=fake_host.manager()), "token")
    try:
        chunked = {"transfer-encoding": "chunked", "content-type": "application/json"}
        for auth, code in [({}, 401), ({"authorization": "Bearer wsgw_not-a-token"}, 401),
                           ({"authorization": door.consume["Authorization"]}, None)]:  # fmt: skip
            got = _asgi(door.app, "POST", "/v1/sessions", {**chunked, **auth}, [b"{"] * 50)
            if code is None:  # a valid token: the body is read (then found not JSON)
                assert got.status == 422 and got.reads > 0
            else:
                assert (got.status, got.reads) == (code, 0)
        huge = {"content-length": str(100 << 20), "content-type": "application/json"}
        got = _asgi(door.app, "POST", "/v1/sessions", {**huge, **door.admin}, [b"x" * 65536] * 3)
        assert (got.status, got.reads) == (413, 0)
        assert b"exceeds the limit of 1048576 bytes" in got.body
    finally:
        door.client.__exit__(None, None, None)


def test_auth_off_refuses_a_remote_body_unread(
    tmp_path: Path, db_url: str, fake_host: FakeHost
) -> None:
    app = create_app(
        make_settings(tmp_path, db_url, auth={"mode": "none"}), host=fake_host.manager()
    )
    with TestClient(app, base_url=BASE_URL):
        headers = {"transfer-encoding": "chunked", "content-type": "application/json"}
        got = _asgi(app, "POST", "/v1/sessions", headers, [b"{"] * 50, client="192.0.2.9")
        assert (got.status, got.reads) == (403, 0)
        got = _asgi(app, "POST", "/v1/sessions", headers, [b"{"] * 50)
        assert got.status == 422 and got.reads > 0  # loopback: read (and not JSON)


def test_streamed_body_stops_at_the_limit(door: Door) -> None:
    """No Content-Length: the limit holds while the body streams in; reading stops at the
    first chunk past it."""
    headers = {"transfer-encoding": "chunked", "content-type": "application/json", **door.admin}
    got = _asgi(door.app, "POST", "/v1/sessions", headers, [b" " * 65536] * 64)  # 4 MiB
    assert got.status == 413
    assert got.reads == (1 << 20) // 65536 + 1
    assert b"exceeds the limit" in got.body
    r = door.client.post("/v1/sessions", content=b" " * (1 << 20) + b"1", headers=headers)
    assert r.status_code == 413


def _raw_http(port: int, request: bytes, timeout: float = 10.0) -> bytes:
    """Send `request` (no more), return the response head and body up to Content-Length."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            assert chunk, f"closed without an answer: {data!r}"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(
            (
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            ),
            0,
        )
        while len(body) < length:
            chunk = sock.recv(65536)
            if not chunk:
                break
            body += chunk
        return head + b"\r\n\r\n" + body


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerThread]:
    """uvicorn with a control plane (auth on) and a hub, in a thread, stopped afterwards."""
    hub = Hub()
    srv = ServerThread(gateway_app(tmp_path, hub)).start()
    try:
        yield srv
    finally:
        srv.stop()
        hub.close()


def test_real_server_answers_401_before_the_body_arrives(server: ServerThread) -> None:
    """A client that sends the head of a chunked POST and then nothing: the answer comes
    without the body (before, the route waited for the whole body, then said 401)."""
    head = (
        b"POST /v1/sessions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    answer = _raw_http(server.port, head)
    assert answer.startswith(b"HTTP/1.1 401 "), answer
    assert b"missing bearer token" in answer
    head = head.replace(b"Transfer-Encoding: chunked", b"Content-Length: 104857600")
    answer = _raw_http(server.port, head)
    assert answer.startswith(b"HTTP/1.1 413 "), answer


# ---- failed authentications --------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_limiter_is_a_token_bucket() -> None:
    clock = FakeClock()
    limiter = AuthFailureLimiter(3, 60.0, clock=clock)
    for _ in range(3):
        assert limiter.retry_after("a") == 0
        limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(20.0)  # one failure back per 20 s
    assert limiter.retry_after("b") == 0
    clock.now += 20
    assert limiter.retry_after("a") == 0
    limiter.failed("a")
    assert limiter.retry_after("a") > 0
    clock.now += 3600
    assert limiter.retry_after("a") == 0
    small = AuthFailureLimiter(1, 1.0, clock=clock, max_clients=2)
    for name in ("x", "y", "z"):
        small.failed(name)
    assert small.retry_after("x") == 0  # forgotten: at most max_clients are kept


def test_limiter_counts_ipv6_clients_per_64() -> None:
    """An IPv6 host holds a whole /64: its addresses share one bucket; another /64 does not."""
    limiter = AuthFailureLimiter(2, 60.0, clock=FakeClock())
    limiter.failed("2001:db8:1:2::10")
    limiter.failed("2001:db8:1:2:ffff::1")
    assert limiter.retry_after("2001:db8:1:2::abcd") > 0
    assert limiter.retry_after("2001:db8:1:3::10") == 0
    assert limiter.retry_after("198.51.100.7") == 0


def test_too_many_failed_authentications_get_429(
    tmp_path: Path, db_url: str, fake_host: FakeHost
) -> None:
    settings = make_settings(tmp_path, db_url, auth={"failure_limit": 3, "failure_window_s": 60})
    door = _start(create_app(settings, host=fake_host.manager()), "token")
    clock = FakeClock()
    door.app.state.auth_limiter.clock = clock
    bad = {"Authorization": "Bearer wsgw_guess"}
    try:
        assert door.client.get("/v1/ports").status_code == 401  # no token: not a guess
        for path in ("/v1/ports", "/ui/whoami", "/readyz"):
            assert door.client.get(path, headers=bad).status_code == 401, path
        r = door.client.get("/v1/ports", headers=bad)  # the next guess waits
        assert r.status_code == 429
        assert r.headers["Retry-After"] == "20"
        assert "too many failed authentications from 127.0.0.1" in r.json()["detail"]
        # A valid token still passes: another client behind the same address (a proxy) is
        # not locked out by one client's stale token.
        assert door.client.get("/v1/ports", headers=door.admin).status_code == 200
        r = door.client.post("/v1/sessions", json=SESSION, headers=bad)
        assert r.status_code == 429  # from the body guard, before the body
        with (
            door.client.websocket_connect(f"{WS_BASE}/v1/stream?session=1", headers=bad) as ws,
            pytest.raises(WebSocketDisconnect) as closed,
        ):
            ws.receive_text()
        assert closed.value.code == 4429
        with TestClient(door.app, client=("127.0.0.2", 1), base_url=BASE_URL) as other:
            assert other.get("/v1/ports", headers=bad).status_code == 401  # its own bucket
        clock.now += 20
        assert door.client.get("/v1/ports", headers=bad).status_code == 401  # refilled one
    finally:
        door.client.__exit__(None, None, None)


# ---- secrets in logs -----------------------------------------------------------------------------
def test_redaction() -> None:
    line = '127.0.0.1:5 - "GET /v1/stream?session=1&token=wsgw_abcdefgh123&envelope=1 HTTP/1.1" 101'
    assert redact_secrets(line) == (
        '127.0.0.1:5 - "GET /v1/stream?session=1&token=[redacted]&envelope=1 HTTP/1.1" 101'
    )
    assert (
        redact_secrets("url wss://x/ws?api_key=K1&b=2") == "url wss://x/ws?api_key=[redacted]&b=2"
    )
    assert redact_secrets("Bearer wsgw_abcdefgh123 sent") == "Bearer [redacted] sent"
    assert redact_secrets("no secrets, tokens: 3") == "no secrets, tokens: 3"


def test_access_log_record_keeps_its_arguments(caplog: pytest.LogCaptureFixture) -> None:
    """uvicorn's AccessFormatter reads the record's positional arguments: they stay, redacted."""
    logger = logging.getLogger("uvicorn.access")
    logger.addFilter(flt := SecretRedactingFilter())
    try:
        with caplog.at_level(logging.INFO, "uvicorn.access"):
            logger.info(
                '%s - "%s %s HTTP/%s" %d',
                "127.0.0.1:1",
                "GET",
                "/x?token=wsgw_secret1234",
                "1.1",
                200,
            )
        record = caplog.records[-1]
        assert record.args == ("127.0.0.1:1", "GET", "/x?token=[redacted]", "1.1", 200)
        assert "wsgw_secret1234" not in caplog.text
    finally:
        logger.removeFilter(flt)


def test_serve_never_logs_a_token(tmp_path: Path, sqlite_url: str) -> None:
    """`wsgw serve` (uvicorn's access log at INFO): a secret in ?token= on a request and on
    a stream's upgrade shows as [redacted]."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    port = free_port()
    env = serve_env(tmp_path, sqlite_url, WSGW_HUB__RING="false")
    made = subprocess.run(
        [sys.executable, "-c", SERVE, "token", "create", "-n", "c", "-s", "consume"],
        env=env, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    secret = made.stdout.strip()
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "serve", "--port", str(port), "--log-level", "info"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        first_answer(proc, f"http://127.0.0.1:{port}/healthz?token={secret}")
        httpx.get(f"http://127.0.0.1:{port}/v1/ports?token={secret}", timeout=5)
        with (
            connect(f"ws://127.0.0.1:{port}/v1/stream?session=9&token={secret}") as ws,
            contextlib.suppress(ConnectionClosed),  # 4404: no session 9
        ):
            ws.recv(timeout=5)
        err = stop_gracefully(proc)
    finally:
        kill_if_running(proc)
    assert "/healthz?token=[redacted]" in err, err
    assert "/v1/stream?session=9&token=[redacted]" in err, err
    assert secret not in err
    assert secret[5:15] not in err


# ---- revocation closes streams ------------------------------------------------------------------
def _stream(server: ServerThread, secret: str, session: int) -> Any:
    from websockets.sync.client import connect

    return connect(
        f"{server.ws_url}/v1/stream?session={session}",
        additional_headers={"Authorization": f"Bearer {secret}"},
        open_timeout=10,
    )


def _close_code(ws: Any, timeout: float) -> tuple[int | None, str | None]:
    """Wait for the stream to be closed (no messages are published here)."""
    from websockets.exceptions import ConnectionClosed

    try:
        ws.recv(timeout=timeout)
    except ConnectionClosed as exc:
        return (exc.rcvd.code, exc.rcvd.reason) if exc.rcvd else (None, None)
    except TimeoutError:
        return (None, "still open")
    raise AssertionError("a message came on an idle stream")


def test_revoking_a_token_closes_its_streams(server: ServerThread) -> None:
    app = server.config.app
    control = app.state.control
    session = control.sessions.create(SESSION).id
    token, secret = control.tokens.create("victim", ["consume"])
    _, other = control.tokens.create("bystander", ["consume"])
    _, admin = control.tokens.create("ops", ["admin"])
    app.state.open_streams.interval_s = 3600  # no sweep: the revocation itself closes them
    with (
        _stream(server, secret, session) as a,
        _stream(server, secret, session) as b,
        _stream(server, other, session) as c,
    ):
        deadline = time.monotonic() + 10
        while app.state.open_streams.count(token.id) < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        r = httpx.delete(
            f"{server.url}/v1/tokens/{token.id}", headers={"Authorization": f"Bearer {admin}"}
        )
        assert r.status_code == 200
        assert _close_code(a, 5) == (1008, "the token was revoked")
        assert _close_code(b, 5) == (1008, "the token was revoked")
        assert _close_code(c, 0.5) == (None, "still open")
    with _stream(server, secret, session) as again:
        assert _close_code(again, 5) == (4401, "missing, invalid or revoked token")


def test_a_token_revoked_elsewhere_closes_its_streams(server: ServerThread) -> None:
    """`wsgw token revoke`, or another gateway on the same database: found by the one
    query a second that checks the tokens of open streams."""
    control = server.config.app.state.control
    session = control.sessions.create(SESSION).id
    token, secret = control.tokens.create("victim", ["consume"])
    with _stream(server, secret, session) as ws:
        deadline = time.monotonic() + 10
        while server.config.app.state.open_streams.count(token.id) < 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        control.tokens.revoke(token.id)  # straight in the database, not through the API
        assert _close_code(ws, 10) == (1008, "the token was revoked")


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_revoked_tokens_query(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
    url = request.getfixturevalue("sqlite_url" if backend == "sqlite" else "pg_url")
    settings = make_settings(tmp_path, url)
    with TestClient(create_app(settings, DetachedRuntime()), base_url=BASE_URL) as client:
        control = client.app.state.control  # type: ignore[attr-defined]
        a, _ = control.tokens.create("a", ["consume"])
        b, _ = control.tokens.create("b", ["consume"])
        control.tokens.revoke(b.id)
        assert control.tokens.revoked({a.id, b.id, 999}) == {b.id, 999}


# ---- /readyz -------------------------------------------------------------------------------------
def test_readyz_shows_details_to_admins_only(door: Door) -> None:
    def broken() -> None:
        raise ConnectionError('connection to server at "db.internal" (10.0.0.5), port 5432 failed')

    door.app.state.control.db.ping = broken
    r = door.client.get("/readyz")
    if door.mode == "token":
        assert (r.status_code, r.json()) == (503, {"status": "not_ready"})
        assert door.client.get("/readyz", headers=door.consume).json() == {"status": "not_ready"}
        assert (
            door.client.get("/readyz", headers={"Authorization": "Bearer wsgw_x"}).status_code
            == 401
        )
    r = door.client.get("/readyz", headers=door.admin)  # auth off: the local user is admin
    assert r.status_code == 503
    body = r.json()
    assert (body["status"], body["database"]) == ("not_ready", "unreachable")
    assert "db.internal" in body["database_error"]
    assert body["engine"]["state"] == "detached"
