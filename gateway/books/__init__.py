"""Local order books per symbol, kept in sync by each venue's rules (gateway.books.sync)."""

from gateway.books.book import OrderBook, kraken_checksum, okx_checksum
from gateway.books.sync import SYNCS, Action, BookSync, Outcome, Reason, make_sync

__all__ = [
    "SYNCS",
    "Action",
    "BookSync",
    "OrderBook",
    "Outcome",
    "Reason",
    "kraken_checksum",
    "make_sync",
    "okx_checksum",
]
