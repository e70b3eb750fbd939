"""A local order book as GET /v1/books/{session}/{symbol} serves it."""

from __future__ import annotations

from pydantic import Field

from api.schemas.common import PublicSchema


class BookPublic(PublicSchema):
    session_id: int
    venue: str
    symbol: str = Field(description="the venue's spelling (BTCUSDT, BTC/USD, BTC-USDT, btcusd)")
    topic: str = Field(description="the upstream topic the book is kept from")
    seq: int = Field(
        description="the book's sequence: the venue's last update id (Binance u, OKX seqId, "
        "Bybit u, Bitstamp microtimestamp); 0 where the venue has none (Kraken, Coinbase)"
    )
    stale: bool = Field(
        description="true while the book is being resynchronized (no levels are shown then)"
    )
    bids: list[tuple[str, str]] = Field(description="[price, size], best first, exact text")
    asks: list[tuple[str, str]] = Field(description="[price, size], best first, exact text")
    updated_ns: int = Field(description="receive stamp of the last event the book took")
    resyncs: dict[str, int] = Field(description="resynchronizations of this book, by reason")
    last_reset_reason: str | None = Field(description="why it was last found wrong, if ever")
