"""Persistence of the control plane's state (SQLAlchemy 2, Alembic migrations)."""

from gateway.store.db import Database, database_url
from gateway.store.errors import ConflictError, InvalidError, NotFoundError, StoreError
from gateway.store.models import EventRow, PortRow, SessionRow, SubscriptionRow, TokenRow

__all__ = [
    "ConflictError",
    "Database",
    "EventRow",
    "InvalidError",
    "NotFoundError",
    "PortRow",
    "SessionRow",
    "StoreError",
    "SubscriptionRow",
    "TokenRow",
    "database_url",
]
