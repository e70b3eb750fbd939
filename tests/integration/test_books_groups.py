"""Normalized subscriptions on feed-group legs (issues #19, #21), against the real feed
simulator: the book is built from the group's arbitrated stream, so a leg that is killed
(its connection reset: it reconnects and resubscribes) does not reset it.

Two kernel legs A and B of the simulator's feed group carry OKX `books:BTC-USDT`; the
gateway's group of them publishes the arbitrated stream under the group's hub id. Leg A
holds a normalized subscription: its consumers read `norm:books:BTC-USDT` under A's session
id. Each leg in turn is killed while updates flow; the consumer gets no BookReset, the book
records no resync, and GET /v1/books equals the simulator's book. A message both legs lose
(a gap of the group) does reset it: the group's losses still count.

After that reset the book recovers: OKX resyncs by resubscribing leg A (the venue's
snapshot on subscribe). That snapshot's seqId is one the group has delivered already
(gateway.dialects.identity: an OKX snapshot is SEQUENCE with prev None), so the arbiter
would drop it as a copy; after a loss on the key it restarts the key from it instead
(gateway.groups.arbiter), and the book manager asks for it itself, since no leg reconnects
for a group's loss (BookManager._session_gap).

A book found wrong with no loss of the group (both legs bring an update whose checksum is
wrong) resubscribes too; the group restarts the topic for it (GroupRouter.restart), so the
snapshot re-bases the arbiter's key without any loss, on the C group and on the Python path.
The simulator's snapshot to a new subscriber takes the place of the next update (same
seqId): leg A runs 50 ms behind B, so B's copy of that update is always delivered first and
A's snapshot is a copy of it to the arbiter unless the topic restarted.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gateway.normalize import BookReset
from tests.integration.test_books_gateway import Gateway
from tests.integration.test_books_sim import VENUES, SimProcess, Venue, sim_book, until
from tests.integration.test_books_snapshots import simulated_gateway

GROUP = "g"
OKX = VENUES["okx"]


def emit(sim: SimProcess, count: int, venue: Venue = OKX) -> int:
    """count updates of the group's book topic; the last one's number."""
    answer = sim.command(
        cmd="emit", dialect=venue.dialect, topic=venue.topic, count=count, group=GROUP
    )
    return int(answer["seq"])


def open_group(
    gw: Gateway, sim: SimProcess, venue: Venue = OKX, normalized: int = 0
) -> tuple[int, int, int]:
    """Legs A and B, their group, a normalized subscription on leg `normalized` (A: 0) and
    a raw one on the other; (A, B, group id)."""
    control = gw.control
    legs = []
    for name in ("A", "B"):
        url = f"{sim.url(venue)}?group={GROUP}&leg={name}"
        values = {"name": f"leg{name}", "url": url, "dialect": venue.dialect, "transport": "kernel"}
        legs.append(control.sessions.create(values).id)
    group_id = control.groups.create({"name": venue.dialect, "legs": legs, "hold_ms": 20}).id
    for leg, sid in enumerate(legs):
        values = {"session_id": sid, "topics": [venue.topic], "consumer": "c"}
        if leg == normalized:
            values["format"] = "normalized"
        control.subscriptions.create(values)
    for sid in legs:
        control.sessions.start(sid)
    until(lambda: sim.subscribers(venue) == 2, "both legs' subscriptions")
    return legs[0], legs[1], group_id


def book_is(gw: Gateway, session_id: int, seq: int, venue: Venue = OKX) -> bool:
    """Whether the session's book (GET /v1/books) is the simulator's after update seq."""
    r = gw.api.get(f"/v1/books/{session_id}/{venue.symbol}")
    got = r.json() if r.status_code == 200 else {}
    return bool(got) and (got["bids"], got["asks"]) == sim_book(venue, seq)


def until_recovered(
    gw: Gateway, sim: SimProcess, session_id: int, seq: int, what: str, venue: Venue = OKX
) -> None:
    """Until the book is the simulator's again, the venue's stream going on meanwhile."""

    def recovered() -> bool:
        nonlocal seq
        if book_is(gw, session_id, seq, venue):
            return True
        seq = emit(sim, 1, venue)
        time.sleep(0.05)
        return book_is(gw, session_id, seq, venue)

    until(recovered, what)


def test_killing_a_leg_does_not_reset_a_book_of_the_groups_stream(tmp_path: Path) -> None:
    with simulated_gateway(tmp_path) as (gw, sim):
        emit(sim, 20)
        a, b, group_id = open_group(gw, sim)
        consumer = gw.consumer(a, [f"norm:{OKX.topic}"])
        resets: list[BookReset] = []
        events = 0

        def pull() -> None:
            nonlocal events
            for message in consumer.read(timeout=0):
                event = getattr(message, "event", None)
                events += 1
                if isinstance(event, BookReset):
                    resets.append(event)

        seq = emit(sim, 5)
        until(lambda: book_is(gw, a, seq), "the book of the group's stream")
        for leg in ("A", "B", "A"):
            armed = sim.command(cmd="fault", kind="reset", target=f"leg:{GROUP}/{leg}")
            assert armed["armed"] == 1
            for _ in range(10):  # updates while the killed leg reconnects
                seq = emit(sim, 3)
                time.sleep(0.03)
            until(lambda: sim.subscribers(OKX) == 2, f"leg {leg} back")
            seq = emit(sim, 5)
            until(lambda s=seq: book_is(gw, a, s), f"the book after leg {leg} was killed")
            pull()

        figures = gw.control.groups.figures(group_id)
        assert figures is not None
        downs = {leg["session_id"]: leg["downs"] for leg in figures["legs"]}
        assert downs[a] >= 2 and downs[b] >= 1, figures["legs"]  # the kills happened
        assert figures["lost"] == 0
        assert resets == [] and events > 0
        got = gw.book(a, OKX.symbol)
        assert got["resyncs"] == {} and got["seq"] > 0 and not got["stale"]
        assert gw.api.get(f"/v1/books/{b}/{OKX.symbol}").status_code == 404  # B: raw only

        # A message both legs lose is a gap of the group: that one resets the book.
        sim.command(cmd="fault", kind="skip", seq=seq + 2, target=f"group:{GROUP}")
        for _ in range(4):
            seq = emit(sim, 3)
            time.sleep(0.05)

        def reset_seen() -> bool:
            pull()
            return bool(resets)

        until(reset_seen, "a BookReset after a loss of both legs")
        assert resets[0].reason in ("gap", "upstream_gap"), resets

        # ... and the book recovers from leg A's resubscribe: the simulator's book again.
        until_recovered(gw, sim, a, seq, "the book after the group's loss (leg A resubscribed)")
        got = gw.book(a, OKX.symbol)
        assert not got["stale"] and got["resyncs"], got["resyncs"]


@pytest.mark.parametrize("path", ["c", "python"])
def test_a_group_book_with_a_wrong_checksum_resyncs_without_a_loss(
    tmp_path: Path, path: str
) -> None:
    with simulated_gateway(tmp_path, groups_in_c=path == "c") as (gw, sim):
        emit(sim, 20)
        a, _, group_id = open_group(gw, sim)
        group = gw.control.groups.figures(group_id)
        assert group is not None and group["path"] == path
        armed = sim.command(cmd="fault", kind="delay", ms=50, target=f"leg:{GROUP}/A")
        assert armed["armed"] == 1

        seq = emit(sim, 5)
        until(lambda: book_is(gw, a, seq), "the book of the group's stream")
        # Both legs' copies of the next update carry a wrong checksum: the book is wrong,
        # the group lost nothing.
        armed = sim.command(cmd="fault", kind="checksum", target=f"group:{GROUP}")
        assert armed["armed"] == 2
        seq = emit(sim, 3)
        until(lambda: "checksum" in gw.book(a, OKX.symbol)["resyncs"], "the checksum resync")
        until_recovered(gw, sim, a, seq, "the book after its checksum resync (A resubscribed)")
        got = gw.book(a, OKX.symbol)
        assert not got["stale"] and got["resyncs"] == {"checksum": 1}, got["resyncs"]
        figures = gw.control.groups.figures(group_id)
        assert figures is not None and figures["lost"] == 0 and figures["gaps"] == 0


def test_a_kraken_group_book_on_leg_b_resyncs_through_leg_a(tmp_path: Path) -> None:
    """Kraken's book messages carry no exchange id: the group passes them through from
    leg A (leg 0) only, so a book whose normalized subscription is on leg B is leg A's
    stream, and a snapshot leg B's resubscribe brought would be dropped; the group names
    leg A as the one to resubscribe."""
    kraken = VENUES["kraken"]
    with simulated_gateway(tmp_path) as (gw, sim):
        emit(sim, 20, kraken)
        _, b, group_id = open_group(gw, sim, kraken, normalized=1)
        seq = emit(sim, 5, kraken)
        until(lambda: book_is(gw, b, seq, kraken), "the book of the group's stream")
        armed = sim.command(cmd="fault", kind="checksum", target=f"group:{GROUP}")
        assert armed["armed"] == 2
        seq = emit(sim, 3, kraken)
        until(lambda: "checksum" in gw.book(b, kraken.symbol)["resyncs"], "the checksum resync")
        until_recovered(gw, sim, b, seq, "the book after its resync (leg A resubscribed)", kraken)
        got = gw.book(b, kraken.symbol)
        assert not got["stale"] and got["resyncs"] == {"checksum": 1}, got["resyncs"]
        figures = gw.control.groups.figures(group_id)
        assert figures is not None and figures["passed_through"] > 0  # leg A's frames
