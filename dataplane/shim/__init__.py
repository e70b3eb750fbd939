"""The C shim: the one place that loads libwsgw_shim.so (see `_loader`)."""

from dataplane.shim._loader import ABI_VERSION, Shim, load, shim_info

__all__ = ["ABI_VERSION", "Shim", "load", "shim_info"]
