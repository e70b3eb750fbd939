"""`books`: how fast books are normalized and applied, against cryptofeed's book, on one core.

`wsgw bench books` (the scenario): for each venue, the simulator's own book stream (its
snapshot, then updates in the venue's format, gateway/simulator/books.py) through
gateway.normalize + gateway.books.BookSync (`wsgw`, the Python path), for the venues done
in C (gateway.books.book.C_VENUES) through BookSync.on_raw_batch in bursts of BURST
(`wsgw-c`: dataplane/shim/book.c parses, checks and applies, and encodes the normalized
delta to JSON), and through what cryptofeed's feed
handlers do with it (`cryptofeed`, the reference: JSON parsed, Decimal levels in the
`order-book` C extension, the sequence rule, Kraken's and OKX's CRC32 checked on every
message as wsgw checks it); messages/s, median of alternated rounds, each round timed in
the thread's CPU time (time.thread_time): "per core" is what a message costs the core it
runs on, and on this shared host the wall clock adds whatever other processes take the
core meanwhile (a run's wall-clock rates spread 5x under load, its CPU rates ~1.5x). Then
the time to
read a book of depth 100 as the REST answer would (the local book -> a normalized
snapshot -> JSON), in process: GET /v1/books is not on this branch.

`python -m wsgw_bench.books [--messages N] [--rounds R]` (moved from
gateway/books/measure.py): builds one stream of raw
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

from dataplane.shim import BOOK_OUT_JSON
from gateway.books.book import C_VENUES, double_key, scaled_key
from gateway.books.sync import Action, BookSync, make_sync
from gateway.normalize.schema import BookDelta, BookSnapshot, encode_json
from gateway.normalize.venues import make_normalizer
from gateway.simulator.feeds import FEEDS, FUTURES
from wsgw_bench.core import BenchOptions, Measurement, alternate, scenario, time_per_op


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


# ---- `wsgw bench books`: the simulator's streams, every venue -----------------------------
#: name: (dialect, topic, symbol, the window the channel keeps to)
SIM_STREAMS = {
    "binance": ("binance", "btcusdt@depth@100ms", "BTCUSDT", None),
    "binance-futures": ("binance", FUTURES + "btcusdt@depth@100ms", "BTCUSDT", None),
    "okx": ("okx", "books:BTC-USDT", "BTC-USDT", None),
    "bybit": ("bybit", "orderbook.50.BTCUSDT", "BTCUSDT", 50),
    "kraken": ("kraken", "book:BTC/USD", "BTC/USD", 10),
    "coinbase": ("coinbase", "level2:BTC-USD", "BTC-USD", None),
    "bitstamp": ("bitstamp", "diff_order_book_btcusd", "btcusd", None),
}
REST_VENUES = ("binance", "bitstamp")


def sim_stream(name: str, messages: int) -> tuple[bytes, list[bytes]]:
    """The simulator's snapshot (REST body or WebSocket message) and `messages` updates."""
    dialect, topic, _, _ = SIM_STREAMS[name]
    feed = FEEDS[dialect]()
    book = feed.book_state(topic)
    assert book is not None
    ts = 1_700_000_000_000_000_000
    if dialect in REST_VENUES:
        snap = feed.rest_body(0, 0, *book.top()).encode()
    else:
        snap = feed.render_snapshot(topic, 0, ts, book) or b""
    updates = [feed.render(topic, n, ts + n * 1000, book) for n in range(1, messages + 1)]
    return snap, updates


def wsgw_stream(name: str) -> Callable[[bytes, list[bytes]], BookSync]:
    dialect, _, symbol, window = SIM_STREAMS[name]

    def run(snap: bytes, updates: list[bytes]) -> BookSync:
        normalizer = make_normalizer(dialect)
        sync = make_sync(dialect, symbol, **({"depth": window} if window else {}))
        if dialect in REST_VENUES:
            event: Any = normalizer.rest_snapshot(snap, symbol, 0)  # type: ignore[attr-defined]
        else:
            (event,) = normalizer.normalize(snap, 0)
        sync.on_snapshot(event)
        normalize, on_event = normalizer.normalize, sync.on_event
        for raw in updates:
            for event in normalize(raw, 0):
                if on_event(event).action is not Action.APPLIED:
                    raise RuntimeError(f"{name}: the book went wrong")
        return sync

    return run


#: Records a ring read hands over at once: the C path takes a burst per call.
BURST = 64


def wsgw_c_stream(name: str) -> Callable[[bytes, list[bytes]], BookSync]:
    """The C path (gateway.books.sync BinanceBookSync.on_raw_batch: parse, the sequence
    rule and the levels in C, the normalized delta encoded to JSON as a subscription gets
    it), bursts of BURST messages, the Python path for what C declines."""
    dialect, _, symbol, window = SIM_STREAMS[name]

    def run(snap: bytes, updates: list[bytes]) -> BookSync:
        normalizer = make_normalizer(dialect)
        sync: Any = make_sync(dialect, symbol, key="c", **({"depth": window} if window else {}))
        if dialect in REST_VENUES:
            sync.on_snapshot(normalizer.rest_snapshot(snap, symbol, 0))  # type: ignore[attr-defined]
        else:
            (event,) = normalizer.normalize(snap, 0)
            sync.on_snapshot(event)
        normalize, on_event, on_raw_batch = normalizer.normalize, sync.on_event, sync.on_raw_batch
        stamps = [0] * BURST
        for start in range(0, len(updates), BURST):
            burst = updates[start : start + BURST]

            def python_path(i: int, burst: list[bytes] = burst) -> None:
                for event in normalize(burst[i], 0):
                    if on_event(event).action is not Action.APPLIED:
                        raise RuntimeError(f"{name}: the book went wrong")

            for result in on_raw_batch(burst, stamps[: len(burst)], BOOK_OUT_JSON, python_path):
                if result is not None and result[0].action is not Action.APPLIED:
                    raise RuntimeError(f"{name}: the book went wrong")
        return sync  # type: ignore[no-any-return]

    return run


def _cf_set(side: Any, price: Decimal, size: Decimal) -> None:
    if size == 0:
        if price in side:
            del side[price]
    else:
        side[price] = size


def cryptofeed_stream(name: str) -> Callable[[bytes, list[bytes]], Any]:
    """What cryptofeed's handler for the venue does per book message, its best case."""
    dialect, _, _, window = SIM_STREAMS[name]
    checksum = {"kraken": "KRAKEN", "okx": "OKX"}.get(dialect)

    def run(snap: bytes, updates: list[bytes]) -> Any:
        book = _cryptofeed_book(checksum_format=checksum) if checksum else _cryptofeed_book()
        bids, asks = book.bids, book.asks
        last = 0
        if dialect == "kraken":
            for raw in [snap, *updates]:
                for item in json.loads(raw, parse_float=Decimal)["data"]:
                    for level in item["bids"]:
                        _cf_set(bids, level["price"], level["qty"])
                    for level in item["asks"]:
                        _cf_set(asks, level["price"], level["qty"])
                    _truncate(book, window or 10)
                    if book.checksum() != item["checksum"]:
                        raise RuntimeError("kraken checksum")
            return book
        if dialect in REST_VENUES:
            body = orjson.loads(snap)
            for p, q in body["bids"]:
                bids[Decimal(p)] = Decimal(q)
            for p, q in body["asks"]:
                asks[Decimal(p)] = Decimal(q)
            last = int(body.get("lastUpdateId", body.get("microtimestamp", 0)))
        for raw in updates if dialect in REST_VENUES else [snap, *updates]:
            msg = orjson.loads(raw)
            if dialect == "binance":
                data = msg["data"]
                if data["u"] <= last:
                    continue
                if "pu" in data and last and data["pu"] != last:
                    raise RuntimeError("gap")
                last = data["u"]
                side_bids, side_asks = data["b"], data["a"]
            elif dialect == "bitstamp":
                data = msg["data"]
                side_bids, side_asks = data["bids"], data["asks"]
            elif dialect == "okx":
                (data,) = msg["data"]
                if msg["action"] == "update" and data["prevSeqId"] != last:
                    raise RuntimeError("gap")
                last = data["seqId"]
                side_bids = [(p, q) for p, q, *_ in data["bids"]]
                side_asks = [(p, q) for p, q, *_ in data["asks"]]
            elif dialect == "bybit":
                data = msg["data"]
                if msg["type"] == "delta" and data["u"] != last + 1:
                    raise RuntimeError("gap")
                last = data["u"]
                side_bids, side_asks = data["b"], data["a"]
            elif msg["type"] == "snapshot":  # coinbase
                side_bids, side_asks = msg["bids"], msg["asks"]
            else:
                changes = msg["changes"]
                side_bids = [(p, q) for side, p, q in changes if side == "buy"]
                side_asks = [(p, q) for side, p, q in changes if side != "buy"]
            for p, q in side_bids:
                _cf_set(bids, Decimal(p), Decimal(q))
            for p, q in side_asks:
                _cf_set(asks, Decimal(p), Decimal(q))
            if window is not None:
                _truncate(book, window)
            if checksum and book.checksum() != (data["checksum"] & 0xFFFFFFFF):
                raise RuntimeError("okx checksum")
        return book

    return run


def snapshot_read(depth: int = 100) -> Callable[[], bytes]:
    """One REST-style read of a book: the top `depth` levels a side of a synced Binance
    book of 2000 levels a side, as a normalized snapshot encoded to JSON."""
    rest, raws = binance_messages(2000)
    sync = wsgw_binance_sync(rest, raws)

    def read() -> bytes:
        snap = sync.snapshot_event(0, depth)
        assert snap is not None
        return encode_json(snap)

    return read


def wsgw_binance_sync(rest: bytes, raws: list[bytes]) -> BookSync:
    normalizer = make_normalizer("binance")
    sync = make_sync("binance", "BTCUSDT")
    sync.on_snapshot(normalizer.rest_snapshot(rest, "BTCUSDT", 0))  # type: ignore[attr-defined]
    for raw in raws:
        for event in normalizer.normalize(raw, 0):
            assert isinstance(event, BookDelta)
            sync.on_delta(event)
    return sync


@scenario("books", "normalize + apply book updates, msg/s per venue vs cryptofeed; book read")
def bench_books(options: BenchOptions) -> list[Measurement]:
    messages = 2_000 if options.quick else 20_000
    out: list[Measurement] = []
    for name in SIM_STREAMS:
        snap, updates = sim_stream(name, messages)
        ours, theirs = wsgw_stream(name), cryptofeed_stream(name)
        # Same books at the end: a contender that went wrong would raise, this says both
        # agree (the differential tests check every step).
        contenders: dict[str, Callable[[bytes, list[bytes]], Any]] = {"wsgw": ours}
        if SIM_STREAMS[name][0] in C_VENUES:
            contenders["wsgw-c"] = wsgw_c_stream(name)
        contenders["cryptofeed"] = theirs
        as_dict = theirs(snap, updates).to_dict()
        for run in contenders.values():
            if run is theirs:
                continue
            mine = run(snap, updates).book.snapshot()
            if [Decimal(p) for p, _ in mine[0]] != list(as_dict["bid"]):
                raise RuntimeError(f"{name}: wsgw and cryptofeed disagree")
        notes = {
            "wsgw": "Python path: gateway.normalize + BookSync (events, not encoded)",
            "wsgw-c": f"C path: book.c in bursts of {BURST}, delta encoded to JSON",
            "cryptofeed": "msg/s of thread CPU time, every contender",
        }
        found = {
            c: Measurement(
                "books",
                f"{name} msg/s",
                c,
                "msg/s",
                True,
                reference=c == "cryptofeed",
                note=notes.get(c, ""),
            )
            for c in contenders
        }
        for _, contender in alternate(options.repetitions, list(contenders)):
            gc.collect()
            start = time.thread_time()  # the core's time, not the other processes' (doc)
            contenders[contender](snap, updates)
            found[contender].samples.append(len(updates) / (time.thread_time() - start))
        out += found.values()
    read = snapshot_read(100)
    seconds = time_per_op(read, 0.05 if options.quick else 0.3)
    reads = Measurement(
        "books",
        "book read, depth 100 (us)",
        "wsgw in-process",
        "us",
        False,
        note="local book -> normalized snapshot -> JSON; GET /v1/books is not on this branch",
    )
    reads.samples.append(seconds * 1e6)
    for _ in range(options.repetitions - 1):
        reads.samples.append(time_per_op(read, 0.05 if options.quick else 0.3) * 1e6)
    out.append(reads)
    return out


if __name__ == "__main__":
    main()
