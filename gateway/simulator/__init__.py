"""The feed simulator: a WebSocket server that speaks every exchange dialect.

async with Simulator(SimConfig(rate=100)) as sim:
    url = sim.url("okx", "/ws/v5/public")
    sim.inject(Fault("drop", after=10))

Feed groups (redundant legs of one stream):
    a = sim.url("binance", "/stream", group="g", leg="A")
    b = sim.url("binance", "/stream", group="g", leg="B")
    sim.inject(Fault("reset"), "leg:g/A")  # B keeps streaming
"""

from gateway.simulator.faults import KINDS as FAULT_KINDS
from gateway.simulator.faults import Fault, FaultError
from gateway.simulator.feeds import FEEDS, Feed
from gateway.simulator.server import (
    DEFAULT_GROUP,
    DIALECTS,
    Counters,
    FeedGroup,
    SimConfig,
    SimConnection,
    Simulator,
    wait_until,
    with_group,
)

__all__ = [
    "DEFAULT_GROUP",
    "DIALECTS",
    "FAULT_KINDS",
    "FEEDS",
    "Counters",
    "Fault",
    "FaultError",
    "Feed",
    "FeedGroup",
    "SimConfig",
    "SimConnection",
    "Simulator",
    "wait_until",
    "with_group",
]
