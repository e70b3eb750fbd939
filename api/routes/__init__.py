"""One router per resource; operation ids are the route functions' names (stable)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import KnownQuery
from api.schemas.common import responses


def resource_router(prefix: str, tag: str, *also: int) -> APIRouter:
    """The router of one /v1 resource. Every route of it may answer 400 (a body that is not
    UTF-8 or JSON), 401 and 403 (also: the resource's other shared answers), and a query
    parameter the route does not take is a 422 (`KnownQuery`)."""
    return APIRouter(
        prefix=prefix,
        tags=[tag],
        responses=responses(400, 401, 403, *also),
        dependencies=[KnownQuery],
    )
