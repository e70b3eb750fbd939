"""Helpers shared by the parsers (private to `dataplane.wire`)."""

from __future__ import annotations

from typing import TypeAlias

#: What every parser accepts: the frame as received, or a zero-copy view into it.
Buffer: TypeAlias = bytes | bytearray | memoryview


def as_view(data: Buffer) -> memoryview:
    """A flat byte view of data, so slices of it stay zero-copy."""
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


def as_bytes(data: Buffer) -> bytes:
    """data as bytes (copied only when it is not bytes already): the shim takes bytes."""
    return data if isinstance(data, bytes) else bytes(data)
