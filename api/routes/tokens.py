"""/v1/tokens: API tokens (admin). The secret is in the creation answer only."""

from __future__ import annotations

from fastapi import Request, status

from api.deps import AdminDep, ControlDep, IdPath, PageDep
from api.revocation import OpenStreams
from api.routes import resource_router
from api.schemas.common import responses
from api.schemas.tokens import TokenCreate, TokenCreatedPublic, TokenListPublic, TokenPublic

router = resource_router("/v1/tokens", "tokens")


@router.get("", response_model=TokenListPublic)
def list_tokens(control: ControlDep, page: PageDep, _: AdminDep) -> TokenListPublic:
    result = control.tokens.page(page.offset, page.limit)
    return page.of(TokenListPublic, result, TokenPublic.model_validate)


@router.post("", response_model=TokenCreatedPublic, status_code=status.HTTP_201_CREATED)
def create_token(body: TokenCreate, control: ControlDep, _: AdminDep) -> TokenCreatedPublic:
    """A new token; keep the secret, it is not shown again."""
    token, secret = control.tokens.create(body.name, list(body.scopes))
    return TokenCreatedPublic.model_validate(
        {**TokenPublic.model_validate(token).model_dump(), "secret": secret}
    )


@router.get("/{token_id}", response_model=TokenPublic, responses=responses(404))
def get_token(token_id: IdPath, control: ControlDep, _: AdminDep) -> TokenPublic:
    return TokenPublic.model_validate(control.tokens.get(token_id))


@router.delete("/{token_id}", response_model=TokenPublic, responses=responses(404))
def revoke_token(
    token_id: IdPath, control: ControlDep, _: AdminDep, request: Request
) -> TokenPublic:
    """Revoke a token (kept for the record, refused from now on); its open streams close
    (1008)."""
    token = TokenPublic.model_validate(control.tokens.revoke(token_id))
    streams: OpenStreams = request.app.state.open_streams
    streams.revoke(token_id)
    return token
