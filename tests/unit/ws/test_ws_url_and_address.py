"""The opener's look-ups are remembered, not redone per open: a parsed URL (immutable) and
an IPv4 literal's address; refusals are not remembered."""

from __future__ import annotations

import pytest

from dataplane.transports.base import WsUrl, parse_ws_url
from dataplane.transports.dpdk import _ipv4_literal
from dataplane.wire.addr import ip_to_int
from dataplane.ws.errors import LocalProtocolError


def test_a_url_is_parsed_once_and_shared() -> None:
    first = parse_ws_url("ws://198.18.5.1:9000/feed?x=1")
    assert first == WsUrl("198.18.5.1", 9000, "/feed?x=1", False)
    assert parse_ws_url("ws://198.18.5.1:9000/feed?x=1") is first
    assert parse_ws_url("wss://198.18.5.1/feed") == WsUrl("198.18.5.1", 443, "/feed", True)


@pytest.mark.parametrize("url", ["http://h/", "ws://h/#frag", "ws://u:p@h/", "ws://h:99999/"])
def test_a_refused_url_is_refused_every_time(url: str) -> None:
    for _ in range(2):
        with pytest.raises(LocalProtocolError):
            parse_ws_url(url)


def test_ipv4_literals_and_names() -> None:
    assert _ipv4_literal("198.18.5.1") == ip_to_int("198.18.5.1")
    assert _ipv4_literal("198.18.5.1") == ip_to_int("198.18.5.1")  # remembered
    assert _ipv4_literal("feed.example") is None  # a name: the resolver's job
    assert _ipv4_literal("::1") is None  # not IPv4
