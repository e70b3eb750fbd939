"""Subscriptions: consumers' interest in topics of a session, ref-counted upstream.

The first subscription of a topic makes the runtime subscribe it upstream, the last one
to let go unsubscribes it; topics are stored as the session's dialect spells them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gateway.control.transactions import RowService, Transactions
from gateway.runtime import Runtime
from gateway.store.errors import InvalidError
from gateway.store.models import SubscriptionRow, with_defaults
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
        try:
            name = proto.normalize(topic)
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


@dataclass(frozen=True)
class SubscriptionChange:
    """A subscription with the topics it made the runtime subscribe or unsubscribe."""

    subscription: SubscriptionRow
    subscribed: list[str]
    unsubscribed: list[str]


class SubscriptionService(RowService[SubscriptionRow]):
    """Create, change and delete subscriptions, keeping the runtime's topics in step."""

    def __init__(self, tx: Transactions, runtime: Runtime, hub_gateway: str) -> None:
        super().__init__(tx, SubscriptionRepository)
        self.runtime = runtime
        self.hub_gateway = hub_gateway

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
        with self.tx.write() as s:
            session_id = values["session_id"]
            session = SessionRepository(s).get(session_id)
            values = {**values, "topics": dialect_topics(session.dialect, values["topics"])}
            subs = SubscriptionRepository(s)
            held = subs.topic_counts(session_id)
            sub = subs.add(SubscriptionRow(**with_defaults(SubscriptionRow, values)))
            new = [t for t in sub.topics if t not in held]
            if new:
                self.runtime.subscribe(session_id, new)
            return SubscriptionChange(sub, new, [])

    def update(self, subscription_id: int, values: Mapping[str, Any]) -> SubscriptionChange:
        with self.tx.write() as s:
            subs = SubscriptionRepository(s)
            sub = subs.get(subscription_id)
            before = list(sub.topics)
            if "topics" in values:
                dialect = SessionRepository(s).get(sub.session_id).dialect
                values = {**values, "topics": dialect_topics(dialect, values["topics"])}
            for key, value in values.items():
                setattr(sub, key, value)
            s.flush()
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
            if removed:
                self.runtime.unsubscribe(sub.session_id, removed)
            return SubscriptionChange(sub, [], removed)

    def ring_name(self, sub: SubscriptionRow) -> str:
        """The gateway's one shared-memory ring (the hub writes every message there); a
        consumer filters it by the subscription's topics, `<session>:<topic>` each."""
        from dataplane.ring import ring_name

        return ring_name(self.hub_gateway, "messages")
