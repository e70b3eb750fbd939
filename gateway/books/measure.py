"""How fast books are normalized and applied, against cryptofeed's book, on one core.

`python -m gateway.books.measure [--messages N] [--rounds R]`: builds one stream of raw
Binance diff-depth messages and one of Kraken v2 book updates (with their CRC32) over a
book of a few thousand levels, then runs each contender over the same bytes, alternated
round by round, and prints messages/s per contender (median of the rounds) and ratios:

- `wsgw`: gateway.normalize + gateway.books with its default keys (`double`);
- `wsgw-scaled`, `wsgw-decimal`: the same with scaled-integer or Decimal keys;
- `cryptofeed`: what cryptofeed's feeds do, given its best case: orjson (Binance) or
  json with Decimal floats (Kraken, whose prices are JSON numbers), Decimal levels in the
  `order-book` C extension, and for Kraken its CRC32 (`checksum_format="KRAKEN"`).

A last table times the price-key choices alone (text -> key). A measurement, not a test:
the machine is shared, so only the ratios within one run mean much.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import orjson

from gateway.books.book import double_key, scaled_key
from gateway.books.sync import Action, make_sync
from gateway.normalize.schema import BookSnapshot
from gateway.normalize.venues import make_normalizer


def _cryptofeed_book(**options: Any) -> Any:
    """cryptofeed's book (the `order-book` package, a test dependency)."""
    from order_book import OrderBook  # type: ignore[import-not-found]

    return OrderBook(**options)


def _book_stream(
    messages: int, seed: int, kraken: bool
) -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[list[tuple[bool, str, str]]]]:
    """A snapshot (bids, asks) and updates [(is_bid, price, size)]: a random walk around
    a mid price, a fifth of the changes deleting a level."""
    rng = random.Random(seed)
    mid = 3_000_000  # in ticks of 0.01 (Kraken: 0.1)

    def text(ticks: int) -> str:
        return f"{ticks // 10}.{ticks % 10}" if kraken else f"{ticks // 100}.{ticks % 100:02d}"

    def size() -> str:
        return f"{rng.randint(1, 5_000_000) / 1e8:.8f}"

    depth = 10 if kraken else 2000
    bids = [(text(mid - i), size()) for i in range(1, depth + 1)]
    asks = [(text(mid + i), size()) for i in range(1, depth + 1)]
    updates = []
    for _ in range(messages):
        mid += rng.randint(-2, 2)
        change = []
        for _ in range(rng.randint(1, 4) if kraken else rng.randint(5, 30)):
            is_bid = rng.random() < 0.5
            offset = int(rng.expovariate(1 / (4 if kraken else 60))) + 1
            ticks = mid - offset if is_bid else mid + offset
            change.append((is_bid, text(ticks), "0" if rng.random() < 0.2 else size()))
        updates.append(change)
    return bids, asks, updates


def binance_messages(messages: int) -> tuple[bytes, list[bytes]]:
    bids, asks, updates = _book_stream(messages, 1, kraken=False)
    rest = orjson.dumps({"lastUpdateId": 1000, "bids": bids, "asks": asks})
    raws = []
    for u, change in enumerate(updates, start=1001):
        data = {
            "e": "depthUpdate",
            "E": 1_700_000_000_000 + u,
            "s": "BTCUSDT",
            "U": u,
            "u": u,
            "b": [[p, s] for is_bid, p, s in change if is_bid],
            "a": [[p, s] for is_bid, p, s in change if not is_bid],
        }
        raws.append(orjson.dumps({"stream": "btcusdt@depth@100ms", "data": data}))
    return rest, raws


def kraken_messages(messages: int) -> list[bytes]:
    """A snapshot then updates, each with the checksum of the book after it."""
    bids, asks, updates = _book_stream(messages, 2, kraken=True)
    book = _cryptofeed_book(checksum_format="KRAKEN")
    for p, s in bids:
        book.bids[Decimal(p)] = Decimal(s)
    for p, s in asks:
        book.asks[Decimal(p)] = Decimal(s)

    def levels(pairs: list[tuple[str, str]]) -> str:
        return ",".join(f'{{"price":{p},"qty":{q}}}' for p, q in pairs)

    def message(kind: str, b: list[tuple[str, str]], a: list[tuple[str, str]]) -> bytes:
        item = (
            f'{{"symbol":"BTC/USD","bids":[{levels(b)}],"asks":[{levels(a)}],'
            f'"checksum":{book.checksum()},"timestamp":"2023-10-06T17:35:55.440295Z"}}'
        )
        return f'{{"channel":"book","type":"{kind}","data":[{item}]}}'.encode()

    raws = [message("snapshot", bids, asks)]
    for change in updates:
        for is_bid, p, s in change:
            side = book.bids if is_bid else book.asks
            if Decimal(s) == 0:
                if Decimal(p) in side:
                    del side[Decimal(p)]
            else:
                side[Decimal(p)] = Decimal(s)
        _truncate(book, 10)
        b = [(p, s) for is_bid, p, s in change if is_bid]
        a = [(p, s) for is_bid, p, s in change if not is_bid]
        raws.append(message("update", b, a))
    return raws


def _truncate(book: Any, depth: int) -> None:
    """Kraken's rule: after a whole message, drop the levels past the subscribed depth."""
    for side in (book.bids, book.asks):
        while len(side) > depth:
            del side[side.index(depth)[0]]


# ---- contenders -----------------------------------------------------------------------------
def wsgw_binance(key: str) -> Callable[[bytes, list[bytes]], int]:
    def run(rest: bytes, raws: list[bytes]) -> int:
        normalizer = make_normalizer("binance")
        sync = make_sync("binance", "BTCUSDT", key=key)
        snap: BookSnapshot = normalizer.rest_snapshot(rest, "BTCUSDT", 0)  # type: ignore[attr-defined]
        sync.on_snapshot(snap)
        normalize, on_delta = normalizer.normalize, sync.on_delta
        for raw in raws:
            for event in normalize(raw, 0):
                on_delta(event)  # type: ignore[arg-type]
        assert sync.synced
        return len(sync.book.bids)

    return run


def cryptofeed_binance(rest: bytes, raws: list[bytes]) -> int:
    book = _cryptofeed_book()
    snap = orjson.loads(rest)
    for side, key in ((book.bids, "bids"), (book.asks, "asks")):
        for p, s in snap[key]:
            side[Decimal(p)] = Decimal(s)
    last = snap["lastUpdateId"]
    for raw in raws:
        data = orjson.loads(raw)["data"]
        if data["u"] <= last:
            continue
        if data["U"] != last + 1:
            raise RuntimeError("gap")
        last = data["u"]
        for side, key in ((book.bids, "b"), (book.asks, "a")):
            for p, s in data[key]:
                price, size = Decimal(p), Decimal(s)
                if size == 0:
                    if price in side:
                        del side[price]
                else:
                    side[price] = size
    return len(book.bids)


def wsgw_kraken(key: str) -> Callable[[list[bytes]], int]:
    def run(raws: list[bytes]) -> int:
        normalizer = make_normalizer("kraken")
        sync = make_sync("kraken", "BTC/USD", depth=10, key=key)
        normalize, on_event = normalizer.normalize, sync.on_event
        for raw in raws:
            for event in normalize(raw, 0):
                if on_event(event).action is not Action.APPLIED:  # type: ignore[arg-type]
                    raise RuntimeError("checksum")
        return len(sync.book.bids)

    return run


def cryptofeed_kraken(raws: list[bytes]) -> int:
    book = _cryptofeed_book(checksum_format="KRAKEN")
    for raw in raws:
        msg = json.loads(raw, parse_float=Decimal)
        for item in msg["data"]:
            for side, key in ((book.bids, "bids"), (book.asks, "asks")):
                for level in item[key]:
                    price, size = level["price"], level["qty"]
                    if size == 0:
                        if price in side:
                            del side[price]
                    else:
                        side[price] = size
            _truncate(book, 10)
            if book.checksum() != item["checksum"]:
                raise RuntimeError("checksum")
    return len(book.bids)


def _rounds(
    contenders: dict[str, Callable[[], int]], rounds: int, messages: int
) -> dict[str, tuple[float, float]]:
    """Per contender: messages/s (median over rounds) and its ratio to cryptofeed's
    (median of the per-round ratios: each round runs every contender back to back, in
    alternating order, so a change in the machine's load hits them alike)."""
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders.items())
        if r % 2:
            order.reverse()
        for name, run in order:
            gc.collect()
            start = time.perf_counter()
            run()
            rates[name].append(messages / (time.perf_counter() - start))
    base = rates["cryptofeed"]
    return {
        name: (
            statistics.median(values),
            statistics.median(v / b for v, b in zip(values, base, strict=True)),
        )
        for name, values in rates.items()
    }


def _keys(levels: int, rounds: int) -> dict[str, float]:
    """Keys/s per price-key function, median over rounds, alternated."""
    rng = random.Random(3)
    texts = [f"{rng.randint(1, 10_000_000) / 100:.2f}" for _ in range(levels)]
    contenders: dict[str, Callable[[str], Any]] = {
        "double": double_key,
        "scaled": scaled_key(),
        "decimal": Decimal,
        "float (inexact)": float,
    }
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for r in range(rounds):
        order = list(contenders.items())
        if r % 2:
            order.reverse()
        for name, fn in order:
            start = time.perf_counter()
            for text in texts:
                fn(text)
            rates[name].append(levels / (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in rates.items()}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)

    rest, binance = binance_messages(args.messages)
    levels = sum(
        len(orjson.loads(m)["data"]["b"]) + len(orjson.loads(m)["data"]["a"]) for m in binance
    )
    print(
        f"binance diff depth: {args.messages} messages, {levels / args.messages:.1f} levels each, "
        "book of 2000 levels a side"
    )
    rates = _rounds(
        {
            "wsgw": lambda: wsgw_binance("double")(rest, binance),
            "wsgw-scaled": lambda: wsgw_binance("scaled")(rest, binance),
            "wsgw-decimal": lambda: wsgw_binance("decimal")(rest, binance),
            "cryptofeed": lambda: cryptofeed_binance(rest, binance),
        },
        args.rounds,
        args.messages,
    )
    _report(rates)

    kraken = kraken_messages(args.messages)
    print(f"kraken v2 book (depth 10, CRC32 checked on every message): {len(kraken)} messages")
    rates = _rounds(
        {
            "wsgw": lambda: wsgw_kraken("double")(kraken),
            "wsgw-scaled": lambda: wsgw_kraken("scaled")(kraken),
            "wsgw-decimal": lambda: wsgw_kraken("decimal")(kraken),
            "cryptofeed": lambda: cryptofeed_kraken(kraken),
        },
        args.rounds,
        len(kraken),
    )
    _report(rates)

    print("price text -> key, keys/s:")
    for name, rate in _keys(200_000, args.rounds).items():
        print(f"  {name:<14} {rate:>12,.0f}")


def _report(rates: dict[str, tuple[float, float]]) -> None:
    for name, (rate, ratio) in rates.items():
        print(f"  {name:<14} {rate:>10,.0f} msg/s   x{ratio:.2f} cryptofeed (median of rounds)")


if __name__ == "__main__":
    main()
