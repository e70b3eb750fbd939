"""/v1/engine/ports: each configured port's live counters (admin), for the dashboard.

Two sources per port: the engine on it (its loop and C fast-path counters, the CPU time of
its thread) and the NIC under it (DPDK's rte_eth_stats and link). Rates are left to the
reader: it diffs two answers over `monotonic`. A port with no engine (no DPDK runtime, a
port that is down) answers null for what it lacks, never zeros.

The runtime has no public accessor for a port's engine yet: a runtime may offer
`port_counters(port_id) -> dict | None` (the answer's per-port fields); otherwise the live
runtime's DPDK engines are read through `engine_for` (gateway.engines.DpdkEngines).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from api.deps import AdminDep, ControlDep, KnownQuery
from api.schemas.common import responses
from gateway.runtime import Runtime

log = logging.getLogger("wsgw.api.engine_ports")

router = APIRouter(
    prefix="/v1/engine/ports",
    tags=["engine"],
    responses=responses(400, 401, 403),
    dependencies=[KnownQuery],
)


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


def _numbers(values: dict[str, Any]) -> dict[str, int | float]:
    return {
        k: v
        for k, v in values.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and k != "at"
    }


def _port_counters(runtime: Runtime, port_id: int) -> dict[str, Any]:
    """engine, cpu_seconds, nic, link for one port; None for each source that is missing."""
    offered = getattr(runtime, "port_counters", None)
    if callable(offered):
        answer = offered(port_id)
        return dict(answer) if answer else {}
    engines = getattr(runtime, "_engine", None)  # LiveRuntime's DpdkEngines, made on first use
    engine_for = getattr(engines, "engine_for", None)
    if engine_for is None:
        return {}
    try:
        engine = engine_for(port_id)
    except Exception:  # the port is not up: nothing to read
        return {}
    out: dict[str, Any] = {}
    snapshot = getattr(engine, "snapshot", None)
    if callable(snapshot):
        out["engine"] = _numbers(snapshot()) or None  # {} until its loop's first pass
    cpu = getattr(engine, "cpu_seconds", None)
    if callable(cpu):
        out["cpu_seconds"] = float(cpu())
    port = getattr(engine, "port", None)
    if port is not None:
        try:
            out["nic"] = dict(port.stats())
            out["link"] = dict(port.link())
        except Exception as exc:  # closed under us (a port going down): what was read
            log.debug("port %s: NIC counters not read: %s", port_id, exc)
    return out


@router.get("", response_model=EnginePortsPublic)
def engine_ports(control: ControlDep, _: AdminDep) -> EnginePortsPublic:
    """Every configured port with its engine's and its NIC's counters (null: not running)."""
    rows: list[PortCountersPublic] = []
    offset = 0
    while True:
        page = control.ports.page(offset, 500)
        for port in page.items:
            status = control.runtime.port_status(port.id)
            counters = _port_counters(control.runtime, port.id)
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
