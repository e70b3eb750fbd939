"""Message identity per dialect: what A/B arbitration compares to tell copies of one
message apart from different messages, without a full parse.

`identity_for("okx")(raw)` gives an Identity(topic, id, kind, prev) or a NoIdentity(reason),
never an exception. `topic` is the stream within which `id` is ordered (the dialect's topic
where the frame alone tells it). Kinds:

    SEQUENCE  the exchange's contiguous sequence: `prev` is the id the message follows
              (Binance depth U-1, OKX prevSeqId, Bybit orderbook u-1; None after a
              snapshot or reset), so a missing message is a detectable gap
    ID        an increasing exchange id with holes (Coinbase sequence on one channel,
              Kraken and Bitstamp trade ids, Binance bookTicker u, OKX tradeId): order and
              duplicates, but no gap detection
    HASH      no exchange id: a 64-bit content hash of the frame (blake2b), for duplicates
              within a window only; two encodings of one message hash differently

The exchange ids are read with msgspec into small structs whose unknown fields are
skipped; the generic dialect reads its configured topic path and hashes the frame.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import orjson

from gateway.dialects.base import get_path, has_path
from gateway.dialects.coinbase import TYPE_CHANNEL
from gateway.dialects.generic import GenericConfig
from gateway.dialects.jsonscan import parse_path

SEQUENCE = "seq"
ID = "id"
HASH = "hash"
KINDS = (SEQUENCE, ID, HASH)


@dataclass(frozen=True, slots=True)
class Identity:
    """One message's identity: same topic and id (and kind) means the same message."""

    topic: str
    id: int
    kind: str
    prev: int | None = None  # SEQUENCE: the id this message follows (None: a new start)


@dataclass(frozen=True, slots=True)
class NoIdentity:
    """The frame carries no identity: not data, malformed, or of an unknown shape."""

    reason: str


Result = Identity | NoIdentity
MessageIdentity = Callable[[bytes], Result]

MALFORMED_FRAME = NoIdentity("malformed")
UNEXPECTED_SHAPE = NoIdentity("unexpected shape")
NOT_DATA = NoIdentity("not data")


def content_hash(raw: bytes) -> int:
    """A 64-bit hash of the frame's bytes."""
    return int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")


def _decoder(kind: type[Any]) -> Callable[[bytes], Any]:
    return msgspec.json.Decoder(kind).decode


def _decode(decode: Callable[[bytes], Any], raw: bytes) -> Any:
    """The struct, or the NoIdentity that says why not."""
    try:
        return decode(raw)
    except msgspec.ValidationError:
        return UNEXPECTED_SHAPE
    except (msgspec.DecodeError, UnicodeDecodeError):
        return MALFORMED_FRAME


# ---- Binance ------------------------------------------------------------------------------
class _BinanceEvent(msgspec.Struct):
    e: str | None = None
    s: str | None = None
    t: int | None = None  # trade id
    a: int | str | list[Any] | None = None  # aggTrade: its id; depth: asks; bookTicker: ask
    U: int | None = None  # depth: first update id
    u: int | None = None  # depth: last update id; bookTicker: update id
    lastUpdateId: int | None = None  # partial depth: the book's update id


class _BinanceFrame(_BinanceEvent):
    stream: str | None = None
    data: _BinanceEvent | None = None


_BINANCE_RAW_EVENTS = {"trade": "trade", "aggTrade": "aggTrade", "depthUpdate": "depth"}
_decode_binance = _decoder(_BinanceFrame)


def binance_identity(raw: bytes) -> Result:  # noqa: PLR0911 (one return per Binance stream kind)
    """Trade `t` and aggTrade `a` (contiguous per symbol), depth `U`..`u`, bookTicker `u`,
    partial depth `lastUpdateId`."""
    frame = _decode(_decode_binance, raw)
    if isinstance(frame, NoIdentity):
        return frame
    event: _BinanceEvent
    if frame.stream is not None:
        if frame.data is None:
            return NOT_DATA
        topic, event = frame.stream, frame.data
    elif frame.e in _BINANCE_RAW_EVENTS and frame.s:  # the raw endpoint: unwrapped events
        topic, event = f"{frame.s.lower()}@{_BINANCE_RAW_EVENTS[frame.e]}", frame
    else:
        return NOT_DATA
    kind = event.e
    if kind == "trade" and event.t is not None:
        return Identity(topic, event.t, SEQUENCE, event.t - 1)
    if kind == "aggTrade":
        agg = event.a if isinstance(event.a, int) else event.t
        if agg is not None:
            return Identity(topic, agg, SEQUENCE, agg - 1)
    if kind == "depthUpdate" and event.U is not None and event.u is not None:
        return Identity(topic, event.u, SEQUENCE, event.U - 1)
    if kind is None and event.u is not None:  # bookTicker
        return Identity(topic, event.u, ID)
    if event.lastUpdateId is not None:
        return Identity(topic, event.lastUpdateId, ID)
    return Identity(topic, content_hash(raw), HASH)


# ---- Coinbase -----------------------------------------------------------------------------
class _CoinbaseFrame(msgspec.Struct):
    type: str | None = None
    product_id: str | None = None
    sequence: int | None = None


_decode_coinbase = _decoder(_CoinbaseFrame)


def coinbase_identity(raw: bytes) -> Result:
    """`sequence` (per product, shared by its channels: contiguous only on `full`)."""
    frame = _decode(_decode_coinbase, raw)
    if isinstance(frame, NoIdentity):
        return frame
    channel = TYPE_CHANNEL.get(frame.type or "")
    if channel is None or not frame.product_id:
        return NOT_DATA
    topic = f"{channel}:{frame.product_id}"
    if frame.sequence is None:
        return Identity(topic, content_hash(raw), HASH)
    if channel == "full":
        return Identity(topic, frame.sequence, SEQUENCE, frame.sequence - 1)
    return Identity(topic, frame.sequence, ID)


# ---- Kraken v2 ----------------------------------------------------------------------------
class _KrakenItem(msgspec.Struct):
    symbol: str | None = None
    trade_id: int | None = None


class _KrakenFrame(msgspec.Struct):
    channel: str | None = None
    data: list[_KrakenItem] | None = None


_decode_kraken = _decoder(_KrakenFrame)


def kraken_identity(raw: bytes) -> Result:
    """Trades by their last `trade_id`; book and ticker updates carry none (hash)."""
    frame = _decode(_decode_kraken, raw)
    if isinstance(frame, NoIdentity):
        return frame
    if not frame.channel or not frame.data or not frame.data[0].symbol:
        return NOT_DATA
    topic = f"{frame.channel}:{frame.data[0].symbol}"
    last = frame.data[-1].trade_id
    if frame.channel == "trade" and last is not None:
        return Identity(topic, last, ID)
    return Identity(topic, content_hash(raw), HASH)


# ---- OKX ----------------------------------------------------------------------------------
class _OkxArg(msgspec.Struct):
    channel: str | None = None
    instId: str | None = None  # the exchange's spelling


class _OkxItem(msgspec.Struct):
    seqId: int | None = None
    prevSeqId: int | None = None
    tradeId: str | None = None


class _OkxFrame(msgspec.Struct):
    arg: _OkxArg | None = None
    event: str | None = None
    data: list[_OkxItem] | None = None


_decode_okx = _decoder(_OkxFrame)


def okx_identity(raw: bytes) -> Result:
    """Books `seqId` after `prevSeqId` (-1: a snapshot), trades `tradeId`."""
    frame = _decode(_decode_okx, raw)
    if isinstance(frame, NoIdentity):
        return frame
    arg = frame.arg
    if frame.event is not None or arg is None or not arg.channel or not arg.instId:
        return NOT_DATA
    if not frame.data:
        return NOT_DATA
    topic = f"{arg.channel}:{arg.instId}"
    item = frame.data[0]
    if item.seqId is not None:
        prev = item.prevSeqId if item.prevSeqId is not None and item.prevSeqId >= 0 else None
        return Identity(topic, item.seqId, SEQUENCE, prev)
    trade_ids = [d.tradeId for d in frame.data if d.tradeId]
    if trade_ids and all(t.isdigit() for t in trade_ids):
        return Identity(topic, max(int(t) for t in trade_ids), ID)
    return Identity(topic, content_hash(raw), HASH)


# ---- Bybit --------------------------------------------------------------------------------
class _BybitBook(msgspec.Struct):
    u: int | None = None
    seq: int | None = None


class _BybitFrame(msgspec.Struct):
    topic: str | None = None
    type: str | None = None
    cs: int | None = None
    data: _BybitBook | list[Any] | None = None


_decode_bybit = _decoder(_BybitFrame)


def bybit_identity(raw: bytes) -> Result:
    """Orderbook `u` (contiguous; a snapshot or u=1 starts anew), tickers `cs`."""
    frame = _decode(_decode_bybit, raw)
    if isinstance(frame, NoIdentity):
        return frame
    if not frame.topic or frame.data is None:
        return NOT_DATA
    data = frame.data
    if isinstance(data, _BybitBook) and data.u is not None:
        prev = None if frame.type == "snapshot" or data.u == 1 else data.u - 1
        return Identity(frame.topic, data.u, SEQUENCE, prev)
    if frame.cs is not None:
        return Identity(frame.topic, frame.cs, ID)
    return Identity(frame.topic, content_hash(raw), HASH)


# ---- Bitstamp -----------------------------------------------------------------------------
class _BitstampData(msgspec.Struct):
    id: int | None = None


class _BitstampFrame(msgspec.Struct):
    channel: str | None = None
    event: str | None = None
    data: _BitstampData | None = None


_decode_bitstamp = _decoder(_BitstampFrame)


def bitstamp_identity(raw: bytes) -> Result:
    """Trades by `data.id`; order book messages carry no id (hash)."""
    frame = _decode(_decode_bitstamp, raw)
    if isinstance(frame, NoIdentity):
        return frame
    if not frame.channel or not frame.event or frame.event.startswith("bts:"):
        return NOT_DATA
    if frame.event == "trade" and frame.data is not None and frame.data.id is not None:
        return Identity(frame.channel, frame.data.id, ID)
    return Identity(frame.channel, content_hash(raw), HASH)


# ---- generic ------------------------------------------------------------------------------
class GenericIdentity:
    """The configured topic (read as the dialect reads data topics) and a content hash.

    One orjson parse: the key-path scanner through ctypes costs more per single frame."""

    def __init__(self, config: GenericConfig | None = None) -> None:
        self.config = config or GenericConfig()
        self._topic_parts = [parse_path(p) for p in self.config.topic_path.split("+")]
        self._presence = (
            parse_path(self.config.data_presence) if self.config.data_presence else None
        )

    def __call__(self, raw: bytes) -> Result:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return MALFORMED_FRAME
        if not isinstance(obj, dict):
            return UNEXPECTED_SHAPE
        if self._presence is not None and not has_path(obj, self._presence):
            return NOT_DATA
        parts = [get_path(obj, p) for p in self._topic_parts]
        if not all(isinstance(p, str) and p for p in parts):
            return NOT_DATA
        return Identity(self.config.topic_join.join(parts), content_hash(raw), HASH)


IDENTITIES: dict[str, MessageIdentity] = {
    "binance": binance_identity,
    "coinbase": coinbase_identity,
    "kraken": kraken_identity,
    "okx": okx_identity,
    "bybit": bybit_identity,
    "bitstamp": bitstamp_identity,
}


def identity_for(dialect: str, config: GenericConfig | None = None) -> MessageIdentity:
    """The identity function of a dialect (`config`: the generic dialect's)."""
    if dialect == "generic" or config is not None:
        return GenericIdentity(config)
    try:
        return IDENTITIES[dialect]
    except KeyError:
        known = ", ".join([*IDENTITIES, "generic"])
        raise ValueError(f"unknown dialect {dialect!r}; known: {known}") from None
