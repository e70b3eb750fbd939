"""/v1/engine/ports: each configured port's live counters (admin), for the dashboard.

Two sources per port: the engine on it (its loop and C fast-path counters, the CPU time of
its thread) and the NIC under it (DPDK's rte_eth_stats and link). Rates are left to the
reader: it diffs two answers over `monotonic`. A port with no engine (no DPDK runtime, a
port that is down) answers null for what it lacks, never zeros.

The runtime reads them (`Runtime.port_counters`): the API never touches an engine.
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from api.deps import AdminDep, ControlDep
from api.routes import resource_router

router = resource_router("/v1/engine/ports", "engine")


class PortCountersPublic(BaseModel):
    port_id: int
    name: str
    device: str
    state: str
    reason: str | None
    engine: dict[str, int | float] | None = Field(
        description="the engine's counters (loops, slow_frames, ..., c_* from the C fast path)"
    )
    cpu_seconds: float | None = Field(description="CPU time the engine thread has used")
    nic: dict[str, int] | None = Field(description="rte_eth_stats: packets, bytes, drops")
    link: dict[str, int] | None = Field(description="speed_mbps, up, full_duplex")


class EnginePortsPublic(BaseModel):
    monotonic: float = Field(description="the server's monotonic clock, in seconds")
    data: list[PortCountersPublic]


@router.get("", response_model=EnginePortsPublic)
def engine_ports(control: ControlDep, _: AdminDep) -> EnginePortsPublic:
    """Every configured port with its engine's and its NIC's counters (null: not running)."""
    rows: list[PortCountersPublic] = []
    offset = 0
    while True:
        page = control.ports.page(offset, 500)
        for port in page.items:
            status = control.runtime.port_status(port.id)
            counters = control.runtime.port_counters(port.id) or {}
            rows.append(
                PortCountersPublic(
                    port_id=port.id,
                    name=port.name,
                    device=port.device,
                    state=str(status.state),
                    reason=status.reason,
                    engine=counters.get("engine"),
                    cpu_seconds=counters.get("cpu_seconds"),
                    nic=counters.get("nic"),
                    link=counters.get("link"),
                )
            )
        offset += len(page.items)
        if not page.items or offset >= page.total:
            break
    return EnginePortsPublic(monotonic=time.monotonic(), data=rows)
