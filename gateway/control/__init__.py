"""The control plane: the operations the API (and the CLI) offer, and the rules between the
store and the runtime, one module per entity.

    ports.py          PortService: a port in use cannot be deleted, one port per device
    sessions.py       SessionService: configuration rules, start/stop, the event log
    subscriptions.py  SubscriptionService: topics ref-counted upstream
    tokens.py         TokenService: secrets shown once, authentication
    groups.py         GroupService: feed groups (legs of one dialect, one group per session)
    books.py          BookSnapshotService: periodic book snapshot settings, stored and restored
    restore.py        the restart guarantee: what was open is handed back at start
    events.py         runtime events written to the store off the caller's thread
    health.py         readiness
    transactions.py   reads, and writes serialised by one lock
    plane.py          ControlPlane: builds the above on one database and one runtime

Callers never reach the runtime around these services, so a rule holds for every caller.
"""

from gateway.control.plane import ControlPlane

__all__ = ["ControlPlane"]
