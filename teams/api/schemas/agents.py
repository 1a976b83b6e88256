"""An agent's fields, what it would see on its turn, and its drift."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from teams.api.schemas.common import Dollars, FromRow, In
from teams.live.event_payloads import QueryOut
from teams.models import (
    AGENT_NAME_PATTERN,
    HUMAN_TEXT_LIMIT,
    AgentRole,
)

# An agent's own cost budget: what Agent.max_cost_usd holds (10 digits, 4 places),
# above $0 as in the admin (teams.admin.forms.budget_formfield); none is null.
AgentBudget = Annotated[Dollars, Field(gt=0, max_digits=10, decimal_places=4)]
BUDGET_HELP = (
    "The agent's own cost budget in USD, beside the team's; null: none (the team's "
    "applies). At 80% the PM is warned once (budget.warning naming the agent); at the "
    "cap the team pauses with a budget request."
)


MAX_TOKENS_HELP = (
    "The most tokens one reply of the agent may hold (256 to 128,000); null: its model's "
    "default (8,192 for Claude models)."
)


class AgentIn(In):
    name: str = Field(pattern=AGENT_NAME_PATTERN, description="Letters, digits, - and _.")
    role: AgentRole
    model: str = Field("", max_length=100, description="Empty: the default model.")
    role_prompt: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    position: int | None = Field(None, ge=0, le=10_000, description="Order in the rotation.")
    max_cost_usd: AgentBudget | None = Field(None, description=BUDGET_HELP)
    max_tokens: int | None = Field(None, ge=256, le=128_000, description=MAX_TOKENS_HELP)


class AgentPatch(In):
    """Only the fields given change."""

    name: str = Field(None, pattern=AGENT_NAME_PATTERN)
    role: AgentRole = None
    model: str = Field(None, max_length=100)
    role_prompt: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    position: int = Field(None, ge=0, le=10_000)
    context_budget_tokens: int = Field(None, ge=1_000, le=10_000_000)
    max_cost_usd: AgentBudget | None = Field(
        None, description=BUDGET_HELP + " Null clears it; not given: unchanged."
    )
    max_tokens: int | None = Field(
        None, ge=256, le=128_000, description=MAX_TOKENS_HELP + " Not given: unchanged."
    )


class AgentOut(FromRow):
    name: str
    role: str
    model: str
    effective_model: str
    endpoint: str = Field(
        description="The model endpoint its effective model is called through "
        '(GET /api/model-endpoints); "" for the offline model.'
    )
    role_prompt: str
    position: int
    context_budget_tokens: int
    max_cost_usd: str | None = Field(description=BUDGET_HELP)
    max_tokens: int | None = Field(description=MAX_TOKENS_HELP)
    reply_tokens: int = Field(description="The max_tokens its requests carry now.")
    turns: int
    drift_score: int
    trajectory: str
    tactic: str
    action: str
    created_at: datetime

    @field_validator("max_cost_usd", mode="before")
    @classmethod
    def _dollars(cls, value):
        """Four places, as a team's max_cost_usd."""
        return f"{Decimal(value):.4f}" if value is not None else None


class ContextMessageOut(BaseModel):
    id: int
    kind: str
    speaker: str
    to_you: bool = Field(description="In this agent's inbox (a peer message, query, answer).")
    query: str | None = Field(description="The query ID of a query or answer.")
    phase: str
    content: str
    created_at: datetime


class ContextOut(BaseModel):
    """What the agent would see on its turn, for a program driving it."""

    agent: str
    role: str
    team: str
    goal: str
    status: str
    phase: str
    anchors: dict[str, str]
    open_queries: list[QueryOut] = Field(description="Open questions sent to this agent.")
    messages: list[ContextMessageOut]
    next_after: int
    has_more: bool


class DriftTurnOut(BaseModel):
    number: int
    drift_score: int
    finished_at: datetime | None


class DriftOut(BaseModel):
    agent: str
    score: int = Field(description="0-100, higher is better: 70+ healthy, under 40 lost.")
    meaning: str = Field(description="What the score says, in words.")
    trajectory: str
    tactic: str
    action: str
    chain_breaks: list[str]
    recommendation: str
    context_updates: int
    files_touched: list[str]
    violations: int = Field(description="Tool calls its role or phase did not allow.")
    report: str = Field(description="The drift report, as the agent reads it.")
    turns: list[DriftTurnOut] = Field(description="The score after each of its turns.")
