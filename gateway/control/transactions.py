"""The store as the control plane uses it: plain reads, and writes serialised by one lock.

The control plane sees a few requests a second, so one lock costs nothing and keeps the
rules that read before they write (topic ref-counts, unique devices) free of races.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from gateway.store.db import Database
from gateway.store.errors import ConflictError
from gateway.store.models import Base
from gateway.store.repository import Page, Repository

T = TypeVar("T")
M = TypeVar("M", bound=Base)


class Transactions:
    """Read and write transactions on one database, the writes under `lock`."""

    def __init__(self, db: Database) -> None:
        self.db = db
        #: Re-entrant: an operation that spans transactions (deleting a running session)
        #: holds it throughout, and the writes inside take it again.
        self.lock = threading.RLock()

    @contextmanager
    def write(self) -> Iterator[Session]:
        """One locked transaction; a unique-constraint race becomes a 409."""
        with self.lock:
            try:
                with self.db.session() as s:
                    yield s
            except IntegrityError as exc:
                raise ConflictError(f"the change conflicts with stored data: {exc.orig}") from exc

    def read(self, fn: Callable[[Session], T]) -> T:
        with self.db.session() as s:
            return fn(s)


class RowService(Generic[M]):
    """What every entity's service reads the same way: a page of its rows, and one row
    (NotFoundError, a 404, when there is none)."""

    def __init__(self, tx: Transactions, repository: type[Repository[M]]) -> None:
        self.tx = tx
        self.repository = repository

    def page(self, offset: int, limit: int) -> Page[M]:
        return self.tx.read(lambda s: self.repository(s).page(offset, limit))

    def get(self, ident: int) -> M:
        return self.tx.read(lambda s: self.repository(s).get(ident))
