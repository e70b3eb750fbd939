"""/v1/subscriptions: consumers' topics of a session, ref-counted upstream (consume)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query, status

from api.auth import Principal, check_subscription_owner
from api.deps import ConsumerDep, ControlDep, IdPath, PageDep
from api.routes import resource_router
from api.schemas.common import ID_MAX, responses
from api.schemas.subscriptions import (
    ConsumePublic,
    SubscriptionCreate,
    SubscriptionListPublic,
    SubscriptionPublic,
    SubscriptionUpdate,
)
from gateway.control import ControlPlane
from gateway.control.subscriptions import SubscriptionChange, delivered_topics
from gateway.hub.names import ring_topics
from gateway.store.models import SubscriptionRow

router = resource_router("/v1/subscriptions", "subscriptions")
STREAM_PATH = "/v1/stream"


def subscription_public(
    control: ControlPlane, sub: SubscriptionRow, change: SubscriptionChange | None = None
) -> SubscriptionPublic:
    fields = {
        k: getattr(sub, k)
        for k in SubscriptionPublic.model_fields
        if k not in ("consume", "upstream_subscribed", "upstream_unsubscribed")
    }
    return SubscriptionPublic.model_validate(
        {
            **fields,
            "consume": ConsumePublic(
                stream_url=f"{STREAM_PATH}?subscription={sub.id}",
                ring=control.subscriptions.ring_name(sub),
                ring_url=control.subscriptions.ring_url(),
                ring_topics=ring_topics(sub.session_id, delivered_topics(sub)),
            ),
            "upstream_subscribed": change.subscribed if change else [],
            "upstream_unsubscribed": change.unsubscribed if change else [],
        }
    )


@router.get("", response_model=SubscriptionListPublic)
def list_subscriptions(
    control: ControlDep,
    page: PageDep,
    caller: ConsumerDep,
    session_id: Annotated[
        int | None, Query(ge=1, le=ID_MAX, description="only this session's")
    ] = None,
) -> SubscriptionListPublic:
    """An admin sees every subscription; another token the ones it created and the
    unowned ones."""
    owner = None if "admin" in caller.scopes else (caller.token_id or 0)
    result = control.subscriptions.page(page.offset, page.limit, session_id, owner)
    return page.of(SubscriptionListPublic, result, lambda s: subscription_public(control, s))


@router.post(
    "",
    response_model=SubscriptionPublic,
    status_code=status.HTTP_201_CREATED,
    responses=responses(404, 409),
)
def create_subscription(
    body: SubscriptionCreate, control: ControlDep, caller: ConsumerDep
) -> SubscriptionPublic:
    """Subscribe a consumer; topics no other subscription of the session holds are
    subscribed upstream. The answer says how to consume the messages. The calling token
    owns it: a consume-only token uses only the subscriptions it created."""
    change = control.subscriptions.create({**body.model_dump(), "owner_token_id": caller.token_id})
    return subscription_public(control, change.subscription, change)


def _owned(control: ControlPlane, subscription_id: int, caller: Principal) -> SubscriptionRow:
    sub = control.subscriptions.get(subscription_id)
    check_subscription_owner(caller, subscription_id, sub.owner_token_id)
    return sub


@router.get("/{subscription_id}", response_model=SubscriptionPublic, responses=responses(404))
def get_subscription(
    subscription_id: IdPath, control: ControlDep, caller: ConsumerDep
) -> SubscriptionPublic:
    return subscription_public(control, _owned(control, subscription_id, caller))


@router.patch(
    "/{subscription_id}", response_model=SubscriptionPublic, responses=responses(404, 409)
)
def update_subscription(
    subscription_id: IdPath, body: SubscriptionUpdate, control: ControlDep, caller: ConsumerDep
) -> SubscriptionPublic:
    """Change topics or delivery options; upstream follows the topics' ref-counts."""
    _owned(control, subscription_id, caller)
    change = control.subscriptions.update(subscription_id, body.model_dump(exclude_unset=True))
    return subscription_public(control, change.subscription, change)


@router.delete(
    "/{subscription_id}", status_code=status.HTTP_204_NO_CONTENT, responses=responses(404)
)
def delete_subscription(subscription_id: IdPath, control: ControlDep, caller: ConsumerDep) -> None:
    """Unsubscribe; topics no other subscription of the session holds leave upstream."""
    _owned(control, subscription_id, caller)
    control.subscriptions.delete(subscription_id)
