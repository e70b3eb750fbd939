"""Typed host errors; each message says what is wrong and what to do about it."""

from __future__ import annotations


class HostError(Exception):
    """Base of every error raised on purpose by host management."""


class HostNotFoundError(HostError):
    """The device, hugepage size or NUMA node named does not exist (404)."""


class HostInvalidError(HostError):
    """The request cannot apply to this host as given (422)."""


class HostRefusedError(HostError):
    """The change would hurt the host or cannot be made in its present state (409)."""


class HostChangesDisabledError(HostRefusedError):
    """host.allow_changes is off: the API only reads the host."""
