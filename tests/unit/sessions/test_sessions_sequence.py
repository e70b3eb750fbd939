"""The optional exchange sequence check: OKX chains, Binance update ids, growing numbers."""

from __future__ import annotations

import orjson
import pytest

from gateway.sessions import sequence_checker


def okx(seq: int, prev: int) -> bytes:
    return orjson.dumps(
        {
            "arg": {"channel": "books", "instId": "BTC-USDT"},
            "data": [{"seqId": seq, "prevSeqId": prev}],
        }
    )


def test_okx_chain_break_is_found_at_its_message() -> None:
    checker = sequence_checker("okx")
    assert checker is not None
    msgs = [okx(10, -1), okx(11, 10), okx(13, 12), okx(14, 13)]  # 12 never came
    seqs, breaks = checker.check(msgs, ["books:BTC-USDT"] * 4)
    assert seqs == [10, 11, 13, 14]
    assert breaks == [(2, "books:BTC-USDT: prevSeqId 12 after seqId 11", None)]  # count unknown
    # A snapshot (prevSeqId -1) restarts the chain.
    seqs, breaks = checker.check([okx(500, -1)], ["books:BTC-USDT"])
    assert (seqs, breaks) == ([500], [])


def test_binance_update_ids_follow_on() -> None:
    checker = sequence_checker("binance")
    assert checker is not None

    def depth(first: int, last: int) -> bytes:
        data = {"e": "depthUpdate", "U": first, "u": last}
        return orjson.dumps({"stream": "btcusdt@depth", "data": data})

    trade = orjson.dumps({"stream": "btcusdt@trade", "data": {"e": "trade", "t": 5}})
    msgs = [depth(1, 3), trade, depth(4, 9), depth(12, 12)]
    seqs, breaks = checker.check(msgs, ["btcusdt@depth", "btcusdt@trade"] + ["btcusdt@depth"] * 2)
    assert seqs == [3, None, 9, 12]  # a trade carries no update id
    assert breaks == [(3, "btcusdt@depth: update 12 follows 9", 2)]  # 10 and 11 skipped


@pytest.mark.parametrize("name", ["coinbase", "bybit"])
def test_growing_sequences_catch_a_step_back(name: str) -> None:
    checker = sequence_checker(name)
    assert checker is not None
    if name == "coinbase":
        msgs = [orjson.dumps({"type": "match", "sequence": s}) for s in (5, 9, 7)]
    else:
        msgs = [orjson.dumps({"topic": "orderbook.50.X", "data": {"u": s}}) for s in (5, 9, 7)]
    seqs, breaks = checker.check(msgs, ["t"] * 3)
    assert seqs == [5, 9, 7]
    assert [(b.at, b.lost) for b in breaks] == [(2, None)]


def test_exchanges_without_sequences_have_no_checker() -> None:
    assert sequence_checker("kraken") is None
    assert sequence_checker("generic") is None


def test_a_new_connection_counts_what_the_reconnect_skipped() -> None:
    """Binance's ids go on across connections: the next connection's checker takes the
    last ones over, so the first update after a reconnect tells how many were missed."""
    first, second = sequence_checker("binance"), sequence_checker("binance")
    assert first is not None and second is not None

    def depth(n: int) -> bytes:
        return orjson.dumps({"stream": "x@depth", "data": {"e": "depthUpdate", "U": n, "u": n}})

    first.check([depth(1), depth(2)], ["x@depth"] * 2)
    second.resume_from(first)
    _, breaks = second.check([depth(8), depth(9)], ["x@depth"] * 2)
    assert breaks == [(0, "x@depth: update 8 follows 2", 5)]
    fresh = sequence_checker("okx")
    assert fresh is not None
    fresh.resume_from(first)  # another rule: nothing to take over
    assert fresh.last == {}
