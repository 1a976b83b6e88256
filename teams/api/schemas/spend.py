"""Where a team's money goes."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, Field


class SpendUsageOut(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    cost_usd: Decimal


class SpendAgentOut(SpendUsageOut):
    agent: str
    turns: int
    max_cost_usd: Decimal | None = Field(description="The agent's own cost budget, if any.")


class SpendPhaseOut(SpendUsageOut):
    phase: str
    turns: int


class SpendToolOut(BaseModel):
    tool: Literal["consultations", "smart retrieval"]
    calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: Decimal


class SpendCutOut(BaseModel):
    mechanism: Literal["passes", "offload", "caching"]
    count: int = Field(
        description="Passes made, messages offloaded, or tokens read from the prompt cache."
    )
    tokens: int = Field(description="Input tokens kept out of (or read cheaper by) model calls.")
    usd: Decimal = Field(description="What those tokens would have cost at full input price.")


class SpendOut(BaseModel):
    """Where a team's money goes. A turn's figures include the calls its tools made
    (consultations, smart retrieval), so the per-tool rows are a part of the per-agent
    and per-phase ones; the cuts are estimates (see the README's Money and budgets)."""

    team: str
    spent_usd: Decimal
    max_cost_usd: Decimal
    totals: SpendUsageOut
    agents: list[SpendAgentOut]
    phases: list[SpendPhaseOut]
    tools: list[SpendToolOut]
    cuts: list[SpendCutOut]
    unknown_prices: list[str] = Field(
        description="Models used whose price Loom does not know: counted as free."
    )
