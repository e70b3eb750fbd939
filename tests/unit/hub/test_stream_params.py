"""/v1/stream's query parameters: what is accepted, and the 4400 reasons for the rest."""

from __future__ import annotations

import pytest
from starlette.datastructures import QueryParams

from api.routes.stream import BadStreamRequest, parse_request
from gateway.hub import DeliveryOptions


def parse(query: str):  # type: ignore[no-untyped-def]
    return parse_request(QueryParams(query))


def test_subscription_mode() -> None:
    r = parse("subscription=5&envelope=1&token=x")
    assert (r.subscription, r.session, r.topics, r.envelope) == (5, None, None, True)


def test_session_mode_with_topics_and_options() -> None:
    r = parse(
        "session=2&topics=a,b&topics=c&topics=a&queue_size=10&overflow=drop_oldest"
        "&conflation_ms=250&consumer=dash-1"
    )
    assert (r.session, r.topics, r.envelope, r.consumer) == (2, ("a", "b", "c"), False, "dash-1")
    assert r.options == DeliveryOptions(10, "drop_oldest", 250)
    assert parse("session=2").topics is None  # every topic of the session
    assert parse("session=2").options == DeliveryOptions()


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "either subscription=ID or session=ID"),
        ("subscription=1&session=2", "either subscription=ID or session=ID"),
        ("subscription=x", "subscription must be an integer"),
        ("subscription=0", "subscription must be 1.."),
        ("subscription=1&topics=a", "topics come from the subscription"),
        ("subscription=1&queue_size=5", "queue_size comes from subscription 1"),
        ("session=1&topics=,", "topics is empty"),
        ("session=1&overflow=block", "overflow must be disconnect or drop_oldest"),
        ("session=1&queue_size=0", "queue_size must be 1..1000000"),
        ("session=1&conflation_ms=60001", "conflation_ms must be 0..60000"),
        ("session=1&envelope=yes", "envelope must be 0 or 1"),
        ("session=1&consumer=-x", "consumer '-x' must be"),
        ("session=1&topic=a", "unknown parameter 'topic'"),
    ],
)
def test_bad_requests(query: str, reason: str) -> None:
    with pytest.raises(BadStreamRequest, match=reason):
        parse(query)


def test_a_group_is_a_stream_of_its_own() -> None:
    """?group=ID (a feed group's one stream) alone, with topics if wanted."""
    request = parse("group=3&topics=a")
    assert request.group == 3 and request.session is None and request.topics == ("a",)
    for query in ("group=3&session=1", "group=3&subscription=1"):
        with pytest.raises(BadStreamRequest, match="group=ID streams the group"):
            parse(query)
