"""FastAPI dependencies as Annotated aliases: the control plane, the host, paging, the caller.

Everything a route needs comes from `request.app.state`, set once by `create_app`, so
tests build apps with their own database, runtime and fake host side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Query, Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError

from api.auth import Principal, require_scope
from api.schemas.common import ID_MAX, PagePublic
from gateway.control import ControlPlane
from gateway.host import HostManager
from gateway.settings import Settings
from gateway.store.models import Base
from gateway.store.repository import Page

IdPath = Annotated[int, Path(ge=1, le=ID_MAX, description="the id the entity was given")]

#: The hard ceiling of `limit`; the configured api.page_limit_max is checked below it.
LIMIT_CEILING = 10_000


ListT = TypeVar("ListT", bound=PagePublic[Any])
M = TypeVar("M", bound=Base)


async def get_control(request: Request) -> ControlPlane:
    control: ControlPlane = request.app.state.control
    return control


def get_host(request: Request) -> HostManager:
    host: HostManager = request.app.state.host
    return host


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


@dataclass(frozen=True)
class Pagination:
    offset: int
    limit: int

    def of(self, model: type[ListT], result: Page[M], public: Callable[[M], Any]) -> ListT:
        """A list route's answer: the page's rows made public, the total and this window."""
        data = [public(row) for row in result.items]
        return model(data=data, count=result.total, offset=self.offset, limit=self.limit)


def pagination(
    request: Request,
    offset: Annotated[int, Query(ge=0, le=1 << 31, description="rows to skip")] = 0,
    limit: Annotated[
        int | None,
        Query(ge=1, le=LIMIT_CEILING, description="rows to return (api.page_limit_max at most)"),
    ] = None,
) -> Pagination:
    api = get_settings(request).api
    if limit is not None and limit > api.page_limit_max:
        raise RequestValidationError(
            [
                {
                    "loc": ("query", "limit"),
                    "msg": f"limit {limit} is above the maximum page size {api.page_limit_max}: "
                    "page with offset instead",
                    "type": "less_than_equal",
                    "input": limit,
                }
            ]
        )
    return Pagination(offset, limit if limit is not None else api.page_limit_default)


def _query_names(dependant: Dependant) -> set[str]:
    names = {param.alias for param in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def refuse_unknown_query(request: Request) -> None:
    """A query parameter the route does not take is a 422, as an unknown body field is:
    `?limt=10` silently ignored would page with the default. (async: it never blocks, so
    it takes no thread hop; nor does get_control.)"""
    route = request.scope.get("route")
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return
    known = _query_names(dependant)
    unknown = sorted({name for name in request.query_params if name not in known})
    if unknown:
        takes = ", ".join(sorted(known)) or "none"
        raise RequestValidationError(
            [
                {
                    "loc": ("query", name),
                    "msg": f"unknown query parameter {name!r}; this route takes: {takes}",
                    "type": "extra_forbidden",
                }
                for name in unknown
            ]
        )


KnownQuery = Depends(refuse_unknown_query)
ControlDep = Annotated[ControlPlane, Depends(get_control)]
HostDep = Annotated[HostManager, Depends(get_host)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
PageDep = Annotated[Pagination, Depends(pagination)]
AdminDep = Annotated[Principal, Depends(require_scope("admin"))]
ConsumerDep = Annotated[Principal, Depends(require_scope("consume"))]
