"""/v1/groups: feed groups, sessions arbitrated into one stream (admin)."""

from __future__ import annotations

from fastapi import status

from api.deps import AdminDep, ControlDep, IdPath, PageDep
from api.routes import resource_router
from api.schemas.common import responses
from api.schemas.groups import (
    GroupCreate,
    GroupFiguresPublic,
    GroupListPublic,
    GroupPublic,
    GroupUpdate,
)
from gateway.control import ControlPlane
from gateway.groups.feed import group_hub_id
from gateway.store.models import FeedGroupRow

router = resource_router("/v1/groups", "groups")


def group_public(control: ControlPlane, row: FeedGroupRow) -> GroupPublic:
    figures = control.groups.figures(row.id)
    return GroupPublic(
        id=row.id,
        name=row.name,
        legs=[leg.session_id for leg in row.legs],
        hold_ms=row.hold_ms,
        hub_id=group_hub_id(row.id),
        created_at=row.created_at,
        updated_at=row.updated_at,
        figures=GroupFiguresPublic.model_validate(figures) if figures is not None else None,
    )


@router.get("", response_model=GroupListPublic)
def list_groups(control: ControlDep, page: PageDep, _: AdminDep) -> GroupListPublic:
    """Every feed group, oldest first."""
    result = control.groups.page(page.offset, page.limit)
    return page.of(GroupListPublic, result, lambda g: group_public(control, g))


@router.post(
    "",
    response_model=GroupPublic,
    status_code=status.HTTP_201_CREATED,
    responses=responses(409),
)
def create_group(body: GroupCreate, control: ControlDep, _: AdminDep) -> GroupPublic:
    """Group sessions carrying one stream; consumers read the group's own topics."""
    return group_public(control, control.groups.create(body.model_dump()))


@router.get("/{group_id}", response_model=GroupPublic, responses=responses(404))
def get_group(group_id: IdPath, control: ControlDep, _: AdminDep) -> GroupPublic:
    """The group and its per-leg figures (won, late, lag, state)."""
    return group_public(control, control.groups.get(group_id))


@router.patch("/{group_id}", response_model=GroupPublic, responses=responses(404, 409))
def update_group(
    group_id: IdPath, body: GroupUpdate, control: ControlDep, _: AdminDep
) -> GroupPublic:
    return group_public(
        control, control.groups.update(group_id, body.model_dump(exclude_unset=True))
    )


@router.delete("/{group_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404))
def delete_group(group_id: IdPath, control: ControlDep, _: AdminDep) -> None:
    """Remove the group; its legs publish under their own session ids again."""
    control.groups.delete(group_id)
