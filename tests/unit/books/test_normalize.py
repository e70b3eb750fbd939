"""Per-venue normalizers on documented message shapes (the dialects' fixtures and the
venues' examples): every field mapped, decimals kept as sent, non-data gives nothing."""

from __future__ import annotations

import pytest

from gateway.dialects.base import Data
from gateway.normalize import (
    NORMALIZERS,
    BookDelta,
    BookSnapshot,
    Funding,
    Level,
    Ticker,
    TopOfBook,
    Trade,
    make_normalizer,
)
from gateway.simulator.feeds import FEEDS
from tests.unit.dialects.fixtures import FIXTURES

VENUES = sorted(NORMALIZERS)
MS = 1_000_000


def norm(venue: str, raw: bytes) -> list[object]:
    return list(make_normalizer(venue).normalize(raw, 42))


@pytest.mark.parametrize("venue", VENUES)
def test_dialect_fixtures_non_data_gives_no_event(venue: str) -> None:
    for case in FIXTURES[venue]:
        events = norm(venue, case.raw)
        if not isinstance(case.expected, Data):
            assert events == [], case.raw
        for event in events:
            assert event.venue == venue  # type: ignore[attr-defined]
            assert event.recv_ns == 42  # type: ignore[attr-defined]


def test_binance() -> None:
    (trade,) = norm("binance", FIXTURES["binance"][0].raw)
    assert trade == Trade(
        "binance", "BTCUSDT", "0.001", "100", "sell", "12345", 1672515782136 * MS, 42
    )
    (delta,) = norm("binance", FIXTURES["binance"][1].raw)
    assert isinstance(delta, BookDelta)
    assert (delta.symbol, delta.first_seq, delta.seq) == ("BNBBTC", 157, 160)
    assert delta.bids == [Level("0.0024", "10")]
    assert delta.asks == [Level("0.0026", "100")]
    # The raw endpoint's bare aggTrade event.
    (agg,) = norm("binance", FIXTURES["binance"][4].raw)
    assert isinstance(agg, Trade)
    assert (agg.trade_id, agg.symbol) == ("12345", "BNBBTC")
    book_ticker = (
        b'{"stream":"bnbusdt@bookTicker","data":{"u":400900217,"s":"BNBUSDT",'
        b'"b":"25.35190000","B":"31.21000000","a":"25.36520000","A":"40.66000000"}}'
    )
    assert norm("binance", book_ticker) == [
        TopOfBook(
            "binance",
            "BNBUSDT",
            "25.35190000",
            "31.21000000",
            "25.36520000",
            "40.66000000",
            400900217,
            0,
            42,
        )
    ]
    partial = (
        b'{"stream":"bnbbtc@depth5@100ms","data":{"lastUpdateId":160,'
        b'"bids":[["0.0024","10"]],"asks":[["0.0026","100"]]}}'
    )
    assert norm("binance", partial) == [
        BookSnapshot(
            "binance", "BNBBTC", [Level("0.0024", "10")], [Level("0.0026", "100")], 160, 0, 42
        )
    ]
    mark = (
        b'{"stream":"btcusdt@markPrice","data":{"e":"markPriceUpdate","E":1562305380000,'
        b'"s":"BTCUSDT","p":"11794.15000000","i":"11784.62659091","P":"11784.25641265",'
        b'"r":"0.00038167","T":1562306400000}}'
    )
    assert norm("binance", mark) == [
        Funding("binance", "BTCUSDT", "0.00038167", 1562306400000 * MS, 1562305380000 * MS, 42)
    ]


def test_coinbase() -> None:
    (match,) = norm("coinbase", FIXTURES["coinbase"][0].raw)
    assert isinstance(match, Trade)
    assert match.trade_id == "10"
    # Coinbase's side is the maker's; the schema's is the taker's.
    assert match.side == "buy"
    (delta,) = norm("coinbase", FIXTURES["coinbase"][1].raw)
    assert isinstance(delta, BookDelta)
    assert delta.bids == [Level("10101.80000000", "0.162567")]
    assert delta.venue_ts_ns == 1565815347265000000  # "2019-08-14T20:42:27.265Z"
    (snap,) = norm("coinbase", FIXTURES["coinbase"][2].raw)
    assert isinstance(snap, BookSnapshot)
    assert snap.bids[0] == Level("10101.10", "0.45054140")
    (ticker,) = norm("coinbase", FIXTURES["coinbase"][3].raw)
    assert isinstance(ticker, Ticker)


def test_kraken_keeps_json_numbers_as_sent() -> None:
    (trade,) = norm("kraken", FIXTURES["kraken"][0].raw)
    assert isinstance(trade, Trade)
    assert trade.symbol == "MATIC/USD"
    (snap,) = norm("kraken", FIXTURES["kraken"][1].raw)
    assert isinstance(snap, BookSnapshot)
    assert snap.checksum is not None
    assert all("." in lv.price and "e" not in lv.size.lower() for lv in snap.bids + snap.asks)
    raw = (
        b'{"channel":"ticker","type":"update","data":[{"symbol":"ALGO/USD","bid":0.10025,'
        b'"bid_qty":740.0,"ask":0.10036,"ask_qty":1361.44813783,"last":0.10035,'
        b'"volume":997038.98383185,"vwap":0.10148,"low":0.09979,"high":0.10285,'
        b'"change":-0.00017,"change_pct":-0.17}]}'
    )
    assert norm("kraken", raw) == [
        Ticker("kraken", "ALGO/USD", "0.10035", "0.10025", "0.10036", "997038.98383185", 0, 42)
    ]


def test_okx() -> None:
    (trade,) = norm("okx", FIXTURES["okx"][0].raw)
    assert isinstance(trade, Trade)
    assert trade.symbol == "BTC-USDT"
    (snap,) = norm("okx", FIXTURES["okx"][1].raw)
    assert isinstance(snap, BookSnapshot)
    assert snap.checksum is not None
    funding = (
        b'{"arg":{"channel":"funding-rate","instId":"BTC-USD-SWAP"},"data":[{"fundingRate":'
        b'"0.0001875391284828","fundingTime":"1700726400000","instId":"BTC-USD-SWAP",'
        b'"instType":"SWAP","nextFundingRate":"","ts":"1700724675402"}]}'
    )
    assert norm("okx", funding) == [
        Funding(
            "okx", "BTC-USD-SWAP", "0.0001875391284828", 1700726400000 * MS, 1700724675402 * MS, 42
        )
    ]
    bbo = (
        b'{"arg":{"channel":"bbo-tbt","instId":"BCH-USDT-SWAP"},"data":[{"asks":[["111.06",'
        b'"55154","0","2"]],"bids":[["111.05","57745","0","2"]],"ts":"1670324386802",'
        b'"seqId":363996337}]}'
    )
    assert norm("okx", bbo) == [
        TopOfBook(
            "okx",
            "BCH-USDT-SWAP",
            "111.05",
            "57745",
            "111.06",
            "55154",
            363996337,
            1670324386802 * MS,
            42,
        )
    ]


def test_bybit() -> None:
    (trade,) = norm("bybit", FIXTURES["bybit"][0].raw)
    assert isinstance(trade, Trade)
    assert trade.side in ("buy", "sell")
    (snap,) = norm("bybit", FIXTURES["bybit"][1].raw)
    assert isinstance(snap, BookSnapshot)
    assert snap.seq > 0
    linear = (
        b'{"topic":"tickers.BTCUSDT","type":"snapshot","data":{"symbol":"BTCUSDT",'
        b'"lastPrice":"17216.00","bid1Price":"17215.50","ask1Price":"17216.00",'
        b'"volume24h":"91705.276","fundingRate":"-0.000212","nextFundingTime":"1673280000000"},'
        b'"cs":24987956059,"ts":1673272861686}'
    )
    ticker, funding = norm("bybit", linear)
    assert ticker == Ticker(
        "bybit", "BTCUSDT", "17216.00", "17215.50", "17216.00", "91705.276", 1673272861686 * MS, 42
    )
    assert funding == Funding(
        "bybit", "BTCUSDT", "-0.000212", 1673280000000 * MS, 1673272861686 * MS, 42
    )


def test_bitstamp() -> None:
    (trade,) = norm("bitstamp", FIXTURES["bitstamp"][0].raw)
    assert isinstance(trade, Trade)
    assert (trade.symbol, trade.trade_id) == ("btcusd", "307183929")
    assert trade.size == "0.0125" or trade.size.startswith("0.0125")
    (delta,) = norm("bitstamp", FIXTURES["bitstamp"][1].raw)
    assert isinstance(delta, BookDelta)
    assert delta.seq == 1700000000123456
    assert delta.venue_ts_ns == 1700000000123456000


@pytest.mark.parametrize("venue", VENUES)
def test_every_simulator_data_message_normalizes(venue: str) -> None:
    feed = FEEDS[venue]()
    channels = sorted(feed.trade_channels | feed.book_channels)
    topics = {
        "binance": [f"btcusdt@{c}" for c in channels],
        "coinbase": [f"{c}:BTC-USD" for c in channels],
        "kraken": [f"{c}:BTC/USD" for c in channels],
        "okx": [f"{c}:BTC-USDT" for c in channels],
        "bybit": [f"{c}.BTCUSDT" for c in channels],
        "bitstamp": [f"{c}_btcusd" for c in channels],
    }[venue]
    # Channels the simulator renders with a shape the venue does not use for them.
    unshaped = {
        "bookTicker",
        "depth5",
        "depth20",
        "live_orders",
        "orderbook.1",
        "bbo-tbt",
        "books5",
    }
    for topic in topics:
        events = norm(venue, feed.render(topic, 5, 1_700_000_000_000_000_000))
        channel = feed.split(topic)
        assert channel is not None
        if channel[0] not in unshaped:
            assert len(events) == 1, topic


def test_malformed_data_gives_no_event() -> None:
    bad_ts = (
        b'{"arg":{"channel":"trades","instId":"BTC-USDT"},"data":[{"instId":"BTC-USDT",'
        b'"tradeId":"1","px":"1","sz":"1","side":"buy","ts":"soon"}]}'
    )
    assert norm("okx", bad_ts) == []
    assert norm("binance", b"not json") == []
    assert norm("kraken", b'{"channel":"book","type":"update","data":[{"symbol":"X"}]}') == []
