"""The exchange side of each dialect: requests in, acks/errors out, data messages rendered.

A feed is stateless across connections (the connection's topic set is passed in) and
renders a data message once per (topic, seq), which every subscriber then receives. Every
data message ends with `"sim_seq": N, "sim_ts": T` at its top level: the per-topic
sequence number (1, 2, ...) and the send time in ns (time.time_ns()), so a client can check
order and gaps and measure latency; a gateway can extract them with the same key-path
scanner as the topic.
"""

from __future__ import annotations

import re
import time
import zlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

import orjson

from gateway.simulator.books import BookStyle, Change, SimBook

SIM_PREFIX = "_sim"


def dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def symbol_key(symbol: str) -> str:
    """Exchange spellings of a symbol compared alike: BTC-USDT, BTC/USDT, btcusdt."""
    return re.sub(r"[^A-Za-z0-9]", "", symbol).upper()


def iso(ts_ns: int) -> str:
    return datetime.fromtimestamp(ts_ns / 1e9, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def pairs(levels: list[Change]) -> str:
    """`[["price","size"],...]`, the way most venues send levels."""
    return "[" + ",".join(f'["{p}","{s}"]' for p, s in levels) + "]"


@dataclass
class Reply:
    """What the server does about one client message."""

    subscribe: list[str] = field(default_factory=list)
    unsubscribe: list[str] = field(default_factory=list)
    send: list[str] = field(default_factory=list)
    #: In-band simulator commands (`_sim...` topics), for the server to run.
    commands: list[str] = field(default_factory=list)
    close: tuple[int, str] | None = None


class Prices:
    """Deterministic synthetic prices: a base per symbol and a wiggle per sequence."""

    #: A price depends on seq modulo this (the wiggle's period).
    PERIOD = 2001

    def __init__(self) -> None:
        self._base: dict[str, int] = {}
        self._texts: dict[str, tuple[str, ...]] = {}  # symbol -> its prices by seq % PERIOD

    def base_cents(self, symbol: str) -> int:
        base = self._base.get(symbol)
        if base is None:
            base = 100 + zlib.crc32(symbol_key(symbol).encode()) % 50_000
            base = self._base[symbol] = base * 100 - 1000
        return base

    def price(self, symbol: str, seq: int) -> str:
        texts = self._texts.get(symbol)
        if texts is None:
            base = self.base_cents(symbol)
            cents = (base + (i * 7919) % self.PERIOD for i in range(self.PERIOD))
            texts = self._texts[symbol] = tuple(f"{c // 100}.{c % 100:02d}" for c in cents)
        return texts[seq % self.PERIOD]

    @staticmethod
    def size(seq: int) -> str:
        return f"0.{(seq * 104729) % 100_000 + 1:05d}"


class Tick(NamedTuple):
    """What a venue's trade/book/snapshot message is made of: the topic, its channel and
    symbol, the message number, its time (ns) and a made-up price and size."""

    topic: str
    ch: str
    sym: str
    seq: int
    ts: int
    px: str
    sz: str


class Feed(ABC):
    """One exchange's server side."""

    name: str = ""
    #: Channels whose topics carry data at the configured rate.
    trade_channels: frozenset[str] = frozenset()
    book_channels: frozenset[str] = frozenset()
    #: Documented limits the server may enforce (enforce_limits).
    max_topics_per_connection: int | None = None
    max_messages_per_second: float | None = None
    #: Book channels modelled by a SimBook (the others render a single made-up level).
    model_channels: frozenset[str] = frozenset()
    #: Book channels whose subscribers get a snapshot first, in place of the next update.
    snapshot_channels: frozenset[str] = frozenset()
    #: How the venue spells prices and sizes.
    style = BookStyle()

    def __init__(self, symbols: Collection[str] | None = None) -> None:
        self.allowed = None if symbols is None else {symbol_key(s) for s in symbols}
        self.prices = Prices()
        self._topics: dict[str, tuple[str, str, bool]] = {}  # topic -> channel, symbol, trade?
        #: Books of stateless render() calls (a publisher passes its own).
        self._books: dict[str, SimBook | None] = {}

    # ---- topics ----------------------------------------------------------------------
    @abstractmethod
    def split(self, topic: str) -> tuple[str, str] | None:
        """(channel, symbol) of a topic, None when it is not spelled like one."""

    def check(self, topic: str) -> str | None:
        """None when the topic can be served, else the reason it cannot."""
        parts = self.split(topic)
        if parts is None:
            return f"invalid topic {topic}"
        channel, symbol = parts
        if channel not in self.trade_channels | self.book_channels | self.extra_channels():
            return f"unknown channel {channel}"
        if self.allowed is not None and symbol_key(symbol) not in self.allowed:
            return f"unknown symbol {symbol}"
        return None

    def extra_channels(self) -> frozenset[str]:
        """Channels accepted but not published at the data rate (heartbeat...)."""
        return frozenset()

    def publishes(self, topic: str) -> bool:
        parts = self.split(topic)
        return parts is not None and parts[0] in self.trade_channels | self.book_channels

    # ---- books -----------------------------------------------------------------------------
    def book_window(self, channel: str) -> int | None:
        """Levels a side the channel shows (its updates keep to them), None: all."""
        return None

    def book_state(self, topic: str) -> SimBook | None:
        """A new book for a modelled book topic (None for the other topics)."""
        parts = self.split(topic)
        if parts is None or parts[0] not in self.model_channels:
            return None
        channel, symbol = parts
        ticks = self.prices.base_cents(symbol) // 10 ** (2 - self.style.price_places)
        window = self.book_window(channel)
        return SimBook(f"{self.name}:{topic}", ticks, self.style, window)

    def snapshot_first(self, topic: str) -> bool:
        """A new subscriber's first message on topic is a snapshot (Kraken, OKX, ...)."""
        parts = self.split(topic)
        return parts is not None and parts[0] in self.snapshot_channels

    def _own_book(self, topic: str) -> SimBook | None:
        if topic not in self._books:
            self._books[topic] = self.book_state(topic)
        return self._books[topic]

    # ---- rendering ---------------------------------------------------------------------------
    def _info(self, topic: str) -> tuple[str, str, bool]:
        info = self._topics.get(topic)
        if info is None:
            channel, symbol = self.split(topic) or ("", topic)
            info = self._topics[topic] = (channel, symbol, channel in self.trade_channels)
        return info

    def _tick(self, topic: str, seq: int, ts_ns: int) -> tuple[Tick, bool]:
        """Message seq of topic as the venue methods take it, and whether it is a trade."""
        channel, symbol, is_trade = self._info(topic)
        px, size = self.prices.price(symbol, seq), self.prices.size(seq)
        return Tick(topic, channel, symbol, seq, ts_ns, px, size), is_trade

    def render(self, topic: str, seq: int, ts_ns: int, book: SimBook | None = None) -> bytes:
        """The data message number seq of topic, as UTF-8 JSON. A book topic's message is
        update seq of its book: `book` (a publisher's), else one kept here per topic."""
        tick, is_trade = self._tick(topic, seq, ts_ns)
        if is_trade:
            body = self.trade(tick)
        else:
            if book is None:
                book = self._own_book(topic)
            if book is not None:
                book.advance_to(seq, ts_ns)
            body = self.book(tick, book)
        return f'{body[:-1]},"sim_seq":{seq},"sim_ts":{ts_ns}}}'.encode()

    def render_snapshot(
        self, topic: str, seq: int, ts_ns: int, book: SimBook | None = None
    ) -> bytes | None:
        """The snapshot a new subscriber gets in place of update seq (the book after it)."""
        if book is None:
            book = self._own_book(topic)
        if book is None:
            return None
        book.advance_to(seq, ts_ns)
        body = self.snapshot(self._tick(topic, seq, ts_ns)[0], book)
        if body is None:
            return None
        return f'{body[:-1]},"sim_seq":{seq},"sim_ts":{ts_ns}}}'.encode()

    def rest_book(self, path: str, query: Mapping[str, str]) -> tuple[list[str], int] | None:
        """For the venue's REST book snapshot path: the topics whose book may answer (the
        first one subscribed, else the first one published, else the first) and the levels
        a side; None when path is not one."""
        return None

    def rest_body(self, seq: int, ts_us: int, bids: list[Change], asks: list[Change]) -> str:
        """The REST snapshot's JSON body."""
        raise NotImplementedError

    @abstractmethod
    def trade(self, t: Tick) -> str:
        """A trade message (JSON object text)."""

    @abstractmethod
    def book(self, t: Tick, sim: SimBook | None) -> str:
        """A book message (JSON object text): update seq of sim, or a made-up level."""

    def snapshot(self, t: Tick, sim: SimBook) -> str | None:
        """The topic's snapshot message (snapshot_channels)."""
        return None

    def on_close(self, conn_id: int) -> None:  # noqa: B027 (a hook: most feeds keep nothing per connection)
        """A connection went away."""

    # ---- connection events -------------------------------------------------------------
    def on_open(self, path: str, conn_id: int) -> Reply:
        """Greetings, and topics given in the URL."""
        return Reply()

    @abstractmethod
    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        """A client message."""

    def heartbeat(self, current: Collection[str]) -> list[str]:
        """Messages sent about once a second to a connection with these topics."""
        return []

    def reconnect_notice(self) -> str | None:
        """The exchange's 'please reconnect' message, when it has one."""
        return None

    def _whole_request(
        self,
        subscribing: bool,
        topics: Iterable[str],
        ack: str,
        refusal: Callable[[str, str], str],
    ) -> Reply:
        """The reply of a venue that takes a request's topics all or none: a subscribe with
        one topic check() refuses gets refusal(topic, reason) for the first such, and nothing
        changes; else the ack, with the in-band simulator commands run on a subscribe."""
        plain, commands = self._split_sim(topics)
        if not subscribing:
            return Reply(unsubscribe=plain, send=[ack])
        refused = next(((t, reason) for t in plain if (reason := self.check(t))), None)
        if refused:
            return Reply(send=[refusal(*refused)])
        return Reply(subscribe=plain, send=[ack], commands=commands)

    def _split_sim(self, topics: Iterable[str]) -> tuple[list[str], list[str]]:
        """Topics and in-band simulator commands (topics starting with `_sim`)."""
        plain: list[str] = []
        commands: list[str] = []
        for topic in topics:
            (commands if topic.lower().startswith(SIM_PREFIX) else plain).append(topic)
        return plain, commands


def _loads(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return None


# ---- Binance --------------------------------------------------------------------------------
#: Topics of USD-M futures connections (path `/fstream...`) are kept under this prefix: the
#: same stream names as spot, their own books, and depth updates that carry `pu`.
FUTURES = "fstream/"


class BinanceFeed(Feed):
    """Spot, and USD-M futures on connections whose path starts with `/fstream`; REST
    book snapshots at GET /api/v3/depth (spot) and /fapi/v1/depth (futures)."""

    name = "binance"
    trade_channels = frozenset({"trade", "aggTrade"})
    book_channels = frozenset({"depth", "depth@100ms", "bookTicker", "depth5", "depth20"})
    model_channels = book_channels
    max_topics_per_connection = 1024
    max_messages_per_second = 5.0

    def __init__(self, symbols: Collection[str] | None = None) -> None:
        super().__init__(symbols)
        self._futures: set[int] = set()

    def split(self, topic: str) -> tuple[str, str] | None:
        symbol, sep, stream = topic.removeprefix(FUTURES).partition("@")
        if not sep or not symbol or not stream or symbol != symbol.lower():
            return None
        return stream, symbol

    def _market(self, topics: list[str], conn_id: int) -> list[str]:
        return [FUTURES + t for t in topics] if conn_id in self._futures else topics

    def on_open(self, path: str, conn_id: int) -> Reply:
        base, _, query = path.partition("?")
        if base.startswith("/fstream"):
            self._futures.add(conn_id)
        for item in query.split("&"):
            key, _, value = item.partition("=")
            if key == "streams" and value:
                topics, commands = self._split_sim(value.split("/"))
                bad = [t for t in topics if self.check(t)]
                if bad:
                    return Reply(close=(1008, f"invalid stream {bad[0]}"))
                return Reply(subscribe=self._market(topics, conn_id), commands=commands)
        return Reply()

    def on_close(self, conn_id: int) -> None:
        self._futures.discard(conn_id)

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        req = _loads(text)
        if not isinstance(req, dict) or "method" not in req:
            return Reply(send=[dumps({"error": {"code": 3, "msg": "Invalid JSON"}, "id": None})])
        rid = req.get("id")
        method = req.get("method")
        params = req.get("params", [])
        if method == "LIST_SUBSCRIPTIONS":
            names = sorted(t.removeprefix(FUTURES) for t in current)
            return Reply(send=[dumps({"result": names, "id": rid})])
        if method not in ("SUBSCRIBE", "UNSUBSCRIBE") or not isinstance(params, list):
            msg = f"Invalid request: unknown variant {method}"
            return Reply(send=[dumps({"error": {"code": 2, "msg": msg}, "id": rid})])
        reply = self._whole_request(
            method == "SUBSCRIBE",
            (str(p) for p in params),
            dumps({"result": None, "id": rid}),
            lambda _, reason: dumps(
                {"error": {"code": 2, "msg": f"Invalid request: {reason}"}, "id": rid}
            ),
        )
        reply.subscribe = self._market(reply.subscribe, conn_id)
        reply.unsubscribe = self._market(reply.unsubscribe, conn_id)
        return reply

    def reconnect_notice(self) -> str | None:
        return dumps({"e": "serverShutdown", "E": time.time_ns() // 1_000_000})

    def trade(self, t: Tick) -> str:
        topic, ch, sym, seq, ts, px, sz = t
        ms = ts // 1_000_000
        data = (
            f'{{"e":"{ch}","E":{ms},"s":"{sym.upper()}","t":{seq},"p":"{px}","q":"{sz}",'
            f'"T":{ms},"m":{"true" if seq % 2 else "false"},"M":true}}'
        )
        return f'{{"stream":"{topic.removeprefix(FUTURES)}","data":{data}}}'

    def book(self, t: Tick, sim: SimBook | None) -> str:
        """Diff depth: update seq is `U` = `u` = seq (futures: `pu` = seq - 1); partial
        depth: the top N with `lastUpdateId`; bookTicker: the best levels with `u`."""
        topic, ch, sym, seq, ts = t.topic, t.ch, t.sym, t.seq, t.ts
        assert sim is not None
        ms = ts // 1_000_000
        stream = topic.removeprefix(FUTURES)
        if ch in ("depth5", "depth20"):
            bids, asks = sim.top(int(ch[5:]))
            data = f'{{"lastUpdateId":{seq},"bids":{pairs(bids)},"asks":{pairs(asks)}}}'
        elif ch == "bookTicker":
            (bid,), (ask,) = sim.top(1)
            data = (
                f'{{"u":{seq},"s":"{sym.upper()}","b":"{bid[0]}","B":"{bid[1]}",'
                f'"a":"{ask[0]}","A":"{ask[1]}"}}'
            )
        else:
            bids, asks = sim.changes
            futures = f'"T":{ms},' if topic.startswith(FUTURES) else ""
            pu = f',"pu":{seq - 1}' if futures else ""
            data = (
                f'{{"e":"depthUpdate","E":{ms},{futures}"s":"{sym.upper()}","U":{seq},'
                f'"u":{seq}{pu},"b":{pairs(bids)},"a":{pairs(asks)}}}'
            )
        return f'{{"stream":"{stream}","data":{data}}}'

    def rest_book(self, path: str, query: Mapping[str, str]) -> tuple[list[str], int] | None:
        base = path.partition("?")[0].rstrip("/")
        if base not in ("/api/v3/depth", "/fapi/v1/depth") or not query.get("symbol"):
            return None
        prefix = FUTURES if base.startswith("/fapi") else ""
        symbol = query["symbol"].lower()
        limit = int(query.get("limit") or 100)
        return [f"{prefix}{symbol}@depth@100ms", f"{prefix}{symbol}@depth"], limit

    def rest_body(self, seq: int, ts_us: int, bids: list[Change], asks: list[Change]) -> str:
        return f'{{"lastUpdateId":{seq},"bids":{pairs(bids)},"asks":{pairs(asks)}}}'


# ---- Coinbase -------------------------------------------------------------------------------
class CoinbaseFeed(Feed):
    name = "coinbase"
    trade_channels = frozenset({"matches", "ticker"})
    book_channels = frozenset({"level2", "level2_batch"})
    model_channels = book_channels
    snapshot_channels = book_channels
    style = BookStyle(zero="0")

    def split(self, topic: str) -> tuple[str, str] | None:
        channel, sep, product = topic.partition(":")
        return (channel, product) if sep and channel and product else None

    def extra_channels(self) -> frozenset[str]:
        return frozenset({"heartbeat"})

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        req = _loads(text)
        if not isinstance(req, dict) or req.get("type") not in ("subscribe", "unsubscribe"):
            return Reply(send=[dumps({"type": "error", "message": "Failed to parse message"})])
        default_products = req.get("product_ids") or []
        topics: list[str] = []
        for entry in req.get("channels") or []:
            if isinstance(entry, str):
                topics += [f"{entry}:{p}" for p in default_products]
            elif isinstance(entry, dict):
                products = entry.get("product_ids") or default_products
                topics += [f"{entry.get('name')}:{p}" for p in products]
        topics, commands = self._split_sim(topics)
        after = set(current)
        if req["type"] == "subscribe":
            bad = next((reason for t in topics if (reason := self.check(t))), None)
            if bad:
                error = {"type": "error", "message": "Failed to subscribe", "reason": bad}
                return Reply(send=[dumps(error)])
            after |= set(topics)
        else:
            after -= set(topics)
        channels: dict[str, list[str]] = {}
        for topic in sorted(after):
            channel, _, product = topic.partition(":")
            channels.setdefault(channel, []).append(product)
        ack = dumps(
            {
                "type": "subscriptions",
                "channels": [{"name": n, "product_ids": p} for n, p in channels.items()],
            }
        )
        if req["type"] == "subscribe":
            return Reply(subscribe=topics, send=[ack], commands=commands)
        return Reply(unsubscribe=topics, send=[ack])

    def heartbeat(self, current: Collection[str]) -> list[str]:
        now = iso(time.time_ns())
        return [
            dumps(
                {
                    "type": "heartbeat",
                    "sequence": 0,
                    "last_trade_id": 0,
                    "product_id": t.partition(":")[2],
                    "time": now,
                }
            )
            for t in sorted(current)
            if t.startswith("heartbeat:")
        ]

    def trade(self, t: Tick) -> str:
        ch, sym, seq, ts, px, sz = t.ch, t.sym, t.seq, t.ts, t.px, t.sz
        side = "buy" if seq % 2 else "sell"
        if ch == "ticker":
            return (
                f'{{"type":"ticker","sequence":{seq},"product_id":"{sym}","price":"{px}",'
                f'"open_24h":"{px}","volume_24h":"1000.0","best_bid":"{px}","best_ask":"{px}",'
                f'"side":"{side}","time":"{iso(ts)}","trade_id":{seq},"last_size":"{sz}"}}'
            )
        return (
            f'{{"type":"match","trade_id":{seq},"sequence":{seq},'
            f'"maker_order_id":"m-{seq}","taker_order_id":"t-{seq}","time":"{iso(ts)}",'
            f'"product_id":"{sym}","size":"{sz}","price":"{px}","side":"{side}"}}'
        )

    def book(self, t: Tick, sim: SimBook | None) -> str:
        """level2: a snapshot to each new subscriber, then l2updates (no sequence)."""
        sym, ts = t.sym, t.ts
        assert sim is not None
        bids, asks = sim.changes
        changes = [f'["buy","{p}","{q}"]' for p, q in bids]
        changes += [f'["sell","{p}","{q}"]' for p, q in asks]
        return (
            f'{{"type":"l2update","product_id":"{sym}","changes":[{",".join(changes)}],'
            f'"time":"{iso(ts)}"}}'
        )

    def snapshot(self, t: Tick, sim: SimBook) -> str | None:
        sym, ts = t.sym, t.ts
        bids, asks = sim.top()
        return (
            f'{{"type":"snapshot","product_id":"{sym}","bids":{pairs(bids)},'
            f'"asks":{pairs(asks)},"time":"{iso(ts)}"}}'
        )


# ---- Kraken ---------------------------------------------------------------------------------
class KrakenFeed(Feed):
    name = "kraken"
    trade_channels = frozenset({"trade", "ticker"})
    #: `book` at a depth other than 10 is the topic `book.N:SYMBOL` here, as in the
    #: gateway's dialect (the request's `depth`; the messages' channel is `book`).
    book_channels = frozenset({"book", "book.25", "book.100", "book.500", "book.1000"})
    model_channels = book_channels
    snapshot_channels = book_channels
    #: BTC/USD's precisions: price 1 decimal, qty 8 (v2 sends both as JSON numbers).
    style = BookStyle(price_places=1)
    #: The subscription's depth when it gives none (Kraken's default).
    depth = 10

    def book_window(self, channel: str) -> int | None:
        return int(channel[5:]) if channel.startswith("book.") else self.depth

    def split(self, topic: str) -> tuple[str, str] | None:
        channel, sep, symbol = topic.partition(":")
        return (channel, symbol) if sep and channel and "/" in symbol else None

    def on_open(self, path: str, conn_id: int) -> Reply:
        status = {
            "channel": "status",
            "type": "update",
            "data": [
                {
                    "api_version": "v2",
                    "connection_id": conn_id,
                    "system": "online",
                    "version": "2.0.0",
                }
            ],
        }
        return Reply(send=[dumps(status)])

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        req = _loads(text)
        now = iso(time.time_ns())
        if not isinstance(req, dict):
            return Reply(send=[dumps({"error": "Malformed request", "success": False})])
        method, rid = req.get("method"), req.get("req_id")
        if method == "ping":
            return Reply(
                send=[dumps({"method": "pong", "req_id": rid, "time_in": now, "time_out": now})]
            )
        params = req.get("params") if isinstance(req.get("params"), dict) else {}
        if method not in ("subscribe", "unsubscribe") or not params:
            error = {"error": f"Unsupported method {method}", "success": False, "req_id": rid}
            return Reply(send=[dumps(error)])
        channel = params.get("channel")
        depth = params.get("depth", self.depth) if channel == "book" else None
        if depth is not None and depth != self.depth:
            if f"book.{depth}" not in self.book_channels:
                error = {"error": f"Invalid depth {depth}", "success": False, "req_id": rid}
                return Reply(send=[dumps(error)])
            channel = f"book.{depth}"
        reply = Reply()
        for symbol in params.get("symbol") or []:
            topic = f"{channel}:{symbol}"
            if topic.lower().startswith(SIM_PREFIX) or str(channel).startswith(SIM_PREFIX):
                reply.commands.append(topic)
                continue
            reason = self.check(topic) if method == "subscribe" else None
            base = {"method": method, "req_id": rid, "time_in": now, "time_out": now}
            if reason:
                reply.send.append(
                    dumps(
                        {
                            "error": f"Currency pair not supported {symbol}"
                            if "symbol" in reason
                            else f"Channel not supported {channel}",
                            "success": False,
                            "symbol": symbol,
                            **base,
                        }
                    )
                )
                continue
            result: dict[str, object] = {"channel": "book", "depth": depth, "snapshot": True}
            if depth is None:
                result = {"channel": channel, "snapshot": False}
            result["symbol"] = symbol
            reply.send.append(dumps({**base, "result": result, "success": True}))
            (reply.subscribe if method == "subscribe" else reply.unsubscribe).append(topic)
        return reply

    def heartbeat(self, current: Collection[str]) -> list[str]:
        return [dumps({"channel": "heartbeat"})] if current else []

    def trade(self, t: Tick) -> str:
        ch, sym, seq, ts, px, sz = t.ch, t.sym, t.seq, t.ts, t.px, t.sz
        side = "buy" if seq % 2 else "sell"
        if ch == "ticker":
            item = f'{{"symbol":"{sym}","bid":{px},"ask":{px},"last":{px},"volume":{sz}}}'
            return f'{{"channel":"ticker","type":"update","data":[{item}]}}'
        item = (
            f'{{"symbol":"{sym}","side":"{side}","price":{px},"qty":{sz},"ord_type":"market",'
            f'"trade_id":{seq},"timestamp":"{iso(ts)}"}}'
        )
        return f'{{"channel":"trade","type":"update","data":[{item}]}}'

    def book(self, t: Tick, sim: SimBook | None) -> str:
        """v2 book: a snapshot of the top 10 to each new subscriber, then updates that keep
        to the top 10, each with the CRC32 of the top 10 after it."""
        sym, ts = t.sym, t.ts
        assert sim is not None
        return self._book_message("update", sym, ts, *sim.changes, sim.kraken_checksum())

    def snapshot(self, t: Tick, sim: SimBook) -> str | None:
        sym, ts = t.sym, t.ts
        bids, asks = sim.top(self.book_window(t.ch))
        return self._book_message("snapshot", sym, ts, bids, asks, sim.kraken_checksum())

    @staticmethod
    def _book_message(
        kind: str, sym: str, ts: int, bids: list[Change], asks: list[Change], checksum: int
    ) -> str:
        def levels(changes: list[Change]) -> str:
            return ",".join(f'{{"price":{p},"qty":{q}}}' for p, q in changes)

        item = (
            f'{{"symbol":"{sym}","bids":[{levels(bids)}],"asks":[{levels(asks)}],'
            f'"checksum":{checksum},"timestamp":"{iso(ts)}"}}'
        )
        return f'{{"channel":"book","type":"{kind}","data":[{item}]}}'


# ---- OKX ------------------------------------------------------------------------------------
class OkxFeed(Feed):
    name = "okx"
    trade_channels = frozenset({"trades", "tickers"})
    book_channels = frozenset({"books", "books5", "bbo-tbt"})
    model_channels = book_channels
    snapshot_channels = frozenset({"books"})
    style = BookStyle(zero="0")

    def split(self, topic: str) -> tuple[str, str] | None:
        channel, sep, inst = topic.partition(":")
        return (channel, inst) if sep and channel and inst else None

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        if text == "ping":
            return Reply(send=["pong"])
        req = _loads(text)
        conn = f"{conn_id:08x}"
        if not isinstance(req, dict) or req.get("op") not in ("subscribe", "unsubscribe"):
            error = {"event": "error", "code": "60012", "msg": f"Invalid request: {text[:100]}"}
            return Reply(send=[dumps({**error, "connId": conn})])
        op, rid = req["op"], req.get("id")
        reply = Reply()
        for arg in req.get("args") or []:
            if not isinstance(arg, dict):
                continue
            topic = f"{arg.get('channel')}:{arg.get('instId')}"
            head = {"id": rid} if rid is not None else {}
            if topic.lower().startswith(SIM_PREFIX):
                reply.commands.append(topic)
            elif op == "subscribe" and (reason := self.check(topic)):
                msg = f"Wrong URL or channel:{arg.get('channel')},instId:{arg.get('instId')} "
                msg += f"doesn't exist ({reason})"
                reply.send.append(
                    dumps({**head, "event": "error", "code": "60018", "msg": msg, "connId": conn})
                )
                continue
            else:
                (reply.subscribe if op == "subscribe" else reply.unsubscribe).append(topic)
            reply.send.append(dumps({**head, "event": op, "arg": arg, "connId": conn}))
        return reply

    def reconnect_notice(self) -> str | None:
        msg = "The connection will soon be closed for a service upgrade. Please reconnect."
        return dumps({"event": "notice", "code": "64008", "msg": msg, "connId": "0"})

    def trade(self, t: Tick) -> str:
        ch, sym, seq, ts, px, sz = t.ch, t.sym, t.seq, t.ts, t.px, t.sz
        ms = ts // 1_000_000
        arg = f'{{"channel":"{ch}","instId":"{sym}"}}'
        if ch == "tickers":
            item = (
                f'{{"instType":"SPOT","instId":"{sym}","last":"{px}","lastSz":"{sz}","ts":"{ms}"}}'
            )
        else:
            item = (
                f'{{"instId":"{sym}","tradeId":"{seq}","px":"{px}","sz":"{sz}",'
                f'"side":"{"buy" if seq % 2 else "sell"}","ts":"{ms}","count":"1"}}'
            )
        return f'{{"arg":{arg},"data":[{item}]}}'

    def book(self, t: Tick, sim: SimBook | None) -> str:
        """books: a snapshot to each new subscriber, then updates with seqId = seq,
        prevSeqId = seq - 1 and the signed CRC32 of the top 25; books5 and bbo-tbt: the
        top 5 or 1 in every message."""
        ch, sym, seq, ts = t.ch, t.sym, t.seq, t.ts
        assert sim is not None
        if ch == "books":
            return self._book_message(ch, sym, seq, seq - 1, ts, *sim.changes, sim, "update")
        bids, asks = sim.top(5 if ch == "books5" else 1)
        return self._book_message(ch, sym, seq, seq - 1, ts, bids, asks, sim, "")

    def snapshot(self, t: Tick, sim: SimBook) -> str | None:
        ch, sym, seq, ts = t.ch, t.sym, t.seq, t.ts
        return self._book_message(ch, sym, seq, -1, ts, *sim.top(), sim, "snapshot")

    @staticmethod
    def _book_message(
        ch: str,
        sym: str,
        seq: int,
        prev: int,
        ts: int,
        bids: list[Change],
        asks: list[Change],
        sim: SimBook,
        action: str,
    ) -> str:
        def levels(changes: list[Change]) -> str:
            return "[" + ",".join(f'["{p}","{q}","0","1"]' for p, q in changes) + "]"

        arg = f'{{"channel":"{ch}","instId":"{sym}"}}'
        checksum = f'"checksum":{sim.okx_checksum()},' if ch == "books" else ""
        item = (
            f'{{"asks":{levels(asks)},"bids":{levels(bids)},"ts":"{ts // 1_000_000}",'
            f'{checksum}"seqId":{seq},"prevSeqId":{prev}}}'
        )
        head = f',"action":"{action}"' if action else ""
        return f'{{"arg":{arg}{head},"data":[{item}]}}'


# ---- Bybit ----------------------------------------------------------------------------------
class BybitFeed(Feed):
    name = "bybit"
    trade_channels = frozenset({"publicTrade", "tickers"})
    book_channels = frozenset({"orderbook.1", "orderbook.50", "orderbook.200"})
    model_channels = book_channels
    snapshot_channels = book_channels
    style = BookStyle(zero="0")

    def book_window(self, channel: str) -> int | None:
        return int(channel.partition(".")[2])

    def split(self, topic: str) -> tuple[str, str] | None:
        channel, sep, symbol = topic.rpartition(".")
        return (channel, symbol) if sep and channel and symbol else None

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        req = _loads(text)
        conn = f"sim-{conn_id}"
        if not isinstance(req, dict):
            return Reply(
                send=[dumps({"success": False, "ret_msg": "invalid json", "conn_id": conn})]
            )
        op, rid = req.get("op"), req.get("req_id", "")
        if op == "ping":
            pong = {
                "success": True,
                "ret_msg": "pong",
                "conn_id": conn,
                "req_id": rid,
                "op": "ping",
            }
            return Reply(send=[dumps(pong)])
        if op not in ("subscribe", "unsubscribe"):
            error = {"success": False, "ret_msg": f"unknown op {op}", "conn_id": conn}
            return Reply(send=[dumps({**error, "req_id": rid, "op": op})])
        args = [str(a) for a in req.get("args") or []]
        head = {"conn_id": conn, "req_id": rid, "op": op}
        if len(args) > 10:
            error = {"success": False, "ret_msg": "args size >10", **head}
            return Reply(send=[dumps(error)])
        return self._whole_request(
            op == "subscribe",
            args,
            dumps({"success": True, "ret_msg": "", **head}),
            lambda topic, _: dumps(
                {"success": False, "ret_msg": f"Invalid topic :[{topic}]", **head}
            ),
        )

    def trade(self, t: Tick) -> str:
        topic, ch, sym, seq, ts, px, sz = t
        ms = ts // 1_000_000
        if ch == "tickers":
            data = f'{{"symbol":"{sym}","lastPrice":"{px}","volume24h":"{sz}"}}'
            return f'{{"topic":"{topic}","type":"snapshot","ts":{ms},"cs":{seq},"data":{data}}}'
        item = (
            f'{{"T":{ms},"s":"{sym}","S":"{"Buy" if seq % 2 else "Sell"}","v":"{sz}","p":"{px}",'
            f'"L":"PlusTick","i":"sim-{seq}","BT":false}}'
        )
        return f'{{"topic":"{topic}","type":"snapshot","ts":{ms},"data":[{item}]}}'

    def book(self, t: Tick, sim: SimBook | None) -> str:
        """orderbook.N: a snapshot to each new subscriber, then deltas with u = seq that
        keep to the top N."""
        topic, sym, seq, ts = t.topic, t.sym, t.seq, t.ts
        assert sim is not None
        return self._book_message(topic, "delta", sym, seq, ts, *sim.changes)

    def snapshot(self, t: Tick, sim: SimBook) -> str | None:
        topic, ch, sym, seq, ts = t.topic, t.ch, t.sym, t.seq, t.ts
        bids, asks = sim.top(self.book_window(ch))
        return self._book_message(topic, "snapshot", sym, seq, ts, bids, asks)

    @staticmethod
    def _book_message(
        topic: str, kind: str, sym: str, seq: int, ts: int, bids: list[Change], asks: list[Change]
    ) -> str:
        ms = ts // 1_000_000
        data = f'{{"s":"{sym}","b":{pairs(bids)},"a":{pairs(asks)},"u":{seq},"seq":{seq}}}'
        return f'{{"topic":"{topic}","type":"{kind}","ts":{ms},"data":{data},"cts":{ms}}}'


# ---- Bitstamp -------------------------------------------------------------------------------
_BITSTAMP_CHANNEL = re.compile(
    r"^(live_trades|live_orders|diff_order_book|order_book)_([a-z0-9]+)$"
)


class BitstampFeed(Feed):
    name = "bitstamp"
    trade_channels = frozenset({"live_trades"})
    book_channels = frozenset({"diff_order_book", "order_book", "live_orders"})
    model_channels = frozenset({"diff_order_book", "order_book"})

    def split(self, topic: str) -> tuple[str, str] | None:
        match = _BITSTAMP_CHANNEL.match(topic)
        return (match.group(1), match.group(2)) if match else None

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:  # noqa: PLR0911 (a request dispatcher: one reply per request kind)
        req = _loads(text)
        bad_request = dumps(
            {"event": "bts:error", "channel": "", "data": {"code": None, "message": "Bad request."}}
        )
        if not isinstance(req, dict):
            return Reply(send=[bad_request])
        event = req.get("event")
        if event == "bts:heartbeat":
            beat = {"event": "bts:heartbeat", "channel": "", "data": {"status": "success"}}
            return Reply(send=[dumps(beat)])
        data = req["data"] if isinstance(req.get("data"), dict) else {}
        channel = str(data.get("channel", ""))
        if event not in ("bts:subscribe", "bts:unsubscribe"):
            return Reply(send=[bad_request])
        if channel.lower().startswith(SIM_PREFIX):
            ack = {"event": "bts:subscription_succeeded", "channel": channel, "data": {}}
            return Reply(send=[dumps(ack)], commands=[channel])
        if event == "bts:subscribe":
            if self.check(channel):
                error = {"code": None, "message": "Bad subscription string."}
                return Reply(send=[dumps({"event": "bts:error", "channel": "", "data": error})])
            ack = {"event": "bts:subscription_succeeded", "channel": channel, "data": {}}
            return Reply(subscribe=[channel], send=[dumps(ack)])
        ack = {"event": "bts:unsubscription_succeeded", "channel": channel, "data": {}}
        return Reply(unsubscribe=[channel], send=[dumps(ack)])

    def reconnect_notice(self) -> str | None:
        return dumps({"event": "bts:request_reconnect", "channel": "", "data": ""})

    def trade(self, t: Tick) -> str:
        topic, seq, ts, px, sz = t.topic, t.seq, t.ts, t.px, t.sz
        data = (
            f'{{"id":{seq},"timestamp":"{ts // 1_000_000_000}","amount":{sz},"amount_str":"{sz}",'
            f'"price":{px},"price_str":"{px}","type":{seq % 2},"microtimestamp":"{ts // 1000}",'
            f'"buy_order_id":{seq * 2},"sell_order_id":{seq * 2 + 1}}}'
        )
        return f'{{"data":{data},"channel":"{topic}","event":"trade"}}'

    def book(self, t: Tick, sim: SimBook | None) -> str:
        """diff_order_book: the changes, stamped by a strictly increasing microtimestamp
        (the REST snapshot's is the last one it holds); order_book: the top 100."""
        topic, ch, seq, ts, px, sz = t.topic, t.ch, t.seq, t.ts, t.px, t.sz
        if sim is None:  # live_orders: one made-up order
            data = (
                f'{{"timestamp":"{ts // 1_000_000_000}","microtimestamp":"{ts // 1000}",'
                f'"bids":[["{px}","{sz}"]],"asks":[["{px}","{sz}"]]}}'
            )
            return f'{{"data":{data},"channel":"{topic}","event":"data"}}'
        bids, asks = sim.changes if ch == "diff_order_book" else sim.top(100)
        data = self.rest_body(seq, sim.ts_us, bids, asks)
        return f'{{"data":{data},"channel":"{topic}","event":"data"}}'

    def rest_book(self, path: str, query: Mapping[str, str]) -> tuple[list[str], int] | None:
        base = path.partition("?")[0].rstrip("/")
        prefix = "/api/v2/order_book/"
        if not base.startswith(prefix) or len(base) == len(prefix):
            return None
        pair = base[len(prefix) :].lower()
        return [f"diff_order_book_{pair}"], 100

    def rest_body(self, seq: int, ts_us: int, bids: list[Change], asks: list[Change]) -> str:
        return (
            f'{{"timestamp":"{ts_us // 1_000_000}","microtimestamp":"{ts_us}",'
            f'"bids":{pairs(bids)},"asks":{pairs(asks)}}}'
        )


# ---- generic --------------------------------------------------------------------------------
class GenericFeed(Feed):
    """Speaks GenericConfig's default templates: {"op": "subscribe", "topics": [...],
    "id": N} acked with {"result": null, "id": N}; data {"topic": ..., ...}."""

    name = "generic"

    def split(self, topic: str) -> tuple[str, str] | None:
        channel, sep, symbol = topic.partition(".")
        return (channel, symbol) if sep and channel and symbol else ("trades", topic)

    def check(self, topic: str) -> str | None:
        if not topic or any(c.isspace() for c in topic):
            return f"invalid topic {topic!r}"
        _, symbol = self.split(topic) or ("", topic)
        if self.allowed is not None and symbol_key(symbol) not in self.allowed:
            return f"unknown symbol {symbol}"
        return None

    def publishes(self, topic: str) -> bool:
        return True

    def on_message(self, text: str, current: Collection[str], conn_id: int) -> Reply:
        req = _loads(text)
        if not isinstance(req, dict):
            return Reply(send=[dumps({"error": "invalid json", "id": None})])
        op, rid = req.get("op"), req.get("id")
        if op == "ping":
            return Reply(send=[dumps({"type": "heartbeat"})])
        topics_raw = req.get("topics")
        if op not in ("subscribe", "unsubscribe") or not isinstance(topics_raw, list):
            return Reply(send=[dumps({"error": f"unknown op {op}", "id": rid})])
        return self._whole_request(
            op == "subscribe",
            (str(t) for t in topics_raw),
            dumps({"result": None, "id": rid}),
            lambda _, reason: dumps({"error": reason, "id": rid}),
        )

    def trade(self, t: Tick) -> str:
        topic, seq, px, sz = t.topic, t.seq, t.px, t.sz
        side = "buy" if seq % 2 else "sell"
        return f'{{"topic":"{topic}","price":"{px}","size":"{sz}","side":"{side}"}}'

    def book(self, t: Tick, sim: SimBook | None) -> str:
        return self.trade(t)


FEEDS: dict[str, type[Feed]] = {
    cls.name: cls
    for cls in (
        BinanceFeed,
        CoinbaseFeed,
        KrakenFeed,
        OkxFeed,
        BybitFeed,
        BitstampFeed,
        GenericFeed,
    )
}
