"""Helpers for the simulator tests (no tests here): a plain `websockets` client driven by a
dialect, topics per dialect, a loop runner."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from websockets.asyncio.client import ClientConnection

from gateway.dialects import Ack, Classified, Data, Dialect, Error, Heartbeat, Other

T = TypeVar("T")

#: Three topics per dialect: a trade, a book and a third channel, as the dialect spells them.
TOPICS: dict[str, list[str]] = {
    "binance": ["btcusdt@trade", "ethusdt@depth", "solusdt@aggTrade"],
    "coinbase": ["matches:BTC-USD", "level2_batch:ETH-USD", "ticker:SOL-USD"],
    "kraken": ["trade:BTC/USD", "book:ETH/USD", "ticker:SOL/USD"],
    "okx": ["trades:BTC-USDT", "books5:ETH-USDT", "tickers:SOL-USDT"],
    "bybit": ["publicTrade.BTCUSDT", "orderbook.50.ETHUSDT", "tickers.SOLUSDT"],
    "bitstamp": ["live_trades_btcusd", "diff_order_book_ethusd", "live_trades_solusd"],
    "generic": ["trades.BTC", "book.ETH", "SOL"],
}

#: A topic each dialect spells right but the simulator (with a symbol list) refuses.
BAD_TOPICS: dict[str, str] = {
    "binance": "dogeusdt@trade",
    "coinbase": "matches:DOGE-USD",
    "kraken": "trade:DOGE/USD",
    "okx": "trades:DOGE-USDT",
    "bybit": "publicTrade.DOGEUSDT",
    "bitstamp": "live_trades_dogeusd",
    "generic": "trades.DOGE",
}

SYMBOLS = ("BTCUSDT", "ETHUSDT", "SOLUSDT", "BTCUSD", "ETHUSD", "SOLUSD", "BTC", "ETH", "SOL")


@dataclass
class Received:
    seqs: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    acks: list[Ack] = field(default_factory=list)
    errors: list[Error] = field(default_factory=list)
    heartbeats: int = 0
    other: list[Other] = field(default_factory=list)
    raw: list[bytes] = field(default_factory=list)
    classified: list[Classified] = field(default_factory=list)


def sim_seq(message: str | bytes) -> int:
    return int(orjson.loads(message)["sim_seq"])


async def receive(
    ws: ClientConnection,
    dialect: Dialect,
    until: Callable[[Received], bool],
    *,
    timeout: float = 10.0,
    got: Received | None = None,
) -> Received:
    """Classify messages until `until` holds (TimeoutError otherwise)."""
    got = got or Received()
    async with asyncio.timeout(timeout):
        while not until(got):
            message = await ws.recv()
            raw = message.encode() if isinstance(message, str) else message
            kind = dialect.classify(raw)
            got.raw.append(raw)
            got.classified.append(kind)
            if isinstance(kind, Data):
                got.seqs[kind.topic].append(sim_seq(raw))
            elif isinstance(kind, Ack):
                got.acks.append(kind)
            elif isinstance(kind, Error):
                got.errors.append(kind)
            elif isinstance(kind, Heartbeat):
                got.heartbeats += 1
            else:
                got.other.append(kind)
    return got


def run(coro: Awaitable[T]) -> T:
    """Run a scenario on a fresh event loop (no pytest-asyncio needed)."""

    async def main() -> T:
        return await coro

    return asyncio.run(main())


def contiguous(seqs: list[int]) -> bool:
    return seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True


def topics_of(got: Received) -> set[str]:
    return set(got.seqs)


def any_of(*kinds: type[Any]) -> Callable[[Received], bool]:
    return lambda got: any(isinstance(k, kinds) for k in got.classified)


def client(uri: str, **kwargs: Any) -> Any:
    """`websockets.connect` with an unbounded receive queue: a test that stops reading
    mid-stream must not stall the closing handshake for close_timeout."""
    from websockets.asyncio.client import connect

    return connect(uri, max_queue=None, **kwargs)
