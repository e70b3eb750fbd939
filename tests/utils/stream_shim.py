"""Counting what the /v1/stream source's shim read took (gateway.client.stream)."""

from __future__ import annotations

from typing import Any

import pytest

from gateway.client.stream import StreamSource


def count_shim_envelopes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets, per shim read that took envelopes, how many it took."""
    made: list[int] = []
    by_shim = StreamSource._envelopes

    def envelopes(self: StreamSource, shim: Any, count: int) -> None:
        made.append(count)
        by_shim(self, shim, count)

    monkeypatch.setattr(StreamSource, "_envelopes", envelopes)
    return made
