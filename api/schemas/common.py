"""Types shared by every resource: names, errors, pages."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from gateway.store.validate import NAME, check_name


class Schema(BaseModel):
    """Base of request bodies: unknown fields are an error, not silently dropped, and numbers
    are finite (Python's JSON reader takes NaN and Infinity, which no setting can use)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class PublicSchema(BaseModel):
    """Base of responses: built from ORM rows and runtime dataclasses."""

    model_config = ConfigDict(from_attributes=True)


Name = Annotated[
    str,
    Field(
        min_length=1,
        max_length=64,
        json_schema_extra={"pattern": NAME.pattern},
        examples=["binance-spot"],
    ),
    AfterValidator(check_name),
]


#: Ids are 32-bit integers in every backend; larger ones cannot name a row.
ID_MAX = 2_147_483_647


class ErrorPublic(BaseModel):
    """Every 4xx but 422: `detail` says what is wrong and what to change."""

    detail: str


class ValidationIssue(BaseModel):
    loc: list[str | int]
    msg: str
    type: str
    input: Any | None = None


class ValidationErrorPublic(BaseModel):
    """422: one entry per field that did not pass, with the field's location."""

    detail: list[ValidationIssue]


class Message(BaseModel):
    message: str


def responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI documentation of the error answers a route may give."""
    texts = {
        400: "the body could not be read (not UTF-8 or not JSON)",
        401: "no valid bearer token",
        403: "the token lacks the scope this route needs",
        404: "an entity named in the path or body does not exist",
        409: "the request conflicts with the stored state or the host's",
        503: "not ready, or the database is unavailable (retry later)",
    }
    return {code: {"model": ErrorPublic, "description": texts[code]} for code in codes}


def refuse_nulls(model: BaseModel, nullable: frozenset[str] = frozenset()) -> None:
    """In an Update body, null clears a field only where the field may be empty."""
    for name in sorted(model.model_fields_set - nullable):
        if getattr(model, name) is None:
            raise ValueError(f"{name} cannot be null: leave it out to keep its value")
