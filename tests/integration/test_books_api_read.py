"""The REST read of a book through the real API under uvicorn (wsgw_bench.books_api, issue
#21's < 1 ms read at depth 100): the answer is the book's top levels, and the bench's run
works end to end (a small run; the figures come from `python -m wsgw_bench.books_api`)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from wsgw_bench.books_api import SYMBOL, book_api, level2_snapshot, run


def test_the_answer_is_the_books_top_levels(tmp_path: Path) -> None:
    with book_api(tmp_path, 300, uvloop=False) as api:
        headers = {"Authorization": f"Bearer {api.token}"}
        path = f"/v1/books/{api.session_id}/{SYMBOL}"
        r = httpx.get(f"{api.url}{path}?depth=100", headers=headers)
        assert r.status_code == 200, r.text
        assert r.headers["content-type"] == "application/json"
        got = r.json()
        sent = json.loads(level2_snapshot(300))
        assert got["bids"] == sent["bids"][:100] and got["asks"] == sent["asks"][:100]
        assert (got["venue"], got["symbol"], got["stale"]) == ("coinbase", SYMBOL, False)
        whole = httpx.get(f"{api.url}{path}", headers=headers).json()
        assert len(whole["bids"]) == len(whole["asks"]) == 300
        # No book of the symbol, or no such session: 404s that say which.
        r = httpx.get(f"{api.url}/v1/books/{api.session_id}/ETH-USD", headers=headers)
        assert r.status_code == 404 and "books of session" in r.json()["detail"]
        r = httpx.get(f"{api.url}/v1/books/999/{SYMBOL}", headers=headers)
        assert r.status_code == 404 and "session" in r.json()["detail"]
        assert httpx.get(f"{api.url}{path}").status_code == 401


def test_a_small_bench_run() -> None:
    result = run(levels=200, depth=100, requests=40, rounds=2)
    assert result["levels_answered"] == 200
    assert set(result["doors"]) == {"token", "no auth", "floor: GET /healthz", "in process (ASGI)"}
    assert all(door["requests"] == 40 for door in result["doors"].values())
