"""The opening handshake, client side (RFC 6455 section 4.1), on h11."""

from __future__ import annotations

import base64

import pytest
from ws_helpers import feed, open_raw, raw_accept, server_frame

from dataplane.ws.client import ConnectionState, WsClient
from dataplane.ws.deflate import DeflateOptions
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Handshake, Message, Ping, RejectedHandshake
from dataplane.ws.handshake import accept_token, host_header, parse_extensions


def request_headers(client: WsClient) -> tuple[str, dict[str, str]]:
    text = client.initiate().decode()
    head, _, rest = text.partition("\r\n")
    headers = {}
    for line in rest.split("\r\n"):
        if line:
            name, _, value = line.partition(": ")
            headers[name.lower()] = value
    return head, headers


def test_request_has_every_header_section_4_1_requires() -> None:
    client = WsClient(
        "feed.example",
        "/v1/stream?x=1",
        port=8443,
        secure=True,
        origin="https://app.example",
        subprotocols=["v2.json", "v1.json"],
        extra_headers=[("X-Api-Key", "k"), (b"User-Agent", b"tester")],
    )
    head, headers = request_headers(client)
    assert head == "GET /v1/stream?x=1 HTTP/1.1"
    assert headers["host"] == "feed.example:8443"
    assert headers["upgrade"] == "websocket"
    assert headers["connection"] == "Upgrade"
    assert headers["sec-websocket-version"] == "13"
    assert headers["origin"] == "https://app.example"
    assert headers["sec-websocket-protocol"] == "v2.json, v1.json"
    assert headers["sec-websocket-extensions"] == (
        "permessage-deflate; client_no_context_takeover; client_max_window_bits"
    )
    assert headers["x-api-key"] == "k"
    assert headers["user-agent"] == "tester"
    assert len(base64.b64decode(headers["sec-websocket-key"])) == 16


def test_key_is_fresh_random_for_each_connection() -> None:
    keys = {request_headers(WsClient("h"))[1]["sec-websocket-key"] for _ in range(50)}
    assert len(keys) == 50


@pytest.mark.parametrize(
    ("host", "port", "secure", "expected"),
    [
        ("h", None, False, "h"),
        ("h", 80, False, "h"),
        ("h", 443, True, "h"),
        ("h", 80, True, "h:80"),
        ("::1", 9001, False, "[::1]:9001"),
        ("[::1]", None, False, "[::1]"),
    ],
)
def test_host_header_omits_the_default_port(
    host: str, port: int | None, secure: bool, expected: str
) -> None:
    assert host_header(host, port, secure) == expected


def test_non_ascii_host_is_sent_as_idna() -> None:
    assert request_headers(WsClient("bücher.example"))[1]["host"] == "xn--bcher-kva.example"


def test_no_deflate_no_extension_header_and_custom_offer() -> None:
    assert "sec-websocket-extensions" not in request_headers(WsClient("h", deflate=None))[1]
    options = DeflateOptions(
        client_no_context_takeover=False,
        server_no_context_takeover=True,
        client_max_window_bits=10,
        server_max_window_bits=11,
    )
    offer = request_headers(WsClient("h", deflate=options))[1]["sec-websocket-extensions"]
    assert offer == (
        "permessage-deflate; server_no_context_takeover; client_max_window_bits=10; "
        "server_max_window_bits=11"
    )


@pytest.mark.parametrize(
    "kwargs",
    [
        {"extra_headers": [("Sec-WebSocket-Key", "x")]},
        {"extra_headers": [("connection", "close")]},
        {"extra_headers": [("Origin", "o")], "origin": "p"},
        {"subprotocols": ["bad proto"]},
        {"path": "no-slash"},
        {"max_message_size": 0},
    ],
)
def test_local_misuse_of_the_request_raises(kwargs: dict[str, object]) -> None:
    with pytest.raises(LocalProtocolError):
        WsClient("h", **kwargs)  # type: ignore[arg-type]


def test_initiate_twice_and_receive_before_initiate_raise() -> None:
    client = WsClient("h")
    with pytest.raises(LocalProtocolError, match="initiate"):
        client.receive_data(b"HTTP/1.1 101 OK\r\n\r\n")
    client.initiate()
    with pytest.raises(LocalProtocolError):
        client.initiate()


def test_accept_token_matches_the_rfc_example() -> None:
    # Section 1.3's worked example.
    assert accept_token(b"dGhlIHNhbXBsZSBub25jZQ==") == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_frames_in_the_same_read_as_the_101_are_kept() -> None:
    """Regression: the old C client read up to \\r\\n\\r\\n and dropped what followed."""
    client = WsClient("h", deflate=None)
    client.initiate()
    tail = server_frame(1, b'{"snapshot":1}') + server_frame(9, b"hb") + server_frame(2, b"\x01")
    events = feed(client, raw_accept(client) + tail)
    assert [type(e) for e in events] == [Handshake, Message, Ping, Message]
    assert events[1] == Message(b'{"snapshot":1}', True)
    assert events[3] == Message(b"\x01", False)
    assert client.data_to_send()  # the pong


def test_handshake_and_leftover_fed_one_byte_at_a_time() -> None:
    client = WsClient("h", deflate=None, subprotocols=["v1"])
    client.initiate()
    data = raw_accept(client, "Sec-WebSocket-Protocol: v1") + server_frame(1, b"x" * 300)
    events = feed(client, data, step=1)
    assert isinstance(events[0], Handshake) and events[0].subprotocol == "v1"
    assert events[1:] == [Message(b"x" * 300, True)]
    assert client.subprotocol == "v1"


def test_response_headers_are_exposed_and_100_continue_is_skipped() -> None:
    client = WsClient("h", deflate=None)
    client.initiate()
    events = feed(client, b"HTTP/1.1 100 Continue\r\n\r\n" + raw_accept(client, "X-Server: y"))
    assert isinstance(events[0], Handshake)
    assert (b"x-server", b"y") in events[0].headers


def test_non_101_is_a_typed_rejection_with_status_and_body() -> None:
    client = WsClient("h")
    client.initiate()
    body = b'{"error":"rate limited"}'
    response = (
        b"HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % len(body) + body
    )
    events = feed(client, response, step=7)
    assert len(events) == 1
    event = events[0]
    assert isinstance(event, RejectedHandshake)
    assert event.status == 429 and event.body == body
    assert (b"content-type", b"application/json") in event.headers
    assert client.state is ConnectionState.REJECTED
    with pytest.raises(LocalProtocolError):
        client.send_text("x")


def test_rejection_body_is_an_excerpt_and_eof_ends_an_unsized_body() -> None:
    client = WsClient("h")
    client.initiate()
    events = feed(client, b"HTTP/1.1 403 Forbidden\r\n\r\n" + b"z" * 10_000)
    assert isinstance(events[0], RejectedHandshake)
    assert events[0].status == 403 and events[0].body == b"z" * 2048

    client = WsClient("h")
    client.initiate()
    assert feed(client, b"HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nshort") == []
    events = feed(client, b"")
    assert isinstance(events[0], RejectedHandshake)
    assert events[0].status == 500 and events[0].body == b"short"


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "closed before"),
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "not an HTTP response"),
    ],
)
def test_no_http_response_is_rejected_with_status_0(data: bytes, reason: str) -> None:
    client = WsClient("h")
    client.initiate()
    client.receive_data(data)
    events = list(client.events())
    assert isinstance(events[0], RejectedHandshake)
    assert events[0].status == 0 and reason in events[0].reason
    assert client.state is ConnectionState.REJECTED


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        (["Upgrade: h2c"], "Upgrade"),
        (["Connection: keep-alive"], "Connection"),
        (["Sec-WebSocket-Accept: AAAA"], "Sec-WebSocket-Accept"),
        (["Sec-WebSocket-Extensions: x-webkit-deflate-frame"], "did not offer"),
        (["Sec-WebSocket-Extensions: permessage-deflate, permessage-deflate"], "twice"),
        (["Sec-WebSocket-Extensions: permessage-deflate; foo"], "unknown parameter"),
        (["Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits=7"], "8..15"),
        (["Sec-WebSocket-Extensions: permessage-deflate; server_max_window_bits"], "value"),
        (["Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits=08"], "value"),
        (
            ["Sec-WebSocket-Extensions: permessage-deflate; server_no_context_takeover=1"],
            "no value",
        ),
        (
            [
                "Sec-WebSocket-Extensions: permessage-deflate; "
                "server_no_context_takeover; server_no_context_takeover"
            ],
            "twice",
        ),
        (["Sec-WebSocket-Protocol: v9"], "did not offer"),
        (["Sec-WebSocket-Protocol: v1, v2"], "did not offer"),
    ],
)
def test_a_101_that_breaks_section_4_1_is_rejected(headers: list[str], reason: str) -> None:
    client = WsClient("h", subprotocols=["v1", "v2"])
    client.initiate()
    base = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": accept_token(client._handshake.key).decode(),
    }
    for line in headers:
        name, _, value = line.partition(": ")
        base[name] = value
    response = "HTTP/1.1 101 Switching Protocols\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in base.items()
    )
    events = feed(client, response.encode() + b"\r\n" + server_frame(1, b"ignored"))
    assert len(events) == 1
    assert isinstance(events[0], RejectedHandshake)
    assert events[0].status == 101 and reason in events[0].reason
    assert client.state is ConnectionState.REJECTED


def _reason_for_101(client: WsClient, **overrides: str | None) -> str:
    """The rejection reason for a 101 with these headers changed (None: left out)."""
    headers: dict[str, str | None] = {
        "Upgrade": "websocket",
        "Connection": "Upgrade",
        "Sec-WebSocket-Accept": accept_token(client._handshake.key).decode(),
    }
    headers.update({name.replace("_", "-"): value for name, value in overrides.items()})
    response = "HTTP/1.1 101 Switching Protocols\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in headers.items() if v is not None
    )
    (event,) = feed(client, response.encode() + b"\r\n")
    assert isinstance(event, RejectedHandshake) and event.status == 101
    return event.reason


def test_a_refused_101_says_what_was_expected_and_what_came() -> None:
    """Section 4.1 items 2-6: the reason names the header, what we expected and what the
    server sent, so an operator can tell a proxy's mangling from a server's bug."""
    client = WsClient("h", subprotocols=["v1"])
    client.initiate()
    expected = accept_token(client._handshake.key).decode()
    assert _reason_for_101(client, Sec_WebSocket_Accept="AAAA") == (
        f"Sec-WebSocket-Accept does not match our key: expected {expected!r}, received 'AAAA'"
    )
    client = WsClient("h")
    client.initiate()
    reason = _reason_for_101(client, Sec_WebSocket_Accept=None)
    assert reason.endswith("received missing")
    client = WsClient("h")
    client.initiate()
    assert (
        _reason_for_101(client, Upgrade="h2c")
        == "101 without 'Upgrade: websocket' (Upgrade: 'h2c')"
    )
    client = WsClient("h")
    client.initiate()
    assert _reason_for_101(client, Connection=None) == (
        "101 without 'Connection: Upgrade' (Connection: missing)"
    )
    client = WsClient("h", deflate=None)
    client.initiate()
    assert _reason_for_101(client, Sec_WebSocket_Extensions="x-webkit-deflate-frame") == (
        "server chose extension 'x-webkit-deflate-frame' that we did not offer (offered: none)"
    )
    client = WsClient("h", subprotocols=["v1", "v2"])
    client.initiate()
    assert _reason_for_101(client, Sec_WebSocket_Protocol="v9") == (
        "server chose subprotocol 'v9' that we did not offer (offered: v1, v2)"
    )


def test_a_close_before_the_answer_is_marked_closed() -> None:
    client = WsClient("h")
    client.initiate()
    client.receive_data(b"")
    (event,) = client.events()
    assert isinstance(event, RejectedHandshake)
    assert (event.status, event.closed) == (0, True)


def test_extensions_from_an_undeflated_client_are_rejected() -> None:
    client = WsClient("h", deflate=None)
    client.initiate()
    events = feed(client, raw_accept(client, "Sec-WebSocket-Extensions: permessage-deflate"))
    assert isinstance(events[0], RejectedHandshake)


def test_header_tokens_are_case_insensitive_and_lists_may_be_split() -> None:
    client = open_raw(
        "Upgrade: WebSocket",
        "Connection: keep-alive, UPGRADE",
        "Sec-WebSocket-Extensions: permessage-deflate;",
        "Sec-WebSocket-Extensions: ",
        deflate=True,
    )
    assert client.state is ConnectionState.OPEN
    assert client.deflate is not None


def test_parse_extensions_handles_quoted_values() -> None:
    parsed = parse_extensions(
        [b'permessage-deflate; client_max_window_bits="10"; x="a,b", foo; bar=\\"1']
    )
    assert parsed == [
        ("permessage-deflate", [("client_max_window_bits", "10"), ("x", "a,b")]),
        ("foo", [("bar", '\\"1')]),
    ]
