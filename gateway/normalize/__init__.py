"""Normalized market data: one schema for every venue (schema) and the per-venue
normalizers that produce it from raw messages (venues)."""

from gateway.normalize.schema import (
    ENCODINGS,
    TOPIC_PREFIXES,
    BookDelta,
    BookReset,
    BookSnapshot,
    Event,
    Funding,
    Level,
    Ticker,
    TopOfBook,
    Trade,
    decode,
    decode_binary,
    decode_json,
    encode,
    encode_binary,
    encode_json,
    encoding_of,
)
from gateway.normalize.venues import NORMALIZERS, Normalizer, make_normalizer

__all__ = [
    "ENCODINGS",
    "NORMALIZERS",
    "TOPIC_PREFIXES",
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
    "decode",
    "decode_binary",
    "decode_json",
    "encode",
    "encode_binary",
    "encode_json",
    "encoding_of",
    "make_normalizer",
]
