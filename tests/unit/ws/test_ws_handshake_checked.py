"""What h11 wrote or parsed once is reused when only the key differs: the upgrade request
comes from a template (h11's own bytes, the key spliced in), and a 101 head h11 parsed
before stands for the same head with another accept token. These tests hold the reuse to
what h11 (and wsproto, as the server) say of the very same bytes."""

from __future__ import annotations

import random
import re

import h11
import pytest
from h11._receivebuffer import blank_line_regex
from ws_helpers import head_101, server_frame
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, Request

from dataplane.ws import handshake
from dataplane.ws.client import ConnectionState, WsClient
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.events import Handshake, Message, RejectedHandshake
from dataplane.ws.handshake import Accepted, ClientHandshake, accept_token

KEY = re.compile(rb"Sec-WebSocket-Key: [A-Za-z0-9+/=]+\r\n")


@pytest.fixture(autouse=True)
def fresh_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with nothing written or parsed before."""
    monkeypatch.setattr(handshake, "_TEMPLATES", {})
    monkeypatch.setattr(handshake, "_HEADS", {})


def without_key(request: bytes) -> bytes:
    return KEY.sub(b"Sec-WebSocket-Key: -\r\n", request)


def make(**options: object) -> ClientHandshake:
    return ClientHandshake("feed.example", "/v1/s?x=1", port=9000, **options)  # type: ignore[arg-type]


def h11_server_reads(request: bytes) -> h11.Request:
    """The request as h11's server side parses it (it checks every header)."""
    server = h11.Connection(h11.SERVER)
    server.receive_data(request)
    event = server.next_event()
    assert isinstance(event, h11.Request)
    assert server.next_event() == h11.EndOfMessage()
    return event


def wsproto_accepts(request: bytes) -> bytes:
    """wsproto's server reads the request as a WebSocket upgrade and answers 101."""
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(request)
    event = next(server.events())
    assert isinstance(event, Request)
    return server.send(AcceptConnection())


# ---- the request ---------------------------------------------------------------------------
def test_templated_requests_differ_in_the_key_only_and_both_validate() -> None:
    options = {"origin": "https://app.example", "extra_headers": [("X-Api-Key", "k")]}
    first = make(**options)
    assert len(handshake._TEMPLATES) == 1  # written by h11 once, kept
    second = make(**options)
    assert first.key != second.key
    assert without_key(first.request()) == without_key(second.request())
    for hs in (first, second):
        request = hs.request()
        assert request.count(hs.key) == 1
        parsed = h11_server_reads(request)
        assert (b"sec-websocket-key", hs.key) in list(parsed.headers)
        # wsproto accepts it, and its 101 carries this very key's token
        assert accept_token(hs.key) in wsproto_accepts(request)


def test_a_templated_request_is_what_h11_writes_for_its_key() -> None:
    make(subprotocols=["v1"])
    hs = make(subprotocols=["v1"])  # from the template
    client = h11.Connection(h11.CLIENT)
    written = client.send(
        h11.Request(method=b"GET", target=b"/v1/s?x=1", headers=hs._template.headers_with(hs.key))
    )
    assert (written or b"") + (client.send(h11.EndOfMessage()) or b"") == hs.request()


def test_every_key_is_fresh() -> None:
    keys = {make().key for _ in range(200)}
    assert len(keys) == 200


def test_unseen_options_are_still_checked() -> None:
    make(extra_headers=[("X-Api-Key", "k")])
    with pytest.raises(LocalProtocolError, match="invalid handshake request"):
        make(extra_headers=[("X-Api-Key", "k\r\nX-Injected: 1")])
    with pytest.raises(LocalProtocolError, match="invalid handshake request"):
        make(extra_headers=[("Bad Name", "k")])
    with pytest.raises(LocalProtocolError, match="set by the WebSocket handshake"):
        make(extra_headers=[("Sec-WebSocket-Key", "x")])
    assert len(handshake._TEMPLATES) == 1  # refused options are not remembered


def test_the_remembered_templates_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handshake, "_TEMPLATES_MAX", 3)
    for i in range(6):
        make(extra_headers=[("X-N", str(i))])
    assert len(handshake._TEMPLATES) == 3
    hs = make(extra_headers=[("X-N", "5")])  # not remembered: written by h11 again
    assert b"X-N: 5\r\n" in hs.request()


# ---- the 101 -------------------------------------------------------------------------------
def head_for(hs: ClientHandshake, *extra: str, token: bytes | None = None) -> bytes:
    return head_101(token or accept_token(hs.key), *extra)


def through_h11(data: bytes, hs: ClientHandshake) -> Accepted | RejectedHandshake | None:
    """The outcome when h11 parses the response: the same options and key, nothing kept."""
    saved = handshake._HEADS.copy(), dict(handshake._TEMPLATES)
    handshake._HEADS.clear()
    try:
        reference = ClientHandshake(
            "feed.example",
            "/v1/s?x=1",
            port=9000,
            subprotocols=hs.subprotocols,
            deflate=hs.deflate,
        )
        reference.key = hs.key
        return reference.receive_data(data)
    finally:
        handshake._HEADS.clear()
        handshake._HEADS.update(saved[0])


def test_a_known_head_with_a_new_token_is_accepted_without_h11() -> None:
    first = make()
    outcome = first.receive_data(head_for(first, "Server: peer"))
    assert isinstance(outcome, Accepted)
    assert len(handshake._HEADS) == 1
    second = make()
    tail = server_frame(1, b"hello")
    data = head_for(second, "Server: peer") + tail
    outcome = second.receive_data(data)
    assert second._h11 is None  # no h11 connection was needed
    assert outcome == through_h11(data, second)
    assert isinstance(outcome, Accepted) and outcome.leftover == tail
    assert (b"sec-websocket-accept", accept_token(second.key)) in outcome.event.headers


def test_a_known_head_with_a_wrong_token_is_rejected() -> None:
    first = make()
    first.receive_data(head_for(first))
    second = make()
    # The head h11 saw, with the previous connection's token: not ours.
    outcome = second.receive_data(head_for(second, token=accept_token(first.key)))
    assert isinstance(outcome, RejectedHandshake)
    assert outcome.status == 101 and "Sec-WebSocket-Accept" in outcome.reason


@pytest.mark.parametrize("expect", [False, True])
def test_the_expected_head_gives_what_h11_gives(expect: bool) -> None:
    first = make(subprotocols=["v1"])
    first.receive_data(head_for(first, "Sec-WebSocket-Protocol: v1"))
    for extra, token_of in [
        (["Sec-WebSocket-Protocol: v1"], "own"),  # the same head: accepted
        (["Sec-WebSocket-Protocol: v1"], "other"),  # the same head, not our token
        (["Sec-WebSocket-Protocol: v2"], "own"),  # one byte off: through h11, rejected
        (["Sec-WebSocket-Protocol: v1", "X-More: 1"], "own"),  # another head
    ]:
        hs = make(subprotocols=["v1"])
        if expect:
            hs.expect()
        token = accept_token(hs.key if token_of == "own" else first.key)
        data = head_for(hs, *extra, token=token) + server_frame(2, b"\x01")
        assert hs.receive_data(data) == through_h11(data, hs), (extra, token_of)


def test_a_known_head_is_judged_against_each_clients_offer() -> None:
    offering = make(subprotocols=["v1"])
    assert isinstance(
        offering.receive_data(head_for(offering, "Sec-WebSocket-Protocol: v1")), Accepted
    )
    other = make()  # offers no subprotocol: the same head is a violation for it
    outcome = other.receive_data(head_for(other, "Sec-WebSocket-Protocol: v1"))
    assert isinstance(outcome, RejectedHandshake) and "did not offer" in outcome.reason


def test_heads_h11_did_not_see_whole_are_not_kept() -> None:
    hs = make()
    data = head_for(hs)
    assert hs.receive_data(data[:20]) is None  # a split read
    assert isinstance(hs.receive_data(data[20:]), Accepted)
    hs = make()
    assert isinstance(hs.receive_data(b"HTTP/1.1 100 Continue\r\n\r\n" + head_for(hs)), Accepted)
    hs = make()
    token = accept_token(hs.key).decode()
    assert isinstance(hs.receive_data(head_for(hs, f"X-Echo: {token}")), Accepted)  # twice
    assert handshake._HEADS == {}


def test_the_kept_heads_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handshake, "_HEADS_MAX", 2)
    for i in range(4):
        hs = make()
        assert isinstance(hs.receive_data(head_for(hs, f"X-N: {i}")), Accepted)
    assert len(handshake._HEADS) == 2


def test_the_end_of_a_head_is_found_as_h11_finds_it() -> None:
    assert handshake._END_OF_HEAD.pattern == blank_line_regex.pattern
    assert handshake._END_OF_HEAD.flags == blank_line_regex.flags


def random_head(rng: random.Random, token: str) -> bytes:
    """A 101 head of random shape: names in any case, odd spacing, bare LF line ends,
    extra headers, sometimes broken (a space in a name, a missing header)."""
    lines = [rng.choice(["HTTP/1.1 101 Switching Protocols", "HTTP/1.1 101 ", "HTTP/1.1 101"])]
    fields = [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Accept", token)]
    fields += [(f"X-{n}", rng.choice(["a", "b, c", '"q"', ""])) for n in range(rng.randrange(3))]
    if rng.random() < 0.2:
        fields.append(("Sec-WebSocket-Protocol", rng.choice(["v1", "v2", "v1, v2"])))
    if rng.random() < 0.1:
        fields.pop(rng.randrange(len(fields)))
    rng.shuffle(fields)
    for name, value in fields:
        name = "".join(c.upper() if rng.random() < 0.3 else c for c in name)
        if rng.random() < 0.05:
            name = name + " "
        lines.append(f"{name}:{rng.choice(['', ' ', '  ', chr(9)])}{value}{rng.choice(['', ' '])}")
    end = rng.choice(["\r\n", "\n"])
    return (end.join(lines) + end + end).encode()


def test_kept_heads_agree_with_h11_on_random_heads() -> None:
    """Differential: every response is answered twice, by a client that may use a kept
    head (and its expectation) and by h11 alone; the outcomes must be equal."""
    rng = random.Random(11)
    shapes = [random_head(rng, "TOKEN") for _ in range(60)]
    for i in range(600):
        hs = make(subprotocols=rng.choice([(), ("v1",)]))
        if rng.random() < 0.5:
            hs.expect()
        token = accept_token(hs.key) if rng.random() < 0.9 else accept_token(make().key)
        # Mostly the head of the opens before (a server's usual answer), sometimes any.
        shape = shapes[i // 4 % len(shapes)] if rng.random() < 0.8 else rng.choice(shapes)
        data = shape.replace(b"TOKEN", token) + rng.choice([b"", b"\x81\x01x"])
        assert hs.receive_data(data) == through_h11(data, hs), data
    assert handshake._HEADS  # some were kept and used


# ---- through the client --------------------------------------------------------------------
def test_prepare_receive_ahead_of_the_101_and_frames_after_it() -> None:
    for _ in range(3):  # the first through h11, the next ones from what it kept
        client = WsClient("feed.example", "/v1/s?x=1", port=9000, deflate=None, batch=True)
        client.initiate()
        client.prepare_receive()
        client.prepare_receive()  # idempotent
        data = head_for(client._handshake) + server_frame(2, b"a") + server_frame(2, b"b")
        client.receive_data(data)
        events = list(client.events())
        assert isinstance(events[0], Handshake)
        assert client.state is ConnectionState.OPEN
        messages = [m for e in events[1:] for m in getattr(e, "messages", lambda e=e: [e])()]
        assert messages == [Message(b"a", False), Message(b"b", False)]


# ---- header lists ----------------------------------------------------------------------------
#: One list element by RFC 7230's grammar, written apart from `_split_commas`'s character loop
#: so that it is an oracle, not a copy: a run of characters other than a comma or a quote, and
#: quoted strings (section 3.2.6: a backslash quotes the next character); a quoted string left
#: open runs to the end.
_ELEMENT = re.compile(r'(?:"(?:\\.|[^"\\])*(?:"|\\?\Z)|[^,"])+', re.DOTALL)


def _split_commas_grammar(value: str) -> list[str]:
    return [item for item in (m.strip() for m in _ELEMENT.findall(value)) if item]


@pytest.mark.parametrize(
    ("value", "items"),
    [
        ("", []),
        (",", []),
        (" , ,, ", []),
        ("Upgrade", ["Upgrade"]),
        ("keep-alive, Upgrade", ["keep-alive", "Upgrade"]),
        ("a,b , c\t,\\x, d\\,e", ["a", "b", "c", "\\x", "d\\", "e"]),
        ("\xa0x\xa0,\x85y", ["x", "y"]),
        (
            'permessage-deflate; server_max_window_bits="10", x',
            ['permessage-deflate; server_max_window_bits="10"', "x"],
        ),
        ('"a,b", c', ['"a,b"', "c"]),
        ('p; q="\\",", r', ['p; q="\\","', "r"]),
        ('"a,b', ['"a,b']),
        ('"a\\', ['"a\\']),
    ],
)
def test_split_commas(value: str, items: list[str]) -> None:
    assert handshake._split_commas(value) == items
    assert _split_commas_grammar(value) == items


def test_split_commas_on_random_lists() -> None:
    rng = random.Random(7)
    alphabet = 'ab ,;=\t\\"-'
    for _ in range(3000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert handshake._split_commas(value) == _split_commas_grammar(value), value
