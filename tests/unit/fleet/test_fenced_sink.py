"""The fence (gateway.fleet.node.FencedSink): a batch of a session this node may publish for
passes whole; a refused session's messages are dropped and counted, in a batch of one
session or of several."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.fleet.node import FencedSink
from gateway.sessions.sink import Published


class Recorder:
    def __init__(self) -> None:
        self.batches: list[list[Published]] = []

    def publish_batch(self, messages: Sequence[Published]) -> object:
        self.batches.append(list(messages))
        return None

    def publish_gap(self, session_id: int, lost: int | None, reason: str) -> object:
        return None


def batch(*sids: int) -> list[Published]:
    return [(sid, "t", b"x", i) for i, sid in enumerate(sids)]  # type: ignore[misc]


def test_the_fence_passes_held_sessions_and_drops_the_others() -> None:
    inner = Recorder()
    warm_told: list[set[int]] = []

    def warm(refused: set[int]) -> set[int]:
        warm_told.append(refused)
        return refused & {3}

    sink = FencedSink(inner, {1: 5}.get, warm)
    sink.publish_batch(batch(1, 1, 1))
    assert inner.batches == [batch(1, 1, 1)] and sink.fenced == 0
    sink.publish_batch(batch(2, 2))  # not held: dropped
    assert len(inner.batches) == 1 and sink.fenced == 2
    # Several sessions (no session's own batch: first and last differ): the held one's pass.
    sink.publish_batch(batch(1, 2, 2))
    assert inner.batches[-1] == batch(1) and sink.fenced == 4
    sink.publish_batch(batch(3))  # a successor's warm session: refused, reported
    assert warm_told[-1] == {3} and sink.fenced == 5
