"""API tokens: created with a secret shown once, found by the secret's hash, revoked."""

from __future__ import annotations

import secrets
from collections.abc import Collection
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from gateway.control.transactions import RowService, Transactions
from gateway.store.errors import ConflictError, InvalidError, NotFoundError
from gateway.store.models import SCOPES, TokenRow
from gateway.store.repository import TokenRepository, hash_secret

TOKEN_PREFIX = "wsgw_"  # noqa: S105 (a marker that makes leaked secrets greppable)


class TokenService(RowService[TokenRow]):
    """Tokens and the authentication of a bearer secret."""

    def __init__(self, tx: Transactions, last_used_resolution: timedelta) -> None:
        super().__init__(tx, TokenRepository)
        #: A token's last use is written at most once per this much time, not per request.
        self.last_used_resolution = last_used_resolution

    def create(self, name: str, scopes: list[str]) -> tuple[TokenRow, str]:
        """A new token and its secret: the only time the secret exists outside the caller."""
        unknown = sorted(set(scopes) - set(SCOPES))
        if unknown or not scopes:
            raise InvalidError(
                f"scopes must be a non-empty subset of {', '.join(SCOPES)} (got {scopes})", "scopes"
            )
        secret = TOKEN_PREFIX + secrets.token_urlsafe(32)
        with self.tx.write() as s:
            token = TokenRepository(s).add(
                TokenRow(
                    name=name,
                    scopes=sorted(set(scopes)),
                    prefix=secret[: len(TOKEN_PREFIX) + 4],
                    secret_hash=hash_secret(secret),
                )
            )
            return token, secret

    def find(self, ident: str) -> TokenRow:
        """A token by id, or by name when one live token has it (for the CLI)."""
        if ident.isdigit():
            return self.get(int(ident))

        def read(s: Session) -> TokenRow:
            tokens = [t for t in TokenRepository(s).named(ident) if t.revoked_at is None]
            if not tokens:
                raise NotFoundError("token", repr(ident))
            if len(tokens) > 1:
                raise ConflictError(
                    f"{len(tokens)} live tokens are named {ident!r}: give the id instead"
                )
            return tokens[0]

        return self.tx.read(read)

    def revoke(self, token_id: int) -> TokenRow:
        with self.tx.write() as s:
            token = TokenRepository(s).get(token_id)
            if token.revoked_at is None:
                token.revoked_at = datetime.now(UTC)
            return token

    def revoked(self, token_ids: Collection[int]) -> set[int]:
        """Those of token_ids revoked (or deleted) by now, by this process or another."""
        with self.tx.db.session() as s:
            return set(token_ids) - TokenRepository(s).live_ids(token_ids)

    def authenticate(self, secret: str) -> TokenRow | None:
        """The live token with this secret, its last use noted (at most once a resolution)."""
        if not secret.startswith(TOKEN_PREFIX):
            return None
        with self.tx.db.session() as s:
            token = TokenRepository(s).by_secret(secret)
            if token is None or token.revoked_at is not None:
                return None
            now = datetime.now(UTC)
            if token.last_used_at is None or now - token.last_used_at >= self.last_used_resolution:
                token.last_used_at = now
            return token
