"""Fork, replay, compare, and a workspace file's revisions."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, Field

from teams.api.paging import MAX_ID, MAX_NUMBER
from teams.api.schemas.common import In
from teams.api.schemas.teams import NAME_MAX, SLUG_MAX, SLUG_PATTERN
from teams.models import HUMAN_TEXT_LIMIT, PLAN_LIMIT

AnchorValue = Annotated[str, Field(max_length=HUMAN_TEXT_LIMIT)]


class ForkIn(In):
    """Where to fork, the new team's slug and name, and edits applied before it runs."""

    at_message: int | None = Field(
        None, ge=1, le=MAX_ID, description="A message id of the team: fork after it."
    )
    at_turn: int | None = Field(
        None, ge=1, le=MAX_ID, description="A turn id of the team: fork at its end."
    )
    slug: str = Field(max_length=SLUG_MAX, pattern=SLUG_PATTERN, description="The fork's slug.")
    name: str | None = Field(None, max_length=NAME_MAX, description="Not given: the source's name.")
    goal: str | None = Field(None, max_length=HUMAN_TEXT_LIMIT, description="A new goal.")
    plan: str | None = Field(None, max_length=PLAN_LIMIT, description="A new plan.")
    anchors: dict[str, AnchorValue | None] | None = Field(
        None, max_length=100, description="Anchors to set (key: value) or delete (key: null)."
    )
    message: str | None = Field(
        None,
        max_length=HUMAN_TEXT_LIMIT,
        description="A new text for the message forked at (with at_message only).",
    )


class ForkOut(BaseModel):
    slug: str
    name: str
    forked_from: str
    forked_at: str = Field(description="The point: 'message 12', 'turn 5' (moved back...).")
    status: str
    phase: str
    messages: int
    copied_turns: int
    copied_spent_usd: str
    spent_usd: str = Field(description="What the fork itself has spent (0 at first).")
    mcp_servers_without_variables: list[str] = Field(
        description="MCP servers copied without the host's variables they were given "
        "(a PM's fork: only a superuser names them again)."
    )


class ReplayIn(In):
    slug: str | None = Field(
        None, max_length=SLUG_MAX, pattern=SLUG_PATTERN, description="Not given: SLUG-replay."
    )
    until_turn: int | None = Field(
        None, ge=1, le=MAX_NUMBER, description="Stop before the turn after this one."
    )


class ReplayOut(BaseModel):
    source: str
    team: str = Field(description="The replay's own team.")
    status: str = Field(description="matched, diverged or stopped (turn limit).")
    turns_replayed: int
    model_steps: int = Field(description="Model calls answered from the record (0 tokens).")
    diverged_turn: int | None = Field(description="The team's turn number where it diverged.")
    diverged_agent: str
    reason: str
    diff: str = Field(description="A unified diff of the two requests, as text.")


class SaidOut(BaseModel):
    id: int
    speaker: str
    kind: str
    phase: str
    content: str


class DifferenceOut(BaseModel):
    position: int = Field(description="Index in the conversations, from 0.")
    a: SaidOut | None
    b: SaidOut | None


class CompareTeamOut(BaseModel):
    slug: str
    status: str
    forked_from: str | None
    forked_at: str
    turns: int
    turns_run: int
    spent_usd: str = Field(description="Copied and own together.")
    copied_turns: int
    own_turns: int
    copied_spent_usd: str
    own_spent_usd: str
    phases_reached: list[str]
    done: bool
    pm_requests: list[dict]
    files_written: list[dict]


class CompareOut(BaseModel):
    a: CompareTeamOut
    b: CompareTeamOut
    first_difference: DifferenceOut | None = Field(description="null: the same conversation.")


class RevisionOut(BaseModel):
    number: int
    sha256: str
    size: int
    agent: str | None
    turn: int | None = Field(description="The team's turn number of the write.")
    note: str
    deleted: bool = Field(False, description="The file was deleted (by a command) here.")
    created_at: datetime


class FileHistoryOut(BaseModel):
    path: str
    revisions: list[RevisionOut] = Field(description="Newest first.")


class RevisionTextOut(RevisionOut):
    path: str
    text: str | None = Field(description="Its first 100 KB; null when binary.")
    truncated: bool
