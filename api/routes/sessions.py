"""/v1/sessions: upstream WebSocket sessions, their start/stop and event log (admin; the
list also to a consume token, as the sessions it may subscribe to)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, status
from pydantic import BaseModel, Field

from api.auth import Principal, require_any_scope
from api.deps import AdminDep, ControlDep, IdPath, PageDep
from api.routes import resource_router
from api.schemas.common import PagePublic, responses
from api.schemas.sessions import (
    DialectListPublic,
    SessionCreate,
    SessionEventListPublic,
    SessionEventPublic,
    SessionListPublic,
    SessionPublic,
    SessionStatusPublic,
    SessionUpdate,
)
from gateway.control import ControlPlane
from gateway.runtime import SessionStatus
from gateway.store.models import SessionRow

router = resource_router("/v1/sessions", "sessions")


def status_public(status_: SessionStatus) -> SessionStatusPublic:
    return SessionStatusPublic(
        state=str(status_.state),
        reason=status_.reason,
        since=datetime.fromtimestamp(status_.since, UTC) if status_.since else None,
        topics=list(status_.topics),
        receiving_unparsable=status_.receiving_unparsable,
    )


def session_public(
    control: ControlPlane, row: SessionRow, status_: SessionStatus | None = None
) -> SessionPublic:
    status_ = status_ or control.sessions.status(row.id)
    fields = {k: getattr(row, k) for k in SessionPublic.model_fields if k != "status"}
    return SessionPublic.model_validate({**fields, "status": status_public(status_)})


class SessionSummaryPublic(BaseModel):
    """What a consume token sees of a session: enough to subscribe to it (/v1/stream
    ?session=ID&topics=...), none of its configuration (URL, TLS files, port)."""

    id: int
    name: str
    dialect: str
    state: str
    topics: list[str] = Field(description="the topics the session is subscribed to upstream")


class SessionSummaryListPublic(PagePublic[SessionSummaryPublic]):
    pass


def session_summary(control: ControlPlane, row: SessionRow) -> SessionSummaryPublic:
    status_ = control.sessions.status(row.id)
    return SessionSummaryPublic(
        id=row.id,
        name=row.name,
        dialect=row.dialect,
        state=str(status_.state),
        topics=list(status_.topics),
    )


AdminOrConsumeDep = Annotated[Principal, Depends(require_any_scope("admin", "consume"))]


@router.get("", response_model=SessionListPublic | SessionSummaryListPublic)
def list_sessions(
    control: ControlDep, page: PageDep, caller: AdminOrConsumeDep
) -> SessionListPublic | SessionSummaryListPublic:
    """Every session: in full to an admin; to a consume token the sessions it may subscribe
    to (all of them), as id, name, dialect, state and topics only."""
    result = control.sessions.page(page.offset, page.limit)
    if "admin" in caller.scopes:
        return page.of(SessionListPublic, result, lambda r: session_public(control, r))
    return page.of(SessionSummaryListPublic, result, lambda r: session_summary(control, r))


@router.get("/dialects", response_model=DialectListPublic)
def list_dialects(control: ControlDep, _: AdminDep) -> DialectListPublic:
    """The exchange dialects a session may name."""
    return DialectListPublic(data=list(control.runtime.dialects()))


@router.post(
    "",
    response_model=SessionPublic,
    status_code=status.HTTP_201_CREATED,
    responses=responses(404, 409),
)
def create_session(body: SessionCreate, control: ControlDep, _: AdminDep) -> SessionPublic:
    """Configure a session (stopped); POST .../start connects it."""
    return session_public(control, control.sessions.create(body.model_dump()))


# {session_id:int} where /dialects sits beside it: DELETE /v1/sessions/dialects is then a
# 405 of that path (Allow: GET), not a 422 about an id that was never meant.
@router.get("/{session_id:int}", response_model=SessionPublic, responses=responses(404))
def get_session(session_id: IdPath, control: ControlDep, _: AdminDep) -> SessionPublic:
    return session_public(control, control.sessions.get(session_id))


@router.patch("/{session_id:int}", response_model=SessionPublic, responses=responses(404, 409))
def update_session(
    session_id: IdPath, body: SessionUpdate, control: ControlDep, _: AdminDep
) -> SessionPublic:
    """Change a session; what it connects to can change only while it is stopped."""
    row = control.sessions.update(session_id, body.model_dump(exclude_unset=True))
    return session_public(control, row)


@router.delete(
    "/{session_id:int}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404, 409)
)
def delete_session(session_id: IdPath, control: ControlDep, _: AdminDep) -> None:
    """Remove a session with its subscriptions and events; a running one is stopped first
    (409 when it does not stop in time: the session then stays, stopped)."""
    control.sessions.delete(session_id)


@router.post("/{session_id}/start", response_model=SessionPublic, responses=responses(404, 409))
def start_session(session_id: IdPath, control: ControlDep, _: AdminDep) -> SessionPublic:
    """Want the session running (kept across restarts) and ask the runtime to connect it."""
    row, status_ = control.sessions.start(session_id)
    return session_public(control, row, status_)


@router.post("/{session_id}/stop", response_model=SessionPublic, responses=responses(404, 409))
def stop_session(session_id: IdPath, control: ControlDep, _: AdminDep) -> SessionPublic:
    """Want the session stopped and ask the runtime to close it."""
    row, status_ = control.sessions.stop(session_id)
    return session_public(control, row, status_)


@router.get("/{session_id}/events", response_model=SessionEventListPublic, responses=responses(404))
def list_session_events(
    session_id: IdPath, control: ControlDep, page: PageDep, _: AdminDep
) -> SessionEventListPublic:
    """The session's history, newest first: what was asked and what the dataplane reported."""
    result = control.sessions.events(session_id, page.offset, page.limit)
    return page.of(SessionEventListPublic, result, SessionEventPublic.model_validate)
