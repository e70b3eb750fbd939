"""Ring topic names and NATS subjects: stable, within limits, never colliding."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.hub.names import (
    RING_GAP_TOPIC,
    check_subject_prefix,
    nats_gap_subject,
    nats_subject,
    ring_topic,
    ring_topics,
    topic_from_token,
    topic_token,
)

# Topics as the store accepts them: printable, no whitespace.
topics = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zs", "Zl", "Zp")), min_size=1, max_size=80
).filter(lambda t: t.isprintable() and not any(c.isspace() for c in t))


@pytest.mark.parametrize(
    ("topic", "token"),
    [
        ("btcusdt@trade", "btcusdt@trade"),
        ("BTC-USD", "BTC-USD"),
        ("BTC-USD.trades", "BTC-USD~2Etrades"),
        ("a*b>c", "a~2Ab~3Ec"),
        ("~", "~7E"),
        ("$gap", "~24gap"),
        ("prix€", "prix~E2~82~AC"),
        ("book:BTC/USD", "book:BTC/USD"),
    ],
)
def test_topic_tokens(topic: str, token: str) -> None:
    assert topic_token(topic) == token
    assert topic_from_token(token) == topic


@given(topics)
def test_tokens_are_valid_and_reversible(topic: str) -> None:
    token = topic_token(topic)
    assert token and not any(c in token for c in ".*> \t\r\n")
    assert topic_from_token(token) == topic
    assert token != "$gap"


@given(topics, topics)
def test_two_topics_never_share_a_subject(a: str, b: str) -> None:
    if a != b:
        assert nats_subject("wsgw", 1, a) != nats_subject("wsgw", 1, b)


def test_subjects() -> None:
    assert nats_subject("wsgw", 3, "btcusdt@trade") == "wsgw.3.btcusdt@trade"
    assert nats_subject("md.gw1", 3, "a.b") == "md.gw1.3.a~2Eb"
    assert nats_gap_subject("wsgw", 3) == "wsgw.3.$gap"
    assert check_subject_prefix("md.gw-1_x") == "md.gw-1_x"
    for bad in ("", "a..b", "a.*", "a b", ".a", "a."):
        with pytest.raises(ValueError, match="subject prefix"):
            check_subject_prefix(bad)


@given(st.integers(1, 2**31 - 1), topics)
def test_ring_names_fit_and_keep_their_session(session: int, topic: str) -> None:
    name = ring_topic(session, topic)
    assert len(name.encode()) <= 56
    assert name.startswith(f"{session}:")
    assert name != RING_GAP_TOPIC


def test_ring_filters() -> None:
    assert ring_topics(3, ["a", "b"]) == ["3:a", "3:b", "$gap"]
    assert ring_topics(3, None) == ["3:*", "$gap"]
    assert ring_topics(3, ["a"], gaps=False) == ["3:a"]
