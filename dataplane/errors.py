"""The dataplane's exception family.

Every error carries a message that names the cause and, where the C side or DPDK reported
one, the errno. Callers catch `DataplaneError` for all of them.
"""

from __future__ import annotations

import errno as _errno


class DataplaneError(Exception):
    """Base of every error the dataplane raises on purpose."""

    def __init__(self, message: str, errno: int = 0) -> None:
        super().__init__(message)
        self.errno = errno

    @property
    def errno_name(self) -> str:
        return _errno.errorcode.get(self.errno, str(self.errno)) if self.errno else ""


class ShimError(DataplaneError):
    """The C shim could not be loaded or is not the one this Python code was written for."""


class ShimMissingError(ShimError):
    """No shim library at the expected path: the package was not built."""


class ShimVersionError(ShimError):
    """The library's ABI version differs from the loader's declarations."""


class ShimStaleError(ShimError):
    """The library was built from other C sources than the ones beside it."""


class DpdkUnavailableError(DataplaneError):
    """The shim was built without DPDK, so ports cannot be opened."""


class EalError(DataplaneError):
    """The DPDK environment (EAL) failed to initialise."""


class EalAlreadyInitialisedError(EalError):
    """DPDK allows one EAL per process; this process already has one (or had one)."""


class HugepagesError(EalError):
    """The configuration asks for more hugepage memory than the host has free."""


class PortError(DataplaneError):
    """A DPDK port could not be opened, configured, started or used."""


class DeviceNotFoundError(PortError):
    """The PCI device, vdev driver or network interface named does not exist."""


class UnsafeInterfaceError(PortError):
    """Opening the port would put the stack's traffic on an interface the host uses."""
