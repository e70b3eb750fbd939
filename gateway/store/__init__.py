"""Persistence of the control plane's state (SQLAlchemy 2, Alembic migrations)."""

from gateway.store.db import Database, database_url
from gateway.store.errors import ConflictError, InvalidError, NotFoundError, StoreError
from gateway.store.models import ApiToken, Port, SessionEvent, Subscription, UpstreamSession

__all__ = [
    "ApiToken",
    "ConflictError",
    "Database",
    "InvalidError",
    "NotFoundError",
    "Port",
    "SessionEvent",
    "StoreError",
    "Subscription",
    "UpstreamSession",
    "database_url",
]
