"""Raw or normalized subscriptions (issue #21): the format and encoding fields, their
validation and persistence, the topics a normalized one is consumed as, and the answers of
GET /v1/books that say what to fix."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.api.conftest import Api, messages


def subscribe(api: Api, session_id: int, topics: list[str], **extra: Any) -> Any:
    body = {"session_id": session_id, "topics": topics, "consumer": "pricer-1", **extra}
    return api.client.post("/v1/subscriptions", json=body, headers=api.consume)


def test_raw_is_the_default(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    sid = make_session(dialect="binance")["id"]
    r = subscribe(api, sid, ["btcusdt@trade"])
    assert r.status_code == 201, r.text
    assert (r.json()["format"], r.json()["encoding"]) == ("raw", "json")
    assert r.json()["consume"]["ring_topics"] == [f"{sid}:btcusdt@trade", "$gap"]


def test_normalized_is_stored_and_consumed_under_its_own_topics(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session(dialect="binance")["id"]
    raw = subscribe(api, sid, ["btcusdt@depth@100ms"])
    r = subscribe(api, sid, ["BTCUSDT@depth@100ms"], format="normalized", encoding="binary")
    assert r.status_code == 201, r.text
    sub = r.json()
    assert (sub["format"], sub["encoding"]) == ("normalized", "binary")
    assert sub["topics"] == ["btcusdt@depth@100ms"]  # as the dialect spells it
    assert sub["consume"]["ring_topics"] == [f"{sid}:normbin:btcusdt@depth@100ms", "$gap"]
    # Raw and normalized consumers of a topic share its one upstream subscription.
    assert raw.json()["upstream_subscribed"] == ["btcusdt@depth@100ms"]
    assert sub["upstream_subscribed"] == []

    got = api.client.get(f"/v1/subscriptions/{sub['id']}", headers=api.consume).json()
    assert (got["format"], got["encoding"]) == ("normalized", "binary")
    r = api.client.patch(
        f"/v1/subscriptions/{sub['id']}", json={"encoding": "json"}, headers=api.consume
    )
    assert r.status_code == 200, r.text
    assert r.json()["consume"]["ring_topics"] == [f"{sid}:norm:btcusdt@depth@100ms", "$gap"]
    r = api.client.patch(
        f"/v1/subscriptions/{sub['id']}", json={"format": "raw"}, headers=api.consume
    )
    assert r.json()["consume"]["ring_topics"] == [f"{sid}:btcusdt@depth@100ms", "$gap"]


def test_bad_format_and_encoding_are_refused(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session(dialect="binance")["id"]
    r = subscribe(api, sid, ["btcusdt@trade"], format="cooked")
    assert r.status_code == 422
    assert "'raw' or 'normalized'" in messages(r)
    r = subscribe(api, sid, ["btcusdt@trade"], format="normalized", encoding="xml")
    assert r.status_code == 422
    assert "'json' or 'binary'" in messages(r)


def test_normalized_needs_a_venue_the_gateway_normalizes(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session()["id"]  # dialect generic
    r = subscribe(api, sid, ["ticks"], format="normalized")
    assert r.status_code == 422
    assert "dialect is generic: use format raw" in r.text
    made = subscribe(api, sid, ["ticks"])
    r = api.client.patch(
        f"/v1/subscriptions/{made.json()['id']}", json={"format": "normalized"},
        headers=api.consume,
    )  # fmt: skip
    assert r.status_code == 422
    assert "use format raw" in r.text


def test_a_normalized_topics_name_is_no_upstream_topic(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session(dialect="kraken")["id"]
    for topic in ("norm:book:BTC/USD", "normbin:book:BTC/USD"):
        r = subscribe(api, sid, [topic])
        assert r.status_code == 422
        assert "subscribe the upstream topic with format normalized" in r.text


def test_books_answers_say_what_to_fix(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session(dialect="binance")["id"]
    r = api.client.get(f"/v1/books/{sid}/BTCUSDT", headers=api.consume)
    assert r.status_code == 404
    # A detached runtime (no dataplane) follows no ring: no books, and it says so.
    assert "keeps no books" in r.json()["detail"]
    r = api.client.get("/v1/books/999/BTCUSDT", headers=api.consume)
    assert r.status_code == 404
    assert r.json()["detail"] == "session 999 not found"
    r = api.client.get(f"/v1/books/{sid}/BTCUSDT?depth=0", headers=api.consume)
    assert r.status_code == 422
    r = api.client.get(f"/v1/books/{sid}/BTCUSDT?levels=3", headers=api.consume)
    assert r.status_code in (400, 422)
    r = api.client.get(f"/v1/books/{sid}/BTCUSDT", headers=api.admin)
    assert r.status_code == 403
