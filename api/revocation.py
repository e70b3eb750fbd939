"""A revoked token's open /v1/stream connections close within a second.

`OpenStreams` keeps the streams open per token id. A revocation through this API's
DELETE /v1/tokens/{id} closes that token's streams at once; one made elsewhere (`wsgw token
revoke`, another gateway on the same PostgreSQL) is found by a single query for every
token that has open streams, once per `interval_s` while any stream is open: no query
per stream and none when no stream is open. A stream is closed with 1008 (policy
violation, RFC 6455 section 7.4.1) by cutting its hub consumer, the way the hub cuts a slow
one, so the stream's own close path sends the code.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading

from starlette.concurrency import run_in_threadpool

from gateway.control.tokens import TokenService
from gateway.hub.consumer import Consumer
from gateway.hub.protocol import CLOSE_POLICY_VIOLATION

log = logging.getLogger("wsgw.api.stream")
REVOKED_REASON = "the token was revoked"


class OpenStreams:
    """Open streams per token id. `add`/`discard` run on the API loop, `revoke` on any
    thread (the sync routes run in the threadpool)."""

    def __init__(self, tokens: TokenService, interval_s: float = 1.0) -> None:
        self.tokens = tokens
        self.interval_s = interval_s
        self._by_token: dict[int, set[Consumer]] = {}
        self._lock = threading.Lock()
        self._sweeper: asyncio.Task[None] | None = None

    def add(self, token_id: int, consumer: Consumer) -> None:
        with self._lock:
            self._by_token.setdefault(token_id, set()).add(consumer)
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    def discard(self, token_id: int, consumer: Consumer) -> None:
        with self._lock:
            streams = self._by_token.get(token_id)
            if streams is not None:
                streams.discard(consumer)
                if not streams:
                    del self._by_token[token_id]

    def count(self, token_id: int) -> int:
        with self._lock:
            return len(self._by_token.get(token_id, ()))

    def revoke(self, token_id: int) -> int:
        """Close every open stream of the token; returns how many there were."""
        with self._lock:
            streams = self._by_token.pop(token_id, set())
        for consumer in streams:
            with contextlib.suppress(RuntimeError):  # its loop is closed: the stream is gone
                consumer.loop.call_soon_threadsafe(
                    consumer.cut, CLOSE_POLICY_VIOLATION, REVOKED_REASON, "revoked"
                )
        if streams:
            log.info("token %d revoked: closing its %d open streams", token_id, len(streams))
        return len(streams)

    async def _sweep(self) -> None:
        """Revocations made by other processes, while streams are open."""
        while True:
            await asyncio.sleep(self.interval_s)
            with self._lock:
                open_ids = set(self._by_token)
            if not open_ids:
                return
            try:
                revoked = await run_in_threadpool(self.tokens.revoked, open_ids)
            except Exception as exc:  # the database is away: keep the streams, ask again
                log.warning("cannot check open streams' tokens for revocation: %s", exc)
                continue
            for token_id in revoked:
                self.revoke(token_id)

    async def close(self) -> None:
        """Stop the sweeper (the app shuts down)."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
