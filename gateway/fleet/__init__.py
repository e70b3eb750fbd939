"""A fleet of gateways on one PostgreSQL database (issue #20): node heartbeats, session
leases with fencing (leases), and where each session should run (placement)."""

from gateway.fleet.leases import DEFAULT_LEASE_S, FleetError, Lease, LeaseStore, NodeInfo
from gateway.fleet.placement import place

__all__ = ["DEFAULT_LEASE_S", "FleetError", "Lease", "LeaseStore", "NodeInfo", "place"]
