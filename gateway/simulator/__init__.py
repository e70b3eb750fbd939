"""The feed simulator: a WebSocket server that speaks every exchange dialect.

async with Simulator(SimConfig(rate=100)) as sim:
    url = sim.url("okx", "/ws/v5/public")
    sim.inject(Fault("drop", after=10))
"""

from gateway.simulator.faults import KINDS as FAULT_KINDS
from gateway.simulator.faults import Fault, FaultError
from gateway.simulator.feeds import FEEDS, Feed
from gateway.simulator.server import (
    DIALECTS,
    Counters,
    SimConfig,
    SimConnection,
    Simulator,
    wait_until,
)

__all__ = [
    "DIALECTS",
    "FAULT_KINDS",
    "FEEDS",
    "Counters",
    "Fault",
    "FaultError",
    "Feed",
    "SimConfig",
    "SimConnection",
    "Simulator",
    "wait_until",
]
