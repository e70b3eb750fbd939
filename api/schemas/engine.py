"""The dataplane engine's configuration as it runs: the latency profile and what it chose."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from api.schemas.common import PublicSchema


class EngineConfigPublic(PublicSchema):
    latency_profile: Literal["economical", "low-latency"] = Field(
        description="the gateway's latency_profile setting (set at start, not through the API)"
    )
    poll_mode: Literal["adaptive", "busy"] = Field(
        description="how the engine polls: adaptive backs off to sleep when idle, busy spins"
    )
    cpu: int | Literal["isolated"] | None = Field(
        description="the engine's CPU setting: a CPU, 'isolated' (the first isolated CPU, "
        "if any) or none (not pinned)"
    )
    budget_us: int = Field(
        description="longest C poll before the engine's Python side runs (any event ends it sooner)"
    )
    reader_wait: str = Field(
        description="the wait policy the ring recommends to readers that follow the gateway "
        "(wait 'auto'): futex, spin:<us> or busy"
    )
    state: str = Field(description="the engine's state: starting, running, failed, ...")
    reason: str | None
    details: dict[str, Any] = Field(description="per port: the engine's counters")
