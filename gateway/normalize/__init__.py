"""Normalized market data: one schema for every venue (schema) and the per-venue
normalizers that produce it from raw messages (venues)."""

from gateway.normalize.schema import (
    BookDelta,
    BookReset,
    BookSnapshot,
    Event,
    Funding,
    Level,
    Ticker,
    TopOfBook,
    Trade,
    decode_binary,
    decode_json,
    encode_binary,
    encode_json,
)
from gateway.normalize.venues import NORMALIZERS, Normalizer, make_normalizer

__all__ = [
    "NORMALIZERS",
    "BookDelta",
    "BookReset",
    "BookSnapshot",
    "Event",
    "Funding",
    "Level",
    "Normalizer",
    "Ticker",
    "TopOfBook",
    "Trade",
    "decode_binary",
    "decode_json",
    "encode_binary",
    "encode_json",
    "make_normalizer",
]
