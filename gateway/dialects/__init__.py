"""Exchange dialects: subscribe messages, message classification, limits, topic paths.

`make_dialect("okx")` gives a fresh dialect object for one connection.
"""

from __future__ import annotations

from typing import Any

from gateway.dialects.base import (
    INFO,
    RECONNECT,
    UNKNOWN,
    UNPARSABLE,
    Ack,
    Classified,
    Data,
    Dialect,
    DialectError,
    Error,
    Heartbeat,
    Limits,
    Message,
    Other,
)
from gateway.dialects.binance import BinanceDialect
from gateway.dialects.bitstamp import BitstampDialect
from gateway.dialects.bybit import BybitDialect
from gateway.dialects.coinbase import CoinbaseDialect
from gateway.dialects.extract import TopicExtractor
from gateway.dialects.generic import GenericConfig, GenericDialect, Match
from gateway.dialects.jsonscan import TopicPaths, parse_path
from gateway.dialects.kraken import KrakenDialect
from gateway.dialects.okx import OkxDialect
from gateway.dialects.planner import (
    RequestQueue,
    SubscriptionPlanner,
    TokenBucket,
    plan_connections,
)

DIALECTS: dict[str, type[Dialect]] = {
    "binance": BinanceDialect,
    "coinbase": CoinbaseDialect,
    "kraken": KrakenDialect,
    "okx": OkxDialect,
    "bybit": BybitDialect,
    "bitstamp": BitstampDialect,
    "generic": GenericDialect,
}


def make_dialect(name: str, **options: Any) -> Dialect:
    """A new dialect object (one per connection) by name."""
    try:
        cls = DIALECTS[name]
    except KeyError:
        raise DialectError(f"unknown dialect {name!r}; known: {', '.join(DIALECTS)}") from None
    return cls(**options)


__all__ = [
    "DIALECTS",
    "INFO",
    "RECONNECT",
    "UNKNOWN",
    "UNPARSABLE",
    "Ack",
    "BinanceDialect",
    "BitstampDialect",
    "BybitDialect",
    "Classified",
    "CoinbaseDialect",
    "Data",
    "Dialect",
    "DialectError",
    "Error",
    "GenericConfig",
    "GenericDialect",
    "Heartbeat",
    "KrakenDialect",
    "Limits",
    "Match",
    "Message",
    "OkxDialect",
    "Other",
    "RequestQueue",
    "SubscriptionPlanner",
    "TokenBucket",
    "TopicExtractor",
    "TopicPaths",
    "make_dialect",
    "parse_path",
    "plan_connections",
]
