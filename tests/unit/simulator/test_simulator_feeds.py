"""The simulator's exchange side against the gateway's dialects, with no network: the
dialect's requests parse into the right topics, the feed's acks and data classify right."""

from __future__ import annotations

import orjson
import pytest

from gateway.dialects import Ack, Data, Error, make_dialect
from gateway.simulator.cli import parse_command
from gateway.simulator.faults import (
    Fault,
    FaultError,
    frame_header,
    malformed_frame,
    oversized_message,
)
from gateway.simulator.feeds import FEEDS, Prices, symbol_key
from tests.integration.test_simulator_helpers import BAD_TOPICS, SYMBOLS, TOPICS


@pytest.mark.parametrize("name", list(FEEDS))
def test_requests_round_trip(name: str) -> None:
    client = make_dialect(name)
    feed = FEEDS[name](SYMBOLS)
    topics = TOPICS[name]
    subscribed: list[str] = []
    acks = []
    for message in client.subscribe_messages(topics):
        text = message if isinstance(message, str) else message.decode()
        reply = feed.on_message(text, set(subscribed), 7)
        assert reply.close is None and not reply.unsubscribe
        subscribed += reply.subscribe
        acks += [client.classify(m) for m in reply.send]
    assert sorted(subscribed) == sorted(topics)
    assert all(isinstance(a, Ack) for a in acks), acks
    assert client.pending_requests == 0
    # Data of each topic classifies back to that topic and carries seq and send time.
    for topic in topics:
        message = feed.render(topic, 42, 1_700_000_000_123_456_789)
        assert client.classify(message) == Data(topic)
        body = orjson.loads(message)
        assert body["sim_seq"] == 42 and body["sim_ts"] == 1_700_000_000_123_456_789
    # Unsubscribe: acked, topics gone.
    removed: list[str] = []
    for message in client.unsubscribe_messages(topics[:1]):
        text = message if isinstance(message, str) else message.decode()
        reply = feed.on_message(text, set(subscribed), 7)
        removed += reply.unsubscribe
        assert all(isinstance(client.classify(m), Ack) for m in reply.send)
    assert removed == topics[:1]


@pytest.mark.parametrize("name", list(FEEDS))
def test_refused_topic_round_trip(name: str) -> None:
    client = make_dialect(name)
    feed = FEEDS[name](SYMBOLS)
    (message,) = client.subscribe_messages([BAD_TOPICS[name]])
    text = message if isinstance(message, str) else message.decode()
    reply = feed.on_message(text, set(), 1)
    assert not reply.subscribe
    assert [type(client.classify(m)) for m in reply.send] == [Error]


@pytest.mark.parametrize("name", list(FEEDS))
def test_garbage_requests_get_an_answer_not_a_crash(name: str) -> None:
    feed = FEEDS[name]()
    for text in ("", "{", "[]", "null", '{"method":1}', '{"op":"subscribe","args":"x"}'):
        reply = feed.on_message(text, set(), 1)
        assert not reply.subscribe


def test_in_band_commands_are_not_topics() -> None:
    feed = FEEDS["binance"]()
    reply = feed.on_message(
        '{"method":"SUBSCRIBE","params":["_sim:drop,after=3","btcusdt@trade"],"id":1}', set(), 1
    )
    assert reply.subscribe == ["btcusdt@trade"]
    assert reply.commands == ["_sim:drop,after=3"]
    reply = feed.on_open("/stream?streams=_sim:stall,seconds=1/btcusdt@trade", 1)
    assert reply.subscribe == ["btcusdt@trade"] and reply.commands == ["_sim:stall,seconds=1"]


def test_prices_are_deterministic() -> None:
    prices = Prices()
    assert prices.price("BTCUSDT", 5) == Prices().price("btc-usdt", 5)
    assert symbol_key("BTC/USD") == symbol_key("btcusd") == "BTCUSD"
    assert float(prices.size(3)) > 0


def test_prices_are_the_base_and_the_wiggle_of_seq() -> None:
    """The price table (per symbol, by seq modulo its period) holds what the formula gives:
    base cents + (seq * 7919) % 2001, as dollars and two places."""
    prices = Prices()
    for seq in (0, 1, 2, 2000, 2001, 2002, 123_456_789):
        cents = prices.base_cents("BTCUSDT") + (seq * 7919) % 2001
        assert prices.price("BTCUSDT", seq) == f"{cents // 100}.{cents % 100:02d}"


def test_fault_frames() -> None:
    assert frame_header(0x1, 5) == b"\x81\x05"
    assert frame_header(0x2, 300)[:2] == b"\x82\x7e"
    assert frame_header(0x1, 70000)[:2] == b"\x81\x7f"
    assert malformed_frame("rsv")[0] == 0xC1
    assert b"\xff\xfe" in malformed_frame("utf8")
    assert malformed_frame("mask")[1] & 0x80
    assert malformed_frame("control")[0] == 0x09  # ping, FIN clear
    big = oversized_message(100_000)
    assert len(big) == 100_000 and orjson.loads(big)["pad"]
    with pytest.raises(FaultError):
        Fault("malformed", variant="length")


def test_parse_command() -> None:
    assert parse_command("fault drop after=3 target=next") == {
        "cmd": "fault",
        "kind": "drop",
        "after": "3",
        "target": "next",
    }
    assert parse_command('{"cmd":"stats"}') == {"cmd": "stats"}
    assert parse_command("   ") == {}
    with pytest.raises(ValueError):
        parse_command("rate fast")
    with pytest.raises(ValueError):
        parse_command("{not json")
