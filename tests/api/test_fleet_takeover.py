"""A hand-over's successor and its owner's death (issue #20), and the groups whose legs share
a node in /v1/fleet/nodes. One fleet node in this process on a throwaway PostgreSQL
database; the owner handing it a session is a second node's lease store (the real one),
which stops heartbeating to die, or keeps heartbeating to live. The session streams from a
local simulator, so the successor connects warm and has data before it takes over."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from api.app import create_app
from gateway.control import ControlPlane
from gateway.fleet.leases import LeaseStore
from gateway.fleet.node import FleetNode, FleetRuntime
from gateway.hub.core import Hub
from gateway.runtime import SessionState
from tests.api.conftest import BASE_URL
from tests.api.test_fleet_failover import wait_for

LEASE_S = 1.5
TOPIC = "btcusdt@trade"


@pytest.fixture
def make_node(make_plane: Callable[..., ControlPlane]) -> Callable[[str], ControlPlane]:
    def make(name: str) -> ControlPlane:
        fleet = {"enabled": True, "node": name, "lease_s": LEASE_S}
        return make_plane(name, hub={"gateway": f"tk{name}"}, fleet=fleet)

    return make


def fleet_node(plane: ControlPlane) -> FleetNode:
    runtime = plane.runtime
    assert isinstance(runtime, FleetRuntime) and runtime.fleet is not None
    return runtime.fleet


def hub(plane: ControlPlane) -> Hub:
    found = getattr(plane.runtime, "hub", None)
    assert isinstance(found, Hub)
    return found


def binance_session(plane: ControlPlane, port: int, name: str) -> int:
    row = plane.sessions.create(
        {
            "name": name,
            "url": f"ws://127.0.0.1:{port}/binance/stream",
            "dialect": "binance",
            "transport": "kernel",
            "reconnect_initial_delay_s": 0.1,
        }
    )
    plane.subscriptions.create({"session_id": row.id, "topics": [TOPIC], "consumer": name})
    return row.id


def handed_by(owner: LeaseStore, plane: ControlPlane, sid: int) -> None:
    """`owner` holds the session, then hands it to the plane's node, which connects it."""
    assert owner.acquire(sid) is not None
    plane.sessions.start(sid)
    assert owner.hand_over(sid, fleet_node(plane).name)
    fleet_node(plane).wake()


@contextlib.contextmanager
def live_owner(engine: Engine) -> Iterator[LeaseStore]:
    """Another node's lease store ("alive") that heartbeats until the block ends."""
    live = LeaseStore(engine, "alive", lease_s=LEASE_S)
    live.register({}, None)
    stop = threading.Event()

    def heartbeat() -> None:
        while not stop.wait(LEASE_S / 3):
            live.heartbeat()

    beating = threading.Thread(target=heartbeat)
    beating.start()
    try:
        yield live
    finally:
        stop.set()
        beating.join()


def test_a_successor_whose_owner_died_publishes_a_gap_and_one_whose_owner_lives_does_not(
    make_node: Callable[[str], ControlPlane], pg_url: str, simulator: int
) -> None:
    b = make_node("b")
    b.start()
    engine = fleet_node(b).db.engine

    # The owner dies (it never heartbeats again) while b connects the session it hands b.
    dead = LeaseStore(engine, "ghost", lease_s=LEASE_S)
    dead.register({}, None)
    orphan = binance_session(b, simulator, "orphan")
    handed_by(dead, b, orphan)
    wait_for("b holding the orphan", lambda: fleet_node(b).may_publish(orphan) == 2)
    wait_for("the orphan's gap", lambda: hub(b).last_gap(orphan) is not None)
    gap = hub(b).last_gap(orphan)
    assert gap is not None and "ghost died" in gap.reason, gap

    # An owner that keeps heartbeating while b connects: b takes over, no gap.
    with live_owner(engine) as live:
        kept = binance_session(b, simulator, "kept")
        handed_by(live, b, kept)
        wait_for("b holding the kept session", lambda: fleet_node(b).may_publish(kept) == 2)
        time.sleep(LEASE_S)  # a gap would come with the take-over
    assert hub(b).last_gap(kept) is None


def test_the_nodes_view_names_groups_whose_legs_share_a_node(
    make_node: Callable[[str], ControlPlane], simulator: int
) -> None:
    a = make_node("a")
    app = create_app(a.settings, control=a)
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        _, secret = a.tokens.create("admin", ["admin"])
        admin = {"Authorization": f"Bearer {secret}"}
        legs = [binance_session(a, simulator, f"leg{i}") for i in range(2)]
        group = a.groups.create({"name": "btc", "legs": legs})
        for sid in legs:
            a.sessions.start(sid)
        node = fleet_node(a)
        wait_for("a holding both legs", lambda: all(node.may_publish(s) for s in legs))
        view = client.get("/v1/fleet/nodes", headers=admin).json()
        assert view["legs_together"] == [{"group": group.id, "legs": legs, "nodes": ["a"]}]

        # A second node: the placement puts one leg on it, and the view says no more.
        b = make_node("b")
        b.start()
        wait_for("one leg on each node", lambda: fleet_node(b).leases.held.keys() != set())
        wait_for(
            "no group with legs together",
            lambda: client.get("/v1/fleet/nodes", headers=admin).json()["legs_together"] == [],
        )


def test_the_old_owner_logs_a_hand_over_as_one_not_as_a_fence(
    make_node: Callable[[str], ControlPlane], simulator: int, caplog: pytest.LogCaptureFixture
) -> None:
    a = make_node("a")
    a.start()
    sid = binance_session(a, simulator, "moving")
    a.sessions.start(sid)
    wait_for("a holding the session", lambda: fleet_node(a).may_publish(sid) == 1)
    b = make_node("b")
    b.start()
    caplog.set_level(logging.INFO, logger="wsgw.fleet")
    fleet_node(a).drain()
    wait_for("b holding the session", lambda: fleet_node(b).may_publish(sid) == 2)
    wait_for("a no longer running it", lambda: sid not in fleet_runtime_of(a).running_here())
    time.sleep(0.5)  # a burst that still reaches a's fence meanwhile
    said = [r.getMessage() for r in caplog.records if r.name == "wsgw.fleet"]
    assert f"fleet: node a handed session {sid} over to b: it stops here" in said, said
    assert not [m for m in said if "fenced" in m or "standing down" in m], said


def fleet_runtime_of(plane: ControlPlane) -> FleetRuntime:
    runtime = plane.runtime
    assert isinstance(runtime, FleetRuntime)
    return runtime


def streaming(plane: ControlPlane, sid: int) -> bool:
    return plane.runtime.session_status(sid).state == SessionState.CONNECTED


def ran_and_stopped(
    make_node: Callable[[str], ControlPlane], simulator: int, name: str
) -> tuple[ControlPlane, int]:
    """Node b, and a session it streamed and then stopped (through its API)."""
    b = make_node("b")
    b.start()
    sid = binance_session(b, simulator, name)
    b.sessions.start(sid)
    wait_for("b streaming the session", lambda: streaming(b, sid))
    b.sessions.stop(sid)
    wait_for("b no longer running it", lambda: sid not in fleet_runtime_of(b).running_here())
    return b, sid


def assert_stopped_gap(plane: ControlPlane, sid: int) -> None:
    """The session's next gap comes, and tells a stop (not a take-over)."""
    wait_for("the restart's gap", lambda: hub(plane).last_gap(sid) is not None)
    gap = hub(plane).last_gap(sid)
    assert gap is not None and gap.reason.startswith("stopped:"), gap


def test_a_session_stopped_and_started_again_on_its_node_publishes_a_gap(
    make_node: Callable[[str], ControlPlane], simulator: int
) -> None:
    """The lease never moved (generation 1), so no take-over gap tells what the stop
    missed: the restart's own gap does, as on a single node."""
    b, sid = ran_and_stopped(make_node, simulator, "restarted")
    assert hub(b).last_gap(sid) is None
    b.sessions.start(sid)
    assert_stopped_gap(b, sid)
    assert fleet_node(b).may_publish(sid) == 1


def test_a_session_handed_back_to_a_node_that_stopped_it_publishes_no_gap_until_it_restarts(
    make_node: Callable[[str], ControlPlane], pg_url: str, simulator: int
) -> None:
    """b ran the session and stopped it; a live owner then holds it and hands it to b: the
    owner published until the hand-over, so b's warm start, whose stop left a gap to
    publish, publishes it behind the fence (b holds no lease yet), and none gets out."""
    b, sid = ran_and_stopped(make_node, simulator, "back")
    wait_for("b releasing its lease", lambda: fleet_node(b).may_publish(sid) is None)
    with live_owner(fleet_node(b).db.engine) as live:
        with fleet_node(b)._lock:  # b does not take the released lease first
            handed_by(live, b, sid)
        wait_for("b holding the session", lambda: fleet_node(b).may_publish(sid) == 3)
        time.sleep(LEASE_S)  # a gap would come with the take-over
    assert hub(b).last_gap(sid) is None

    # Its stored configuration differs from the one it runs with (changed through another
    # node's API between two ticks): b restarts it, and the gap says so, not "moved here".
    runtime = fleet_runtime_of(b)
    with runtime._here_lock:
        running = runtime._started_with[sid]
        runtime._started_with[sid] = replace(running, url="ws://127.0.0.1:9/before")
    fleet_node(b).tick()
    assert_stopped_gap(b, sid)
    assert fleet_runtime_of(b).started_with(sid) == running
