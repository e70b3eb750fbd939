"""Fleet ownership (gateway.fleet) on a real PostgreSQL: node heartbeats, session leases,
generations and fencing, placement by labels and load, and the refusal on SQLite.

Time is the database's for leases; each node's fence runs on a clock the test drives, so
"node a was paused past its lease" is a statement about that clock, not a sleep."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from sqlalchemy import insert

from gateway.fleet import FleetError, LeaseStore, place
from gateway.fleet.placement import unplaced
from gateway.store import Database, migrate
from gateway.store.models import SessionRow

LEASE_S = 0.5


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def db(pg_url: str) -> Iterator[Database]:
    database = Database(pg_url)
    migrate.upgrade(database)
    with database.engine.begin() as conn:
        conn.execute(
            insert(SessionRow),
            [
                {"name": f"s{i}", "url": "wss://feed.example/ws", "dialect": "generic",
                 "transport": "kernel"}
                for i in range(1, 51)
            ],
        )  # fmt: skip
    try:
        yield database
    finally:
        database.close()


def node(
    db: Database, name: str, clock: Clock | None = None, lease_s: float = LEASE_S
) -> LeaseStore:
    store = LeaseStore(db.engine, name, lease_s=lease_s, clock=clock or Clock())
    store.register({"venue": "binance"} if name != "c" else {"venue": "okx"})
    return store


def test_a_session_has_one_owner_and_a_dead_owner_s_sessions_move(db: Database) -> None:
    a, b = node(db, "a"), node(db, "b")
    lease = a.acquire(1)
    assert lease is not None and lease.generation == 1
    assert b.acquire(1) is None  # a holds it
    assert a.acquire(1) is not None and a.held == {1: 1}  # ours again: same generation
    time.sleep(LEASE_S + 0.1)  # a stops heartbeating
    taken = b.acquire(1)
    assert taken is not None and taken.node == "b" and taken.generation == 2
    # a comes back: its renewal no longer covers the session, so it stands down.
    assert a.heartbeat() == {}
    assert a.may_publish(1) is None
    assert b.may_publish(1) == 2
    assert [(x.session_id, x.node, x.generation) for x in b.leases()] == [(1, "b", 2)]


def test_a_paused_owner_stops_publishing_before_its_lease_can_expire(db: Database) -> None:
    clock = Clock()
    a = node(db, "a", clock)
    assert a.acquire(7) is not None
    assert a.may_publish(7) == 1
    clock.now += LEASE_S * 0.79  # within the fence (1 - FENCE_MARGIN of the lease)
    assert a.may_publish(7) == 1
    clock.now += LEASE_S * 0.02  # past it: a may not publish although nobody took over
    assert a.may_publish(7) is None
    assert a.heartbeat() == {7: 1}  # a renewal that says it still owns it lifts the fence
    assert a.may_publish(7) == 1


def test_nodes_are_alive_by_their_heartbeat_in_database_time(db: Database) -> None:
    a, b = node(db, "a"), node(db, "b")
    assert [(n.name, n.alive, n.labels) for n in a.nodes()] == [
        ("a", True, {"venue": "binance"}),
        ("b", True, {"venue": "binance"}),
    ]
    time.sleep(LEASE_S + 0.1)
    b.heartbeat()
    assert [(n.name, n.alive) for n in a.nodes()] == [("a", False), ("b", True)]
    ages = {n.name: n.heartbeat_age_s for n in a.nodes()}  # by the database's clock
    assert ages["a"] > LEASE_S > ages["b"] >= 0
    b.set_draining(True)
    assert [n.draining for n in a.nodes()] == [False, True]
    b.leave()
    assert [n.name for n in a.nodes()] == ["a"]


def test_a_released_lease_is_taken_at_once_with_the_next_generation(db: Database) -> None:
    a, b = node(db, "a"), node(db, "b")
    assert a.acquire(3) is not None
    assert a.release(3)
    taken = b.acquire(3)
    assert taken is not None and taken.generation == 2
    assert not a.release(3)  # not a's any more


def test_racing_nodes_give_every_session_exactly_one_owner(db: Database) -> None:
    # A lease longer than the race: an expired lease may rightly change hands.
    stores = [node(db, name, lease_s=60) for name in ("a", "b", "c")]
    won: dict[str, list[int]] = {s.node: [] for s in stores}
    start = threading.Barrier(len(stores))

    def race(store: LeaseStore) -> None:
        start.wait()
        for sid in range(1, 51):
            if store.acquire(sid) is not None:
                won[store.node].append(sid)

    threads = [threading.Thread(target=race, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    owned = sorted(sid for sids in won.values() for sid in sids)
    assert owned == list(range(1, 51))  # each once: no session has two owners
    leases = stores[0].leases()
    assert {(x.session_id, x.node) for x in leases} == {
        (sid, name) for name, sids in won.items() for sid in sids
    }
    assert all(x.generation == 1 for x in leases)


def test_the_fleet_refuses_sqlite(tmp_path: object) -> None:
    database = Database(f"sqlite:///{tmp_path}/wsgw.db")
    try:
        with pytest.raises(FleetError, match="needs PostgreSQL"):
            LeaseStore(database.engine, "a")
    finally:
        database.close()


def test_placement_follows_labels_and_load_and_keeps_live_owners() -> None:
    nodes = {"a": {"venue": "binance", "dpdk": "true"}, "b": {"venue": "binance"}, "c": {}}
    sessions = {1: {"venue": "binance"}, 2: {"venue": "binance"}, 3: {"dpdk": "true"},
                4: {}, 5: {"venue": "okx"}, 6: {}}  # fmt: skip
    placed = place(sessions, nodes, owners={2: "a"})
    assert placed[2] == "a"  # stays with its live owner
    assert placed[1] == "b"  # a has one already
    assert placed[3] == "a"  # only a has dpdk
    assert placed[4] == "c"  # the least loaded of all three
    assert placed[6] == "b"  # a has 2, b and c 1: b by name
    assert unplaced(sessions, placed) == [5]
    # An owner that stopped matching (or died: not in nodes) loses the session.
    again = place(sessions, {"b": nodes["b"], "c": {}}, owners={2: "a", 3: "a"})
    assert again[2] == "b" and 3 not in again
    # Spread: 12 sessions over 3 equal nodes, 4 each.
    spread = place({i: {} for i in range(12)}, {"x": {}, "y": {}, "z": {}}, owners={})
    assert sorted(list(spread.values()).count(n) for n in "xyz") == [4, 4, 4]


def test_placement_rebalances_only_beyond_one() -> None:
    """A node joins: the fewest sessions move to it, only while the load differs by more
    than one between nodes the rule allows."""
    three = {"x": {}, "y": {}, "z": {}}
    owners = {sid: ("x" if sid < 3 else "y") for sid in range(6)}  # 3 on x, 3 on y
    placed = place({sid: {} for sid in range(6)}, three, owners)
    moved = {sid for sid in range(6) if placed[sid] != owners[sid]}
    assert len(moved) == 2 and {placed[sid] for sid in moved} == {"z"}
    assert sorted(list(placed.values()).count(n) for n in three) == [2, 2, 2]
    # Uneven by one only: nothing moves (7 sessions: 3/2/2 stays as it is).
    owners = {sid: "xyz"[sid % 3] for sid in range(7)}
    assert place({sid: {} for sid in range(7)}, three, owners) == owners
    # A node the rules do not allow takes nothing, however idle.
    rules = {sid: {"venue": "a"} for sid in range(4)}
    labelled = {"x": {"venue": "a"}, "y": {"venue": "a"}, "z": {}}
    owners = {sid: "x" for sid in range(4)}
    placed = place(rules, labelled, owners)
    assert sorted(placed.values()) == ["x", "x", "y", "y"]
    # Placing new sessions first fills the idle node: no owned session moves for them.
    owners = {0: "x", 1: "y"}
    placed = place({sid: {} for sid in range(3)}, three, owners)
    assert placed == {0: "x", 1: "y", 2: "z"}


def test_next_expiry_is_another_nodes_first_live_lease(db: Database) -> None:
    """What the tick aims at when an owner stops renewing (gateway.fleet.node)."""
    a, b = node(db, "a"), node(db, "b")
    assert a.next_expiry_s() is None
    assert b.acquire(1) is not None and a.acquire(2) is not None
    first = a.next_expiry_s()
    assert first is not None and 0 < first <= LEASE_S  # b's, not a's own
    assert b.next_expiry_s() is not None
    time.sleep(LEASE_S + 0.05)
    assert a.next_expiry_s() is None  # expired: nothing left to wait for
