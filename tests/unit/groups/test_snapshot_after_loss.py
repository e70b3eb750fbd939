"""After a loss on a key, the next unlinked message (a venue's snapshot, as a resubscribe
brings it) restarts the key even when its id was delivered already (issue #21: an OKX book
on a feed group recovers from a group-wide loss by resubscribing). Without a loss, a leg's
snapshot of what the group has delivered stays a copy (a killed leg that reconnects).
The same cases on the Python reference and on C."""

from __future__ import annotations

from typing import Any

import pytest

from dataplane.arbiter import CArbiter
from gateway.groups import Arbiter

MS = 1_000_000
IMPLEMENTATIONS = pytest.mark.parametrize("make", [Arbiter, CArbiter], ids=["reference", "c"])


def kinds(out: list[Any]) -> list[tuple[str, int]]:
    return [
        (type(o).__name__, o.this if type(o).__name__ == "Delivered" else o.before) for o in out
    ]


def linked(arb: Any, leg: int, ids: range, at: int) -> list[Any]:
    out: list[Any] = []
    for i in ids:
        out += arb.offer(leg, 0, i, i - 1, b"u%d" % i, at)
    return out


@IMPLEMENTATIONS
def test_a_snapshot_after_a_loss_restarts_the_key(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    linked(arb, 0, range(1, 11), 0)
    linked(arb, 1, range(1, 11), 0)
    # Both legs lose 11: 12.. is held, then given up (a Lost), and the stream goes on.
    out = linked(arb, 0, range(12, 16), 1 * MS) + linked(arb, 1, range(12, 16), 1 * MS)
    out += arb.expire(100 * MS)
    assert ("Lost", 12) in kinds(out)
    # Leg 0 resubscribes: its snapshot is at 13 (< last 15), then the updates after it.
    out = arb.offer(0, 0, 13, None, b"snapshot", 200 * MS)
    assert kinds(out) == [("Delivered", 13)]
    out = linked(arb, 0, range(14, 18), 201 * MS)
    assert kinds(out) == [("Delivered", i) for i in range(14, 18)]  # linked to the snapshot
    out = linked(arb, 1, range(16, 18), 202 * MS)
    assert kinds(out) == []  # copies
    # Only the first snapshot after the loss restarts: the next one is a copy again.
    assert arb.offer(1, 0, 17, None, b"snapshot", 203 * MS) == []


@IMPLEMENTATIONS
def test_without_a_loss_a_legs_snapshot_is_a_copy(make: Any) -> None:
    arb = make(2, hold_ns=20 * MS)
    linked(arb, 0, range(1, 11), 0)
    linked(arb, 1, range(1, 11), 0)
    assert arb.offer(1, 0, 9, None, b"snapshot", 1 * MS) == []  # a reconnected leg's
    assert kinds(linked(arb, 0, range(11, 13), 2 * MS)) == [("Delivered", 11), ("Delivered", 12)]
