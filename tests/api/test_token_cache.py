"""Verified tokens are remembered for auth.token_cache_s (gateway.control.tokens), so a
request needs no database read (issue #21's < 1 ms book read). What must still hold: a
revocation through this API refuses the token at once; one made elsewhere (`wsgw token
revoke`, another gateway on the same database) within token_cache_s; a bad secret is read
again every time; the cache keeps at most its bound. Time is a fake clock where the bound
itself is checked, so the tests do not depend on the machine's speed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from gateway.cli import app as CLI
from gateway.control.tokens import TokenCache, TokenService, VerifiedToken
from gateway.runtime import DetachedRuntime
from gateway.store.repository import hash_secret
from tests.api.conftest import BASE_URL, make_settings


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Door:
    """An app on `db_url` whose token cache runs on a fake clock and counts database reads."""

    def __init__(self, client: TestClient, clock: Clock) -> None:
        self.client = client
        self.clock = clock
        self.tokens: TokenService = client.app.state.control.tokens  # type: ignore[attr-defined]
        self.tokens.cache.clock = clock
        self.reads = 0
        authenticate = self.tokens.authenticate

        def counted(secret: str) -> object:
            self.reads += 1
            return authenticate(secret)

        self.tokens.authenticate = counted  # type: ignore[method-assign,assignment]

    def token(self, *scopes: str) -> tuple[int, dict[str, str]]:
        row, secret = self.tokens.create("t", list(scopes or ("consume",)))
        return row.id, {"Authorization": f"Bearer {secret}"}

    def status(self, headers: dict[str, str]) -> int:
        return self.client.get("/v1/subscriptions", headers=headers).status_code


@pytest.fixture
def door(tmp_path: Path, db_url: str) -> Iterator[Door]:
    settings = make_settings(tmp_path, db_url, auth={"token_cache_s": 1.0})
    app = create_app(settings, DetachedRuntime())
    with TestClient(app, client=("127.0.0.1", 50000), base_url=BASE_URL) as client:
        yield Door(client, Clock())


def test_a_token_is_read_once_per_interval(door: Door) -> None:
    _, headers = door.token()
    assert [door.status(headers) for _ in range(5)] == [200] * 5
    assert door.reads == 1
    door.clock.now += 0.999
    assert door.status(headers) == 200 and door.reads == 1
    door.clock.now += 0.001  # cache_s after the read began: read again
    assert door.status(headers) == 200 and door.reads == 2


def test_a_revocation_through_the_api_refuses_at_once(door: Door) -> None:
    token_id, headers = door.token()
    _, admin = door.token("admin")
    assert door.status(headers) == 200
    r = door.client.delete(f"/v1/tokens/{token_id}", headers=admin)
    assert r.status_code == 200, r.text
    assert door.status(headers) == 401  # the clock has not moved: no expiry helped


def test_a_revocation_elsewhere_refuses_within_the_bound(
    door: Door, tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`wsgw token revoke` is another process with its own TokenService: this gateway
    learns of it when its cached verification is cache_s old, not later."""
    token_id, headers = door.token()
    assert door.status(headers) == 200
    monkeypatch.setenv("WSGW_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("WSGW_DB__URL", db_url)
    result = CliRunner().invoke(CLI, ["token", "revoke", str(token_id)])
    assert result.exit_code == 0, result.output
    door.clock.now += 0.5
    assert door.status(headers) == 200  # the documented window: at most token_cache_s
    door.clock.now += 0.5
    assert door.status(headers) == 401
    assert door.status(headers) == 401  # and stays refused: no failure is cached as success


def test_another_gateway_on_the_same_database(tmp_path: Path, db_url: str) -> None:
    """Two apps on one database, the real clock: a revocation through one is refused by
    the other after token_cache_s (0.2 s here)."""
    apps = [
        create_app(
            make_settings(tmp_path / name, db_url, auth={"token_cache_s": 0.2}), DetachedRuntime()
        )
        for name in ("a", "b")
    ]
    with (
        TestClient(apps[0], client=("127.0.0.1", 1), base_url=BASE_URL) as a,
        TestClient(apps[1], client=("127.0.0.1", 2), base_url=BASE_URL) as b,
    ):
        row, secret = apps[0].state.control.tokens.create("shared", ["consume"])
        _, admin = apps[0].state.control.tokens.create("admin", ["admin"])
        headers = {"Authorization": f"Bearer {secret}"}
        assert b.get("/v1/subscriptions", headers=headers).status_code == 200
        revoked = a.delete(f"/v1/tokens/{row.id}", headers={"Authorization": f"Bearer {admin}"})
        assert revoked.status_code == 200
        assert a.get("/v1/subscriptions", headers=headers).status_code == 401
        time.sleep(0.2)
        assert b.get("/v1/subscriptions", headers=headers).status_code == 401


def test_failed_lookups_are_not_cached(door: Door) -> None:
    bad = {"Authorization": "Bearer wsgw_not-a-token"}
    assert [door.status(bad) for _ in range(3)] == [401] * 3
    assert door.reads == 3 and len(door.tokens.cache) == 0
    token_id, headers = door.token()
    door.tokens.revoke(token_id)
    assert door.status(headers) == 401 and door.status(headers) == 401
    assert door.reads == 5 and len(door.tokens.cache) == 0


def test_cache_off_reads_every_time(tmp_path: Path, sqlite_url: str) -> None:
    settings = make_settings(tmp_path, sqlite_url, auth={"token_cache_s": 0})
    with TestClient(create_app(settings, DetachedRuntime()), base_url=BASE_URL) as client:
        door = Door(client, Clock())
        _, headers = door.token()
        assert [door.status(headers) for _ in range(3)] == [200] * 3
        assert door.reads == 3 and len(door.tokens.cache) == 0


def test_the_cache_is_bounded_and_keyed_by_hash() -> None:
    cache = TokenCache(60, max_entries=3, clock=Clock())
    secrets = [f"wsgw_secret{i}" for i in range(5)]

    def put(i: int) -> None:
        cache.put(hash_secret(secrets[i]), VerifiedToken(i, "t", frozenset()), 1000.0, cache.epoch)

    for i in range(3):
        put(i)
    assert cache.get(hash_secret(secrets[0])) is not None  # used: the second is now oldest
    put(3)
    put(4)
    assert len(cache) == 3
    kept = [cache.get(hash_secret(s)) is not None for s in secrets]
    assert kept == [True, False, False, True, True]
    assert not any(secret in key for key in cache._entries for secret in secrets)


def test_a_lookup_that_raced_a_revocation_is_not_kept() -> None:
    """A verification that read the database before the revocation committed and stores
    after it was forgotten must not bring the token back for cache_s."""
    cache = TokenCache(60, clock=Clock())
    key = hash_secret("wsgw_x")
    epoch = cache.epoch  # the lookup begins
    cache.forget(7)  # the revocation commits meanwhile
    cache.put(key, VerifiedToken(7, "t", frozenset()), 1000.0, epoch)
    assert cache.get(key) is None
