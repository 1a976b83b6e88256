"""What every router's schemas share: strict input, and the one error shape."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FromRow(BaseModel):
    """An Out schema whose fields are its row's attributes as they are: built with
    `model_validate(row)`. Schemas that convert a field keep an explicit `of`."""

    model_config = ConfigDict(from_attributes=True)


class In(BaseModel):
    """Unknown fields are refused, not ignored: a typo is an error, not a no-op."""

    model_config = ConfigDict(extra="forbid")


class ErrorOut(BaseModel):
    detail: str


class FieldErrorOut(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorOut(BaseModel):
    detail: list[FieldErrorOut]


def responses(ok: dict, *errors: int) -> dict:
    """An operation's documented responses: its success, the errors every operation
    may give (401 no or bad credentials, 403 refused, 422 invalid input, 429 rate
    limit) and its own (400 a request body that is not JSON, 404, 409, ...)."""
    documented = dict(ok)
    for code in (401, 403, 422, 429, *errors):
        documented[code] = ValidationErrorOut if code == 422 else ErrorOut
    return documented
