"""A session's periodic book snapshots, stored: the setting a PUT /v1/books/{session}/
snapshots makes is written to the database and handed to the BookManager, and `restore`
hands every stored one back at start, so a restart keeps them (migration 0009). A deleted
session's setting goes with it (the foreign key cascades; the manager forgets its own)."""

from __future__ import annotations

from sqlalchemy import select

from gateway.books.manager import BookManager, SnapshotPolicy
from gateway.control.transactions import Transactions
from gateway.store.models import BookSnapshotsRow


class BookSnapshotService:
    """The stored periodic snapshot settings, and the books they apply to."""

    def __init__(self, tx: Transactions, books: BookManager) -> None:
        self.tx = tx
        self.books = books

    def set(self, session_id: int, policy: SnapshotPolicy | None) -> None:
        """Store the session's setting (None: remove it, the default applies) and apply it."""
        with self.tx.lock:  # the store and the books change in one order
            with self.tx.write() as s:
                row = s.get(BookSnapshotsRow, session_id)
                if policy is None:
                    if row is not None:
                        s.delete(row)
                else:
                    if row is None:
                        row = BookSnapshotsRow(session_id=session_id)
                        s.add(row)
                    row.interval_ms = round(policy.interval_s * 1000)
                    row.depth = policy.depth
            self.books.set_snapshots(session_id, policy)  # once stored

    def restore(self) -> int:
        """Hand every stored setting to the books; how many there were."""
        rows = self.tx.read(lambda s: list(s.scalars(select(BookSnapshotsRow))))
        for row in rows:
            self.books.set_snapshots(
                row.session_id, SnapshotPolicy(row.interval_ms / 1000, row.depth)
            )
        return len(rows)
