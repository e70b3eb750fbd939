"""This gateway as a node of a fleet: the tick that keeps its leases, and the runtime that
runs only what it leases.

The seam is the runtime (`FleetRuntime`, a LiveRuntime built by gateway.runtime.compose when
fleet.enabled): the control plane keeps calling `start_session` as on one gateway (an
operator's start, the restore at start), and the runtime starts a session only while this
node holds its lease; otherwise the session stays configured here and the node the
placement gives it to starts it on its next tick. The stored wanted state (desired_state)
stays the one truth every node reads.

Every tick (a third of the lease time) `FleetNode.tick`:
1. heartbeats, which renews every lease this node holds and says which it still holds;
2. reads the sessions wanted running and their placement rules, the live nodes and the
   live leases, and computes the placement (gateway.fleet.placement) as every node does;
3. acquires what is placed here, releases what is no longer wanted or placed elsewhere
   (draining or rebalancing: one per tick, so the others take them one by one);
4. starts what it holds and does not run, stops what it runs and no longer holds;
5. gives the sessions it runs exactly their stored topics: a subscription changed through
   any node's API reaches the owner within a tick;
6. runs every stored feed group as stored (a group made or changed through another node's
   API reaches this one within a tick).

Feed groups across nodes: the placement puts a group's legs on different nodes (legs
apart, gateway.fleet.placement). Every node runs every group; a node arbitrates the legs
it runs and publishes the group's winners under the group's hub id, the same on every
node, and the bus's message id is that hub id + the exchange's id (gateway.hub.nats
`message_id`), so the copies two nodes publish are one message in JetStream (within its
duplicate window). A group's messages pass the fence while this node may publish for one
of its legs; they carry no generation (a group has no lease: its legs do).

Hand-over, make-before-break (drain, rebalance): the owner names the node the placement
gives the session to as its successor and keeps running it; that node connects the session
"warm" (behind its fence: what it receives is dropped), and at its first burst takes the
lease over (gateway.fleet.leases `take_over`) and publishes; the old owner stops at its
next heartbeat, which that take-over's NOTIFY brings at once. Nothing is lost between the
two, and what both publish in that moment carries the same message ids (the exchange's),
so JetStream stores it once. The successor takes over only once the owner has heartbeated
since the warm session had data: an owner that died while its successor was connecting
(silent for OWNER_SILENT_TICKS ticks, or its lease expired) published nothing meanwhile,
so the successor takes over and publishes a gap. The old owner logs the hand-over as one,
not as a fence. Only a session whose dialect has exchange ids hands over so
(not `generic`: its ids are the run and ring sequence, which differ between nodes); the
others, a successor that does not stream within WARM_MAX_S (a quiet feed: it takes over
then), and a rule the owner no longer matches are handed over as before: released, then
taken (break-before-make).

Joining a stream another node publishes: a node that starts publishing a session's or a
group's messages while another live node publishes the same message ids (the owner that hands
the session over; the node of another leg of the group) holds back what it publishes first,
JOIN_HOLD_S (`FencedSink.hold`, `joining_holds`). JetStream stores the first copy of a message
id where it comes, so without the hold the joining node's first message, published at once,
came before the messages just before it that the other node, a few ms behind on a loaded
machine, had not published yet: stored in that order, a consumer read them out of order (the
group test's failure: 1378 stored before 1360..1377). Afterwards both nodes publish every
message in order, so the first copy of each comes in order.

Fencing: the sessions publish through `FencedSink`, which drops a burst's messages of a
session for which `LeaseStore.may_publish` says None (not held, or the last renewal too
old: a paused or cut-off node stops before its lease can expire). That check runs on the
sessions' own thread at every burst, so a node woken from SIGSTOP publishes nothing for a
lease it lost even before its tick has run and stopped the session.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from sqlalchemy import select

from gateway.fleet.leases import NOTIFY_CHANNEL, LeaseStore, NodeInfo
from gateway.fleet.placement import matches, place, together
from gateway.groups.feed import GROUP_HUB_BASE, GroupSpec
from gateway.runtime.live import LiveRuntime
from gateway.runtime.protocol import SessionSpec, SessionState, SessionStatus
from gateway.sessions.sink import MessageSink, Published
from gateway.settings import FleetSettings
from gateway.store.db import Database
from gateway.store.models import FeedGroupLegRow, SessionRow, SubscriptionRow
from gateway.store.repository import SubscriptionRepository

log = logging.getLogger("wsgw.fleet")


class Lock(Protocol):
    """threading.Lock or RLock (the control plane's write lock is an RLock)."""

    def acquire(self, blocking: bool = ..., timeout: float = ...) -> bool: ...
    def release(self) -> None: ...


#: The gap a session publishes when this node takes it over from another.
TAKEOVER_GAP_REASON = "fleet: the session moved to node {node} (generation {generation}); " \
    "messages published meanwhile may be missing"  # fmt: skip
#: The gap a successor publishes when the owner handing it the session died meanwhile.
DEAD_OWNER_GAP_REASON = "fleet: node {owner} died while handing the session to node {node} " \
    "(generation {generation}); messages published meanwhile may be missing"  # fmt: skip


#: How long a successor's warm session may wait for its first burst before it takes the lease
#: over anyway (a quiet feed sends nothing to wait for).
WARM_MAX_S = 5.0
#: A successor takes a lease over once the owner has heartbeated since the warm session had
#: data (the owner published all along: no gap); an owner silent for this many ticks is dead,
#: and the successor takes over and publishes a gap.
OWNER_SILENT_TICKS = 1.5
#: How long a node holds back what it publishes first for a session or a group that another
#: live node publishes too (module doc: joining); the other node's lag behind this one must
#: stay under it (about 0.1 s seen on a loaded 2-vCPU machine).
JOIN_HOLD_S = 1.0
#: A hold nothing came for within this time ends (the session did not stream, or it publishes
#: under its group's hub id only).
HOLD_ARMED_S = 10.0
#: Dialects whose message ids are not the exchange's (run + ring sequence): their sessions
#: hand over break-before-make, since two nodes' copies would not be one message on the bus.
NO_EXCHANGE_IDS = frozenset({"generic"})

#: How often the NOTIFY listener looks whether the node stops.
LISTEN_POLL_S = 0.5
#: How long after another node's lease expires (by the database's clock) the tick aimed at
#: it runs: the acquire's own `expires_at < clock_timestamp()` must already hold.
EXPIRY_SLACK_S = 0.02


def joining_holds(
    session_id: int,
    *,
    node: str,
    running: Collection[int],
    owners: Mapping[int, str],
    alive: Collection[str],
    apart: Mapping[int, int],
    owner_alive: bool,
) -> set[int]:
    """What `node` holds back (module doc: joining) as it starts publishing `session_id`:
    the session's own messages when its owner hands it over alive (it publishes until it
    stops); its feed group's (hub id) when that owner, or the node of another leg of the
    group, is alive and publishes the group, unless another leg of the group runs here
    already (the group's stream goes on here then). running: the sessions this node runs;
    owners: session -> the node holding its lease; apart: session -> its group."""
    held = {session_id} if owner_alive else set()
    group = apart.get(session_id)
    if group is None:
        return held
    legs = [sid for sid, gid in apart.items() if gid == group and sid != session_id]
    if any(sid in running for sid in legs):
        return held
    elsewhere = any(
        owners.get(sid) in alive and owners.get(sid) != node for sid in legs if sid in owners
    )
    if owner_alive or elsewhere:
        held.add(GROUP_HUB_BASE + group)
    return held


class _Hold:
    """FencedSink.hold's state for one id: what it holds back (None: nothing came yet)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.stale_at = time.monotonic() + HOLD_ARMED_S  # nothing came by then: it ends
        self.queue: list[Callable[[], object]] | None = None


def same_connection(a: SessionSpec, b: SessionSpec) -> bool:
    """Whether two specs of a session connect alike (a new name changes nothing)."""
    return replace(a, name="") == replace(b, name="")


class FencedSink:
    """The hub behind the fence: a burst's messages of a session this node may not publish
    for (gate returns None) are dropped and counted, never written."""

    def __init__(
        self,
        inner: MessageSink,
        gate: Callable[[int], int | None],
        warm: Callable[[set[int]], set[int]] | None = None,
    ) -> None:
        """warm: told the refused sessions, returns those refused by design (a successor's
        warm sessions, those this node has just handed over): not logged as fenced."""
        self.inner = inner
        self.gate = gate
        self.warm = warm
        self.fenced = 0  # messages dropped (read by tests and metrics)
        self._fenced_sessions: set[int] = set()  # logged once per spell behind the fence
        self._holds: dict[int, _Hold] = {}  # hold(): id -> what it holds back
        self._holds_lock = threading.Lock()

    def hold(self, session_id: int, seconds: float) -> None:
        """Hold back what passes the fence for `session_id` (batches and gaps) for `seconds`
        from the first of it on, then publish it in order (what was refused by then is
        dropped) and pass the rest straight on (module doc: joining). A hold of the id
        already there stays as it is (what it keeps back is published when it ends)."""
        with self._holds_lock:
            self._holds.setdefault(session_id, _Hold(seconds))

    def unhold(self, session_id: int) -> None:
        """A hold that nothing came for yet ends (a take-over that failed)."""
        with self._holds_lock:
            hold = self._holds.get(session_id)
            if hold is not None and hold.queue is None:
                del self._holds[session_id]

    def publish_batch(self, messages: Sequence[Published]) -> object:
        if messages:
            sid = messages[0][0]
            # A session publishes its own batches (UpstreamSession, a group under its hub
            # id; GroupRouter relies on it too): one gate call per batch, not a look at
            # every message; a batch whose first and last differ is sorted message by message.
            if messages[-1][0] == sid and self.gate(sid) is not None:
                if self._fenced_sessions:
                    self._fenced_sessions.discard(sid)
                if self._holds and self._held_back(sid, messages):
                    return None
                return self.inner.publish_batch(messages)
        return self._publish_sorted(messages)

    def _held_back(self, session_id: int, messages: Sequence[Published]) -> bool:
        """Whether the id's messages (passed by the gate) are held back: queued then."""
        batch = list(messages)
        return self._queue(session_id, lambda: self._release_batch(session_id, batch))

    def _queue(self, session_id: int, publish: Callable[[], object]) -> bool:
        with self._holds_lock:
            now = time.monotonic()
            stale = [i for i, h in self._holds.items() if h.queue is None and now > h.stale_at]
            for ended in stale:
                del self._holds[ended]
            hold = self._holds.get(session_id)
            if hold is None:
                return False
            if hold.queue is None:  # the first: the hold's time starts
                hold.queue = []
                timer = threading.Timer(hold.seconds, self._release, (session_id,))
                timer.daemon = True
                timer.start()
            hold.queue.append(publish)
            return True

    def _release(self, session_id: int) -> None:
        """The hold's time is over: what it held, in order. Under the lock and with the
        hold still in place, so that what comes for the id meanwhile waits for the lock
        and goes after it (gone from _holds first, it would pass straight on: before)."""
        with self._holds_lock:
            hold = self._holds.get(session_id)
            for publish in (hold.queue if hold is not None else None) or ():
                try:
                    publish()
                except Exception:  # the hub closed meanwhile: the node is going away
                    log.exception("fleet: releasing what was held for %d failed", session_id)
            self._holds.pop(session_id, None)

    def _release_batch(self, session_id: int, batch: list[Published]) -> object:
        if self.gate(session_id) is None:  # its lease was lost meanwhile: fenced
            self.fenced += len(batch)
            return None
        return self.inner.publish_batch(batch)

    def _publish_sorted(self, messages: Sequence[Published]) -> object:
        """A batch of several sessions, or one refused: each session's messages apart."""
        gate = self.gate
        sessions = {m[0] for m in messages}
        refused = {sid for sid in sessions if gate(sid) is None}
        if self._fenced_sessions:
            self._fenced_sessions &= refused | (self._fenced_sessions - sessions)
        if not refused and not self._holds:
            return self.inner.publish_batch(messages)
        if refused:
            expected = self.warm(refused) if self.warm is not None else set()
            for sid in refused - self._fenced_sessions - expected:
                log.warning("fleet: session %d is fenced (no lease renewed in time): its "
                            "messages are dropped here", sid)  # fmt: skip
            self._fenced_sessions |= refused
        kept = [m for m in messages if m[0] not in refused]
        self.fenced += len(messages) - len(kept)
        if self._holds:
            kept = [m for m in kept if not self._held_back(m[0], [m])]
        return self.inner.publish_batch(kept) if kept else None

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        if self.gate(session_id) is None:
            return None
        if self._holds and self._queue(
            session_id, lambda: self._release_gap(session_id, lost, reason)
        ):
            return None
        return self.inner.publish_gap(session_id, lost, reason)

    def _release_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        if self.gate(session_id) is None:
            return None
        return self.inner.publish_gap(session_id, lost, reason)


class FleetRuntime(LiveRuntime):
    """A LiveRuntime that runs a session only while this node holds its lease (module doc)."""

    # A session this node stopped publishes a gap at its next start here (LiveRuntime), as on
    # a single node: in a fleet too nobody published it meanwhile unless the lease moved, and
    # then the take-over's reason replaces it (mark_resumed). A successor's warm start
    # publishes its gap behind the fence (it holds no lease yet): dropped, as it should be
    # when the owner published until the hand-over.

    def __init__(
        self,
        sink: MessageSink,
        fleet: FleetSettings,
        *,
        api_url: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.fleet_settings = fleet
        self.api_url = api_url
        self.fleet: FleetNode | None = None
        self.fenced_sink = FencedSink(sink, self.may_publish_any, self._expected_refusals)
        self._here: set[int] = set()  # sessions started here (as holder of their lease)
        self._started_with: dict[int, SessionSpec] = {}  # the spec each was started with
        self._here_lock = threading.Lock()
        super().__init__(self.fenced_sink, **kwargs)

    def may_publish(self, session_id: int) -> int | None:
        """The generation of this node's lease on the session, None: it may not publish."""
        node = self.fleet
        return None if node is None else node.may_publish(session_id)

    def may_publish_any(self, session_id: int) -> int | None:
        """The fence's gate: a session's generation; for a feed group's hub id, 0 while this
        node may publish for one of the group's legs (module doc), else None."""
        if session_id < GROUP_HUB_BASE:
            return self.may_publish(session_id)
        group = self._groups.groups.get(session_id - GROUP_HUB_BASE)
        if group is None:
            return None
        held = any(self.may_publish(leg) is not None for leg in group.spec.legs)
        return 0 if held else None

    def _expected_refusals(self, sessions: set[int]) -> set[int]:
        node = self.fleet
        return set() if node is None else node.expected_refusals(sessions)

    def group_specs(self) -> dict[int, GroupSpec]:
        """The feed groups this runtime runs, as they were set."""
        return {gid: group.spec for gid, group in self._groups.groups.items()}

    # ---- joining, called by gateway.control.restore ----------------------------------
    def join_fleet(self, db: Database, write_lock: Lock | None = None) -> set[int]:
        """Register this node and acquire what the placement gives it; returns the sessions
        it holds (restore starts only those). write_lock: the control plane's, under which
        an API call changes a subscription and this runtime's topics together."""
        if self.fleet is None:
            self.fleet = FleetNode(
                self, db, self.fleet_settings, api_url=self.api_url, write_lock=write_lock
            )
        return self.fleet.join()

    def run_fleet(self) -> None:
        """Start the node's tick (after restore started what this node holds)."""
        if self.fleet is not None:
            self.fleet.run()

    # ---- the gate ---------------------------------------------------------------------
    def start_session(self, session: SessionSpec) -> SessionStatus:
        node = self.fleet
        if node is None or node.may_publish(session.id) is None:
            if node is not None:
                node.wake()  # place it now rather than at the next tick
            return SessionStatus(
                session.id,
                SessionState.CONFIGURED,
                "fleet: the node holding its lease runs it (GET /v1/fleet/leases)",
                time.time(),
            )
        return self.run_here(session)

    def run_here(self, session: SessionSpec) -> SessionStatus:
        """Start the session on this node (it holds the lease)."""
        status = super().start_session(session)
        with self._here_lock:
            self._here.add(session.id)
            self._started_with[session.id] = session
        return status

    def started_with(self, session_id: int) -> SessionSpec | None:
        """The spec the session runs with here (None: not started here)."""
        with self._here_lock:
            return self._started_with.get(session_id)

    def stop_session(self, session_id: int) -> SessionStatus:
        with self._here_lock:
            self._here.discard(session_id)
            self._started_with.pop(session_id, None)
        return super().stop_session(session_id)

    def remove_session(self, session_id: int) -> None:
        with self._here_lock:
            self._here.discard(session_id)
            self._started_with.pop(session_id, None)
        super().remove_session(session_id)

    def set_topics(self, session_id: int, topics: Sequence[str]) -> tuple[list[str], list[str]]:
        """Hold exactly `topics` for the session (the store's, which another node's API may
        have changed); a running session subscribes and unsubscribes the difference.
        Returns (added, removed)."""
        held = self._held(session_id)
        added = [t for t in topics if t not in held]
        wanted = set(topics)
        removed = [t for t in held if t not in wanted]
        if removed:
            self.unsubscribe(session_id, removed)
        if added:
            self.subscribe(session_id, added)
        if added or removed:
            log.info("fleet: session %d topics from the store: +%s -%s",
                     session_id, added, removed)  # fmt: skip
        return added, removed

    def running_here(self) -> set[int]:
        with self._here_lock:
            return set(self._here)

    def close(self) -> None:
        """Leave the fleet first (the fence shuts at once, the leases are free for the other
        nodes), then stop the sessions."""
        node = self.fleet
        if node is not None:
            node.stop()
        super().close()


class FleetNode:
    """The tick of one node (module doc); the lease store is used under one lock."""

    def __init__(
        self,
        runtime: FleetRuntime,
        db: Database,
        settings: FleetSettings,
        *,
        api_url: str | None = None,
        write_lock: Lock | None = None,
    ) -> None:
        self.runtime = runtime
        self.write_lock = write_lock
        self.db = db
        self.settings = settings
        self.name = settings.node
        self.labels = dict(settings.labels)
        self.api_url = api_url
        self.leases = LeaseStore(db.engine, settings.node, lease_s=settings.lease_s)
        self.draining = False
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._closed = False  # the fence is shut for good (leaving)
        #: Monotonic time just after another node's lease expires, when that comes before
        #: the next tick (an owner that stopped renewing): the tick runs then, so a dead
        #: owner's sessions move one lease time after its last renewal, not up to a tick later.
        self._expiry_due: float | None = None
        self._thread: threading.Thread | None = None
        self._listener: threading.Thread | None = None
        self._last_hand_over = 0.0  # monotonic time of the last drain or rebalance release
        self._together: dict[int, list[int]] = {}  # groups with legs sharing a node
        #: A successor's warm sessions (module doc) -> (monotonic time started, the owner
        #: handing it); those that streamed (a refused burst) -> time of their first burst.
        self._warm: dict[int, tuple[float, str]] = {}
        self._streamed: dict[int, float] = {}
        #: session -> successor, for what this node hands over (as of its last tick), and
        #: what a successor has taken over from it but still runs here until it stops.
        self._handing: dict[int, str] = {}
        self._handed: dict[int, str] = {}
        #: As of the tick: session -> the node holding its lease, the nodes alive, and
        #: session -> its feed group (who else publishes what this node starts: joining).
        self._view: tuple[Mapping[int, str], Collection[str], Mapping[int, int]] = ({}, (), {})

    def may_publish(self, session_id: int) -> int | None:
        if self._closed:
            return None
        return self.leases.may_publish(session_id)

    # ---- life ----------------------------------------------------------------------
    def join(self) -> set[int]:
        with self._lock:
            self.leases.register(self.labels, self.api_url)
            log.info("fleet: node %s joined (labels %s, lease %.1f s)",
                     self.name, self.labels, self.settings.lease_s)  # fmt: skip
            self._tick_locked(start=False)
            return set(self.leases.held)

    def run(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="wsgw-fleet", daemon=True)
            self._thread.start()
        if self._listener is None:
            self._listener = threading.Thread(
                target=self._listen, name="wsgw-fleet-listen", daemon=True
            )
            self._listener.start()

    def _listen(self) -> None:
        """Tick at once when another node says the fleet changed (PostgreSQL NOTIFY): a
        session it released (drain, rebalance) is taken in a moment, not at the next tick.
        Only a shortcut: without it (the connection lost) the ticks do the same, later."""
        import psycopg

        while not self._stopped.is_set():
            try:
                with psycopg.connect(self.leases.listen_url(), autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    while not self._stopped.is_set():
                        for note in conn.notifies(timeout=LISTEN_POLL_S):
                            if note.payload != self.name:
                                self.wake()
            except Exception:
                if not self._stopped.is_set():
                    log.warning("fleet: node %s lost its LISTEN connection; retrying",
                                self.name, exc_info=True)  # fmt: skip
                self._stopped.wait(self.settings.tick_s)

    def wake(self) -> None:
        self._wake.set()

    def expected_refusals(self, sessions: set[int]) -> set[int]:
        """Called by the fence with the sessions it refused a burst of (the sessions' own
        thread); returns those refused by design. A warm one streams, so the tick looks
        whether to take its lease over now; one handed over (or being handed over) stops at
        this tick."""
        warm = sessions & self._warm.keys()
        new = warm - self._streamed.keys()
        if new:
            now = time.monotonic()
            for sid in new:
                self._streamed.setdefault(sid, now)
            self.wake()
        # One being handed over is refused once its successor took the lease, which may be
        # before this node's tick notes it as handed (_note_handed): expected all the same.
        return warm | (sessions & (self._handed.keys() | self._handing.keys()))

    def stop(self) -> None:
        """Stop ticking and leave the fleet: every lease released, the node's row gone."""
        self._closed = True
        self._stopped.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=self.settings.lease_s)
        if self._listener is not None:
            self._listener.join(timeout=LISTEN_POLL_S + 1)
        with self._lock:
            try:
                self.leases.leave()
                log.info("fleet: node %s left the fleet", self.name)
            except Exception:  # the database is gone: the leases expire by themselves
                log.exception("fleet: node %s could not leave cleanly", self.name)

    def drain(self, draining: bool = True) -> set[int]:
        """Take no new sessions and give up the held ones, one per tick (draining False:
        take sessions again); returns what it still holds."""
        with self._lock:
            self.leases.set_draining(draining)
            self.draining = draining
            held = set(self.leases.held)
        self.wake()
        return held

    def _loop(self) -> None:
        tick = self.settings.tick_s
        while not self._stopped.is_set():
            started = time.monotonic()
            try:
                with self._lock:
                    if self._stopped.is_set():
                        return
                    self._tick_locked(start=True)
            except Exception:  # the database is away: the fence stops publishing on time
                log.exception("fleet: tick of node %s failed", self.name)
            due = started + tick
            if self._expiry_due is not None:
                due = min(due, self._expiry_due)
            self._wake.wait(max(0.0, due - time.monotonic()))
            self._wake.clear()

    # ---- the tick ------------------------------------------------------------------
    def tick(self) -> None:
        with self._lock:
            self._tick_locked(start=True)

    def _tick_locked(self, *, start: bool) -> None:
        store = self.leases
        held = store.heartbeat()
        wanted = self._wanted()
        nodes = store.nodes()
        # node -> monotonic time of its last heartbeat (the database measures its age)
        heard = time.monotonic()
        heartbeats = {n.name: heard - n.heartbeat_age_s for n in nodes}
        live = self._live_nodes(nodes)
        owners = {lease.session_id: lease.node for lease in store.leases()}
        self._note_handed(held, owners)
        rules = {sid: rule for sid, (_, rule) in wanted.items()}
        apart = self.legs()
        self._view = (owners, {n.name for n in nodes if n.alive}, apart)
        placement = place(rules, live, owners, apart)
        self._warn_together(placement, apart)
        until = store.next_expiry_s()
        self._expiry_due = None
        if until is not None and until < self.settings.tick_s:
            self._expiry_due = time.monotonic() + until + EXPIRY_SLACK_S
        for sid, node in placement.items():
            if node == self.name and sid not in held:
                lease = store.acquire(sid)
                if lease is not None:
                    held[sid] = lease.generation
                    log.info("fleet: node %s took session %d (generation %d)",
                             self.name, sid, lease.generation)  # fmt: skip
                    if sid in self._warm:  # its owner died while handing it here
                        self._dead_owner_gap(sid, self._warm[sid][1], lease.generation)
        self._let_go(held, wanted, placement)
        if start:
            self._sync_groups()
            self._succeed(held, wanted, heartbeats)
            self._sync(held, {sid: spec for sid, (spec, _) in wanted.items()})
            self._sync_topics()

    def _let_go(
        self,
        held: dict[int, int],
        wanted: Mapping[int, tuple[SessionSpec, dict[str, str]]],
        placement: Mapping[int, str],
    ) -> None:
        """Give up what is no longer wanted here: released, or handed over (module doc)."""
        store = self.leases
        # One gentle hand-over per tick's time, also when other nodes' notifications wake
        # this node more often: the node taking them connects them one by one.
        handed_over = time.monotonic() - self._last_hand_over < self.settings.tick_s * 0.5
        handing = store.handing_over()
        self._handing = handing
        for sid in sorted(held):
            if sid not in wanted:
                store.release(sid)
                del held[sid]
                continue
            target = placement.get(sid)
            if target == self.name:
                if sid in handing:  # no longer moving (undrained, the load evened out)
                    store.hand_over(sid, None)
                continue
            # Drained or rebalanced away while this node could still run it: one per tick,
            # so the others take them one by one. A rule this node no longer matches (or
            # that no node matches): at once.
            gentle = self.draining or (target is not None and matches(wanted[sid][1], self.labels))
            if gentle and target is not None and handing.get(sid) == target:
                continue  # under way: the successor takes it over once it streams
            if gentle and handed_over:
                continue
            if gentle and target is not None and wanted[sid][0].dialect not in NO_EXCHANGE_IDS:
                store.hand_over(sid, target)
                handing[sid] = target
                handed_over = True
                self._last_hand_over = time.monotonic()
                log.info("fleet: node %s hands session %d over to %s",
                         self.name, sid, target)  # fmt: skip
                continue
            store.release(sid)
            del held[sid]
            if gentle:
                handed_over = True
                self._last_hand_over = time.monotonic()
            log.info("fleet: node %s released session %d", self.name, sid)

    def _note_handed(self, held: Mapping[int, int], owners: Mapping[int, str]) -> None:
        """The sessions this node was handing over that their successor now owns: handed
        over (they stop at this tick), not fenced."""
        for sid, successor in self._handing.items():
            if sid not in held and owners.get(sid) == successor:
                self._handed[sid] = successor
                log.info("fleet: node %s handed session %d over to %s: it stops here",
                         self.name, sid, successor)  # fmt: skip
        for sid in self._handed.keys() - self.runtime.running_here():
            del self._handed[sid]

    def _dead_owner_gap(self, session_id: int, owner: str, generation: int) -> None:
        """The owner died while this node connected its session warm (what this node
        received meanwhile was dropped): tell the session's consumers."""
        log.warning("fleet: node %s took session %d over from %s, which died meanwhile: "
                    "publishing a gap", self.name, session_id, owner)  # fmt: skip
        reason = DEAD_OWNER_GAP_REASON.format(owner=owner, node=self.name, generation=generation)
        self.runtime.fenced_sink.publish_gap(session_id, None, reason)

    def _owner_dead(self, since: float, owner: str, heartbeats: Mapping[str, float]) -> bool | None:
        """Whether the owner handing a session here is dead: False once it heartbeated
        after `since` (monotonic: the warm session had data then, so the owner published
        all along), True once silent OWNER_SILENT_TICKS ticks, None: not known yet."""
        heartbeat = heartbeats.get(owner)
        if heartbeat is not None and heartbeat > since:
            return False
        silent = self.settings.tick_s * OWNER_SILENT_TICKS
        if heartbeat is None or time.monotonic() - heartbeat > silent:
            return True
        return None

    def _succeed(
        self,
        held: dict[int, int],
        wanted: Mapping[int, tuple[SessionSpec, dict[str, str]]],
        heartbeats: Mapping[str, float],
    ) -> None:
        """The successor's side of a hand-over (module doc): connect warm what an owner hands
        to this node, take over what streamed (or waited WARM_MAX_S) once the owner ran
        since (or died: then with a gap), and stop a warm session whose owner no longer
        hands it here. heartbeats: node -> monotonic time of its last heartbeat."""
        store, runtime = self.leases, self.runtime
        successions = store.successions()
        offered = {sid for sid in successions if sid in wanted and sid not in held}
        now = time.monotonic()
        for sid in sorted(self._warm.keys() - offered):
            del self._warm[sid]
            self._streamed.pop(sid, None)
            if sid not in held:
                log.info("fleet: node %s no longer takes session %d over", self.name, sid)
                runtime.stop_session(sid)
        for sid in sorted(offered):
            warm = self._warm.get(sid)
            if warm is None:
                if self.draining:
                    continue
                try:
                    runtime.set_topics(sid, self._topics(sid))
                    runtime.run_here(wanted[sid][0])
                except Exception:
                    log.exception("fleet: node %s could not connect session %d", self.name, sid)
                    continue
                self._warm[sid] = (now, successions[sid])
                log.info("fleet: node %s connects session %d to take it over", self.name, sid)
                continue
            started, owner = warm
            streamed = self._streamed.get(sid)
            if streamed is None and now - started < WARM_MAX_S:
                continue
            dead = self._owner_dead(streamed or started, owner, heartbeats)
            if dead is None:
                continue
            # Armed before the lease: its next batch passes the fence at once. An owner
            # dead meanwhile publishes nothing more, but another leg's node may (its group).
            holding = self._hold_joining(sid, owner_alive=not dead)
            lease = store.take_over(sid)
            del self._warm[sid]
            self._streamed.pop(sid, None)
            if lease is None:
                for held_back in holding:
                    runtime.fenced_sink.unhold(held_back)
                runtime.stop_session(sid)
                continue
            held[sid] = lease.generation
            log.info("fleet: node %s took session %d over after %.3f s warm (generation %d)",
                     self.name, sid, now - started, lease.generation)  # fmt: skip
            if dead:
                self._dead_owner_gap(sid, owner, lease.generation)

    def _hold_joining(self, session_id: int, *, owner_alive: bool) -> set[int]:
        """This node starts publishing the session: hold back what it publishes first for
        the session and its group where another live node publishes them too (module doc:
        joining). Returns the ids held back."""
        owners, alive, apart = self._view
        ids = joining_holds(
            session_id,
            node=self.name,
            running=self.runtime.running_here(),
            owners=owners,
            alive=alive,
            apart=apart,
            owner_alive=owner_alive,
        )
        for held_back in sorted(ids):
            self.runtime.fenced_sink.hold(held_back, JOIN_HOLD_S)
        if ids:
            log.info("fleet: node %s holds back the first %.1f s of %s: another node "
                     "publishes it too", self.name, JOIN_HOLD_S, sorted(ids))  # fmt: skip
        return ids

    def _live_nodes(self, nodes: list[NodeInfo]) -> dict[str, Mapping[str, str]]:
        live: dict[str, Mapping[str, str]] = {
            n.name: n.labels for n in nodes if n.alive and not n.draining
        }
        if self.draining:
            live.pop(self.name, None)
        else:  # it has just heartbeated: alive, whatever the snapshot's timing says
            live[self.name] = self.labels
        return live

    def _wanted(self) -> dict[int, tuple[SessionSpec, dict[str, str]]]:
        """Sessions wanted running: their spec and placement rule, from the shared store."""
        from gateway.control.sessions import session_spec  # control imports the runtime

        with self.db.session() as s:
            rows = s.scalars(select(SessionRow).where(SessionRow.desired_state == "running"))
            return {row.id: (session_spec(row), dict(row.placement or {})) for row in rows}

    def legs(self) -> dict[int, int]:
        """session -> the feed group it is a leg of (the placement keeps legs apart)."""
        with self.db.session() as s:
            rows = s.execute(select(FeedGroupLegRow.session_id, FeedGroupLegRow.group_id))
            return {sid: gid for sid, gid in rows}

    def _warn_together(self, placement: Mapping[int, str], apart: Mapping[int, int]) -> None:
        """Say once (per change) which groups have legs sharing a node: too few eligible
        nodes, so losing that node loses those legs together."""
        shared = together(placement, apart)
        if shared != self._together:
            for group, legs in sorted(shared.items()):
                log.warning("fleet: group %d has legs %s on one node (too few eligible nodes "
                            "to put them apart)", group, legs)  # fmt: skip
            self._together = shared

    def _sync_groups(self) -> None:
        """Run every stored feed group as stored; remove the ones gone from the store."""
        from gateway.control.groups import GroupRepository, group_spec

        runtime = self.runtime
        with self.db.session() as s:
            stored: dict[int, GroupSpec] = {}
            for row in GroupRepository(s).all():
                first = s.get(SessionRow, row.legs[0].session_id) if row.legs else None
                if first is not None and len(row.legs) > 1:
                    stored[row.id] = group_spec(row, first.dialect)
        running = runtime.group_specs()
        for gid in sorted(running.keys() - stored.keys()):
            runtime.remove_group(gid)
        for gid, spec in sorted(stored.items()):
            if running.get(gid) != spec:
                log.info("fleet: node %s runs group %d with legs %s", self.name, gid, spec.legs)
                runtime.set_group(spec)

    def _topics(self, session_id: int) -> list[str]:
        """The session's subscribed topics, from the shared store: a subscription made
        through another node's API reached only that node's runtime."""
        with self.db.session() as s:
            return list(SubscriptionRepository(s).topic_counts(session_id))

    def _stored_topics(self, sessions: Collection[int]) -> dict[int, list[str]]:
        """session -> its subscribed topics (first subscription first), in one query."""
        topics: dict[int, dict[str, None]] = {sid: {} for sid in sessions}
        if not sessions:
            return {}
        query = (
            select(SubscriptionRow.session_id, SubscriptionRow.topics)
            .where(SubscriptionRow.session_id.in_(sorted(sessions)))
            .order_by(SubscriptionRow.id)
        )
        with self.db.session() as s:
            for sid, row_topics in s.execute(query):
                topics[sid].update(dict.fromkeys(row_topics))
        return {sid: list(held) for sid, held in topics.items()}

    def _sync_topics(self) -> None:
        """The sessions running here subscribe exactly their stored topics: a subscription
        created, changed or deleted through any node's API reaches the owner on its tick."""
        lock = self.write_lock
        # This node's own API changes the store and the runtime under this lock: the store
        # is read and applied when no such change is half done (busy: the next tick).
        if lock is not None and not lock.acquire(timeout=self.settings.tick_s / 2):
            return
        try:
            runtime = self.runtime
            for sid, stored in self._stored_topics(runtime.running_here()).items():
                try:
                    runtime.set_topics(sid, stored)
                except Exception:
                    log.exception("fleet: node %s could not update the topics of session %d",
                                  self.name, sid)  # fmt: skip
        finally:
            if lock is not None:
                lock.release()

    def _sync(self, held: Mapping[int, int], specs: Mapping[int, SessionSpec]) -> None:
        """The runtime runs exactly what this node holds and is wanted; a session it takes
        gets its topics from the store first, so it subscribes them as it connects."""
        runtime = self.runtime
        here = runtime.running_here()
        for sid in sorted(here - held.keys() - self._warm.keys()):
            if sid not in self._handed:
                log.warning("fleet: node %s no longer holds session %d: standing down",
                            self.name, sid)  # fmt: skip
            runtime.stop_session(sid)
        restarted: set[int] = set()
        for sid in sorted(held.keys() & here):
            spec, before = specs.get(sid), runtime.started_with(sid)
            if spec is None or before is None or same_connection(spec, before):
                continue
            # Stopped, changed and started again through another node's API between two
            # ticks: the session still runs with the old configuration here.
            log.info("fleet: node %s restarts session %d with its stored configuration",
                     self.name, sid)  # fmt: skip
            runtime.stop_session(sid)
            here.discard(sid)
            restarted.add(sid)  # its stop's own gap ("stopped") tells the hole, not a take-over's
        for sid in sorted(held.keys() - here):
            spec = specs.get(sid)
            if spec is None:
                continue
            generation = held[sid]
            if generation > 1 and sid not in restarted:
                reason = TAKEOVER_GAP_REASON.format(node=self.name, generation=generation)
                runtime.mark_resumed(sid, reason)
            try:
                self._hold_joining(sid, owner_alive=False)
                runtime.set_topics(sid, self._topics(sid))
                runtime.run_here(spec)
                log.info("fleet: node %s runs session %d (generation %d)",
                         self.name, sid, generation)  # fmt: skip
            except Exception:
                log.exception("fleet: node %s could not start session %d", self.name, sid)
