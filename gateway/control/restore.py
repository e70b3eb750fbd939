"""The restart guarantee: what was open before the gateway stopped is handed back to the
runtime when it starts, read from the store."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from gateway.control.ports import port_spec
from gateway.control.sessions import session_spec
from gateway.control.transactions import Transactions
from gateway.runtime import Runtime, RuntimeRefusedError
from gateway.store.repository import (
    EventRepository,
    PortRepository,
    SessionRepository,
    SubscriptionRepository,
)

log = logging.getLogger("wsgw.control")

#: The gap a session restored at start publishes when it reconnects upstream.
RESTART_GAP_REASON = "restart: the gateway was down; messages published meanwhile were missed"


@dataclass
class RestoreReport:
    """What a start handed back to the runtime, and what it refused."""

    ports: list[int] = field(default_factory=list)
    sessions: list[int] = field(default_factory=list)
    topics: dict[int, list[str]] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    #: Sessions wanted running that another node of the fleet leases (not started here).
    elsewhere: list[int] = field(default_factory=list)


def restore(tx: Transactions, runtime: Runtime) -> RestoreReport:
    """Enabled ports up; topics of every session re-registered; running sessions started.

    Topics go first so a session subscribes all of them as soon as it connects. A
    refusal is logged and written to the session's events; the rest still restores.
    A node of a fleet (gateway.fleet.node.FleetRuntime) first joins the fleet and starts
    only the sessions it then holds; its tick runs from the end of the restore on.
    """
    report = RestoreReport()
    join_fleet = getattr(runtime, "join_fleet", None)
    held: set[int] | None = join_fleet(tx.db, tx.lock) if callable(join_fleet) else None
    with tx.lock, tx.db.session() as s:
        for port in PortRepository(s).enabled():
            try:
                runtime.port_up(port_spec(port))
                report.ports.append(port.id)
            except RuntimeRefusedError as exc:
                report.failures.append(f"port {port.id}: {exc}")
                log.error("restore: port %s (%s) refused: %s", port.id, port.name, exc)
        subs = SubscriptionRepository(s)
        sessions = SessionRepository(s)
        for row in sessions.all():
            topics = list(subs.topic_counts(row.id))
            if topics:
                runtime.subscribe(row.id, topics)
                report.topics[row.id] = topics
        events = EventRepository(s)
        # The feed went on while the gateway was down: a runtime that can tell its
        # consumers so (LiveRuntime) publishes a gap when the session reconnects.
        mark_resumed = getattr(runtime, "mark_resumed", None)
        for row in sessions.wanted_running():
            if held is not None and row.id not in held:
                report.elsewhere.append(row.id)
                continue
            try:
                if callable(mark_resumed):
                    mark_resumed(row.id, RESTART_GAP_REASON)
                runtime.start_session(session_spec(row))
                report.sessions.append(row.id)
                events.record(row.id, "restored", "gateway started: session restored")
            except RuntimeRefusedError as exc:
                report.failures.append(f"session {row.id}: {exc}")
                events.record(row.id, "restore_failed", str(exc))
                log.error("restore: session %s (%s) refused: %s", row.id, row.name, exc)
    run_fleet = getattr(runtime, "run_fleet", None)
    if callable(run_fleet):
        run_fleet()
    log.info(
        "restored %d port(s), %d session(s), topics of %d session(s)%s%s",
        len(report.ports),
        len(report.sessions),
        len(report.topics),
        f"; {len(report.failures)} refused" if report.failures else "",
        f"; {len(report.elsewhere)} run by other nodes" if report.elsewhere else "",
    )
    return report
