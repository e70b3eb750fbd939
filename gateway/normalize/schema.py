"""The normalized market-data schema: one shape for every venue.

Events are msgspec Structs, tagged by a `type` field:

| type       | what                                                                         |
| ---------- | ---------------------------------------------------------------------------- |
| `trade`    | one execution: price, size, taker side, the venue's trade id                 |
| `snapshot` | a whole book (or its top N): bids best first, asks best first, its sequence  |
| `delta`    | changed levels: absolute size per price, size "0" removes the level          |
| `tob`      | best bid and ask (Binance bookTicker, OKX bbo-tbt)                           |
| `ticker`   | last price, best bid/ask, 24 h volume                                        |
| `funding`  | funding rate and the next funding time (perpetuals: OKX, Bybit, Binance USD-M) |
| `reset`    | the gateway's word that a book went stale and is being resynchronized       |

Prices and sizes are the exchange's own decimal text (`"45283.50"`, never a float): exact,
with the venue's precision kept (Kraken and OKX checksums depend on it), and cheap, since
no number is parsed twice. The local books order levels by a key derived from the text
(gateway.books.book: an exact binary64 for up to 15 significant digits, Decimal past
them; the C books of dataplane/shim/book.c: scaled integers, the text kept beside them).

Every event carries the venue's name and its own symbol spelling (`BTCUSDT`, `BTC/USD`,
`BTC-USDT`, `btcusd`), the venue's timestamp in ns since the epoch (`venue_ts_ns`, 0 when
the message has none) and the gateway's receive stamp (`recv_ns`). Book events carry the
venue's sequence fields mapped to three names: `first_seq` (Binance `U`), `seq` (Binance
`u`, OKX `seqId`, Bybit `u`, Binance snapshot `lastUpdateId`, Bitstamp's
`microtimestamp`) and `prev_seq` (OKX `prevSeqId`, Binance futures `pu`); 0 means the
venue has none. `checksum` is the venue's
book checksum, None where it sends none.

Encodings:
- JSON (`encode_json`/`decode_json`): an object per event, `{"type": "trade", ...}`; a level
  is a two-element array `["price", "size"]`.
- Binary (`encode_binary`/`decode_binary`): MessagePack, each event an array whose first
  element is a small integer tag (trade 1, snapshot 2, delta 3, tob 4, ticker 5, funding 6,
  reset 7) followed by the fields in the order declared here; about half the JSON's bytes
  since no field name is repeated.
"""

from __future__ import annotations

from typing import Any

import msgspec


class Level(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One price level: the exchange's decimal strings."""

    price: str
    size: str


class Trade(msgspec.Struct, tag="trade", tag_field="type", gc=False):
    venue: str
    symbol: str
    price: str
    size: str
    #: The taker's side, "buy" or "sell"; "" when the venue does not say.
    side: str
    trade_id: str
    venue_ts_ns: int
    recv_ns: int


class BookSnapshot(msgspec.Struct, tag="snapshot", tag_field="type"):
    venue: str
    symbol: str
    bids: list[Level]
    asks: list[Level]
    seq: int
    venue_ts_ns: int
    recv_ns: int
    checksum: int | None = None


class BookDelta(msgspec.Struct, tag="delta", tag_field="type"):
    venue: str
    symbol: str
    bids: list[Level]
    asks: list[Level]
    first_seq: int
    seq: int
    prev_seq: int
    venue_ts_ns: int
    recv_ns: int
    checksum: int | None = None


class TopOfBook(msgspec.Struct, tag="tob", tag_field="type", gc=False):
    venue: str
    symbol: str
    bid_price: str
    bid_size: str
    ask_price: str
    ask_size: str
    seq: int
    venue_ts_ns: int
    recv_ns: int


class Ticker(msgspec.Struct, tag="ticker", tag_field="type", gc=False):
    venue: str
    symbol: str
    last: str
    bid: str
    ask: str
    volume_24h: str
    venue_ts_ns: int
    recv_ns: int


class Funding(msgspec.Struct, tag="funding", tag_field="type", gc=False):
    venue: str
    symbol: str
    rate: str
    next_funding_ns: int
    venue_ts_ns: int
    recv_ns: int


class BookReset(msgspec.Struct, tag="reset", tag_field="type", gc=False):
    """A book was found wrong (gap, checksum, stale snapshot) and is being rebuilt."""

    venue: str
    symbol: str
    reason: str
    recv_ns: int


Event = Trade | BookSnapshot | BookDelta | TopOfBook | Ticker | Funding | BookReset
EVENT_TYPES: tuple[type[Any], ...] = (
    Trade,
    BookSnapshot,
    BookDelta,
    TopOfBook,
    Ticker,
    Funding,
    BookReset,
)

_json_encoder = msgspec.json.Encoder()
_json_decoder: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)


def encode_json(event: Event) -> bytes:
    return _json_encoder.encode(event)


def decode_json(data: bytes | str) -> Event:
    return _json_decoder.decode(data)


def _compact_twin(cls: type[Any], tag: int) -> type[Any]:
    """The same fields as cls, encoded as an array led by an integer tag."""
    fields = [(f.name, f.type) for f in msgspec.structs.fields(cls)]
    return msgspec.defstruct(
        f"{cls.__name__}Binary", fields, array_like=True, tag=tag, gc=False, module=__name__
    )


_BINARY = {cls: _compact_twin(cls, i) for i, cls in enumerate(EVENT_TYPES, start=1)}
_FROM_BINARY = {twin: cls for cls, twin in _BINARY.items()}
_msgpack_encoder = msgspec.msgpack.Encoder()
_BinaryUnion: Any = None
for _twin in _BINARY.values():
    _BinaryUnion = _twin if _BinaryUnion is None else _BinaryUnion | _twin
_msgpack_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(_BinaryUnion)


def encode_binary(event: Event) -> bytes:
    twin = _BINARY[type(event)]
    return _msgpack_encoder.encode(twin(*msgspec.structs.astuple(event)))


def decode_binary(data: bytes) -> Event:
    twin = _msgpack_decoder.decode(data)
    event: Event = _FROM_BINARY[type(twin)](*msgspec.structs.astuple(twin))
    return event


#: The encodings a normalized subscription may choose.
ENCODINGS = ("json", "binary")
#: Topic prefix of normalized events per encoding: the gateway publishes the events made
#: from upstream topic T as `norm:T` (JSON) or `normbin:T` (binary), one event per
#: message (gateway.hub.names.normalized_topic). An upstream topic may not start so.
TOPIC_PREFIXES = {"json": "norm:", "binary": "normbin:"}


def encode(event: Event, encoding: str) -> bytes:
    return encode_binary(event) if encoding == "binary" else encode_json(event)


def decode(payload: bytes | memoryview, encoding: str) -> Event:
    data = bytes(payload)
    return decode_binary(data) if encoding == "binary" else decode_json(data)


def encoding_of(topic: str) -> tuple[str, str] | None:
    """(encoding, upstream topic) of a normalized topic, None for an upstream one."""
    for encoding, prefix in TOPIC_PREFIXES.items():
        if topic.startswith(prefix):
            return encoding, topic[len(prefix) :]
    return None
