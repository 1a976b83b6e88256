"""A team's fields, its copy (run again), and its agents inline."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from teams.api.schemas.agents import AgentIn, AgentOut
from teams.api.schemas.common import Dollars, In
from teams.conversation import phase_guide
from teams.models import (
    HUMAN_TEXT_LIMIT,
    MAX_PHASES,
    PHASE_GUIDE_TEXT_LIMIT,
    PHASE_NAME_MAX,
    PLAN_LIMIT,
    SHORT_TEXT_LIMIT,
    Team,
    team_slug_validator,
)
from teams.run import lifecycle

# The slug rule is the model's (one definition: teams.models.team_slug_validator).
SLUG_PATTERN = team_slug_validator.regex.pattern
SLUG_MAX = Team._meta.get_field("slug").max_length
NAME_MAX = Team._meta.get_field("name").max_length
PhaseName = Annotated[str, Field(min_length=1, max_length=PHASE_NAME_MAX)]
ShortText = Annotated[str, Field(max_length=SHORT_TEXT_LIMIT)]
GuideText = Annotated[str, Field(max_length=PHASE_GUIDE_TEXT_LIMIT)]
PHASES_HELP = f"Phase names in order, each at most {PHASE_NAME_MAX} characters."
PLAN_HELP = "Markdown; its '## Plan' section is what agents see when they think back."
GUIDE_HELP = (
    'The team\'s own phase lines, {phase: {"produce": text, role: text}}: what a phase '
    "should produce and each role's part in it; what is missing comes from Loom's defaults."
)
APPROVALS_HELP = (
    'Built-in tools\' approval policies, {"tool_name": "auto" | "ask" | "never"}: ask makes '
    "a call wait for the PM's approval, never stops offering the tool; auto by default. "
    "MCP tools have theirs on their server (/mcp-servers)."
)
ACCESS_HELP = (
    'Who may use a tool, {tool: {"roles": [...], "phases": [...]}} (an empty list: '
    "all); a tool not listed keeps its default (GET /api/tools)."
)

# When the team asks the PM for help (teams.run.stuck); 0 turns a check off.
EXCHANGES_HELP = (
    "Stuck: more queries or forwards than this between the same two agents in a phase "
    "open a stuck request (default 8; 0: never)."
)
PASS_ROUNDS_HELP = (
    "Stuck: this many rounds in a row where everyone passes, the phase still open, open a "
    "stuck request (default 3; 0: never)."
)
PHASE_TURNS_HELP = (
    "Stuck: a phase that has taken this many turns opens a stuck request (default 60; 0: no limit)."
)


class ToolAccess(BaseModel):
    roles: list[ShortText] | None = Field(
        None, max_length=50, description="Roles allowed; empty: every role."
    )
    phases: list[Annotated[str, Field(max_length=PHASE_NAME_MAX)]] | None = Field(
        None, max_length=MAX_PHASES, description="Phases allowed; empty: every phase."
    )


A2A_HELP = (
    "Published over A2A: other agents may hire this team at /a2a/{team}/ (its card at "
    "/a2a/{team}/.well-known/agent-card.json); each message starts a fresh copy."
)


class TeamIn(In):
    slug: str = Field(
        max_length=SLUG_MAX,
        pattern=SLUG_PATTERN,
        description="Lowercase letters, digits and dashes.",
    )
    name: str = Field("", max_length=NAME_MAX)
    goal: str = Field("", max_length=HUMAN_TEXT_LIMIT)
    plan: str = Field("", max_length=PLAN_LIMIT, description=PLAN_HELP)
    phases: list[PhaseName] | None = Field(
        None, min_length=1, max_length=MAX_PHASES, description=PHASES_HELP
    )
    workspace: str = Field("", max_length=500)
    max_turns: int = Field(200, ge=1, le=1_000_000, description="Turn budget.")
    max_cost_usd: Dollars = Field(Decimal("5"), ge=0, max_digits=10, decimal_places=4)
    agents: list[AgentIn] = Field([], max_length=50)


class TeamPatch(In):
    """Only the fields given change; status, phase, turns and spend are the engine's."""

    slug: str = Field(None, max_length=SLUG_MAX, pattern=SLUG_PATTERN)
    name: str = Field(None, max_length=NAME_MAX)
    goal: str = Field(None, max_length=HUMAN_TEXT_LIMIT)
    plan: str = Field(None, max_length=PLAN_LIMIT, description=PLAN_HELP)
    phases: list[PhaseName] = Field(
        None, min_length=1, max_length=MAX_PHASES, description=PHASES_HELP
    )
    workspace: str = Field(None, max_length=500)
    max_turns: int = Field(None, ge=1, le=1_000_000)
    max_cost_usd: Dollars = Field(None, ge=0, max_digits=10, decimal_places=4)
    phase_guide: dict[PhaseName, dict[ShortText, GuideText]] = Field(
        None, max_length=MAX_PHASES, description=GUIDE_HELP
    )
    tool_access: dict[ShortText, ToolAccess] = Field(
        None, max_length=SHORT_TEXT_LIMIT, description=ACCESS_HELP
    )
    tool_approvals: dict[ShortText, Literal["auto", "ask", "never"]] = Field(
        None, max_length=SHORT_TEXT_LIMIT, description=APPROVALS_HELP
    )
    max_anchors: int = Field(None, ge=0, le=1000, description="Most anchors the team may have.")
    anchor_value_limit: int = Field(
        None, ge=1, le=HUMAN_TEXT_LIMIT, description="Most characters of an agent-saved anchor."
    )
    consultants: list[ShortText] = Field(
        None, max_length=100, description="Names of the consultant profiles its agents may ask."
    )
    max_exchanges: int = Field(None, ge=0, le=10_000, description=EXCHANGES_HELP)
    max_pass_rounds: int = Field(None, ge=0, le=1000, description=PASS_ROUNDS_HELP)
    max_phase_turns: int = Field(None, ge=0, le=1_000_000, description=PHASE_TURNS_HELP)
    a2a: bool = Field(None, description=A2A_HELP)


class TeamCloneIn(In):
    """Run a team again: a fresh idle copy (agents, anchors, plan, workspace files)."""

    slug: str | None = Field(
        None,
        max_length=SLUG_MAX,
        pattern=SLUG_PATTERN,
        description="The copy's slug; not given: the source's slug with -2, -3...",
    )
    name: str | None = Field(None, max_length=NAME_MAX, description="Not given: the source's name.")


class TeamOut(BaseModel):
    slug: str
    name: str
    goal: str
    plan: str
    phases: list[str]
    phase: str
    phase_index: int
    status: str
    actions: list[str] = Field(description="What a PM may do now: start, pause, resume.")
    workspace: str
    max_turns: int
    turn_count: int
    max_cost_usd: str
    spent_usd: str
    phase_guide: dict[str, dict[str, str]] = Field(description="The team's own phase lines.")
    effective_phase_guide: dict[str, dict[str, str]] = Field(
        description="Every phase's lines as the agents read them (the team's, else Loom's)."
    )
    tool_access: dict = Field(description=ACCESS_HELP)
    tool_approvals: dict = Field(description=APPROVALS_HELP)
    max_anchors: int
    anchor_value_limit: int
    consultants: list[str] = Field(description="The consultant profiles its agents may ask.")
    max_exchanges: int = Field(description=EXCHANGES_HELP)
    max_pass_rounds: int = Field(description=PASS_ROUNDS_HELP)
    max_phase_turns: int = Field(description=PHASE_TURNS_HELP)
    next_speaker: str | None = Field(
        None, description="The agent the PM chose to speak next, until its turn is queued."
    )
    agents: list[AgentOut]
    a2a: bool = Field(description=A2A_HELP)
    hired_from: str | None = Field(
        None, description="The published team this run was hired from over A2A."
    )
    hired_by: str = Field("", description="The label of the token that hired this run over A2A.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, team: Team) -> TeamOut:
        return cls(
            slug=team.slug,
            name=team.name,
            goal=team.goal,
            plan=team.plan,
            phases=team.phases,
            phase=team.phase,
            phase_index=team.phase_index,
            status=team.status,
            actions=lifecycle.pm_actions(team.status),
            workspace=team.workspace,
            max_turns=team.max_turns,
            turn_count=team.turn_count,
            max_cost_usd=f"{team.max_cost_usd:.4f}",
            spent_usd=f"{team.spent_usd:.6f}",
            phase_guide=team.phase_guide,
            effective_phase_guide=phase_guide.effective_guide(team),
            tool_access=team.tool_access,
            tool_approvals=team.tool_approvals,
            max_anchors=team.max_anchors,
            anchor_value_limit=team.anchor_value_limit,
            consultants=sorted(p.name for p in team.consultants.all()),
            max_exchanges=team.max_exchanges,
            max_pass_rounds=team.max_pass_rounds,
            max_phase_turns=team.max_phase_turns,
            next_speaker=team.next_speaker.name if team.next_speaker_id else None,
            agents=[AgentOut.model_validate(a) for a in team.agents.all()],
            a2a=team.a2a,
            hired_from=team.hired_from.slug if team.hired_from_id else None,
            hired_by=team.hired_by,
            created_at=team.created_at,
            updated_at=team.updated_at,
        )
