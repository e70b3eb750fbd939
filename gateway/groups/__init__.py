"""Feed groups: several upstream legs carrying one stream, arbitrated (issue #19)."""

from gateway.groups.arbiter import Arbiter, Delivered, LegStats, Lost, Output

__all__ = ["Arbiter", "Delivered", "LegStats", "Lost", "Output"]
