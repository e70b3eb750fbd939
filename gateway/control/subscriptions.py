"""Subscriptions: consumers' interest in topics of a session, ref-counted upstream.

The first subscription of a topic makes the runtime subscribe it upstream, the last one
to let go unsubscribes it; topics are stored as the session's dialect spells them.

A subscription's `format` is "raw" (the upstream's messages) or "normalized": the gateway's
normalizer (gateway.books.manager.BookManager, a ring reader beside the feed) publishes the
events of its topics as `norm:<topic>` / `normbin:<topic>` (its `encoding`), and keeps the
local books of its book topics. Every change tells the manager which topics of the session
are wanted normalized, before the runtime subscribes them (the first snapshot is not missed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select

from gateway.books.manager import BookManager
from gateway.control.transactions import RowService, Transactions
from gateway.groups.feed import group_hub_id
from gateway.hub.names import is_reserved_topic, normalized_topic, upstream_of
from gateway.normalize.venues import NORMALIZERS
from gateway.runtime import Runtime
from gateway.store.errors import InvalidError
from gateway.store.models import FeedGroupLegRow, SubscriptionRow, with_defaults
from gateway.store.repository import Page, SessionRepository, SubscriptionRepository


def dialect_topics(dialect: str, topics: list[str], field: str = "topics") -> list[str]:
    """`topics` as the session's dialect spells them (binance: btcusdt@trade), which is
    how the session subscribes and publishes them; InvalidError when the dialect cannot
    spell one (dialect.normalize is the check the session makes when it subscribes)."""
    from gateway.dialects import DIALECTS, DialectError, make_dialect

    if dialect not in DIALECTS:
        return topics
    proto = make_dialect(dialect)
    spelled: list[str] = []
    for topic in topics:
        normalized = upstream_of(topic)  # norm:<topic>: its upstream part is spelled
        try:
            if normalized is None:
                name = proto.normalize(topic)
            else:
                name = normalized_topic(proto.normalize(normalized[1]), normalized[0])
        except DialectError as exc:
            raise InvalidError(
                f"topic {topic!r} is refused by the session's dialect: {exc}", field
            ) from None
        if name in spelled:
            raise InvalidError(
                f"topic {topic!r} is {name!r} in dialect {dialect}, which is listed already", field
            )
        spelled.append(name)
    return spelled


def upstream_topics(dialect: str, topics: list[str]) -> list[str]:
    """A subscription's topics: upstream ones (a normalized name is refused, it is no
    upstream topic), as the dialect spells them."""
    for topic in topics:
        if is_reserved_topic(topic):
            raise InvalidError(
                f"topic {topic!r} is a normalized topic's name (norm:/normbin: prefix): "
                "subscribe the upstream topic with format normalized instead",
                "topics",
            )
    return dialect_topics(dialect, topics)


def check_format(dialect: str, values: Mapping[str, Any]) -> None:
    """A normalized subscription needs a venue the gateway normalizes."""
    if values.get("format") == "normalized" and dialect not in NORMALIZERS:
        venues = ", ".join(sorted(NORMALIZERS))
        raise InvalidError(
            f"format normalized needs a session of one of the venues {venues}; this session's "
            f"dialect is {dialect}: use format raw",
            "format",
        )


def delivered_topics(sub: SubscriptionRow) -> list[str]:
    """The topics a subscription's messages come as: its own, or their normalized names."""
    if sub.format == "normalized":
        return [normalized_topic(t, sub.encoding) for t in sub.topics]
    return list(sub.topics)


@dataclass(frozen=True)
class SubscriptionChange:
    """A subscription with the topics it made the runtime subscribe or unsubscribe."""

    subscription: SubscriptionRow
    subscribed: list[str]
    unsubscribed: list[str]


class SubscriptionService(RowService[SubscriptionRow]):
    """Create, change and delete subscriptions, keeping the runtime's topics in step."""

    def __init__(
        self,
        tx: Transactions,
        runtime: Runtime,
        hub_gateway: str,
        books: BookManager | None = None,
    ) -> None:
        super().__init__(tx, SubscriptionRepository)
        self.runtime = runtime
        self.hub_gateway = hub_gateway
        #: The normalizer and local books (None: normalized subscriptions get nothing).
        self.books = books

    def _tell_books(self, s: Any, session_id: int) -> None:
        """The session's normalized topics as the store now has them, to the manager."""
        if self.books is None:
            return
        wanted: dict[str, set[str]] = {}
        for row in SubscriptionRepository(s).of_session(session_id):
            if row.format == "normalized":
                for topic in row.topics:
                    wanted.setdefault(topic, set()).add(row.encoding)
        dialect = SessionRepository(s).get(session_id).dialect
        self.books.set_session(session_id, dialect, wanted, source=_books_source(s, session_id))

    def retell_books(self, session_ids: list[int]) -> None:
        """Sessions became or stopped being legs of a feed group: their books' source."""
        with self.tx.write() as s:
            for session_id in session_ids:
                self._tell_books(s, session_id)

    def _check_snapshots(
        self, values: Mapping[str, Any], *, session_id: int = 0, subscription_id: int = 0
    ) -> None:
        """A normalized subscription whose books could never get their REST snapshot (no
        snapshot base for the venue) is refused (BookManager.snapshot_unreachable)."""
        if self.books is None or values.get("format") != "normalized":
            return

        def facts(s: Any) -> tuple[str, list[str]]:
            sub = SubscriptionRepository(s).get(subscription_id) if subscription_id else None
            session = SessionRepository(s).get(sub.session_id if sub else session_id)
            topics = values.get("topics")
            if topics is not None:
                topics = upstream_topics(session.dialect, topics)
            return session.dialect, list(topics or (sub.topics if sub else []))

        dialect, topics = self.tx.read(facts)
        why = self.books.snapshot_unreachable(dialect, topics)
        if why is not None:
            raise InvalidError(why, "format")

    def restore_books(self) -> None:
        """At start: every session's normalized topics to the manager."""
        if self.books is None:
            return
        with self.tx.write() as s:
            for session in SessionRepository(s).all():
                self._tell_books(s, session.id)

    def page(
        self,
        offset: int,
        limit: int,
        session_id: int | None = None,
        owner_token_id: int | None = None,
    ) -> Page[SubscriptionRow]:
        return self.tx.read(
            lambda s: SubscriptionRepository(s).page_filtered(
                offset, limit, session_id, owner_token_id
            )
        )

    def create(self, values: Mapping[str, Any]) -> SubscriptionChange:
        self._check_snapshots(values, session_id=values["session_id"])
        with self.tx.write() as s:
            session_id = values["session_id"]
            session = SessionRepository(s).get(session_id)
            values = {**values, "topics": upstream_topics(session.dialect, values["topics"])}
            check_format(session.dialect, values)
            subs = SubscriptionRepository(s)
            held = subs.topic_counts(session_id)
            sub = subs.add(SubscriptionRow(**with_defaults(SubscriptionRow, values)))
            new = [t for t in sub.topics if t not in held]
            if sub.format == "normalized":
                s.flush()
                self._tell_books(s, session_id)
            if new:
                self.runtime.subscribe(session_id, new)
            return SubscriptionChange(sub, new, [])

    def update(self, subscription_id: int, values: Mapping[str, Any]) -> SubscriptionChange:
        self._check_snapshots(values, subscription_id=subscription_id)
        with self.tx.write() as s:
            subs = SubscriptionRepository(s)
            sub = subs.get(subscription_id)
            before = list(sub.topics)
            was_normalized = sub.format == "normalized"
            dialect = SessionRepository(s).get(sub.session_id).dialect
            if "topics" in values:
                values = {**values, "topics": upstream_topics(dialect, values["topics"])}
            check_format(dialect, values)
            for key, value in values.items():
                setattr(sub, key, value)
            s.flush()
            if was_normalized or sub.format == "normalized":
                self._tell_books(s, sub.session_id)
            others = subs.topic_counts(sub.session_id, exclude=sub.id)
            added = [t for t in sub.topics if t not in before and t not in others]
            removed = [t for t in before if t not in sub.topics and t not in others]
            if added:
                self.runtime.subscribe(sub.session_id, added)
            if removed:
                self.runtime.unsubscribe(sub.session_id, removed)
            return SubscriptionChange(sub, added, removed)

    def delete(self, subscription_id: int) -> SubscriptionChange:
        with self.tx.write() as s:
            subs = SubscriptionRepository(s)
            sub = subs.get(subscription_id)
            others = subs.topic_counts(sub.session_id, exclude=sub.id)
            removed = [t for t in sub.topics if t not in others]
            subs.delete(sub)
            if sub.format == "normalized":
                s.flush()
                self._tell_books(s, sub.session_id)
            if removed:
                self.runtime.unsubscribe(sub.session_id, removed)
            return SubscriptionChange(sub, [], removed)

    def ring_name(self, sub: SubscriptionRow) -> str:
        """The gateway's one shared-memory ring (the hub writes every message there); a
        consumer filters it by the subscription's topics, `<session>:<topic>` each."""
        from dataplane.ring import ring_name

        return ring_name(self.hub_gateway, "messages")

    def ring_url(self) -> str:
        """The ring as the consumer SDK names it (gateway.client: shm://<gateway>/<ring>)."""
        return f"shm://{self.hub_gateway}/messages"


def _books_source(s: Any, session_id: int) -> int | None:
    """A feed group's leg is read as its group's stream (BookManager.set_session).
    (gateway.control.groups.GroupRepository.group_of: that module imports this one.)"""
    query = select(FeedGroupLegRow.group_id).where(FeedGroupLegRow.session_id == session_id)
    group_id: int | None = s.scalar(query)
    return group_hub_id(group_id) if group_id is not None else None
