"""Queries, one small repository per entity, all working inside a caller's session.

Repositories only read and write rows; rules that involve the runtime (ref-counted topics,
starting sessions) live in gateway.control. `get` raises NotFoundError with the message
the API returns ("port 7 not found").
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy import ColumnElement, func, or_, select
from sqlalchemy.orm import Session

from gateway.store.errors import NotFoundError
from gateway.store.models import (
    Base,
    EventRow,
    PortRow,
    SessionRow,
    SubscriptionRow,
    TokenRow,
    utcnow,
)

M = TypeVar("M", bound=Base)


@dataclass(frozen=True)
class Page(Generic[M]):
    items: list[M]
    total: int


class Repository(Generic[M]):
    """Get, list (paged, oldest first), add and delete for one model."""

    model: ClassVar[type[Any]]
    kind: ClassVar[str]

    def __init__(self, session: Session) -> None:
        self.session = session

    def get(self, ident: int) -> M:
        row: M | None = self.session.get(self.model, ident)
        if row is None:
            raise NotFoundError(self.kind, ident)
        return row

    def find(self, ident: int) -> M | None:
        row: M | None = self.session.get(self.model, ident)
        return row

    def page(self, offset: int = 0, limit: int = 100) -> Page[M]:
        return self._page(offset, limit)

    def _page(
        self,
        offset: int,
        limit: int,
        *where: ColumnElement[bool],
        order_by: Sequence[ColumnElement[Any]] = (),
    ) -> Page[M]:
        """The rows that match `where`, in `order_by` (oldest first, by id, when not
        given), from `offset`, and how many match in all."""
        total = self.session.scalar(select(func.count()).select_from(self.model).where(*where))
        rows = self.session.scalars(
            select(self.model)
            .where(*where)
            .order_by(*(order_by or [self.model.id]))
            .offset(offset)
            .limit(limit)
        )
        return Page(list(rows), total or 0)

    def all(self) -> list[M]:
        return list(self.session.scalars(select(self.model).order_by(self.model.id)))

    def add(self, row: M) -> M:
        self.session.add(row)
        self.session.flush()
        return row

    def delete(self, row: M) -> None:
        self.session.delete(row)
        self.session.flush()


class PortRepository(Repository[PortRow]):
    model = PortRow
    kind = "port"

    def by_name(self, name: str) -> PortRow | None:
        return self.session.scalar(select(PortRow).where(PortRow.name == name))

    def by_device(self, device: str) -> PortRow | None:
        return self.session.scalar(select(PortRow).where(PortRow.device == device))

    def enabled(self) -> list[PortRow]:
        return list(
            self.session.scalars(select(PortRow).where(PortRow.enabled).order_by(PortRow.id))
        )


class SessionRepository(Repository[SessionRow]):
    model = SessionRow
    kind = "session"

    def by_name(self, name: str) -> SessionRow | None:
        return self.session.scalar(select(SessionRow).where(SessionRow.name == name))

    def on_port(self, port_id: int) -> list[SessionRow]:
        return list(
            self.session.scalars(
                select(SessionRow).where(SessionRow.port_id == port_id).order_by(SessionRow.id)
            )
        )

    def wanted_running(self) -> list[SessionRow]:
        return list(
            self.session.scalars(
                select(SessionRow)
                .where(SessionRow.desired_state == "running")
                .order_by(SessionRow.id)
            )
        )


class SubscriptionRepository(Repository[SubscriptionRow]):
    model = SubscriptionRow
    kind = "subscription"

    def page_filtered(
        self,
        offset: int,
        limit: int,
        session_id: int | None = None,
        owner_token_id: int | None = None,
    ) -> Page[SubscriptionRow]:
        """owner_token_id: only that token's subscriptions and the unowned ones (None:
        everyone's)."""
        where = [] if session_id is None else [SubscriptionRow.session_id == session_id]
        if owner_token_id is not None:
            where.append(
                or_(
                    SubscriptionRow.owner_token_id == owner_token_id,
                    SubscriptionRow.owner_token_id.is_(None),
                )
            )
        return self._page(offset, limit, *where)

    def of_session(self, session_id: int) -> list[SubscriptionRow]:
        return list(
            self.session.scalars(
                select(SubscriptionRow)
                .where(SubscriptionRow.session_id == session_id)
                .order_by(SubscriptionRow.id)
            )
        )

    def topic_counts(self, session_id: int, exclude: int | None = None) -> dict[str, int]:
        """How many subscriptions of a session hold each topic (the upstream ref-count)."""
        counts: dict[str, int] = {}
        for sub in self.of_session(session_id):
            if sub.id == exclude:
                continue
            for topic in sub.topics:
                counts[topic] = counts.get(topic, 0) + 1
        return counts


class EventRepository(Repository[EventRow]):
    model = EventRow
    kind = "event"

    def record(
        self,
        session_id: int,
        kind: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> EventRow:
        return self.add(
            EventRow(
                session_id=session_id,
                kind=kind,
                reason=reason,
                details=details or {},
                at=at or utcnow(),
            )
        )

    def of_session(self, session_id: int, offset: int, limit: int) -> Page[EventRow]:
        """Newest first: an operator reads a session's history from the latest change."""
        return self._page(
            offset,
            limit,
            EventRow.session_id == session_id,
            order_by=[EventRow.at.desc(), EventRow.id.desc()],
        )


def hash_secret(secret: str) -> str:
    """SHA-256 of a token secret.

    The secrets are 256 random bits, so a slow hash (scrypt) adds nothing against guessing
    while costing every request; a fast hash also lets the token be looked up by its hash.
    """
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRepository(Repository[TokenRow]):
    model = TokenRow
    kind = "token"

    def by_secret(self, secret: str) -> TokenRow | None:
        return self.session.scalar(
            select(TokenRow).where(TokenRow.secret_hash == hash_secret(secret))
        )

    def named(self, name: str) -> Sequence[TokenRow]:
        return list(self.session.scalars(select(TokenRow).where(TokenRow.name == name)))

    def live_ids(self, ids: Collection[int]) -> set[int]:
        """Those of `ids` that name a stored token not revoked."""
        query = select(TokenRow.id).where(TokenRow.id.in_(ids), TokenRow.revoked_at.is_(None))
        return set(self.session.scalars(query))
