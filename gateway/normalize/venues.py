"""Per-venue normalizers: a raw data message (the bytes the gateway received) -> events.

Each venue's messages are decoded by msgspec into typed structs that name only the fields
used (the rest are skipped in C), then mapped onto gateway.normalize.schema. Prices and
sizes stay the venue's text; Kraken v2 sends them as JSON numbers, which are kept as their
raw text (msgspec.Raw) so `0.10000000` stays `0.10000000`. A message that is not market
data (acks, heartbeats, statuses) or that the normalizer does not know gives no event.

Side is the taker's: Binance `m` (buyer is maker) -> sell; Coinbase `match.side` is the
maker's, so it is flipped; the others send the taker's side.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec

from gateway.normalize.schema import (
    BookDelta,
    BookSnapshot,
    Event,
    Funding,
    Level,
    Ticker,
    TopOfBook,
    Trade,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_US = timedelta(microseconds=1)
MS = 1_000_000


def datetime_ns(value: datetime) -> int:
    return (value - _EPOCH) // _US * 1000


def _int(text: str) -> int:
    return int(text) if text else 0


class Normalizer:
    """Turns one venue's raw data messages into normalized events."""

    venue = ""

    def normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        try:
            return self._normalize(raw, recv_ns)
        except (msgspec.ValidationError, msgspec.DecodeError, ValueError):
            return []

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        raise NotImplementedError


# ---- Binance --------------------------------------------------------------------------------
class _BnEnvelope(msgspec.Struct):
    stream: str = ""
    data: msgspec.Raw = msgspec.Raw(b"")
    e: str = ""  # an event from the raw endpoint (/ws), not wrapped


#: Event type of the raw endpoint -> the stream kind that carries it.
_BN_RAW_KIND = {
    "trade": "trade",
    "aggTrade": "aggTrade",
    "depthUpdate": "depth",
    "24hrTicker": "ticker",
    "markPriceUpdate": "markPrice",
}


class _BnTrade(msgspec.Struct):
    s: str
    t: int
    p: str
    q: str
    T: int
    m: bool


class _BnAggTrade(msgspec.Struct):
    s: str
    p: str
    q: str
    T: int
    m: bool
    a: int = 0  # the aggregate trade id (the simulator sends a trade id, t, instead)
    t: int = 0


class _BnDepthUpdate(msgspec.Struct):
    E: int
    s: str
    U: int
    u: int
    b: list[Level]
    a: list[Level]
    pu: int = 0


class _BnPartialDepth(msgspec.Struct):
    lastUpdateId: int
    bids: list[Level]
    asks: list[Level]


class _BnBookTicker(msgspec.Struct):
    u: int
    s: str
    b: str
    B: str
    a: str
    A: str


class _BnTicker(msgspec.Struct):
    E: int
    s: str
    c: str
    b: str
    a: str
    v: str


class _BnMarkPrice(msgspec.Struct):
    E: int
    s: str
    r: str
    T: int


def _decoder(kind: Any) -> Callable[[Any], Any]:
    return msgspec.json.Decoder(kind).decode


class BinanceNormalizer(Normalizer):
    """Combined-stream messages, `{"stream": "btcusdt@depth@100ms", "data": {...}}`, and
    the raw endpoint's bare events (told apart by `e`).

    The partial-depth streams (`@depth5`, `@depth20`) and `@bookTicker` carry no event
    type, so the stream name chooses the decoder."""

    venue = "binance"

    def __init__(self) -> None:
        self._envelope = _decoder(_BnEnvelope)
        self._trade = _decoder(_BnTrade)
        self._agg = _decoder(_BnAggTrade)
        self._depth = _decoder(_BnDepthUpdate)
        self._partial = _decoder(_BnPartialDepth)
        self._book_ticker = _decoder(_BnBookTicker)
        self._ticker = _decoder(_BnTicker)
        self._mark = _decoder(_BnMarkPrice)

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:  # noqa: PLR0911 (one return per Binance event type)
        env = self._envelope(raw)
        if env.stream:
            symbol, _, stream = env.stream.partition("@")
            kind = stream.partition("@")[0]
            data: Any = env.data
        else:
            symbol, kind, data = "", _BN_RAW_KIND.get(env.e, ""), raw
        if kind == "depth":
            d = self._depth(data)
            return [BookDelta(self.venue, d.s, d.b, d.a, d.U, d.u, d.pu, d.E * MS, recv_ns, None)]
        if kind == "trade":
            t = self._trade(data)
            side = "sell" if t.m else "buy"
            return [Trade(self.venue, t.s, t.p, t.q, side, str(t.t), t.T * MS, recv_ns)]
        if kind == "aggTrade":
            g = self._agg(data)
            side = "sell" if g.m else "buy"
            return [Trade(self.venue, g.s, g.p, g.q, side, str(g.a or g.t), g.T * MS, recv_ns)]
        if kind in ("depth5", "depth10", "depth20"):
            p = self._partial(data)
            return [
                BookSnapshot(self.venue, symbol.upper(), p.bids, p.asks, p.lastUpdateId, 0, recv_ns)
            ]
        if kind == "bookTicker":
            k = self._book_ticker(data)
            return [TopOfBook(self.venue, k.s, k.b, k.B, k.a, k.A, k.u, 0, recv_ns)]
        if kind == "ticker":
            x = self._ticker(data)
            return [Ticker(self.venue, x.s, x.c, x.b, x.a, x.v, x.E * MS, recv_ns)]
        if kind.startswith("markPrice"):
            f = self._mark(data)
            return [Funding(self.venue, f.s, f.r, f.T * MS, f.E * MS, recv_ns)]
        return []

    def rest_snapshot(self, raw: bytes | str, symbol: str, recv_ns: int) -> BookSnapshot:
        """GET /api/v3/depth: `{"lastUpdateId": N, "bids": [...], "asks": [...]}`."""
        p = self._partial(raw)
        return BookSnapshot(self.venue, symbol, p.bids, p.asks, p.lastUpdateId, 0, recv_ns)


# ---- Coinbase -------------------------------------------------------------------------------
class _CbChange(msgspec.Struct, array_like=True):
    side: str
    price: str
    size: str


class _CbMatch(msgspec.Struct, tag="match", tag_field="type"):
    trade_id: int
    product_id: str
    price: str
    size: str
    side: str
    time: datetime


class _CbLastMatch(_CbMatch, tag="last_match"):
    pass


class _CbSnapshot(msgspec.Struct, tag="snapshot", tag_field="type"):
    product_id: str
    bids: list[Level]
    asks: list[Level]
    time: datetime | None = None


class _CbL2Update(msgspec.Struct, tag="l2update", tag_field="type"):
    product_id: str
    changes: list[_CbChange]
    time: datetime


class _CbTicker(msgspec.Struct, tag="ticker", tag_field="type"):
    product_id: str
    price: str
    best_bid: str = ""
    best_ask: str = ""
    volume_24h: str = ""
    time: datetime | None = None


_CbMessage = _CbMatch | _CbLastMatch | _CbSnapshot | _CbL2Update | _CbTicker
_MAKER_TO_TAKER = {"buy": "sell", "sell": "buy"}


class CoinbaseNormalizer(Normalizer):
    """Coinbase Exchange: `match`, level2 `snapshot`/`l2update`, `ticker`."""

    venue = "coinbase"

    def __init__(self) -> None:
        self._decode = _decoder(_CbMessage)

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        m = self._decode(raw)
        if isinstance(m, _CbL2Update):
            bids = [Level(c.price, c.size) for c in m.changes if c.side == "buy"]
            asks = [Level(c.price, c.size) for c in m.changes if c.side != "buy"]
            ts = datetime_ns(m.time)
            return [BookDelta(self.venue, m.product_id, bids, asks, 0, 0, 0, ts, recv_ns)]
        if isinstance(m, _CbMatch):
            side = _MAKER_TO_TAKER.get(m.side, "")
            ts = datetime_ns(m.time)
            trade_id = str(m.trade_id)
            return [Trade(self.venue, m.product_id, m.price, m.size, side, trade_id, ts, recv_ns)]
        if isinstance(m, _CbSnapshot):
            ts = datetime_ns(m.time) if m.time else 0
            return [BookSnapshot(self.venue, m.product_id, m.bids, m.asks, 0, ts, recv_ns)]
        if isinstance(m, _CbTicker):
            ts = datetime_ns(m.time) if m.time else 0
            return [
                Ticker(
                    self.venue,
                    m.product_id,
                    m.price,
                    m.best_bid,
                    m.best_ask,
                    m.volume_24h,
                    ts,
                    recv_ns,
                )
            ]
        return []


# ---- Kraken v2 ------------------------------------------------------------------------------
class _KrLevel(msgspec.Struct):
    price: msgspec.Raw
    qty: msgspec.Raw


class _KrBook(msgspec.Struct):
    symbol: str
    bids: list[_KrLevel]
    asks: list[_KrLevel]
    checksum: int | None = None
    timestamp: datetime | None = None


class _KrTrade(msgspec.Struct):
    symbol: str
    side: str
    price: msgspec.Raw
    qty: msgspec.Raw
    trade_id: int
    timestamp: datetime


class _KrTicker(msgspec.Struct):
    symbol: str
    bid: msgspec.Raw
    ask: msgspec.Raw
    last: msgspec.Raw
    volume: msgspec.Raw


class _KrEnvelope(msgspec.Struct):
    channel: str
    data: msgspec.Raw = msgspec.Raw(b"[]")
    type: str = ""


def _text(raw: msgspec.Raw) -> str:
    return bytes(raw).decode()


def _kr_levels(levels: list[_KrLevel]) -> list[Level]:
    return [Level(bytes(lv.price).decode(), bytes(lv.qty).decode()) for lv in levels]


class KrakenNormalizer(Normalizer):
    """Kraken WebSocket v2: `book` snapshot/update with its CRC32, `trade`, `ticker`."""

    venue = "kraken"

    def __init__(self) -> None:
        self._envelope = _decoder(_KrEnvelope)
        self._book = _decoder(list[_KrBook])
        self._trade = _decoder(list[_KrTrade])
        self._ticker = _decoder(list[_KrTicker])

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        env = self._envelope(raw)
        out: list[Event] = []
        if env.channel == "book":
            for b in self._book(env.data):
                ts = datetime_ns(b.timestamp) if b.timestamp else 0
                bids, asks = _kr_levels(b.bids), _kr_levels(b.asks)
                if env.type == "snapshot":
                    out.append(
                        BookSnapshot(self.venue, b.symbol, bids, asks, 0, ts, recv_ns, b.checksum)
                    )
                else:
                    out.append(
                        BookDelta(
                            self.venue, b.symbol, bids, asks, 0, 0, 0, ts, recv_ns, b.checksum
                        )
                    )
        elif env.channel == "trade":
            for t in self._trade(env.data):
                out.append(
                    Trade(
                        self.venue,
                        t.symbol,
                        _text(t.price),
                        _text(t.qty),
                        t.side,
                        str(t.trade_id),
                        datetime_ns(t.timestamp),
                        recv_ns,
                    )
                )
        elif env.channel == "ticker":
            for x in self._ticker(env.data):
                out.append(
                    Ticker(
                        self.venue,
                        x.symbol,
                        _text(x.last),
                        _text(x.bid),
                        _text(x.ask),
                        _text(x.volume),
                        0,
                        recv_ns,
                    )
                )
        return out


# ---- OKX ------------------------------------------------------------------------------------
class _OkArg(msgspec.Struct):
    channel: str
    instId: str = ""


class _OkEnvelope(msgspec.Struct):
    arg: _OkArg
    data: msgspec.Raw
    action: str = ""


class _OkTrade(msgspec.Struct):
    instId: str
    tradeId: str
    px: str
    sz: str
    side: str
    ts: str


class _OkBook(msgspec.Struct):
    asks: list[Level]
    bids: list[Level]
    ts: str
    checksum: int | None = None
    seqId: int = 0
    prevSeqId: int = 0


class _OkTicker(msgspec.Struct):
    instId: str
    last: str
    bidPx: str = ""
    askPx: str = ""
    vol24h: str = ""
    ts: str = ""


class _OkFunding(msgspec.Struct):
    instId: str
    fundingRate: str
    fundingTime: str
    ts: str = ""


class OkxNormalizer(Normalizer):
    """OKX v5 public: `books` (snapshot/update, seqId/prevSeqId, CRC32), `books5`,
    `bbo-tbt`, `trades`, `tickers`, `funding-rate`."""

    venue = "okx"

    def __init__(self) -> None:
        self._envelope = _decoder(_OkEnvelope)
        self._book = _decoder(list[_OkBook])
        self._trade = _decoder(list[_OkTrade])
        self._ticker = _decoder(list[_OkTicker])
        self._funding = _decoder(list[_OkFunding])

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        env = self._envelope(raw)
        channel, inst = env.arg.channel, env.arg.instId
        out: list[Event] = []
        if channel.startswith(("books", "bbo")):
            for b in self._book(env.data):
                ts = _int(b.ts) * MS
                if env.action == "update":
                    out.append(
                        BookDelta(
                            self.venue,
                            inst,
                            b.bids,
                            b.asks,
                            0,
                            b.seqId,
                            b.prevSeqId,
                            ts,
                            recv_ns,
                            b.checksum,
                        )
                    )
                elif channel == "bbo-tbt" and b.bids and b.asks:
                    bid, ask = b.bids[0], b.asks[0]
                    out.append(
                        TopOfBook(
                            self.venue,
                            inst,
                            bid.price,
                            bid.size,
                            ask.price,
                            ask.size,
                            b.seqId,
                            ts,
                            recv_ns,
                        )
                    )
                else:
                    out.append(
                        BookSnapshot(
                            self.venue, inst, b.bids, b.asks, b.seqId, ts, recv_ns, b.checksum
                        )
                    )
        elif channel == "trades":
            for t in self._trade(env.data):
                out.append(
                    Trade(
                        self.venue,
                        t.instId,
                        t.px,
                        t.sz,
                        t.side,
                        t.tradeId,
                        _int(t.ts) * MS,
                        recv_ns,
                    )
                )
        elif channel == "tickers":
            for x in self._ticker(env.data):
                out.append(
                    Ticker(
                        self.venue,
                        x.instId,
                        x.last,
                        x.bidPx,
                        x.askPx,
                        x.vol24h,
                        _int(x.ts) * MS,
                        recv_ns,
                    )
                )
        elif channel == "funding-rate":
            for f in self._funding(env.data):
                out.append(
                    Funding(
                        self.venue,
                        f.instId,
                        f.fundingRate,
                        _int(f.fundingTime) * MS,
                        _int(f.ts) * MS,
                        recv_ns,
                    )
                )
        return out


# ---- Bybit ----------------------------------------------------------------------------------
class _ByEnvelope(msgspec.Struct):
    topic: str
    data: msgspec.Raw
    type: str = ""
    ts: int = 0


class _ByTrade(msgspec.Struct):
    T: int
    s: str
    S: str
    v: str
    p: str
    i: str


class _ByBook(msgspec.Struct):
    s: str
    b: list[Level]
    a: list[Level]
    u: int
    seq: int = 0


class _ByTicker(msgspec.Struct):
    symbol: str
    lastPrice: str = ""
    bid1Price: str = ""
    ask1Price: str = ""
    volume24h: str = ""
    fundingRate: str = ""
    nextFundingTime: str = ""


class BybitNormalizer(Normalizer):
    """Bybit v5 public: `orderbook.N.SYM` (snapshot/delta with u), `publicTrade`,
    `tickers` (funding on linear and inverse contracts). A linear ticker delta carries only
    the fields that changed; the others come out empty."""

    venue = "bybit"

    def __init__(self) -> None:
        self._envelope = _decoder(_ByEnvelope)
        self._book = _decoder(_ByBook)
        self._trade = _decoder(list[_ByTrade])
        self._ticker = _decoder(_ByTicker)

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        env = self._envelope(raw)
        kind = env.topic.partition(".")[0]
        ts = env.ts * MS
        if kind == "orderbook":
            b = self._book(env.data)
            if env.type == "snapshot":
                return [BookSnapshot(self.venue, b.s, b.b, b.a, b.u, ts, recv_ns)]
            return [BookDelta(self.venue, b.s, b.b, b.a, 0, b.u, 0, ts, recv_ns)]
        if kind == "publicTrade":
            return [
                Trade(self.venue, t.s, t.p, t.v, t.S.lower(), t.i, t.T * MS, recv_ns)
                for t in self._trade(env.data)
            ]
        if kind == "tickers":
            x = self._ticker(env.data)
            out: list[Event] = [
                Ticker(
                    self.venue,
                    x.symbol,
                    x.lastPrice,
                    x.bid1Price,
                    x.ask1Price,
                    x.volume24h,
                    ts,
                    recv_ns,
                )
            ]
            if x.fundingRate:
                next_ns = _int(x.nextFundingTime) * MS
                out.append(Funding(self.venue, x.symbol, x.fundingRate, next_ns, ts, recv_ns))
            return out
        return []


# ---- Bitstamp -------------------------------------------------------------------------------
class _BsEnvelope(msgspec.Struct):
    data: msgspec.Raw
    channel: str
    event: str


class _BsTrade(msgspec.Struct):
    id: int
    amount_str: str
    price_str: str
    type: int
    microtimestamp: str


class _BsBook(msgspec.Struct):
    microtimestamp: str
    bids: list[Level]
    asks: list[Level]


class BitstampNormalizer(Normalizer):
    """Bitstamp v2: `live_trades_*` (trade), `diff_order_book_*` (deltas stamped by
    microtimestamp, no sequence), `order_book_*` (top 100 snapshots)."""

    venue = "bitstamp"

    def __init__(self) -> None:
        self._envelope = _decoder(_BsEnvelope)
        self._trade = _decoder(_BsTrade)
        self._book = _decoder(_BsBook)

    def _normalize(self, raw: bytes | str, recv_ns: int) -> list[Event]:
        env = self._envelope(raw)
        if env.event.startswith("bts:"):
            return []
        channel = env.channel
        symbol = channel.rpartition("_")[2]
        if env.event == "trade":
            t = self._trade(env.data)
            side = "buy" if t.type == 0 else "sell"
            ts = _int(t.microtimestamp) * 1000
            return [
                Trade(self.venue, symbol, t.price_str, t.amount_str, side, str(t.id), ts, recv_ns)
            ]
        if env.event == "data" and channel.startswith("diff_order_book_"):
            b = self._book(env.data)
            us = _int(b.microtimestamp)
            return [BookDelta(self.venue, symbol, b.bids, b.asks, 0, us, 0, us * 1000, recv_ns)]
        if env.event == "data" and channel.startswith("order_book_"):
            b = self._book(env.data)
            us = _int(b.microtimestamp)
            return [BookSnapshot(self.venue, symbol, b.bids, b.asks, us, us * 1000, recv_ns)]
        return []

    def rest_snapshot(self, raw: bytes | str, symbol: str, recv_ns: int) -> BookSnapshot:
        """GET /api/v2/order_book/{pair}/: its microtimestamp is the snapshot's sequence."""
        b = self._book(raw)
        us = _int(b.microtimestamp)
        return BookSnapshot(self.venue, symbol, b.bids, b.asks, us, us * 1000, recv_ns)


NORMALIZERS: dict[str, type[Normalizer]] = {
    cls.venue: cls
    for cls in (
        BinanceNormalizer,
        CoinbaseNormalizer,
        KrakenNormalizer,
        OkxNormalizer,
        BybitNormalizer,
        BitstampNormalizer,
    )
}


def make_normalizer(venue: str) -> Normalizer:
    return NORMALIZERS[venue]()
