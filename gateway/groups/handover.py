"""Where a replaced group's late batches go.

A change of a group (GroupRouter.set_group: a new hold, other legs) closes its form, reads
what the form delivered (the floors of the next) and runs a fresh form from there. A leg's
batch can reach the old form after its close: a read loop took the group from the router
just before the swap, or a joined C feed's frames came back to Python. The old form must
neither publish such a batch unarbitrated (duplicates) nor drop it (a silent loss): it hands
the batch to its successor, whose floors drop what it already delivered.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from gateway.sessions.sink import Published

#: How long a late batch waits for the router to name the successor: the swap is a few
#: statements on another thread, so this bounds a bug, not a normal wait.
SUCCESSOR_WAIT_S = 2.0


class Offers(Protocol):
    def offer(self, messages: Sequence[Published]) -> None: ...


class Successor:
    """The next form of a closed group, once the router names it (None: the group was
    removed, and its late batches go nowhere, as its legs' do)."""

    def __init__(self) -> None:
        self._named = threading.Event()
        self._group: Offers | None = None

    def name(self, group: Offers | None) -> None:
        self._group = group
        self._named.set()

    def forward(self, messages: Sequence[Published]) -> bool:
        """Offer a late batch to the successor; False when there is none."""
        if not messages or not self._named.wait(SUCCESSOR_WAIT_S) or self._group is None:
            return False
        self._group.offer(messages)
        return True
