"""The batch contenders of the ingest benchmark: `IngestCheck.batch` (sequence numbers
checked in C) counts exactly like the per-message `IngestCheck.message`, and
"wsgw kernel (batch)" floods the C peer on 127.0.0.1 with every message verified."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.ws.events import Message, MessageBatch
from wsgw_bench import ws_runner
from wsgw_bench.peers import WsPeer
from wsgw_bench.ws_runner import IngestCheck, run_loop, run_test


def payload(seq: int, size: int) -> bytes:
    return seq.to_bytes(8, "big")[: max(size, 0)] + bytes(max(size - 8, 0))


@settings(max_examples=200, deadline=None)
@given(
    seqs=st.lists(st.integers(0, 40), max_size=60),
    sizes=st.lists(st.sampled_from([16, 16, 16, 9, 8, 3, 0]), min_size=60, max_size=60),
    cuts=st.lists(st.integers(1, 60), max_size=6),
)
def test_batch_check_counts_like_the_per_message_check(
    seqs: list[int], sizes: list[int], cuts: list[int]
) -> None:
    messages = [Message(payload(s, n), False) for s, n in zip(seqs, sizes, strict=False)]
    expected = max(len(messages) - 2, 1)
    one, many = IngestCheck(16, expected), IngestCheck(16, expected)
    for m in messages:
        one.message(m.data)
    bounds = sorted({0, len(messages), *(c for c in cuts if c < len(messages))})
    for a, b in itertools.pairwise(bounds):
        batch = MessageBatch.of(messages[a:b])
        many.batch(batch.data, batch.spans, len(batch))
    fields = ("received", "gaps", "duplicates", "bad_length", "next_seq")
    assert [getattr(many, f) for f in fields] == [getattr(one, f) for f in fields]
    want, got = one.result(), many.result()
    for key in ("received", "gaps", "duplicates", "bad_length", "ok"):
        assert want[key] == got[key], key


def test_the_first_batch_is_not_counted_in_the_rate() -> None:
    check = IngestCheck(16, 10)
    for first, last in ((0, 4), (4, 10)):
        batch = MessageBatch.of([Message(payload(s, 16), False) for s in range(first, last)])
        check.batch(batch.data, batch.spans, len(batch))
    result = check.result()
    assert result["ok"] and check.head == 3
    assert result["msg_per_s"] == pytest.approx(6 / result["seconds"])


def test_batch_contenders_are_named_and_made(ws_peer: WsPeer) -> None:
    names = [c.name for c in ws_runner.wsgw_batch_contenders()]
    assert "wsgw kernel (batch)" in names and "wsgw DPDK (batch)" in names
    adapter = ws_runner.make_adapter("wsgw-kernel-batch")
    assert isinstance(adapter, ws_runner.WsgwBatchAdapter)
    assert adapter.name == "wsgw kernel (batch)"
    results, _ = run_loop(
        run_test(
            adapter,
            "ingest",
            f"ws://127.0.0.1:{ws_peer.port}",
            {"count": 30000, "sizes": [100, 1024]},
        ),
        "asyncio",
    )
    for size in ("100", "1024"):
        r = results[size]
        assert r["ok"], r
        assert r["received"] == 30000 and r["msg_per_s"] > 0
