"""Fuzz: whatever the server sends, `receive_data` never raises; a protocol violation ends
in one `Closed` event, the last one (wsproto's invariant: parse it or close)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ws_helpers import BACKENDS, feed, open_raw, raw_accept, server_frame

from dataplane.ws.client import ConnectionState, WsClient
from dataplane.ws.events import Closed, Message, RejectedHandshake
from dataplane.ws.scan import BackendName

FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def frames() -> st.SearchStrategy[bytes]:
    """Mostly well-formed frames with random fields, so the fuzzer gets past the header."""
    frame = st.builds(
        server_frame,
        st.sampled_from([0, 1, 2, 3, 8, 9, 10, 11]),
        st.binary(max_size=200),
        fin=st.booleans(),
        rsv=st.sampled_from([0, 0, 0, 4, 2]),
        mask=st.none() | st.just(b"\x01\x02\x03\x04"),
    )
    return st.lists(frame | st.binary(max_size=20), max_size=10).map(b"".join)


def check_invariant(client: WsClient, data: bytes, split: list[int]) -> None:
    cuts = sorted({min(c, len(data)) for c in split})
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    events = []
    for piece in pieces:
        events += feed(client, piece)
        client.data_to_send()
    events += feed(client, b"")
    closed = [e for e in events if isinstance(e, Closed)]
    assert len(closed) == 1 and events[-1] is closed[0], events
    assert client.state in (ConnectionState.CLOSED, ConnectionState.ERROR)
    for event in events:
        if isinstance(event, Message) and event.text:
            event.data.decode("utf-8")  # every text message delivered is valid UTF-8


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("deflate", [False, True])
@FUZZ
@given(data=st.binary(max_size=600) | frames(), split=st.lists(st.integers(0, 600), max_size=4))
def test_arbitrary_bytes_after_the_handshake_never_raise(
    backend: BackendName, deflate: bool, data: bytes, split: list[int]
) -> None:
    extra = ["Sec-WebSocket-Extensions: permessage-deflate"] if deflate else []
    client = open_raw(*extra, backend=backend, deflate=deflate, max_message_size=300)
    check_invariant(client, data, split)


@FUZZ
@given(st.binary(max_size=400))
def test_arbitrary_bytes_as_the_handshake_response_never_raise(data: bytes) -> None:
    client = WsClient("h")
    client.initiate()
    client.receive_data(data)
    client.receive_data(b"")
    events = list(client.events())
    assert len(events) == 1 and isinstance(events[0], RejectedHandshake)
    assert client.state is ConnectionState.REJECTED


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_http_body_after_a_101_is_frames(data: bytes) -> None:
    client = WsClient("h", deflate=None)
    client.initiate()
    check_invariant(client, raw_accept(client) + data, [])
