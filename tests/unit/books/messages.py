"""Raw venue book messages built from abstract level changes, and a plain reference book.

The reference is a dict per side keyed by Decimal, sorted only when read, and its
checksums are written again from the venues' documents (not imported from the gateway),
so a test that compares the two compares two independent readings of the docs.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from decimal import Decimal

from hypothesis import strategies as st

Change = tuple[str, str]  # (price text, size text); size "0" removes


@dataclass
class RefBook:
    bids: dict[Decimal, tuple[str, str]] = field(default_factory=dict)
    asks: dict[Decimal, tuple[str, str]] = field(default_factory=dict)
    depth: int | None = None

    def set(self, side: str, price: str, size: str) -> None:
        levels = self.bids if side == "bid" else self.asks
        if Decimal(size) == 0:
            levels.pop(Decimal(price), None)
        else:
            levels[Decimal(price)] = (price, size)

    def apply(self, bids: list[Change], asks: list[Change]) -> None:
        for p, s in bids:
            self.set("bid", p, s)
        for p, s in asks:
            self.set("ask", p, s)
        if self.depth is not None:
            for levels, best_first in ((self.bids, True), (self.asks, False)):
                for k in sorted(levels, reverse=best_first)[self.depth :]:
                    del levels[k]

    def sorted_bids(self) -> list[tuple[str, str]]:
        return [self.bids[k] for k in sorted(self.bids, reverse=True)]

    def sorted_asks(self) -> list[tuple[str, str]]:
        return [self.asks[k] for k in sorted(self.asks)]

    def kraken_checksum(self) -> int:
        def digits(text: str) -> str:
            return text.replace(".", "").lstrip("0")

        text = "".join(digits(p) + digits(q) for p, q in self.sorted_asks()[:10])
        text += "".join(digits(p) + digits(q) for p, q in self.sorted_bids()[:10])
        return zlib.crc32(text.encode())

    def okx_checksum(self) -> int:
        bids, asks = self.sorted_bids()[:25], self.sorted_asks()[:25]
        parts: list[str] = []
        for i in range(25):
            if i < len(bids):
                parts.append(f"{bids[i][0]}:{bids[i][1]}")
            if i < len(asks):
                parts.append(f"{asks[i][0]}:{asks[i][1]}")
        crc = zlib.crc32(":".join(parts).encode())
        return crc - 2**32 if crc >= 2**31 else crc


def _pairs(levels: list[Change]) -> str:
    return json.dumps([[p, s] for p, s in levels])


# ---- per venue: (snapshot, update) message texts -------------------------------------------
def binance_rest(last: int, bids: list[Change], asks: list[Change]) -> str:
    return f'{{"lastUpdateId":{last},"bids":{_pairs(bids)},"asks":{_pairs(asks)}}}'


def binance_depth(first: int, last: int, bids: list[Change], asks: list[Change]) -> str:
    data = (
        f'{{"e":"depthUpdate","E":1700000000000,"s":"BTCUSDT","U":{first},"u":{last},'
        f'"b":{_pairs(bids)},"a":{_pairs(asks)}}}'
    )
    return f'{{"stream":"btcusdt@depth@100ms","data":{data}}}'


def kraken_book(kind: str, bids: list[Change], asks: list[Change], checksum: int) -> str:
    def levels(changes: list[Change]) -> str:
        return "[" + ",".join(f'{{"price":{p},"qty":{s}}}' for p, s in changes) + "]"

    item = (
        f'{{"symbol":"BTC/USD","bids":{levels(bids)},"asks":{levels(asks)},'
        f'"checksum":{checksum},"timestamp":"2023-10-06T17:35:55.440295Z"}}'
    )
    return f'{{"channel":"book","type":"{kind}","data":[{item}]}}'


def okx_book(
    action: str, seq: int, prev: int, bids: list[Change], asks: list[Change], checksum: int
) -> str:
    def levels(changes: list[Change]) -> str:
        return json.dumps([[p, s, "0", "1"] for p, s in changes])

    item = (
        f'{{"asks":{levels(asks)},"bids":{levels(bids)},"ts":"1597026383085",'
        f'"checksum":{checksum},"prevSeqId":{prev},"seqId":{seq}}}'
    )
    return (
        f'{{"arg":{{"channel":"books","instId":"BTC-USDT"}},"action":"{action}","data":[{item}]}}'
    )


def bybit_book(kind: str, u: int, bids: list[Change], asks: list[Change]) -> str:
    data = f'{{"s":"BTCUSDT","b":{_pairs(bids)},"a":{_pairs(asks)},"u":{u},"seq":{u * 10}}}'
    head = f'{{"topic":"orderbook.50.BTCUSDT","type":"{kind}","ts":1671179923028'
    return f'{head},"data":{data},"cts":1}}'


def coinbase_snapshot(bids: list[Change], asks: list[Change]) -> str:
    return (
        f'{{"type":"snapshot","product_id":"BTC-USD","bids":{_pairs(bids)},"asks":{_pairs(asks)}}}'
    )


def coinbase_update(bids: list[Change], asks: list[Change]) -> str:
    changes = [["buy", p, s] for p, s in bids] + [["sell", p, s] for p, s in asks]
    return (
        f'{{"type":"l2update","product_id":"BTC-USD","changes":{json.dumps(changes)},'
        f'"time":"2022-08-04T15:25:05.010758Z"}}'
    )


def bitstamp_diff(us: int, bids: list[Change], asks: list[Change]) -> str:
    data = (
        f'{{"timestamp":"{us // 1_000_000}","microtimestamp":"{us}",'
        f'"bids":{_pairs(bids)},"asks":{_pairs(asks)}}}'
    )
    return f'{{"data":{data},"channel":"diff_order_book_btcusd","event":"data"}}'


def bitstamp_rest(us: int, bids: list[Change], asks: list[Change]) -> str:
    return (
        f'{{"timestamp":"{us // 1_000_000}","microtimestamp":"{us}",'
        f'"bids":{_pairs(bids)},"asks":{_pairs(asks)}}}'
    )


def mutated(data: st.DataObject, raw: bytes, alphabet: bytes) -> bytes:
    """raw with 1-4 random edits (a byte replaced, deleted or inserted, from alphabet): what
    the C parsers' mutation tests feed them."""
    out = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(out) - 1))
        edit = data.draw(st.sampled_from(["replace", "delete", "insert"]))
        byte = data.draw(st.sampled_from(list(alphabet)))
        if edit == "replace":
            out[at] = byte
        elif edit == "delete":
            del out[at]
        else:
            out.insert(at, byte)
    return bytes(out)
