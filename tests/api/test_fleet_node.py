"""Two fleet nodes in one process on a throwaway PostgreSQL database (gateway.fleet.node):
placement rules decide who may run a session, the restore at start runs only what the node
then holds, an operator's start on a node that may not run it leaves it to the one that may,
and a drained node hands its sessions over. Sessions point at a closed port: what is
checked is who runs them, not their feed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from gateway.control import ControlPlane
from gateway.fleet.node import FleetNode, FleetRuntime
from gateway.runtime import SessionState
from tests.api.test_fleet_failover import wait_for

LEASE_S = 1.5


@pytest.fixture
def make_node(make_plane: Callable[..., ControlPlane]) -> Callable[..., ControlPlane]:
    def make(name: str, labels: dict[str, str], lease_s: float = LEASE_S) -> ControlPlane:
        fleet = {"enabled": True, "node": name, "labels": labels, "lease_s": lease_s}
        plane = make_plane(name, hub={"gateway": f"t{name}", "ring": False}, fleet=fleet)
        assert isinstance(plane.runtime, FleetRuntime)
        return plane

    return make


def fleet_runtime(plane: ControlPlane) -> FleetRuntime:
    runtime = plane.runtime
    assert isinstance(runtime, FleetRuntime)
    return runtime


def fleet_node(plane: ControlPlane) -> FleetNode:
    node = fleet_runtime(plane).fleet
    assert node is not None
    return node


def here(plane: ControlPlane) -> set[int]:
    return fleet_runtime(plane).running_here()


def session(plane: ControlPlane, name: str, placement: dict[str, str]) -> int:
    row = plane.sessions.create(
        {
            "name": name,
            "url": "ws://127.0.0.1:9/feed",
            "dialect": "generic",
            "transport": "kernel",
            "placement": placement,
        }
    )
    return row.id


def running_on_b(
    make_node: Callable[[str, dict[str, str]], ControlPlane],
) -> tuple[ControlPlane, ControlPlane, int]:
    """Nodes a (zone x) and b (zone y) started, and a session placed in zone y started
    through a's API: (a, b, the session), once b runs it."""
    a = make_node("a", {"zone": "x"})
    a.start()
    b = make_node("b", {"zone": "y"})
    b.start()
    sid = session(a, "on-b", {"zone": "y"})
    a.sessions.start(sid)
    wait_for("b running the session", lambda: here(b) == {sid})
    return a, b, sid


def test_placement_restore_start_and_drain(
    make_node: Callable[[str, dict[str, str]], ControlPlane],
) -> None:
    a = make_node("a", {"zone": "x"})
    a.start()
    only_y = session(a, "only-y", {"zone": "y"})
    anywhere = session(a, "anywhere", {})
    # Node a may not run only-y: its start leaves it configured here, for a node that may.
    _, status = a.sessions.start(only_y)
    assert status.state is SessionState.CONFIGURED
    assert status.reason is not None and "fleet" in status.reason
    a.sessions.start(anywhere)
    wait_for("node a running the session it may run", lambda: here(a) == {anywhere})

    # Node b starts: its restore runs what it then holds (only-y), not a's session.
    b = make_node("b", {"zone": "y"})
    report = b.start()
    assert report.sessions == [only_y]
    assert report.elsewhere == [anywhere]
    assert here(b) == {only_y}
    assert here(a) == {anywhere}
    leases = {lease.session_id: lease.node for lease in fleet_node(a).leases.leases()}
    assert leases == {only_y: "b", anywhere: "a"}

    # Drain a: b takes the session a gave up; a stops it.
    assert fleet_node(a).drain() == {anywhere}
    wait_for("b running both sessions", lambda: here(b) == {only_y, anywhere})
    wait_for("a running none", lambda: here(a) == set())
    assert fleet_runtime(b).may_publish(anywhere) == 2  # a new owner: one generation more
    assert fleet_runtime(a).may_publish(anywhere) is None

    # A stopped session's lease is given up by its holder.
    b.sessions.stop(only_y)
    wait_for("only-y's lease released", lambda: fleet_runtime(b).may_publish(only_y) is None)
    wait_for("b running only the other", lambda: here(b) == {anywhere})

    # A node that shuts down leaves the fleet: its row and leases go; the other, drained
    # no more, takes over.
    b.shutdown()
    assert [n.name for n in fleet_node(a).leases.nodes()] == ["a"]
    assert fleet_node(a).drain(False) == set()
    wait_for("a running the session b left", lambda: here(a) == {anywhere})


def test_a_node_that_joins_gets_its_share_and_no_more(
    make_node: Callable[[str, dict[str, str]], ControlPlane],
) -> None:
    """2 nodes run 6 sessions 3 and 3; a third joins: exactly two move to it, one per tick
    of their owners, and each session keeps running on one node only."""
    a = make_node("a", {})
    a.start()
    sessions = [session(a, f"s{i}", {}) for i in range(6)]
    for sid in sessions:
        a.sessions.start(sid)
    b = make_node("b", {})
    b.start()
    wait_for("3 and 3", lambda: sorted((len(here(a)), len(here(b)))) == [3, 3], 20)
    before = {sid: "a" for sid in here(a)} | {sid: "b" for sid in here(b)}
    generations = {x.session_id: x.generation for x in fleet_node(a).leases.leases()}

    c = make_node("c", {})
    c.start()
    planes = {"a": a, "b": b, "c": c}
    wait_for("2, 2 and 2", lambda: sorted(len(here(p)) for p in planes.values()) == [2, 2, 2], 20)
    after = {sid: name for name, p in planes.items() for sid in here(p)}
    assert sorted(after) == sorted(sessions)  # each on one node
    moved = {sid for sid in sessions if after[sid] != before[sid]}
    assert len(moved) == 2 and {after[sid] for sid in moved} == {"c"}
    leases = {x.session_id: x for x in fleet_node(a).leases.leases()}
    assert {sid for sid in sessions if leases[sid].generation == generations[sid] + 1} == moved
    time.sleep(3 * LEASE_S / 3)  # a few more ticks: balanced is stable
    assert {sid: name for name, p in planes.items() for sid in here(p)} == after


def test_subscriptions_changed_on_any_node_reach_the_owner(
    make_node: Callable[[str, dict[str, str]], ControlPlane],
) -> None:
    """A subscription created, changed and deleted through the API of a node that does not
    run the session reaches the node that does within a tick; the owner subscribes it. A
    stop and a start there reach it too."""
    a, b, sid = running_on_b(make_node)

    def topics_on_b() -> tuple[str, ...]:
        return fleet_runtime(b).session_status(sid).topics

    change = a.subscriptions.create({"session_id": sid, "topics": ["t1", "t2"], "consumer": "c"})
    wait_for("b holding t1 and t2", lambda: topics_on_b() == ("t1", "t2"))
    a.subscriptions.update(change.subscription.id, {"topics": ["t2", "t3"]})
    wait_for("b holding t2 and t3", lambda: sorted(topics_on_b()) == ["t2", "t3"])
    other = b.subscriptions.create({"session_id": sid, "topics": ["t3"], "consumer": "d"})
    a.subscriptions.delete(change.subscription.id)
    wait_for("b holding t3 only", lambda: topics_on_b() == ("t3",))
    time.sleep(LEASE_S)  # b's own subscription stays through its ticks
    assert topics_on_b() == ("t3",)
    a.subscriptions.delete(other.subscription.id)
    wait_for("b holding nothing", lambda: topics_on_b() == ())
    # Stop and start through a: the owner b follows the stored wanted state.
    a.sessions.stop(sid)
    wait_for("b no longer running the session", lambda: here(b) == set())
    a.sessions.start(sid)
    wait_for("b running the session again", lambda: here(b) == {sid})
    assert here(a) == set()


def test_a_released_session_is_taken_at_once_not_at_the_next_tick(
    make_node: Callable[..., ControlPlane],
) -> None:
    """A 30 s lease ticks every 10 s; the node a drain releases to ticks at once on the
    releasing node's NOTIFY, so the session moves within a few seconds."""
    a = make_node("a", {}, 30.0)
    a.start()
    sid = session(a, "moving", {})
    a.sessions.start(sid)
    wait_for("a running the session", lambda: here(a) == {sid})
    b = make_node("b", {}, 30.0)
    b.start()
    time.sleep(0.5)  # b's first tick is behind it: its next is 10 s away
    fleet_node(a).drain()
    wait_for("b running the session", lambda: here(b) == {sid}, timeout=5)
    assert here(a) == set()


def test_a_session_changed_through_another_node_restarts_with_its_new_configuration(
    make_node: Callable[..., ControlPlane],
) -> None:
    """Stopped, changed and started again through node a's API while its owner b does not
    tick (b's tick lock held): b's next tick restarts it with the stored configuration."""
    a, b, sid = running_on_b(make_node)
    with fleet_node(b)._lock:  # b between two ticks
        a.sessions.stop(sid)
        a.sessions.update(sid, {"url": "ws://127.0.0.1:10/other", "name": "renamed"})
        a.sessions.start(sid)
        assert fleet_runtime(b).started_with(sid).url == "ws://127.0.0.1:9/feed"  # type: ignore[union-attr]

    def runs_the_new_url() -> bool:
        spec = fleet_runtime(b).started_with(sid)
        return spec is not None and spec.url == "ws://127.0.0.1:10/other"

    wait_for("b running the session with its new url", runs_the_new_url)
    assert here(b) == {sid} and here(a) == set()
