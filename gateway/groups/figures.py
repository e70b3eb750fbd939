"""One leg's figures, the same keys whichever path (C group or Python arbiter) runs it, and
the gap reason both paths give when leg 0 goes down."""

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


def passed_through_gap(reason: str) -> str:
    """The group's gap reason when leg 0 went down: frames without an exchange id pass
    through from it alone, so no other leg fills what it loses."""
    return f"leg 0 down ({reason}): what passes through it alone (no exchange id) is lost"
