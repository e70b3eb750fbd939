"""/v1/books: the gateway's local order books (consume scope, like the subscriptions).

A book is kept per symbol for the book topics that a normalized subscription holds
(gateway.books.manager); it is read under the manager's lock, so the levels and the
sequence are one state of the book.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status

from api.deps import ConsumerDep, ControlDep, IdPath, KnownQuery
from api.schemas.books import BookPublic
from api.schemas.common import responses

router = APIRouter(
    prefix="/v1/books",
    tags=["books"],
    responses=responses(400, 401, 403),
    dependencies=[KnownQuery],
)
#: The deepest book a request may ask for.
MAX_DEPTH = 5000

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


@router.get(
    "/{session_id}/{symbol:path}",
    response_model=BookPublic,
    responses=responses(404),
)
def get_book(
    session_id: IdPath,
    symbol: Symbol,
    control: ControlDep,
    _caller: ConsumerDep,
    depth: Annotated[
        int | None,
        Query(ge=1, le=MAX_DEPTH, description="levels per side, best first (default: all)"),
    ] = None,
) -> BookPublic:
    """The session's local book of a symbol: its levels, sequence and whether it is stale."""
    control.sessions.get(session_id)  # 404 when there is no such session
    books = control.books
    view = books.view(session_id, symbol, depth)
    if view is None:
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
    return BookPublic(
        session_id=view.session_id,
        venue=view.venue,
        symbol=view.symbol,
        topic=view.topic,
        seq=view.seq,
        stale=view.stale,
        bids=[(lv.price, lv.size) for lv in view.bids],
        asks=[(lv.price, lv.size) for lv in view.asks],
        updated_ns=view.updated_ns,
        resyncs=view.resyncs,
        last_reset_reason=view.last_reset.reason if view.last_reset else None,
    )
