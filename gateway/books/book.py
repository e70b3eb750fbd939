"""A local order book: two sorted sides of exact decimal levels, and the venues' checksums.

A side keeps a dict from a price key to the venue's Level (price and size text) and a
sorted list of the keys, so a level update is a dict store plus, for a new or removed
price, one bisect and a memmove; the best N levels are the first N keys. Bids are negated,
so both sides sort best first. The texts are kept because the venues' checksums are
computed over them (OKX) or over their digits (Kraken), and because they are exact.

Keys (see double_key): `double` (default), `scaled` (`"45283.5"` at scale 12 is
45283500000000000) or `decimal`; all three are exact, wsgw_bench.books times them.

`COrderBook` is the same interface over the C book (dataplane/shim/book.c: scaled
integers, the texts rebuilt byte for byte), for the venues done in C: its per-message path
is gateway.books.sync.BinanceBookSync.on_raw. Levels the C book cannot hold exactly (a text
that is not a plain decimal, more than 18 digits) move the book to a Python OrderBook, once.
"""

from __future__ import annotations

import zlib
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import Any

import msgspec

from dataplane.shim import BOOK_APPLIED, BOOK_ASKS, BOOK_BIDS, CBook
from gateway.normalize.schema import Level

#: Decimal places a scaled key keeps: enough for every spot and perpetual tick in use.
DEFAULT_SCALE = 12


def is_zero(size: str) -> bool:
    """True for "0", "0.000", "0E-8": the size that removes a level."""
    mantissa = size.strip("0.")
    return not mantissa or mantissa[0] in "eE"


def double_key(text: str) -> float | Decimal:
    """Price text -> a key that orders and identifies prices exactly, cheaply.

    A decimal of at most 15 significant digits converts to a distinct binary64 (DBL_DIG
    is 15) and correctly rounded conversion never reverses an order, so for such texts
    (under 16 characters) float order and equality are the decimal's. Longer texts become
    Decimals; Python compares and hashes floats and Decimals by exact value, so the two
    kinds mix in one side. Only the key is a float: the level keeps the venue's text."""
    return float(text) if len(text) < 16 else Decimal(text)


def scaled_key(scale: int = DEFAULT_SCALE) -> Callable[[str], int]:
    """Price text -> integer price * 10**scale, exactly; raises ValueError past the scale."""
    factor = 10**scale

    def key(text: str) -> int:
        whole, dot, frac = text.partition(".")
        if len(frac) <= scale and "e" not in frac and "E" not in text:
            return int(whole + frac.ljust(scale, "0")) if dot else int(whole) * factor
        value = Decimal(text).scaleb(scale)
        if value != value.to_integral_value():
            raise ValueError(f"price {text} has more than {scale} decimal places")
        return int(value)

    return key


KEYS: dict[str, Callable[[int], Callable[[str], Any]]] = {
    "double": lambda scale: double_key,
    "scaled": scaled_key,
    "decimal": lambda scale: Decimal,
}


class Side:
    """One side of a book, best level first."""

    __slots__ = ("_double", "_key", "_keys", "_levels", "_negate")

    def __init__(self, key: Callable[[str], Any], *, descending: bool) -> None:
        self._key = key
        self._double = key is double_key  # inlined in update: a call per level saved
        self._negate = descending
        self._levels: dict[Any, Level] = {}
        self._keys: list[Any] = []

    def __len__(self) -> int:
        return len(self._keys)

    def clear(self) -> None:
        self._levels.clear()
        self._keys.clear()

    def set(self, price: str, size: str) -> None:
        """Absolute size at price; a zero size removes the level (absent is fine)."""
        self.update((Level(price, size),))

    def update(self, changes: Iterable[Level]) -> None:
        """Apply levels in order: absolute sizes, a zero size removes (absent is fine)."""
        key, levels, keys, negate = self._key, self._levels, self._keys, self._negate
        double = self._double
        for level in changes:
            price = level.price
            k = (float(price) if len(price) < 16 else Decimal(price)) if double else key(price)
            if negate:
                k = -k
            mantissa = level.size.strip("0.")
            if not mantissa or mantissa[0] in "eE":
                if levels.pop(k, None) is not None:
                    del keys[bisect_left(keys, k)]
            else:
                if k not in levels:
                    insort(keys, k)
                levels[k] = level

    def truncate(self, depth: int) -> None:
        """Drop levels past depth (Kraken: levels that fall out of the subscription)."""
        keys = self._keys
        if len(keys) > depth:
            levels = self._levels
            for k in keys[depth:]:
                del levels[k]
            del keys[depth:]

    def top(self, n: int | None = None) -> list[tuple[str, str]]:
        """The best n levels (all when None), as (price, size) texts."""
        levels = self._levels
        keys = self._keys if n is None else self._keys[:n]
        return [(lv.price, lv.size) for lv in map(levels.__getitem__, keys)]

    def levels(self, n: int) -> list[Level]:
        """The best n levels as the venue sent them."""
        return list(map(self._levels.__getitem__, self._keys[:n]))

    def best(self) -> tuple[str, str] | None:
        if not self._keys:
            return None
        level = self._levels[self._keys[0]]
        return level.price, level.size


class OrderBook:
    """Bids and asks of one symbol at one venue, with the sequence it has reached.

    key chooses how prices are ordered: `double` (default: exact for the 15 significant
    digits venues use, Decimal past them), `scaled` (integers at `scale` places) or
    `decimal`; wsgw_bench.books compares them."""

    __slots__ = ("asks", "bids", "seq")

    def __init__(self, key: str = "double", scale: int = DEFAULT_SCALE) -> None:
        if key not in KEYS:
            raise ValueError(f"unknown key {key!r}: one of {', '.join(KEYS)}")
        key_fn = KEYS[key](scale)
        self.bids = Side(key_fn, descending=True)
        self.asks = Side(key_fn, descending=False)
        self.seq = 0

    def clear(self) -> None:
        self.bids.clear()
        self.asks.clear()
        self.seq = 0

    def load(self, bids: Iterable[Level], asks: Iterable[Level]) -> None:
        self.bids.clear()
        self.asks.clear()
        self.bids.update(bids)
        self.asks.update(asks)

    def apply(self, bids: Iterable[Level], asks: Iterable[Level]) -> None:
        self.bids.update(bids)
        self.asks.update(asks)

    def truncate(self, depth: int) -> None:
        self.bids.truncate(depth)
        self.asks.truncate(depth)

    def snapshot(
        self, depth: int | None = None
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        return self.bids.top(depth), self.asks.top(depth)


_encode_levels = msgspec.json.Encoder().encode
_decode_levels = msgspec.json.Decoder(list[Level]).decode


class _CSide:
    """One side of a CBook, read the way Side is read."""

    __slots__ = ("_book", "_side")

    def __init__(self, book: CBook, side: int) -> None:
        self._book = book
        self._side = side

    def __len__(self) -> int:
        return self._book.count(self._side)

    def levels(self, n: int) -> list[Level]:
        return _decode_levels(self._book.top_json(self._side, n))

    def top(self, n: int | None = None) -> list[tuple[str, str]]:
        return [(lv.price, lv.size) for lv in self.levels(len(self) if n is None else n)]

    def best(self) -> tuple[str, str] | None:
        top = self.levels(1)
        return (top[0].price, top[0].size) if top else None


class COrderBook:
    """OrderBook's interface over the C book of one symbol (see the module's docstring)."""

    def __init__(self, venue: str, symbol: str, depth: int | None = None) -> None:
        self.c = CBook(venue, symbol)
        if depth is not None:  # the per-message truncation (Bybit orderbook.N, Kraken depth)
            self.c.set_depth(depth)
        self.c.set_joined(True)  # the Python sync guards the fast path (BookSync.on_raw)
        self._c_bids = _CSide(self.c, BOOK_BIDS)
        self._c_asks = _CSide(self.c, BOOK_ASKS)
        #: Set once levels did not fit the C book: everything goes here from then on.
        self.python: OrderBook | None = None

    @property
    def bids(self) -> Side | _CSide:
        return self.python.bids if self.python is not None else self._c_bids

    @property
    def asks(self) -> Side | _CSide:
        return self.python.asks if self.python is not None else self._c_asks

    @property
    def seq(self) -> int:
        return self.python.seq if self.python is not None else self.c.seq

    @seq.setter
    def seq(self, value: int) -> None:
        if self.python is not None:
            self.python.seq = value
        else:
            self.c.seq = value

    def clear(self) -> None:
        self.python = None  # an empty book: the C one can take it again
        self.c.clear()
        self.c.set_joined(True)

    def load(self, bids: Iterable[Level], asks: Iterable[Level]) -> None:
        seq = self.seq
        self.clear()
        self.apply(bids, asks)
        self.seq = seq

    def apply(self, bids: Iterable[Level], asks: Iterable[Level]) -> None:
        if self.python is None:
            bids, asks = list(bids), list(asks)
            if self._update(BOOK_BIDS, bids):
                if self._update(BOOK_ASKS, asks):
                    return
                self._to_python().asks.update(asks)
                return
            self._to_python().apply(bids, asks)
            return
        self.python.apply(bids, asks)

    def _update(self, side: int, levels: list[Level]) -> bool:
        return not levels or self.c.update(side, _encode_levels(levels)) == BOOK_APPLIED

    def _to_python(self) -> OrderBook:
        book = OrderBook()
        book.load(self._c_bids.levels(len(self._c_bids)), self._c_asks.levels(len(self._c_asks)))
        book.seq = self.c.seq
        self.python = book
        return book

    def truncate(self, depth: int) -> None:
        if self.python is not None:
            self.python.truncate(depth)
        else:
            self.c.truncate(depth)

    def snapshot(
        self, depth: int | None = None
    ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
        return self.bids.top(depth), self.asks.top(depth)


#: Venues whose books (and per-message path) are in C.
C_VENUES = frozenset({"binance", "okx", "bybit", "kraken", "coinbase", "bitstamp"})


def make_book(
    key: str, venue: str, symbol: str, depth: int | None = None
) -> OrderBook | COrderBook:
    """key "c": the C book where the venue is done in C (depth: the levels a side its
    per-message path keeps, as the venue's sync truncates), else the default Python book."""
    if key == "c":
        return COrderBook(venue, symbol, depth) if venue in C_VENUES else OrderBook()
    return OrderBook(key)


# ---- checksums ------------------------------------------------------------------------------
def _kraken_digits(text: str, places: int | None) -> str:
    if places is not None:
        whole, _, frac = text.partition(".")
        text = whole + "." + frac.ljust(places, "0")[:places] if places else whole
    return text.replace(".", "").lstrip("0")


def kraken_checksum_string(
    bids: Sequence[tuple[str, str]],
    asks: Sequence[tuple[str, str]],
    price_places: int | None = None,
    qty_places: int | None = None,
) -> str:
    """Kraken (v1 and v2): asks low to high then bids high to low, top 10 each, every
    price and size with its dot and leading zeros removed. The texts are used as sent
    (v2 sends full precision); price_places/qty_places re-pad them to the instrument's
    precision when a source lost trailing zeros."""
    parts = [
        _kraken_digits(p, price_places) + _kraken_digits(q, qty_places)
        for p, q in (*asks[:10], *bids[:10])
    ]
    return "".join(parts)


#: Level -> its digits in Kraken's checksum string; levels recur, so most are found here.
_KRAKEN_TOKENS: dict[Level, str] = {}


def kraken_checksum(
    book: OrderBook | COrderBook, price_places: int | None = None, qty_places: int | None = None
) -> int:
    """CRC32 of kraken_checksum_string, unsigned, as Kraken sends it."""
    if price_places is not None or qty_places is not None:
        text = kraken_checksum_string(
            book.bids.top(10), book.asks.top(10), price_places, qty_places
        )
        return zlib.crc32(text.encode())
    tokens = _KRAKEN_TOKENS
    parts = []
    for level in (*book.asks.levels(10), *book.bids.levels(10)):
        token = tokens.get(level)
        if token is None:
            if len(tokens) > 100_000:
                tokens.clear()
            token = level.price.replace(".", "").lstrip("0")
            token = tokens[level] = token + level.size.replace(".", "").lstrip("0")
        parts.append(token)
    return zlib.crc32("".join(parts).encode())


def okx_checksum_string(bids: Sequence[tuple[str, str]], asks: Sequence[tuple[str, str]]) -> str:
    """OKX: the top 25 of each side, `bid:size:ask:size` alternating per rank; a side
    that runs out just stops contributing."""
    parts: list[str] = []
    for i in range(max(len(bids), len(asks))):
        if i < len(bids):
            parts += bids[i]
        if i < len(asks):
            parts += asks[i]
    return ":".join(parts)


def okx_checksum(book: OrderBook | COrderBook) -> int:
    """CRC32 of okx_checksum_string as a signed 32-bit integer, as OKX sends it."""
    crc = zlib.crc32(okx_checksum_string(book.bids.top(25), book.asks.top(25)).encode())
    return crc - (1 << 32) if crc >= 1 << 31 else crc
