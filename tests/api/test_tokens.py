"""/v1/tokens and bearer authentication."""

from __future__ import annotations

from tests.api.conftest import Api


def test_create_use_list_revoke(api: Api) -> None:
    r = api.client.post("/v1/tokens", json={"name": "ci", "scopes": ["consume"]}, headers=api.admin)
    assert r.status_code == 201, r.text
    created = r.json()
    secret = created["secret"]
    assert secret.startswith("wsgw_")
    assert secret.startswith(created["prefix"])
    headers = {"Authorization": f"Bearer {secret}"}
    assert api.client.get("/v1/subscriptions", headers=headers).status_code == 200

    got = api.client.get(f"/v1/tokens/{created['id']}", headers=api.admin).json()
    assert "secret" not in got
    assert got["last_used_at"] is not None
    listing = api.client.get("/v1/tokens", headers=api.admin).json()
    assert all("secret" not in t for t in listing["data"])
    assert {t["name"] for t in listing["data"]} >= {"ci", "admin", "consumer"}

    r = api.client.delete(f"/v1/tokens/{created['id']}", headers=api.admin)
    assert r.status_code == 200
    assert r.json()["revoked_at"] is not None
    r = api.client.get("/v1/subscriptions", headers=headers)
    assert r.status_code == 401
    assert r.json() == {"detail": "invalid or revoked token"}
    assert r.headers["www-authenticate"] == "Bearer"


def test_secret_is_stored_hashed(api: Api) -> None:
    from sqlalchemy import text

    r = api.client.post("/v1/tokens", json={"name": "x", "scopes": ["admin"]}, headers=api.admin)
    secret = r.json()["secret"]
    with api.control.db.engine.connect() as conn:
        stored = [row[0] for row in conn.execute(text("SELECT secret_hash FROM api_tokens"))]
    assert secret not in stored
    assert all(len(h) == 64 for h in stored)


def test_bad_scopes_and_names(api: Api) -> None:
    r = api.client.post("/v1/tokens", json={"name": "x", "scopes": ["root"]}, headers=api.admin)
    assert r.status_code == 422
    r = api.client.post("/v1/tokens", json={"name": "x", "scopes": []}, headers=api.admin)
    assert r.status_code == 422
    r = api.client.get("/v1/tokens/77", headers=api.admin)
    assert r.json() == {"detail": "token 77 not found"}


def test_malformed_authorization(api: Api) -> None:
    for value in ("Basic abc", "Bearer", "Bearer ", "wsgw_nope"):
        r = api.client.get("/v1/ports", headers={"Authorization": value})
        assert r.status_code == 401, value
    r = api.client.get("/v1/ports", headers={"Authorization": "Bearer wsgw_guess"})
    assert r.json() == {"detail": "invalid or revoked token"}
