"""API tokens: created with a secret shown once, found by the secret's hash, revoked.

A verified token is remembered for `cache_s` (auth.token_cache_s, 1 s by default) by the
SHA-256 of its secret, so that a request needs no database read. A revocation through this
service forgets the token at once; one made elsewhere (`wsgw token revoke`, another gateway
on the same database) takes effect within `cache_s`, the bound open streams have too
(api.revocation). Only live tokens are remembered: a failed lookup reads the database again.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy.orm import Session

from gateway.control.transactions import RowService, Transactions
from gateway.store.errors import ConflictError, InvalidError, NotFoundError
from gateway.store.models import SCOPES, TokenRow
from gateway.store.repository import TokenRepository, hash_secret

TOKEN_PREFIX = "wsgw_"  # noqa: S105 (a marker that makes leaked secrets greppable)


@dataclass(frozen=True)
class VerifiedToken:
    """A live token as a request sees it (no ORM row: it outlives its session)."""

    id: int
    name: str
    scopes: frozenset[str]


class TokenCache:
    """Live tokens verified within the last `ttl_s`, by the hash of their secret (never the
    secret), at most `max_entries` (the least recently used go first). Thread-safe.

    `forget` bumps an epoch: a lookup that read the database before a revocation committed
    and stores after it was forgotten is refused by `put`, so it cannot bring the token back."""

    def __init__(
        self, ttl_s: float, max_entries: int = 4096, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.clock = clock
        self.epoch = 0
        self._entries: OrderedDict[str, tuple[VerifiedToken, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: str) -> VerifiedToken | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if self.clock() - entry[1] >= self.ttl_s:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: str, token: VerifiedToken, read_at: float, epoch: int) -> None:
        """Remember `token`, read from the database from `read_at` on (clock time) under
        `epoch`; nothing when a token was forgotten since or caching is off."""
        if self.ttl_s <= 0:
            return
        with self._lock:
            if epoch != self.epoch:
                return
            self._entries[key] = (token, read_at)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def discard(self, key: str) -> None:
        with self._lock:
            self._entries.pop(key, None)

    def forget(self, token_id: int) -> None:
        """The token is revoked: no request passes on its cached verification any more."""
        with self._lock:
            self.epoch += 1
            for key in [k for k, (t, _) in self._entries.items() if t.id == token_id]:
                del self._entries[key]


class TokenService(RowService[TokenRow]):
    """Tokens and the authentication of a bearer secret."""

    def __init__(
        self, tx: Transactions, last_used_resolution: timedelta, cache_s: float = 1.0
    ) -> None:
        super().__init__(tx, TokenRepository)
        #: A token's last use is written at most once per this much time, not per request.
        self.last_used_resolution = last_used_resolution
        self.cache = TokenCache(cache_s)

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
        self.cache.forget(token_id)  # after the commit: a lookup from now on reads it revoked
        return token

    def revoked(self, token_ids: Collection[int]) -> set[int]:
        """Those of token_ids revoked (or deleted) by now, by this process or another."""
        with self.tx.db.session() as s:
            return set(token_ids) - TokenRepository(s).live_ids(token_ids)

    def cached(self, secret: str) -> VerifiedToken | None:
        """The token of this secret if verified within cache_s; None: ask `verify`."""
        return self.cache.get(hash_secret(secret))

    def verify(self, secret: str) -> VerifiedToken | None:
        """The live token with this secret, from the cache or else the database (blocking)."""
        if not secret.startswith(TOKEN_PREFIX):
            return None
        key = hash_secret(secret)
        found = self.cache.get(key)
        if found is not None:
            return found
        epoch, read_at = self.cache.epoch, self.cache.clock()
        token = self.authenticate(secret)
        if token is None:
            self.cache.discard(key)
            return None
        found = VerifiedToken(token.id, token.name, frozenset(token.scopes))
        self.cache.put(key, found, read_at, epoch)
        return found

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
