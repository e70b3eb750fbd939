"""One leg's figures, the same keys whichever path (C group or Python arbiter) runs it, and
the gap a leg going down owes the group's consumers on both paths."""

from __future__ import annotations

from typing import Any, Protocol


class _LegStats(Protocol):
    won: int
    late: int


class LegSource(Protocol):
    """What a leg's won/late and lag come from: CArbiter or the C group's binding."""

    def leg_stats(self, leg: int) -> _LegStats: ...

    def lag_percentile(self, leg: int, percentile: float) -> int | None: ...


def leg_figures(
    source: LegSource,
    leg: int,
    session_id: int,
    *,
    live: bool,
    downs: int,
    messages: int,
    newest_id: int | None,
    state: str | None,
) -> dict[str, Any]:
    """GET /v1/groups/{id}'s per-leg entry (won, late, lag p50/p99 in ns, live, state...)."""
    stats = source.leg_stats(leg)
    return {
        "session_id": session_id,
        "leg": leg,
        "won": stats.won,
        "late": stats.late,
        "lag_p50_ns": source.lag_percentile(leg, 50),
        "lag_p99_ns": source.lag_percentile(leg, 99),
        "live": live,
        "downs": downs,
        "messages": messages,
        "newest_id": newest_id,
        "state": state,
    }


class DownGaps:
    """Which gap of the group a leg going down is (both paths). Every leg down for a failure
    (a lost connection, a sequence break, a backoff: not a stop) after the group carried
    anything since the last such gap: what the exchange sends until a leg is back is lost,
    and only linked topics get exact gaps later (the arbiter's holes), not unlinked ones
    (bookTicker: ids that skip) nor those passing through. A stopped leg (the operator's,
    or a fleet node's that moved it) is not down for this: no gap at a stop, and none on a
    node where the leg runs elsewhere. Else leg 0's, when frames pass through it alone (no
    exchange id): no other leg fills what it loses of them."""

    def __init__(self) -> None:
        self._told_at = 0  # what the group had carried at the last every-leg-down gap
        self._stopped: set[int] = set()  # legs down for a stop, until they start again

    def leg_down(self, leg: int, stopped: bool) -> None:
        """Every time a leg is told down (already down or not): a stop marks it, anything
        else (a failure, or connecting: a stopped leg starting again) unmarks it."""
        if stopped:
            self._stopped.add(leg)
        else:
            self._stopped.discard(leg)

    def reason(
        self, leg: int, every_leg_down: bool, carried: int, passed: bool, why: str
    ) -> tuple[str, bool] | None:
        """When the leg went from live to down: (gap reason, whether the leg's own count
        applies), or None: no gap."""
        if every_leg_down and not self._stopped and carried > self._told_at:
            self._told_at = carried
            return f"every leg down (the last: {why}): what the exchange sent may be lost", False
        if leg == 0 and passed:
            return passed_through_gap(why), True
        return None


def passed_through_gap(reason: str) -> str:
    """The group's gap reason when leg 0 went down: frames without an exchange id pass
    through from it alone, so no other leg fills what it loses."""
    return f"leg 0 down ({reason}): what passes through it alone (no exchange id) is lost"
