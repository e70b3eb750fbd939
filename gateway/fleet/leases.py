"""Session ownership in a fleet: node heartbeats and session leases in PostgreSQL.

No coordination protocol of our own: PostgreSQL's row locks decide. A lease is a row of
`session_leases` (session, node, generation, expires_at); every time is the database's
(`clock_timestamp()`), so the nodes' clocks never decide who owns what.

- Acquire: one INSERT ... ON CONFLICT DO UPDATE that takes the row only if it is free,
  expired, or already this node's; the generation grows by one when the owner changes.
- Renew: `heartbeat` renews the node's row and every lease it holds in one transaction, and
  learns which it still holds (a lease another node took is not renewed: that node's row).
- Fencing: a node may publish for a session only until its fence deadline (`may_publish`):
  its monotonic time when it sent the last successful renewal of that lease plus
  (1 - FENCE_MARGIN) of the lease time.
  The renewal set expires_at after that instant, so the node stops before its lease can
  expire and another node take it, even if it is paused (SIGSTOP) or cut off in between:
  on waking it sees the deadline passed and stands down until a renewal says it still owns.
  What it publishes carries the generation, so consumers and the bus can drop a stale
  owner's messages as well.
- Release: the lease expires at once, so the next node's acquire takes it.
- Hand-over (drain, rebalance: make-before-break): the owner names a successor
  (`hand_over`) and keeps publishing; the successor connects, and once its session streams
  it takes the lease (`take_over`: the generation grows by one, as at any change of owner).
  The old owner learns it at its next heartbeat (at once: the NOTIFY wakes it) and stops.
  Between the two, both publish for a moment, each with its own generation: the copies
  carry the same message ids (the exchange's), so the bus stores one (gateway.fleet.node
  says which sessions hand over so). This is the one overlap of two generations the fleet
  allows, and only by the owner's consent; a lease lost by expiry (a paused or cut-off
  owner) is still fenced as above, so that owner publishes nothing after its deadline.

The fleet needs PostgreSQL: on SQLite (one machine) `LeaseStore` refuses to start.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, case, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert

from gateway.store.models import LeaseRow, NodeRow

#: Default lease time (s): a dead owner's sessions move within it (plus a tick).
DEFAULT_LEASE_S = 3.0
#: The part of the lease time a node gives up before its lease could expire (clock rates,
#: the renewal's own round trip).
FENCE_MARGIN = 0.2


#: The PostgreSQL channel on which a node says the fleet changed (a lease released, a node
#: joined, drains or leaves), so the others tick at once rather than at their next tick.
NOTIFY_CHANNEL = "wsgw_fleet"


class FleetError(RuntimeError):
    """The fleet cannot run as configured (a database that is not PostgreSQL, a bad name)."""


@dataclass(frozen=True)
class Lease:
    session_id: int
    node: str
    generation: int
    expires_at: datetime


@dataclass(frozen=True)
class NodeInfo:
    name: str
    labels: dict[str, str]
    api_url: str | None
    started_at: datetime
    heartbeat_at: datetime
    draining: bool
    alive: bool  # heartbeat within the lease time, by the database's clock
    heartbeat_age_s: float  # since the last heartbeat, by the database's clock


class LeaseStore:
    """One node's view of the fleet tables (module doc). Not thread-safe: one caller."""

    def __init__(
        self,
        engine: Engine,
        node: str,
        *,
        lease_s: float = DEFAULT_LEASE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if engine.dialect.name != "postgresql":
            raise FleetError(
                f"a fleet needs PostgreSQL (db.url), not {engine.dialect.name}: SQLite "
                "serves one gateway; run the fleet's nodes on one PostgreSQL database"
            )
        if not node or len(node) > 63:
            raise FleetError(f"a node name is 1-63 characters, not {node!r}")
        if not 0.1 <= lease_s <= 3600:
            raise FleetError(f"the lease time is 0.1-3600 s, not {lease_s}")
        self.engine = engine
        self.node = node
        self.lease_s = lease_s
        self.clock = clock
        self._ttl = timedelta(seconds=lease_s)
        # session -> (generation, fence deadline: the monotonic time until which this node
        # may publish for it), as of the last heartbeat or acquire.
        self._held: dict[int, tuple[int, float]] = {}

    # ---- this node ----------------------------------------------------------------------
    def register(self, labels: Mapping[str, str], api_url: str | None = None) -> None:
        """Join the fleet (again): the node's row with its labels, alive from now on."""
        now = func.clock_timestamp()
        row = {
            "name": self.node,
            "labels": dict(labels),
            "api_url": api_url,
            "started_at": now,
            "heartbeat_at": now,
            "draining": False,
        }
        stmt = insert(NodeRow).values(row)
        stmt = stmt.on_conflict_do_update(
            index_elements=[NodeRow.name],
            set_={k: stmt.excluded[k] for k in ("labels", "api_url", "started_at",
                                                "heartbeat_at", "draining")},
        )  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(stmt)
            self._notify(conn)

    def heartbeat(self) -> dict[int, int]:
        """Renew the node's heartbeat and every lease it holds; returns what it holds now
        (session -> generation) and moves the fence deadline on."""
        sent = self.clock()
        with self.engine.begin() as conn:
            conn.execute(
                update(NodeRow)
                .where(NodeRow.name == self.node)
                .values(heartbeat_at=func.clock_timestamp())
            )
            rows = conn.execute(
                update(LeaseRow)
                .where(LeaseRow.node == self.node)
                .values(expires_at=func.clock_timestamp() + self._ttl)
                .returning(LeaseRow.session_id, LeaseRow.generation)
            ).all()
        deadline = self._fence(sent)
        self._held = {sid: (gen, deadline) for sid, gen in rows}
        return self.held

    @property
    def held(self) -> dict[int, int]:
        """session -> generation, as of the last heartbeat or acquire."""
        return {sid: gen for sid, (gen, _) in self._held.items()}

    def _fence(self, sent: float) -> float:
        return sent + self.lease_s * (1 - FENCE_MARGIN)

    def may_publish(self, session_id: int) -> int | None:
        """The generation to publish `session_id`'s messages with, or None: this node does
        not hold it, or its last renewal is too old to be sure it still does."""
        held = self._held.get(session_id)
        if held is None or self.clock() >= held[1]:
            return None
        return held[0]

    def acquire(self, session_id: int) -> Lease | None:
        """Take the session's lease if it is free, expired or already ours; None if another
        node holds it."""
        sent = self.clock()
        expires = func.clock_timestamp() + self._ttl
        proposed = insert(LeaseRow).values(
            session_id=session_id, node=self.node, generation=1, expires_at=expires
        )
        current = LeaseRow.__table__.c
        taken = proposed.excluded
        # The owner changes: one generation more; the same owner: the same generation.
        generation = case((current.node == taken.node, current.generation),
                          else_=current.generation + 1)  # fmt: skip
        stmt = proposed.on_conflict_do_update(
            index_elements=[LeaseRow.session_id],
            set_={
                "node": taken.node,
                "generation": generation,
                "expires_at": taken.expires_at,
                "successor": None,
            },
            where=(current.node == self.node) | (current.expires_at < func.clock_timestamp()),
        ).returning(LeaseRow.generation, LeaseRow.expires_at)
        with self.engine.begin() as conn:
            row = conn.execute(stmt).first()
        if row is None:
            self._held.pop(session_id, None)
            return None
        self._held[session_id] = (row.generation, self._fence(sent))
        return Lease(session_id, self.node, row.generation, row.expires_at)

    def hand_over(self, session_id: int, successor: str | None) -> bool:
        """Name the node this node hands the session to (None: no hand-over); it keeps the
        lease until that node takes it over. False if this node does not hold it."""
        with self.engine.begin() as conn:
            rows = conn.execute(
                update(LeaseRow)
                .where(LeaseRow.session_id == session_id, LeaseRow.node == self.node)
                .values(successor=successor)
                .returning(LeaseRow.session_id)
            ).all()
            if rows:
                self._notify(conn)
        return bool(rows)

    def successions(self) -> dict[int, str]:
        """session -> its owner, for the live leases whose owner hands them to this node."""
        query = select(LeaseRow.session_id, LeaseRow.node).where(
            LeaseRow.successor == self.node, LeaseRow.expires_at > func.clock_timestamp()
        )
        with self.engine.connect() as conn:
            return {sid: node for sid, node in conn.execute(query).all()}

    def handing_over(self) -> dict[int, str]:
        """session -> successor, for the leases this node is handing over."""
        query = select(LeaseRow.session_id, LeaseRow.successor).where(
            LeaseRow.node == self.node, LeaseRow.successor.is_not(None)
        )
        with self.engine.connect() as conn:
            return {sid: str(node) for sid, node in conn.execute(query).all()}

    def take_over(self, session_id: int) -> Lease | None:
        """Take a lease whose owner hands it to this node (hand_over), live or not: one
        generation more. None if the owner no longer hands it here."""
        sent = self.clock()
        stmt = (
            update(LeaseRow)
            .where(LeaseRow.session_id == session_id, LeaseRow.successor == self.node)
            .values(
                node=self.node,
                generation=LeaseRow.generation + 1,
                successor=None,
                expires_at=func.clock_timestamp() + self._ttl,
            )
            .returning(LeaseRow.generation, LeaseRow.expires_at)
        )
        with self.engine.begin() as conn:
            row = conn.execute(stmt).first()
            if row is not None:
                self._notify(conn)
        if row is None:
            return None
        self._held[session_id] = (row.generation, self._fence(sent))
        return Lease(session_id, self.node, row.generation, row.expires_at)

    def release(self, session_id: int) -> bool:
        """Give the session up at once (drain, stop): the next acquire anywhere takes it.
        False if this node did not hold it."""
        with self.engine.begin() as conn:
            rows = conn.execute(
                update(LeaseRow)
                .where(LeaseRow.session_id == session_id, LeaseRow.node == self.node)
                .values(expires_at=func.clock_timestamp() - timedelta(microseconds=1))
                .returning(LeaseRow.session_id)
            ).all()
            if rows:
                self._notify(conn)
        self._held.pop(session_id, None)
        return bool(rows)

    def set_draining(self, draining: bool) -> None:
        """A draining node takes no new sessions (placement skips it)."""
        with self.engine.begin() as conn:
            conn.execute(update(NodeRow).where(NodeRow.name == self.node).values(draining=draining))
            self._notify(conn)

    def leave(self) -> None:
        """Leave the fleet: every lease released, the node's row removed."""
        with self.engine.begin() as conn:
            conn.execute(delete(LeaseRow).where(LeaseRow.node == self.node))
            conn.execute(delete(NodeRow).where(NodeRow.name == self.node))
            self._notify(conn)
        self._held = {}

    def _notify(self, conn: Connection) -> None:
        """Tell the other nodes, when this transaction commits (NOTIFY_CHANNEL)."""
        conn.execute(select(func.pg_notify(NOTIFY_CHANNEL, self.node)))

    def listen_url(self) -> str:
        """The database's URL for a plain psycopg connection (LISTEN NOTIFY_CHANNEL)."""
        return self.engine.url.set(drivername="postgresql").render_as_string(hide_password=False)

    # ---- the whole fleet ----------------------------------------------------------------
    def next_expiry_s(self) -> float | None:
        """Seconds (by the database's clock) until the first live lease of another node
        expires; None if there is none. A healthy owner renews every tick, so this is near
        only for an owner that stopped: the tick aims at the instant its leases free up."""
        remaining = func.extract("epoch", func.min(LeaseRow.expires_at) - func.clock_timestamp())
        query = select(remaining).where(
            LeaseRow.node != self.node, LeaseRow.expires_at > func.clock_timestamp()
        )
        with self.engine.connect() as conn:
            value = conn.execute(query).scalar()
        return None if value is None else max(0.0, float(value))

    def nodes(self) -> list[NodeInfo]:
        alive = NodeRow.heartbeat_at > func.clock_timestamp() - self._ttl
        age = func.extract("epoch", func.clock_timestamp() - NodeRow.heartbeat_at)
        columns = (NodeRow.name, NodeRow.labels, NodeRow.api_url, NodeRow.started_at,
                   NodeRow.heartbeat_at, NodeRow.draining, alive, age)  # fmt: skip
        with self.engine.connect() as conn:
            rows = conn.execute(select(*columns).order_by(NodeRow.name)).all()
        return [
            NodeInfo(
                name,
                dict(labels),
                url,
                started,
                beat,
                bool(draining),
                bool(is_alive),
                max(0.0, float(age_s)),
            )
            for name, labels, url, started, beat, draining, is_alive, age_s in rows
        ]

    def leases(self, *, live_only: bool = True) -> list[Lease]:
        """Every lease (live_only: those not expired, by the database's clock)."""
        columns = (LeaseRow.session_id, LeaseRow.node, LeaseRow.generation, LeaseRow.expires_at)
        query = select(*columns).order_by(LeaseRow.session_id)
        if live_only:
            query = query.where(LeaseRow.expires_at > func.clock_timestamp())
        with self.engine.connect() as conn:
            return [Lease(*row) for row in conn.execute(query).all()]
