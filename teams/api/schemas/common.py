"""What every router's schemas share: strict input, and the one error shape."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict


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


def _ascii_dollars(value):
    """A budget given as text has ASCII digits and at most one decimal point: "١٥٠"
    is refused, not read as 150 (a JSON number is ASCII already)."""
    if isinstance(value, str) and not re.fullmatch(r"[0-9]+(\.[0-9]*)?|\.[0-9]+", value, re.ASCII):
        raise ValueError("write the budget with the digits 0-9 and at most one decimal point")
    return value


# A budget in dollars (a team's, an agent's): what Team/Agent.max_cost_usd hold.
Dollars = Annotated[Decimal, BeforeValidator(_ascii_dollars)]
