"""The C feed group (gateway.groups.cgroup, dataplane/shim/feed.c's wsgw_group) against the
Python path (gateway.groups.feed.FeedGroup, the reference): the same legs' batches, with
faults (a leg skips messages, resets and comes back, stalls while the other runs on; both
legs skip), give the same ring records: payloads, order, and gaps with their counts."""

from __future__ import annotations

import random
import socket
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.ring import RingMessage, RingReader, RingWriter
from gateway.groups.cgroup import CFeedGroup
from gateway.groups.feed import FeedGroup, GroupRouter, GroupSpec, group_hub_id
from gateway.hub import Hub
from gateway.hub.names import RING_GAP_TOPIC, ring_topics
from tests.unit.groups.test_feed_group import TOPIC, batch, trade

A, B = 11, 12
GROUP_ID = 3
HUB_ID = group_hub_id(GROUP_ID)
FAR = 2**62  # an expire time past every hole's deadline (an int64)


class Side:
    """One path: a hub on its own ring, a router with the group, a reader of the group."""

    def __init__(self, c_path: bool, hold_ms: int = 10_000) -> None:
        self.ring = RingWriter.create(None, 1 << 22)
        self.hub = Hub(ring=self.ring)
        self.router = GroupRouter(self.hub, c_path=c_path)
        self.group = self.router.set_group(GroupSpec(GROUP_ID, "g", (A, B), "binance", hold_ms))
        assert isinstance(self.group, CFeedGroup if c_path else FeedGroup)
        self.reader = RingReader.attach_fd(
            self.ring.fd, topics=ring_topics(HUB_ID, None), copy=True, start="oldest"
        )

    def records(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for event in self.reader.poll():
            assert type(event) is RingMessage
            if event.topic == RING_GAP_TOPIC:
                gap = orjson.loads(bytes(event.payload))
                out.append(("gap", event.session_id, gap["session"], gap["lost"], gap["reason"]))
            else:
                out.append((event.session_id, event.topic, bytes(event.payload)))
        return out

    def close(self) -> None:
        self.router.remove_group(GROUP_ID)
        self.reader.close()
        self.hub.close()
        self.ring.close()


def scenario(rng: random.Random, n: int) -> list[tuple[str, Any]]:
    """Each leg's stream of 1..n with its faults, merged in a random order (each leg's own
    order kept): ("batch", sid, ids), ("down", sid), ("expire",)."""
    both_skip = set(rng.sample(range(2, n), k=rng.randint(0, 3)))
    legs: dict[int, list[tuple[str, Any]]] = {}
    for sid in (A, B):
        skips = set(rng.sample(range(2, n), k=rng.randint(0, 6))) | both_skip
        ids = [i for i in range(1, n + 1) if i not in skips]
        events: list[tuple[str, Any]] = []
        reset_at = rng.randint(0, len(ids)) if rng.random() < 0.6 else None
        at = 0
        while at < len(ids):
            if reset_at is not None and at >= reset_at:
                events.append(("down", sid))
                at += rng.randint(1, 8)  # what the reset lost on this leg
                reset_at = None
                continue
            size = rng.randint(1, 6)
            events.append(("batch", sid, ids[at : at + size]))
            at += size
        legs[sid] = events
    merged: list[tuple[str, Any]] = []
    queues = [list(legs[A]), list(legs[B])]
    stall = rng.choice([None, 0, 1])  # one leg runs far behind the other
    while any(queues):
        weights = [len(q) * (0.15 if i == stall else 1.0) for i, q in enumerate(queues)]
        pick = rng.choices([0, 1], weights=weights)[0]
        merged.append(queues[pick].pop(0))
        if rng.random() < 0.05:
            merged.append(("expire",))
    return merged


def run(side: Side, events: list[tuple[str, Any]], t0: int) -> list[tuple[Any, ...]]:
    for k, event in enumerate(events):
        if event[0] == "batch":
            side.router.publish_batch(batch(event[1], event[2], t0 + k))
        elif event[0] == "down":
            side.router.publish_gap(event[1], None, "reset")
        else:
            side.group.expire(FAR)
    side.group.expire(FAR)
    return side.records()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32))
def test_c_group_writes_what_the_python_path_publishes(seed: int) -> None:
    events = scenario(random.Random(seed), 60)
    c_side, py_side = Side(c_path=True), Side(c_path=False)
    try:
        t0 = time.time_ns()
        c_records = run(c_side, events, t0)
        py_records = run(py_side, events, t0)
        assert c_records == py_records
        data = [r for r in c_records if r[0] != "gap"]
        ids = [orjson.loads(r[2])["data"]["t"] for r in data]
        assert ids == sorted(set(ids))  # once each, in order
        c_fig, py_fig = c_side.group.figures(), py_side.group.figures()
        for key in ("delivered", "gaps", "lost", "duplicates", "held"):
            assert c_fig[key] == py_fig[key], key
        for c_leg, py_leg in zip(c_fig["legs"], py_fig["legs"], strict=True):
            for key in ("won", "late", "live", "downs", "messages", "newest_id"):
                assert c_leg[key] == py_leg[key], key
    finally:
        c_side.close()
        py_side.close()


def test_a_hole_expires_at_the_next_offer_past_its_deadline() -> None:
    """A busy leg expires holes in C (no timer needed): hold 1 ms, the next frame 5 ms on."""
    side = Side(c_path=True, hold_ms=1)
    try:
        t0 = time.time_ns()
        side.router.publish_batch(batch(A, [1, 2, 4], t0))  # 3 missing: 4 held
        side.router.publish_batch(batch(A, [5], t0 + 5_000_000))
        records = side.records()
        assert [r[0] for r in records] == [HUB_ID, HUB_ID, "gap", HUB_ID, HUB_ID]
        assert records[2][3] == 1
        assert records[2][4] == f"lost on every leg: {TOPIC} after 2, before 4"
    finally:
        side.close()


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("first", [B, A], ids=["waited-for leg first", "other leg first"])
def test_a_process_stall_longer_than_the_hold_loses_nothing(c_path: bool, first: int) -> None:
    """The failover bench's false losses: leg A is past the hole at 3, leg B brings it; the
    gateway stalls 25 ms (hold 20 ms), then both legs' frames are read in bursts, `first`'s
    first. Before, the first frame after the stall gave the hole up (B's last arrival was
    more than the hold before its stamp) although B's copy of 3 was next in line."""
    side = Side(c_path=c_path, hold_ms=20)
    try:
        t0 = time.time_ns()
        side.router.publish_batch(batch(B, [1, 2], t0))
        side.router.publish_batch(batch(A, [1, 2, 4], t0))  # 3 missing on A: 4 held
        late = t0 + 25_000_000  # after the stall
        bursts = {A: batch(A, [5, 6], late), B: batch(B, [3, 4, 5, 6], late + 100_000)}
        bursts[first] = [(s, t, raw, late, x) for s, t, raw, _, x in bursts[first]]
        side.router.publish_batch(bursts[first])
        side.router.publish_batch(bursts[B if first == A else A])
        records = side.records()
        assert [r[2] for r in records] == [trade(i) for i in range(1, 7)]  # no gap, in order
    finally:
        side.close()


def test_frames_c_cannot_tell_take_the_python_identity_or_pass_through() -> None:
    side = Side(c_path=True)
    try:
        ticker = b'{"stream":"btcusdt@bookTicker","data":{"u":7,"s":"BTCUSDT","b":"1"}}'
        odd = b'{"stream":"btcusdt@trade","data":{"e":"trade","s":"X"}}'  # no id: a hash
        now = time.time_ns()
        side.router.publish_batch([(A, "btcusdt@bookTicker", ticker, now, None)])
        side.router.publish_batch([(B, "btcusdt@bookTicker", ticker, now, None)])
        side.router.publish_batch([(A, TOPIC, odd, now, None), (A, TOPIC, trade(1), now, None)])
        side.router.publish_batch([(B, TOPIC, odd, now, None)])
        records = side.records()
        assert [r[2] for r in records] == [ticker, trade(1), odd]  # as the Python path: the
        # frames without an exchange id pass through after the batch's winners
        figures = side.group.figures()
        assert figures["path"] == "c" and figures["passed_through"] == 1
        assert figures["dropped_unidentified"] == 1 and figures["duplicates"] == 1
    finally:
        side.close()


def test_a_changed_group_starts_where_the_old_one_left_off() -> None:
    side = Side(c_path=True)
    try:
        side.router.publish_batch(batch(A, [1, 2, 3]))
        side.router.set_group(GroupSpec(GROUP_ID, "g", (A, B), "binance", 50))
        side.router.publish_batch(batch(B, [2, 3, 4]))
        ids = [orjson.loads(r[2])["data"]["t"] for r in side.records()]
        assert ids == [1, 2, 3, 4]
    finally:
        side.close()


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
@pytest.mark.parametrize("leg", [A, B], ids=["leg0", "leg1"])
def test_a_batch_that_reaches_a_changed_groups_old_form_goes_to_the_new_one(
    c_path: bool, leg: int
) -> None:
    """A read loop took the group from the router just before a change swapped it: its
    batch reaches the closed old form. It must neither pass unarbitrated (a duplicate of what
    the old form delivered; leg 0's frames used to) nor vanish (leg 1's used to): the new
    form takes it, and its floors drop what the old form delivered."""
    side = Side(c_path=c_path)
    try:
        side.router.publish_batch(batch(A, [1, 2, 3]))
        old = side.group
        side.router.set_group(GroupSpec(GROUP_ID, "g", (A, B), "binance", 50))
        old.offer(batch(leg, [2, 3, 4, 5]))  # late: after the old form's close
        side.router.publish_batch(batch(B if leg == A else A, [5, 6]))
        ids = [orjson.loads(r[2])["data"]["t"] for r in side.records()]
        assert ids == [1, 2, 3, 4, 5, 6]
    finally:
        side.close()


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
def test_downs_count_a_leg_going_down_once_however_many_changes_tell_it(c_path: bool) -> None:
    """A reset tells a gap, then backoff, then connecting: one down. The leg is up again at
    its next frame, and the next reset is the second."""
    side = Side(c_path=c_path)
    try:
        t0 = time.time_ns()
        side.router.publish_batch(batch(A, [1], t0))
        side.router.publish_batch(batch(B, [1], t0))
        side.router.publish_gap(B, None, "reset")
        side.router.leg_down(B, "backoff: reconnecting")
        side.router.leg_down(B, "connecting")
        assert [leg["downs"] for leg in side.group.figures()["legs"]] == [0, 1]
        side.router.publish_batch(batch(B, [2], t0 + 1))
        side.router.leg_down(B, "backoff: reconnecting")
        side.router.publish_gap(B, None, "reset")
        assert [leg["downs"] for leg in side.group.figures()["legs"]] == [0, 2]
    finally:
        side.close()


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
def test_a_tapped_group_also_publishes_each_legs_copies_as_they_arrived(c_path: bool) -> None:
    """GroupSpec.tap: every copy a leg brought, under the leg's session id with its own
    arrival stamp, beside the group's one record per message (the same on both paths)."""
    ring = RingWriter.create(None, 1 << 22)
    hub = Hub(ring=ring)
    router = GroupRouter(hub, c_path=c_path)
    router.set_group(GroupSpec(GROUP_ID, "g", (A, B), "binance", 10_000, tap=True))
    filters = [*ring_topics(HUB_ID, None), *ring_topics(A, None), *ring_topics(B, None)]
    reader = RingReader.attach_fd(ring.fd, topics=filters, copy=True, start="oldest")
    try:
        t0 = time.time_ns()
        router.publish_batch(batch(A, [1, 2, 3], t0))
        router.publish_batch(batch(B, [2, 3, 4], t0 + 5))
        seen = [
            (e.session_id, e.topic, orjson.loads(bytes(e.payload))["data"]["t"], e.ts_ns - t0)
            for e in reader.poll()
            if type(e) is RingMessage
        ]
        group = [(t, ts) for sid, _, t, ts in seen if sid == HUB_ID]
        assert group == [(1, 0), (2, 0), (3, 0), (4, 5)]
        assert [(t, ts) for sid, _, t, ts in seen if sid == A] == [(1, 0), (2, 0), (3, 0)]
        assert [(t, ts) for sid, _, t, ts in seen if sid == B] == [(2, 5), (3, 5), (4, 5)]
        assert {(sid, topic) for sid, topic, _, _ in seen} == {
            (sid, f"{sid}:{TOPIC}") for sid in (HUB_ID, A, B)
        }
    finally:
        router.remove_group(GROUP_ID)
        reader.close()
        hub.close()
        ring.close()


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
def test_a_kernel_legs_unread_socket_bytes_hold_a_due_hole_until_they_are_read(
    c_path: bool,
) -> None:
    """The failover bench's false losses after session 10: leg B (a kernel socket) brings 3,
    but its read loop runs late while leg A's frames keep coming. B told its group the
    socket (leg_input): while it holds unread bytes a hole that is due waits; once they are
    read and B brings nothing, the hole goes a hold after B's last arrival; the router keeps
    the socket for a group that is changed."""
    side = Side(c_path=c_path, hold_ms=20)
    mine, peer = socket.socketpair()
    try:
        side.router.leg_input(B, mine.fileno())
        t0 = time.time_ns()
        side.router.publish_batch(batch(B, [1, 2], t0))
        side.router.publish_batch(batch(A, [1, 2, 4], t0))  # 3 missing on A: 4 held
        peer.sendall(b"B's frames, not read yet")
        # due at A's frame (B silent 30 ms), but B's socket holds bytes: B counts as
        # arriving at 30 ms, the hole is due at 50 ms
        side.router.publish_batch(batch(A, [5], t0 + 30_000_000))
        side.group.expire(t0 + 40_000_000)
        assert [r[2] for r in side.records()] == [trade(1), trade(2)]  # 4, 5 held for B
        side.group.expire(t0 + 50_000_000)  # due again: still unread, held to 70 ms
        assert side.records() == []
        mine.recv(1024)  # B's loop reads: 3 was not in it after all
        side.group.expire(t0 + 69_000_000)
        assert side.records() == []
        side.group.expire(t0 + 70_000_000)
        records = side.records()
        assert [r[0] for r in records] == ["gap", HUB_ID, HUB_ID] and records[0][3] == 1
        figures = side.group.figures()
        assert figures["gaps"] == 1
        if c_path:
            assert side.group.group.stats()["unread_waits"] >= 1
        side.router.leg_input(B, -1)  # the socket closes: no longer asked
        side.router.publish_batch(batch(A, [7], t0 + 80_000_000))  # 6 missing: 7 held
        peer.sendall(b"more")
        side.group.expire(t0 + 100_000_000)
        assert [r[0] for r in side.records()] == ["gap", HUB_ID]
    finally:
        mine.close()
        peer.close()
        side.close()


def test_a_batch_a_read_loop_is_offering_holds_a_due_hole_for_its_leg() -> None:
    """C groups take a read loop's batch one frame per call: between two of them the engine's
    leg may give a hole up, while the rest of the batch, stamped when it was read (longer
    than the hold ago, on a loaded machine), brings the missing message. While a batch is
    being offered its leg counts as having unread input."""
    side = Side(c_path=True, hold_ms=20)
    try:
        group = side.group
        assert isinstance(group, CFeedGroup)
        t0 = time.time_ns()
        side.router.publish_batch(batch(B, [1, 2], t0))
        side.router.publish_batch(batch(A, [1, 2, 4], t0))  # 3 missing on A: 4 held
        group.group.set_leg_busy(1, True)  # B's loop is in the middle of a batch
        side.router.publish_batch(batch(A, [5], t0 + 15_000_000))
        side.router.publish_batch(batch(A, [6], t0 + 30_000_000))  # due, but B is busy
        assert [r[2] for r in side.records()] == [trade(1), trade(2)]
        group.group.set_leg_busy(1, False)
        side.router.publish_batch(batch(B, [3], t0 + 1_000_000))  # the batch's stamp
        assert [r[2] for r in side.records()] == [trade(i) for i in (3, 4, 5, 6)]
        assert group.figures()["gaps"] == 0 and group.figures()["unread_waits"] == 1
    finally:
        side.close()


@pytest.mark.parametrize("c_path", [True, False], ids=["c", "python"])
def test_frames_a_kernel_legs_connection_read_and_queued_hold_a_due_hole(c_path: bool) -> None:
    """The failover bench's false losses that `unread_waits` missed (session 11): the kernel
    leg's connection had read its socket empty (FIONREAD 0) and queued the frames, and the
    session thread waited for a CPU before offering them. Frames queued and not offered
    count as unread input as the socket's bytes do (GroupRouter.leg_queued)."""
    side = Side(c_path=c_path, hold_ms=20)
    mine, peer = socket.socketpair()
    try:
        side.router.leg_input(B, mine.fileno())  # registered, and empty: it was read
        t0 = time.time_ns()
        side.router.publish_batch(batch(B, [1, 2], t0))
        side.router.publish_batch(batch(A, [1, 2, 4], t0))  # 3 missing on A: 4 held
        side.router.leg_queued(B, True)  # B's connection read 3 and queued it
        side.router.publish_batch(batch(A, [5], t0 + 30_000_000))  # due: B has input
        side.group.expire(t0 + 60_000_000)
        assert [r[2] for r in side.records()] == [trade(1), trade(2)]  # 4, 5 held for B
        side.router.publish_batch(batch(B, [3], t0 + 70_000_000))  # B's loop offers it
        side.router.leg_queued(B, False)
        assert [r[2] for r in side.records()] == [trade(i) for i in (3, 4, 5)]
        figures = side.group.figures()
        assert figures["gaps"] == 0
        if c_path:
            assert figures["unread_waits"] >= 1
        side.router.publish_batch(batch(A, [7], t0 + 80_000_000))  # 6 missing: 7 held
        side.group.expire(t0 + 100_000_000)  # B's queue is empty: given up a hold on
        assert [r[0] for r in side.records()] == ["gap", HUB_ID]
    finally:
        mine.close()
        peer.close()
        side.close()


@pytest.mark.parametrize("c_path", [True, False])
def test_leg_0_going_down_is_a_gap_of_what_passes_through_it_alone(c_path: bool) -> None:
    """Frames without an exchange id come from leg 0 only: no other leg can fill what it
    loses (a reconnect), so the group's stream gets a gap for them, before the next one."""
    side = Side(c_path=c_path)
    try:
        odd = b'{"stream":"btcusdt@trade","data":{"e":"trade","s":"X"}}'  # no id: a hash
        later = b'{"stream":"btcusdt@trade","data":{"e":"trade","s":"Y"}}'
        now = time.time_ns()
        for sid in (A, B):
            side.router.publish_batch([(sid, TOPIC, odd, now, None)])
        # (B going down alone is no gap: test_every_leg_down_is_a_gap_of_the_group)
        side.router.publish_gap(A, 4, "reconnect: A's")
        side.router.publish_gap(A, None, "backoff")  # down already: told once
        for sid in (A, B):
            side.router.publish_batch([(sid, TOPIC, later, time.time_ns(), None)])
        records = side.records()
    finally:
        side.close()
    assert [r[:4] for r in records] == [
        (HUB_ID, f"{HUB_ID}:{TOPIC}", odd),
        ("gap", HUB_ID, HUB_ID, 4),
        (HUB_ID, f"{HUB_ID}:{TOPIC}", later),
    ][: len(records)] and len(records) == 3, records
    assert "reconnect: A's" in records[1][4]


def book_ticker(u: int) -> bytes:
    """A bookTicker frame: its update id `u` skips (no link), so no hole can be told."""
    return b'{"stream":"btcusdt@bookTicker","data":{"u":%d,"s":"BTCUSDT","b":"1","a":"2"}}' % u


@pytest.mark.parametrize("c_path", [True, False])
def test_every_leg_down_is_a_gap_of_the_group(c_path: bool) -> None:
    """Every leg down for a failure is a gap of the group (lost unknown): what the exchange
    sends until a leg is back is lost, and for topics it does not link (bookTicker) no
    hole will tell it (it was silent). Not at the start (nothing carried yet), not while
    another leg is live, once per time every leg is down, and a stopped leg is not down
    for it (a stop is no loss; on a fleet node the leg may run elsewhere)."""
    side = Side(c_path=c_path)
    topic = "btcusdt@bookTicker"

    def ticks(sid: int, *ids: int) -> None:
        side.router.publish_batch([(sid, topic, book_ticker(u), time.time_ns(), None) for u in ids])

    try:
        side.router.leg_down(A, "connecting: start")  # both down before anything came
        side.router.leg_down(B, "connecting: start")
        ticks(A, 10)
        ticks(B, 10)
        side.router.leg_down(B, "backoff: B's reset")  # A is live: no gap
        ticks(A, 15)
        side.router.publish_gap(A, None, "reconnect: A's reset")  # the last one: a gap
        side.router.leg_down(A, "backoff: A's reset")  # down already: told once
        side.router.leg_down(B, "backoff: again")
        ticks(B, 40)  # back: 16..39 may be lost, and only the gap says so
        ticks(A, 40, 41)
        side.router.leg_down(A, "stopping: by the operator", stopped=True)
        side.router.leg_down(B, "stopping: by the operator", stopped=True)  # a stop: no gap
        ticks(B, 50)  # restarted
        side.router.publish_gap(B, None, "reconnect: B's")  # A is stopped: not down, no gap
        ticks(A, 60)  # restarted
        side.router.publish_gap(A, None, "reconnect: A's")  # every leg lost: a gap
        ticks(B, 65)  # B back
        side.router.leg_down(B, "stopping: by the operator", stopped=True)
        ticks(A, 70)
        side.router.leg_down(B, "connecting: started again")  # B starts: a leg again
        side.router.publish_gap(A, None, "reconnect: A's again")  # B is not up yet: a gap
        records = side.records()
    finally:
        side.close()
    ring_topic = f"{HUB_ID}:{topic}"
    tick = [(HUB_ID, ring_topic, book_ticker(u)) for u in (10, 15, 40, 41, 50, 60, 65, 70)]
    down = ("gap", HUB_ID, HUB_ID, None)
    assert [r[:4] for r in records] == [*tick[:2], down, *tick[2:6], down, *tick[6:], down]
    assert "reconnect: A's again" in records[-1][4]
    assert "every leg down" in records[2][4] and "A's reset" in records[2][4]
    assert "every leg down" in records[-4][4] and "reconnect: A's" in records[-4][4]
