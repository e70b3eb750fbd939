"""Optional: the exchange's own sequence numbers, checked per topic (SessionConfig
sequence_check). Off by default; when on, it costs one more C scan per burst and an int()
per data message that carries a number.

Only rules that the exchanges document are checked:
- OKX order books: each push's `prevSeqId` is the previous push's `seqId` (-1 on a
  snapshot) ("Order book channel", OKX API v5 docs).
- Binance diff depth: each event's first update id `U` is the previous event's `u` + 1
  ("How to manage a local order book correctly", Binance spot WebSocket streams docs).
- Coinbase `sequence` and Bybit order book update id `u` only ever grow (Bybit resends
  u=1, a snapshot, after a service restart); a step back means a replay or reordering.
The number found is also the message's upstream seq in the tuple handed to the hub.

How many were skipped is told only where the rule makes the numbers contiguous: Binance's
update ids (`lost` = the ids skipped: each event carries U..u, so it counts updates, not
events). OKX's seqId chain only links a push to the previous one (seqIds need not be
consecutive) and a growing number may jump legitimately, so their breaks carry lost=None.
A session's next connection takes the last numbers over (`resume_from`), so a jump across
a reconnect is counted as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from dataplane.shim import JSON_NUMBER
from gateway.dialects.extract import TopicExtractor
from gateway.dialects.jsonscan import TopicPaths

Mode = Literal["chain", "next", "grows"]


@dataclass(frozen=True)
class SequenceRule:
    """paths: (seq, prev) for chain, (first, last) for next, (seq,) for grows."""

    paths: TopicPaths
    mode: Mode


RULES: dict[str, SequenceRule] = {
    "okx": SequenceRule(TopicPaths.of("data[0].seqId", "data[0].prevSeqId"), "chain"),
    "binance": SequenceRule(TopicPaths.of("data.U", "data.u"), "next"),
    "coinbase": SequenceRule(TopicPaths.of("sequence"), "grows"),
    "bybit": SequenceRule(TopicPaths.of("data.u"), "grows"),
}


class SequenceBreak(NamedTuple):
    """A break before message `at` of a burst; lost: numbers skipped (None: unknown)."""

    at: int
    reason: str
    lost: int | None = None


class SequenceChecker:
    """Per-topic last sequence for one connection (a new connection starts afresh)."""

    def __init__(self, rule: SequenceRule, *, backend: str = "auto") -> None:
        self.rule = rule
        self._extractor = TopicExtractor(rule.paths, backend=backend)
        self._n = len(rule.paths.paths)
        self.last: dict[str, int] = {}

    def resume_from(self, previous: SequenceChecker) -> None:
        """Take over the last numbers of the session's previous connection when they are
        contiguous ones ("next"): the first message after a reconnect then tells how many
        were skipped meanwhile. Other rules start afresh (a snapshot restarts a chain)."""
        if self.rule.mode == "next" and previous.rule == self.rule:
            self.last = dict(previous.last)

    def check(
        self, payloads: Sequence[bytes], topics: Sequence[str]
    ) -> tuple[list[int | None], list[SequenceBreak]]:
        """(seq per message or None, a SequenceBreak per message that follows a break)."""
        _status, spans = self._extractor.run(payloads)
        stride = 3 * self._n
        mode = self.rule.mode
        last = self.last
        seqs: list[int | None] = []
        breaks: list[SequenceBreak] = []
        for i, raw in enumerate(payloads):
            b = i * stride
            first = _number(raw, spans, b)
            if first is None:
                seqs.append(None)
                continue
            second = _number(raw, spans, b + 3) if self._n > 1 else None
            topic = topics[i]
            before = last.get(topic)
            if mode == "chain":
                seq = first
                if before is not None and second is not None and second not in (before, -1):
                    reason = f"{topic}: prevSeqId {second} after seqId {before}"
                    breaks.append(SequenceBreak(i, reason))
            elif mode == "next":
                seq = second if second is not None else first
                if before is not None and first > before + 1:
                    reason = f"{topic}: update {first} follows {before}"
                    breaks.append(SequenceBreak(i, reason, first - before - 1))
            else:
                seq = first
                if before is not None and seq <= before and seq != 1:
                    breaks.append(SequenceBreak(i, f"{topic}: sequence {seq} after {before}"))
            last[topic] = seq
            seqs.append(seq)
        return seqs, breaks


def _number(raw: bytes, spans: Sequence[int], i: int) -> int | None:
    if spans[i + 2] != JSON_NUMBER:
        return None
    off = spans[i]
    try:
        return int(raw[off : off + spans[i + 1]])
    except ValueError:  # a fraction or an exponent: not a sequence number
        return None


def sequence_checker(dialect: str) -> SequenceChecker | None:
    """A checker for the dialect, or None when its exchange has no sequence to check."""
    rule = RULES.get(dialect)
    return SequenceChecker(rule) if rule is not None else None
