"""API tokens: the secret is shown once, at creation."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from api.schemas.common import Name, PagePublic, PublicSchema, Schema

Scope = Literal["admin", "consume"]


class TokenCreate(Schema):
    name: Name
    scopes: Annotated[list[Scope], Field(min_length=1, max_length=2)]


class TokenPublic(PublicSchema):
    id: int
    name: str
    scopes: list[str]
    prefix: str = Field(description="the secret's first characters, to tell tokens apart")
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


class TokenCreatedPublic(TokenPublic):
    secret: str = Field(description="the bearer secret: shown this once, stored only hashed")


class TokenListPublic(PagePublic[TokenPublic]):
    pass
