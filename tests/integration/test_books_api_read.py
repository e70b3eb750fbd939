"""The REST read of a book through the real API under uvicorn (wsgw_bench.books_api, issue
#21's < 1 ms read at depth 100): the answer is the book's top levels, and the bench's run
works end to end (a small run; the figures come from `python -m wsgw_bench.books_api`)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from api.schemas.books import BookPublic
from gateway.books.manager import BooksBusy
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
        # Encoded by msgspec, not by the response model: still exactly the documented one.
        assert list(got) == list(BookPublic.model_fields)
        assert BookPublic.model_validate(got).model_dump(mode="json") == got
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


def test_a_read_while_the_books_are_busy_waits_off_the_loop(tmp_path: Path) -> None:
    """The route reads a shallow book on the event loop only when the reader thread does
    not hold the books; otherwise it waits in the threadpool, and the loop serves others."""
    with book_api(tmp_path, 50, uvloop=False) as api:
        headers = {"Authorization": f"Bearer {api.token}"}
        path = f"{api.url}/v1/books/{api.session_id}/{SYMBOL}?depth=10"
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with api.control.books._lock:  # as the reader thread holds it for a batch
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        try:
            held.wait(5)
            with pytest.raises(BooksBusy):
                api.control.books.view(api.session_id, SYMBOL, 10, wait=False)
            with httpx.Client(timeout=10) as client:
                answers: list[httpx.Response] = []
                pending = threading.Thread(
                    target=lambda: answers.append(client.get(path, headers=headers))
                )
                pending.start()
                assert httpx.get(f"{api.url}/healthz").status_code == 200  # the loop is free
                release.set()
                pending.join(10)
            assert answers[0].status_code == 200 and len(answers[0].json()["bids"]) == 10
        finally:
            release.set()
            holder.join()
