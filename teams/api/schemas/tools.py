"""The agents' tools, and a tool call's result."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ToolOut(BaseModel):
    name: str
    description: str
    input_schema: dict = Field(description="The Anthropic tool definition's input schema.")
    roles: list[str] | None = Field(description="The roles that have it; null: every role.")
    phases: list[str] | None = Field(
        description="The phases it is offered in (of the team asked about); null: all."
    )
    phase_rule: str = Field(
        "", description="Its default phases in words, when a rule decides them (no team given)."
    )
    approval: str = Field(
        "auto",
        description=(
            "Of the team asked about: auto (runs), ask (waits for the PM's approval) or never "
            "(not offered). MCP tools (`<server>__<tool>`) are listed with a team only."
        ),
    )


class TurnEndOut(BaseModel):
    kind: str = Field(description="How it ends the agent's turn: pass, pm_request, ...")
    reason: str


class ToolCallOut(BaseModel):
    result: str
    is_error: bool
    outcome: TurnEndOut | None = Field(description="Set when the tool ends the agent's turn.")
