"""Typed errors of the store and the service layer; the API maps them to 404 and 409."""

from __future__ import annotations


class StoreError(Exception):
    """Base of the errors raised on purpose by the store and the service layer."""


class NotFoundError(StoreError):
    """The entity named does not exist: the message reads like "port 7 not found"."""

    def __init__(self, kind: str, ident: object) -> None:
        super().__init__(f"{kind} {ident} not found")
        self.kind = kind
        self.ident = ident


class ConflictError(StoreError):
    """The request contradicts stored state (a name taken, a port in use); says what to do."""


class InvalidError(StoreError):
    """A value that passed the schema but does not fit the stored state (422)."""

    def __init__(self, message: str, field: str | None = None, location: str = "body") -> None:
        super().__init__(message)
        self.field = field
        #: where the field is: "body", or "query" for a rule between query parameters
        self.location = location
