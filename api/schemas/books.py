"""A local order book as GET /v1/books/{session}/{symbol} serves it."""

from __future__ import annotations

from pydantic import Field

from api.schemas.common import PublicSchema, Schema


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


#: The deepest book a request may ask for (GET depth, periodic snapshot depth).
MAX_DEPTH = 5000
#: Periodic snapshot intervals: the books' reader looks at its timers every 100 ms.
MIN_SNAPSHOT_INTERVAL_MS = 100
MAX_SNAPSHOT_INTERVAL_MS = 3_600_000


class BookSnapshotsSettings(Schema):
    """Periodic snapshots of a session's books over the ring, /v1/stream and NATS."""

    interval_ms: int = Field(
        ge=MIN_SNAPSHOT_INTERVAL_MS,
        le=MAX_SNAPSHOT_INTERVAL_MS,
        description="a `snapshot` event of each synced book every this many ms",
    )
    depth: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DEPTH,
        description="levels a side, best first (null: the whole book)",
    )


class BookSnapshotsPublic(PublicSchema):
    session_id: int
    interval_ms: int | None = Field(description="null: no periodic snapshots")
    depth: int | None = Field(description="levels a side (null: the whole book)")
    default: bool = Field(
        description="true: the gateway's default (books.periodic_interval_ms, "
        "books.periodic_depth), the session has no setting of its own"
    )
    published: int = Field(description="periodic snapshots published by this gateway, all sessions")
