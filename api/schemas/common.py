"""Types shared by every resource: names, errors, pages."""

from __future__ import annotations

from types import UnionType
from typing import Annotated, Any, ClassVar, Generic, TypeVar, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from gateway.store.validate import NAME, check_name


class Schema(BaseModel):
    """Base of request bodies: unknown fields are an error, not silently dropped; numbers are
    finite (Python's JSON reader takes NaN and Infinity, which no setting can use). Booleans
    are StrictBool: 0 or "no" is not false; and false is not 0 in an integer or number field
    (JSON Schema keeps the two types apart; 5.0 is still an integer there)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if _takes_number(annotation) and not _takes_bool(annotation):
                raise ValueError("a number is expected, not true/false")
        return value


def _members(annotation: Any) -> tuple[Any, ...]:
    return get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)


def _takes_number(annotation: Any) -> bool:
    return any(member in (int, float) for member in _members(annotation))


def _takes_bool(annotation: Any) -> bool:
    return any(member is bool for member in _members(annotation))


class PublicSchema(BaseModel):
    """Base of responses: built from ORM rows and runtime dataclasses."""

    model_config = ConfigDict(from_attributes=True)


ItemT = TypeVar("ItemT")


class PagePublic(PublicSchema, Generic[ItemT]):
    """Base of a list route's answer (deps.Pagination.of builds it): one page of the items,
    how many there are in all, and the window asked for."""

    data: list[ItemT]
    count: int
    offset: int
    limit: int


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


def _drop_null_options(schema: dict[str, Any], model: type[Any]) -> None:
    """The document of an UpdateSchema: null only where `nullable` allows it."""
    nullable: frozenset[str] = getattr(model, "nullable", frozenset())
    for name, prop in schema.get("properties", {}).items():
        options = prop.get("anyOf")
        if name in nullable or not options or {"type": "null"} not in options:
            continue
        rest = [option for option in options if option != {"type": "null"}]
        del prop["anyOf"]
        if len(rest) == 1:
            prop.update(rest[0])
        else:
            prop["anyOf"] = rest
        if "default" in prop and prop["default"] is None:
            del prop["default"]


class UpdateSchema(Schema):
    """Base of PATCH bodies: a field left out keeps its value; null clears it, which only
    the fields in `nullable` allow (the document lists null for those alone)."""

    model_config = ConfigDict(json_schema_extra=_drop_null_options)
    nullable: ClassVar[frozenset[str]] = frozenset()

    @field_validator("*", mode="before")
    @classmethod
    def _refuse_null(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None and info.field_name not in cls.nullable:
            raise ValueError(f"{info.field_name} cannot be null: leave it out to keep its value")
        return value
