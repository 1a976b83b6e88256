"""An eval run: the suite to run (as JSON, the suite file's fields) and the report."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field

from teams.api.schemas.common import In
from teams.evals import suites
from teams.evals.runs import DEFAULT_CONCURRENCY, MAX_CONCURRENCY

SET_HELP = (
    "Changes to the team template, as `manage.py eval run --set` takes them: "
    '"max_turns=40", "phases=implementation,code-review", "agents.coder.model=claude-haiku-4-5".'
)


class EvalRunIn(In):
    suite: suites.SuiteSpec = Field(description="The suite, with the suite file's fields.")
    repeat: int = Field(1, ge=1, le=suites.MAX_REPEAT, description="Runs of each case.")
    set: list[Annotated[str, Field(max_length=1000)]] = Field(
        [], max_length=50, description=SET_HELP
    )
    concurrency: int = Field(
        DEFAULT_CONCURRENCY, ge=1, le=MAX_CONCURRENCY, description="Cases at work at once."
    )


class EvalRunCreatedOut(BaseModel):
    id: int = Field(description="The run's id: GET /api/evals/{id} follows it.")
    status: str
    cases: int = Field(description="Case runs: cases times repeats, a team each.")


class CheckOut(BaseModel):
    kind: str
    passed: bool
    detail: str


class EvalCaseOut(BaseModel):
    case: str
    repeat: int
    team: str | None = Field(description="The case's team's slug (null when it was deleted).")
    status: str = Field(description="queued, running, done (every phase done) or stopped.")
    passed: bool | None = Field(description="Null until scored.")
    checks: list[CheckOut]
    turns: int
    cost_usd: float
    seconds: float


class EvalSummaryOut(BaseModel):
    passed: int
    total: int
    cost_usd: float
    turns: int


class EvalRunOut(BaseModel):
    """The run's report, as `manage.py eval run --json` writes it, with its status."""

    suite: str
    run: int
    status: str = Field(description="running until every case is scored, then done.")
    settings: dict
    cases: list[EvalCaseOut]
    summary: EvalSummaryOut
