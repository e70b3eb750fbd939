"""The upgrade request skips h11's per-header grammar check for a header set it accepted
before (only the key differs between opens): the bytes are the same either way, and a set
it did not see is still checked."""

from __future__ import annotations

import re

import pytest

from dataplane.ws import handshake
from dataplane.ws.errors import LocalProtocolError
from dataplane.ws.handshake import ClientHandshake

KEY = re.compile(rb"Sec-WebSocket-Key: [A-Za-z0-9+/=]+\r\n")


def without_key(request: bytes) -> bytes:
    return KEY.sub(b"Sec-WebSocket-Key: -\r\n", request)


def make(**options: object) -> ClientHandshake:
    return ClientHandshake("feed.example", "/v1/s?x=1", port=9000, **options)  # type: ignore[arg-type]


def test_a_known_header_set_gives_the_same_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handshake, "_CHECKED_HEADERS", set())
    options = {"origin": "https://app.example", "extra_headers": [("X-Api-Key", "k")]}
    first = make(**options)
    assert len(handshake._CHECKED_HEADERS) == 1  # remembered once h11 accepted it
    second = make(**options)
    assert first.key != second.key
    assert without_key(first.request()) == without_key(second.request())
    assert second.key in second.request()
    assert b"host: " not in second.request().lower().replace(b"host: feed", b"")


def test_an_unseen_header_set_is_still_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handshake, "_CHECKED_HEADERS", set())
    make(extra_headers=[("X-Api-Key", "k")])
    with pytest.raises(LocalProtocolError, match="invalid handshake request"):
        make(extra_headers=[("X-Api-Key", "k\r\nX-Injected: 1")])
    with pytest.raises(LocalProtocolError, match="invalid handshake request"):
        make(extra_headers=[("Bad Name", "k")])
    assert len(handshake._CHECKED_HEADERS) == 1  # refused sets are not remembered


def test_the_remembered_sets_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(handshake, "_CHECKED_HEADERS", set())
    monkeypatch.setattr(handshake, "_CHECKED_HEADERS_MAX", 3)
    for i in range(6):
        make(extra_headers=[("X-N", str(i))])
    assert len(handshake._CHECKED_HEADERS) == 3
    make(extra_headers=[("X-N", "5")])  # not remembered: checked again, still fine


def _split_commas_reference(value: str) -> list[str]:
    """The character loop `_split_commas` runs for values with a quoted string."""
    items: list[str] = []
    current: list[str] = []
    quoted = escaped = False
    for ch in value:
        if escaped:
            current.append(ch)
            escaped = False
        elif ch == "\\" and quoted:
            current.append(ch)
            escaped = True
        elif ch == '"':
            quoted = not quoted
            current.append(ch)
        elif ch == "," and not quoted:
            items.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    items.append("".join(current).strip())
    return [item for item in items if item]


@pytest.mark.parametrize(
    "value",
    [
        "",
        ",",
        " , ,, ",
        "Upgrade",
        "keep-alive, Upgrade",
        "a,b , c\t,\\x, d\\,e",
        "\xa0x\xa0,\x85y",
        'permessage-deflate; server_max_window_bits="10", x',
        '"a,b", c',
        'p; q="\\",", r',
    ],
)
def test_split_commas_matches_the_character_loop(value: str) -> None:
    assert handshake._split_commas(value) == _split_commas_reference(value)


def test_split_commas_on_random_lists() -> None:
    import random

    rng = random.Random(7)
    alphabet = 'ab ,;=\t\\"-'
    for _ in range(3000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randrange(12)))
        assert handshake._split_commas(value) == _split_commas_reference(value), value
