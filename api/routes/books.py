"""/v1/books: the gateway's local order books (consume scope, like the subscriptions).

A book is kept per symbol for the book topics that a normalized subscription holds
(gateway.books.manager); it is read under the manager's lock, so the levels and the
sequence are one state of the book.

`/v1/books/{session}/snapshots` sets a session's periodic book snapshots (admin scope: they
go to every consumer of the session's normalized topics). The setting is stored and applied
(gateway.control.books), so a restart keeps it; a session without one follows the gateway's
default (books.periodic_interval_ms, periodic_depth).
"""

from __future__ import annotations

from typing import Annotated

import msgspec
from fastapi import HTTPException, Path, Query, Response, status
from starlette.concurrency import run_in_threadpool

from api.deps import AdminDep, ConsumerDep, ControlDep, IdPath
from api.routes import resource_router
from api.schemas.books import MAX_DEPTH, BookPublic, BookSnapshotsPublic, BookSnapshotsSettings
from api.schemas.common import responses
from gateway.books.manager import BookManager, BooksBusy, BookView, SnapshotPolicy
from gateway.control import ControlPlane

router = resource_router("/v1/books", "books")
Symbol = Annotated[
    str,
    Path(
        min_length=1,
        max_length=64,
        description="the venue's symbol (BTCUSDT, BTC-USDT, btcusd; BTC/USD as BTC/USD or "
        "BTC%2FUSD); case is ignored when no book matches it exactly",
    ),
]


@router.get("/{session_id}", responses=responses(404))
def list_books(session_id: IdPath, control: ControlDep, _caller: ConsumerDep) -> dict[str, object]:
    """The symbols the session keeps books of (the dashboard's book view picks from them)."""
    control.sessions.get(session_id)  # 404 when there is no such session
    books = control.books
    return {
        "session_id": session_id,
        "available": books.available,
        "symbols": books.symbols(session_id),
    }


def _snapshots_public(books: BookManager, session_id: int) -> BookSnapshotsPublic:
    own = books.snapshot_policy(session_id)
    policy = own or books.default_snapshots
    return BookSnapshotsPublic(
        session_id=session_id,
        interval_ms=round(policy.interval_s * 1000) if policy else None,
        depth=policy.depth if policy else None,
        default=own is None,
        published=books.periodic_snapshots,
    )


# Before /{session_id}/{symbol:path}, which would take "snapshots" for a symbol.
@router.get("/{session_id}/snapshots", responses=responses(404))
def get_snapshots(
    session_id: IdPath, control: ControlDep, _caller: AdminDep
) -> BookSnapshotsPublic:
    """The session's periodic book snapshots (interval_ms null: none)."""
    control.sessions.get(session_id)
    return _snapshots_public(control.books, session_id)


@router.put("/{session_id}/snapshots", responses=responses(404))
def put_snapshots(
    session_id: IdPath, body: BookSnapshotsSettings, control: ControlDep, _caller: AdminDep
) -> BookSnapshotsPublic:
    """Publish each synced book of the session as a `snapshot` event (with the book's
    sequence) every interval_ms, in order with its deltas, so that a consumer who joins
    late rebuilds the book from a snapshot and the deltas after it."""
    control.sessions.get(session_id)
    policy = SnapshotPolicy(body.interval_ms / 1000, body.depth)
    control.book_snapshots.set(session_id, policy)
    return _snapshots_public(control.books, session_id)


@router.delete(
    "/{session_id}/snapshots", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404)
)
def delete_snapshots(session_id: IdPath, control: ControlDep, _caller: AdminDep) -> None:
    """The session's own setting goes: its books are published by the gateway's default
    (books.periodic_interval_ms; none unless set)."""
    control.sessions.get(session_id)
    control.book_snapshots.set(session_id, None)


#: Books read on the event loop up to this depth a side (a few tens of us); deeper ones,
#: and any read while the reader thread holds the books, go to the threadpool.
INLINE_DEPTH = 500
_encode = msgspec.json.Encoder().encode


def book_json(view: BookView) -> bytes:
    """The BookPublic document of a view, encoded once by msgspec (a Level is a [price,
    size] array already): no pydantic model is built for the answer."""
    return _encode(
        {
            "session_id": view.session_id,
            "venue": view.venue,
            "symbol": view.symbol,
            "topic": view.topic,
            "seq": view.seq,
            "stale": view.stale,
            "bids": view.bids,
            "asks": view.asks,
            "updated_ns": view.updated_ns,
            "resyncs": view.resyncs,
            "last_reset_reason": view.last_reset.reason if view.last_reset else None,
        }
    )


@router.get(
    "/{session_id}/{symbol:path}",
    response_model=BookPublic,
    responses=responses(404),
)
async def get_book(
    session_id: IdPath,
    symbol: Symbol,
    control: ControlDep,
    _caller: ConsumerDep,
    depth: Annotated[
        int | None,
        Query(ge=1, le=MAX_DEPTH, description="levels per side, best first (default: all)"),
    ] = None,
) -> Response:
    """The session's local book of a symbol: its levels, sequence and whether it is stale."""
    # A book is kept only for a live session (a deleted one's go with it): no database
    # read on this path, and no thread hop for a shallow read of books not being updated.
    books = control.books
    try:
        if depth is None or depth > INLINE_DEPTH:
            raise BooksBusy
        view = books.view(session_id, symbol, depth, wait=False)
    except BooksBusy:
        view = await run_in_threadpool(books.view, session_id, symbol, depth)
    if view is None:
        await run_in_threadpool(_no_book, control, session_id, symbol)
    assert view is not None
    return Response(book_json(view), media_type="application/json")


def _no_book(control: ControlPlane, session_id: int, symbol: str) -> None:
    """The 404 of a book the session does not keep (blocking: the session is read)."""
    control.sessions.get(session_id)  # 404 when there is no such session
    books = control.books
    known = books.symbols(session_id)
    if not books.available:
        hint = "this gateway runs no dataplane (no hub ring to follow), so it keeps no books"
    elif known:
        hint = f"books of session {session_id}: {', '.join(known)}"
    else:
        hint = (
            f"session {session_id} keeps no book yet: subscribe a book topic with "
            '"format": "normalized" (POST /v1/subscriptions); the book appears with its '
            "first update"
        )
    raise HTTPException(
        status.HTTP_404_NOT_FOUND, f"no book of {symbol!r} in session {session_id}: {hint}"
    )
