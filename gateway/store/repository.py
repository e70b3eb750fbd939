"""Queries, one small repository per entity, all working inside a caller's session.

Repositories only read and write rows; rules that involve the runtime (ref-counted topics,
starting sessions) live in gateway.service. `get` raises NotFoundError with the message
the API returns ("port 7 not found").
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from gateway.store.errors import NotFoundError
from gateway.store.models import (
    ApiToken,
    Base,
    Port,
    SessionEvent,
    Subscription,
    UpstreamSession,
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
        total = self.session.scalar(select(func.count()).select_from(self.model)) or 0
        rows = self.session.scalars(
            select(self.model).order_by(self.model.id).offset(offset).limit(limit)
        )
        return Page(list(rows), total)

    def all(self) -> list[M]:
        return list(self.session.scalars(select(self.model).order_by(self.model.id)))

    def add(self, row: M) -> M:
        self.session.add(row)
        self.session.flush()
        return row

    def delete(self, row: M) -> None:
        self.session.delete(row)
        self.session.flush()


class PortRepository(Repository[Port]):
    model = Port
    kind = "port"

    def by_name(self, name: str) -> Port | None:
        return self.session.scalar(select(Port).where(Port.name == name))

    def by_device(self, device: str) -> Port | None:
        return self.session.scalar(select(Port).where(Port.device == device))

    def enabled(self) -> list[Port]:
        return list(self.session.scalars(select(Port).where(Port.enabled).order_by(Port.id)))


class SessionRepository(Repository[UpstreamSession]):
    model = UpstreamSession
    kind = "session"

    def by_name(self, name: str) -> UpstreamSession | None:
        return self.session.scalar(select(UpstreamSession).where(UpstreamSession.name == name))

    def on_port(self, port_id: int) -> list[UpstreamSession]:
        return list(
            self.session.scalars(
                select(UpstreamSession)
                .where(UpstreamSession.port_id == port_id)
                .order_by(UpstreamSession.id)
            )
        )

    def wanted_running(self) -> list[UpstreamSession]:
        return list(
            self.session.scalars(
                select(UpstreamSession)
                .where(UpstreamSession.desired_state == "running")
                .order_by(UpstreamSession.id)
            )
        )


class SubscriptionRepository(Repository[Subscription]):
    model = Subscription
    kind = "subscription"

    def page_filtered(
        self,
        offset: int,
        limit: int,
        session_id: int | None = None,
        owner_token_id: int | None = None,
    ) -> Page[Subscription]:
        """owner_token_id: only that token's subscriptions and the unowned ones (None:
        everyone's)."""
        where = [] if session_id is None else [Subscription.session_id == session_id]
        if owner_token_id is not None:
            where.append(
                or_(
                    Subscription.owner_token_id == owner_token_id,
                    Subscription.owner_token_id.is_(None),
                )
            )
        total = (
            self.session.scalar(select(func.count()).select_from(Subscription).where(*where)) or 0
        )
        rows = self.session.scalars(
            select(Subscription).where(*where).order_by(Subscription.id).offset(offset).limit(limit)
        )
        return Page(list(rows), total)

    def of_session(self, session_id: int) -> list[Subscription]:
        return list(
            self.session.scalars(
                select(Subscription)
                .where(Subscription.session_id == session_id)
                .order_by(Subscription.id)
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


class EventRepository(Repository[SessionEvent]):
    model = SessionEvent
    kind = "event"

    def record(
        self,
        session_id: int,
        kind: str,
        reason: str | None = None,
        details: dict[str, Any] | None = None,
        at: datetime | None = None,
    ) -> SessionEvent:
        return self.add(
            SessionEvent(
                session_id=session_id,
                kind=kind,
                reason=reason,
                details=details or {},
                at=at or utcnow(),
            )
        )

    def of_session(self, session_id: int, offset: int, limit: int) -> Page[SessionEvent]:
        """Newest first: an operator reads a session's history from the latest change."""
        where = SessionEvent.session_id == session_id
        total = self.session.scalar(select(func.count()).select_from(SessionEvent).where(where))
        rows = self.session.scalars(
            select(SessionEvent)
            .where(where)
            .order_by(SessionEvent.at.desc(), SessionEvent.id.desc())
            .offset(offset)
            .limit(limit)
        )
        return Page(list(rows), total or 0)


def hash_secret(secret: str) -> str:
    """SHA-256 of a token secret.

    The secrets are 256 random bits, so a slow hash (scrypt) adds nothing against guessing
    while costing every request; a fast hash also lets the token be looked up by its hash.
    """
    return hashlib.sha256(secret.encode()).hexdigest()


class TokenRepository(Repository[ApiToken]):
    model = ApiToken
    kind = "token"

    def by_secret(self, secret: str) -> ApiToken | None:
        return self.session.scalar(
            select(ApiToken).where(ApiToken.secret_hash == hash_secret(secret))
        )

    def named(self, name: str) -> Sequence[ApiToken]:
        return list(self.session.scalars(select(ApiToken).where(ApiToken.name == name)))

    def live_ids(self, ids: Collection[int]) -> set[int]:
        """Those of `ids` that name a stored token not revoked."""
        query = select(ApiToken.id).where(ApiToken.id.in_(ids), ApiToken.revoked_at.is_(None))
        return set(self.session.scalars(query))
