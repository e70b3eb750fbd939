"""/v1/subscriptions: ref-counted upstream topics, delivery options, how to consume."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.conftest import Api, stream_close


def subscribe(api: Api, session_id: int, topics: list[str], **extra: Any) -> dict[str, Any]:
    body = {"session_id": session_id, "topics": topics, "consumer": "pricer-1", **extra}
    r = api.client.post("/v1/subscriptions", json=body, headers=api.consume)
    assert r.status_code == 201, r.text
    result: dict[str, Any] = r.json()
    return result


def upstream_calls(api: Api) -> list[tuple[str, object]]:
    return [c for c in api.runtime.calls if c[0] in ("subscribe", "unsubscribe")]


def test_first_subscribes_last_unsubscribes(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session()["id"]
    a = subscribe(api, sid, ["btcusdt@trade", "ethusdt@trade"])
    assert a["upstream_subscribed"] == ["btcusdt@trade", "ethusdt@trade"]
    assert a["consume"] == {
        "stream_url": f"/v1/stream?subscription={a['id']}",
        "ring": "wsgw-wsgw-messages",
        "ring_url": "shm://wsgw/messages",
        "ring_topics": [f"{sid}:btcusdt@trade", f"{sid}:ethusdt@trade", "$gap"],
    }
    b = subscribe(api, sid, ["ethusdt@trade", "solusdt@trade"], overflow="drop_oldest")
    assert b["upstream_subscribed"] == ["solusdt@trade"]  # eth is held by a already
    assert upstream_calls(api) == [
        ("subscribe", (sid, ("btcusdt@trade", "ethusdt@trade"))),
        ("subscribe", (sid, ("solusdt@trade",))),
    ]

    r = api.client.delete(f"/v1/subscriptions/{a['id']}", headers=api.consume)
    assert r.status_code == 204
    assert upstream_calls(api)[-1] == ("unsubscribe", (sid, ("btcusdt@trade",)))
    assert api.runtime.topics[sid] == ["ethusdt@trade", "solusdt@trade"]

    api.client.delete(f"/v1/subscriptions/{b['id']}", headers=api.consume)
    assert upstream_calls(api)[-1] == ("unsubscribe", (sid, ("ethusdt@trade", "solusdt@trade")))
    assert sid not in api.runtime.topics


def test_update_topics_follows_the_counts(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session()["id"]
    a = subscribe(api, sid, ["x", "y"])
    subscribe(api, sid, ["y"])
    r = api.client.patch(
        f"/v1/subscriptions/{a['id']}", json={"topics": ["y", "z"], "queue_size": 16},
        headers=api.consume,
    )  # fmt: skip
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["upstream_subscribed"], body["upstream_unsubscribed"]) == (["z"], ["x"])
    assert body["queue_size"] == 16
    assert api.runtime.topics[sid] == ["y", "z"]


def test_topics_are_per_session(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    s1, s2 = make_session()["id"], make_session()["id"]
    assert subscribe(api, s1, ["t"])["upstream_subscribed"] == ["t"]
    assert subscribe(api, s2, ["t"])["upstream_subscribed"] == ["t"]


def test_crud_and_filter(api: Api, make_session: Callable[..., dict[str, Any]]) -> None:
    s1, s2 = make_session()["id"], make_session()["id"]
    a = subscribe(api, s1, ["a"], queue_size=10, conflation_ms=250)
    subscribe(api, s2, ["b"])
    r = api.client.get(f"/v1/subscriptions/{a['id']}", headers=api.consume)
    assert (r.json()["queue_size"], r.json()["conflation_ms"]) == (10, 250)
    assert r.json()["overflow"] == "disconnect"
    listing = api.client.get(f"/v1/subscriptions?session_id={s1}", headers=api.consume).json()
    assert [s["id"] for s in listing["data"]] == [a["id"]]
    assert api.client.get("/v1/subscriptions", headers=api.consume).json()["count"] == 2
    r = api.client.get("/v1/subscriptions/999", headers=api.consume)
    assert r.status_code == 404
    assert r.json() == {"detail": "subscription 999 not found"}


def test_deleting_a_session_drops_its_subscriptions_and_topics(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    sid = make_session()["id"]
    sub = subscribe(api, sid, ["a", "b"])
    assert api.client.delete(f"/v1/sessions/{sid}", headers=api.admin).status_code == 204
    assert api.runtime.calls[-1] == ("remove_session", sid)  # its topics go with it
    assert sid not in api.runtime.topics
    r = api.client.get(f"/v1/subscriptions/{sub['id']}", headers=api.consume)
    assert r.status_code == 404


@pytest.mark.parametrize(
    ("changes", "status", "expected"),
    [
        ({"session_id": 42}, 404, "session 42 not found"),
        ({"topics": []}, 422, "at least 1 item"),
        ({"topics": ["a", "a"]}, 422, "topic 'a' is listed twice"),
        ({"topics": ["has space"]}, 422, "has a space at position 3"),
        ({"overflow": "block"}, 422, "'disconnect' or 'drop_oldest'"),
        ({"queue_size": 0}, 422, "greater than or equal to 1"),
        ({"conflation_ms": -1}, 422, "greater than or equal to 0"),
        ({"consumer": "bad consumer"}, 422, "consumer 'bad consumer' must be"),
    ],
)
def test_validation(
    api: Api,
    make_session: Callable[..., dict[str, Any]],
    changes: dict[str, Any],
    status: int,
    expected: str,
) -> None:
    sid = make_session()["id"]
    body = {"session_id": sid, "topics": ["t"], "consumer": "c", **changes}
    r = api.client.post("/v1/subscriptions", json=body, headers=api.consume)
    assert r.status_code == status, r.text
    detail = r.json()["detail"]
    text = detail if isinstance(detail, str) else " | ".join(e["msg"] for e in detail)
    assert expected in text, text
    assert not upstream_calls(api)


# ---- ownership: a consume-only token uses only the subscriptions it created ----------------
def _second_consumer(api: Api) -> dict[str, str]:
    _, secret = api.control.tokens.create("consumer-2", ["consume"])
    return {"Authorization": f"Bearer {secret}"}


def test_a_consume_token_cannot_touch_another_tokens_subscription(
    api: Api, make_session: Callable[..., dict[str, Any]]
) -> None:
    """The admin's subscription (and another consumer's) is out of reach of a consume-only
    token: 403 naming the rule on GET, PATCH and DELETE, left out of its list, refused
    on /v1/stream with 4403; an admin (with consume, as the routes need) reaches all. One
    made without a token (the control plane's own callers, rows from before the owner column)
    stays everyone's."""
    sid = make_session()["id"]
    body = {"session_id": sid, "topics": ["a"], "consumer": "ops"}
    r = api.client.post("/v1/subscriptions", json=body, headers=api.both)
    assert r.status_code == 201, r.text
    admins = r.json()
    mine = subscribe(api, sid, ["b"])  # created by api.consume
    other = _second_consumer(api)
    theirs = api.client.post(
        "/v1/subscriptions", json={**body, "topics": ["c"]}, headers=other
    ).json()
    assert admins["owner_token_id"] != mine["owner_token_id"] != theirs["owner_token_id"]
    unowned = api.control.subscriptions.create({**body, "topics": ["u"]}).subscription
    assert unowned.owner_token_id is None
    for target in (admins, theirs):
        path = f"/v1/subscriptions/{target['id']}"
        for method, kwargs in (
            ("GET", {}),
            ("PATCH", {"json": {"topics": ["z"]}}),
            ("DELETE", {}),
        ):
            r = api.client.request(method, path, headers=api.consume, **kwargs)
            assert r.status_code == 403, (method, path, r.text)
            assert "belongs to another token" in r.json()["detail"]
        stream_path = f"/v1/stream?subscription={target['id']}"
        assert stream_close(api.client, stream_path, api.consume)[0] == 4403
    listed = api.client.get("/v1/subscriptions", headers=api.consume).json()
    assert [s["id"] for s in listed["data"]] == [mine["id"], unowned.id]
    assert listed["count"] == 2
    r = api.client.get(f"/v1/subscriptions/{unowned.id}", headers=api.consume)
    assert r.status_code == 200, r.text
    # Its own: every verb works. Nothing of the others' changed upstream.
    r = api.client.patch(
        f"/v1/subscriptions/{mine['id']}", json={"topics": ["b", "d"]}, headers=api.consume
    )
    assert r.status_code == 200, r.text
    assert api.client.get(f"/v1/subscriptions/{admins['id']}", headers=api.both).json()[
        "topics"
    ] == ["a"]
    everyone = api.client.get("/v1/subscriptions", headers=api.both).json()
    assert {s["id"] for s in everyone["data"]} == {
        admins["id"],
        mine["id"],
        theirs["id"],
        unowned.id,
    }
    for target in (mine, theirs):  # the admin manages every one
        r = api.client.delete(f"/v1/subscriptions/{target['id']}", headers=api.both)
        assert r.status_code == 204, r.text
    r = api.client.delete(f"/v1/subscriptions/{admins['id']}", headers=api.consume)
    assert r.status_code == 403
