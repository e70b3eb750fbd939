"""TopicExtractor: a dialect's key paths bound to a scanner backend (C batch or Python).

Both backends answer in the same flat layout so that dialect code reads one shape:
status[i] per message and spans[(i * n_paths + p) * 3 + 0..2] = offset, length, kind.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dataplane.errors import ShimError
from dataplane.shim import TopicBatch, build_topic_spec, topic_extract
from gateway.dialects.jsonscan import TopicPaths, scan

BACKENDS = ("auto", "c", "python")
log = logging.getLogger("wsgw.dialects")
_warned = False


def _warn_once(exc: Exception) -> None:
    """The Python scanner is some 200 times slower: say so, once, instead of silently."""
    global _warned
    if not _warned:
        _warned = True
        log.warning("topic extraction falls back to Python (slow): %s", exc)


def c_available() -> bool:
    try:
        build_topic_spec([("x",)])
    except (ShimError, OSError):
        return False
    return True


class TopicExtractor:
    """Scans messages for the values of a few key paths."""

    def __init__(self, paths: TopicPaths, *, backend: str = "auto", capacity: int = 256) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        self.paths = paths
        self.n_paths = len(paths.paths)
        self._batch: TopicBatch | None = None
        if backend in ("auto", "c"):
            try:
                spec = build_topic_spec(paths.paths, presence=paths.presence, strict=paths.strict)
                self._batch = TopicBatch(spec, capacity)
            except (ShimError, OSError) as exc:
                if backend == "c":
                    raise
                _warn_once(exc)
        self.backend = "c" if self._batch is not None else "python"

    def extract(self, message: bytes) -> tuple[int, list[int]]:
        """(status, flat spans) for one message."""
        if self._batch is not None:
            status, spans = topic_extract(self._batch.spec, message)
        else:
            status, spans = scan(message, self.paths)
        flat: list[int] = []
        for span in spans:
            flat += (span.offset, span.length, span.kind)
        return status, flat

    def run(self, messages: Sequence[bytes]) -> tuple[Sequence[int], Sequence[int]]:
        """(status per message, flat spans) for a burst: one C call with the C backend."""
        if self._batch is not None:
            self._batch.run(messages)
            return self._batch.status, self._batch.spans
        statuses: list[int] = []
        flat: list[int] = []
        for message in messages:
            status, spans = scan(message, self.paths)
            statuses.append(status)
            for span in spans:
                flat += (span.offset, span.length, span.kind)
        return statuses, flat
