"""Out schemas of the domain's rows: the payloads of live events, and (next) the
REST API's responses (django-ninja takes pydantic models as they are). Each is built
from its row by one classmethod. Plain pydantic models rather than ninja.Schema:
they are built from rows explicitly, so ninja's attribute resolver (DjangoGetter,
run on every field of every instance) would only cost time on each turn."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel as Schema

from teams.models import (
    APPROVAL_CHOICES,
    BUDGET_CHOICES,
    STUCK_CHOICES,
    Message,
    PMRequest,
    Query,
    Team,
    Turn,
)
from teams.run import lifecycle


class TeamStatusOut(Schema):
    team: str  # the slug
    team_id: int
    status: str
    status_label: str
    phase: str
    turn_count: int
    max_turns: int
    spent_usd: str
    max_cost_usd: str
    actions: list[str]

    @classmethod
    def of(cls, team: Team) -> TeamStatusOut:
        return cls(
            team=team.slug,
            team_id=team.id,
            status=team.status,
            status_label=team.get_status_display(),
            phase=team.phase,
            turn_count=team.turn_count,
            max_turns=team.max_turns,
            spent_usd=f"{team.spent_usd:.4f}",
            max_cost_usd=f"{team.max_cost_usd:.2f}",
            actions=lifecycle.pm_actions(team.status),
        )


class MessageOut(Schema):
    id: int
    kind: str
    speaker: str
    recipient: str | None
    phase: str
    content: str
    turn_id: int | None  # the turn that wrote it (its tokens, cost and time)
    created_at: datetime

    @classmethod
    def of(cls, message: Message) -> MessageOut:
        return cls(
            id=message.id,
            kind=message.kind,
            speaker=message.speaker,
            recipient=message.recipient.name if message.recipient_id else None,
            phase=message.phase,
            content=message.content,
            turn_id=message.turn_id,
            created_at=message.created_at,
        )


class TurnOut(Schema):
    id: int
    agent: str
    number: int
    purpose: str
    phase: str
    status: str
    outcome: str
    model: str
    input_tokens: int
    output_tokens: int
    cache_creation_tokens: int
    cache_read_tokens: int
    cost_usd: str
    duration_seconds: float | None
    drift_score: int | None  # the agent's score when the turn finished
    queued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error: str

    @classmethod
    def of(cls, turn: Turn) -> TurnOut:
        duration = None
        if turn.started_at and turn.finished_at:
            duration = round((turn.finished_at - turn.started_at).total_seconds(), 3)
        return cls(
            id=turn.id,
            agent=turn.agent.name,
            number=turn.number,
            purpose=turn.purpose,
            phase=turn.phase,
            status=turn.status,
            outcome=turn.outcome,
            model=turn.model,
            input_tokens=turn.input_tokens,
            output_tokens=turn.output_tokens,
            cache_creation_tokens=turn.cache_creation_tokens,
            cache_read_tokens=turn.cache_read_tokens,
            cost_usd=str(turn.cost_usd),
            duration_seconds=duration,
            drift_score=turn.drift_score,
            queued_at=turn.queued_at,
            started_at=turn.started_at,
            finished_at=turn.finished_at,
            error=turn.error,
        )


class PMRequestOut(Schema):
    id: int
    team: str
    team_name: str
    team_id: int
    agent: str | None
    question: str
    # "budget": answered with one of `choices` or a new cap (teams.run.budgets);
    # "approval": with one of `choices`, a note, and to approve, edited arguments;
    # "stuck": with one of `choices` (teams.run.stuck).
    kind: str = "question"
    choices: list[str] = []
    status: str
    answer: str
    # An approval request: the tool, the arguments it would run with, the PM's note.
    tool: str = ""
    arguments: dict | None = None
    # An approval request: the agent's reason (its text of the step), and the
    # arguments as the PM reads them, [name, value as text] each.
    why: str = ""
    arguments_shown: list[list[str]] = []
    note: str = ""
    created_at: datetime

    @classmethod
    def of(cls, request: PMRequest) -> PMRequestOut:
        budget = request.kind == PMRequest.Kind.BUDGET
        approval = request.kind == PMRequest.Kind.APPROVAL
        return cls(
            id=request.id,
            team=request.team.slug,
            team_name=request.team.name,
            team_id=request.team_id,
            agent=request.agent.name if request.agent_id else None,
            question=request.question,
            kind=request.kind,
            choices=list(
                BUDGET_CHOICES
                if budget
                else APPROVAL_CHOICES
                if approval
                else STUCK_CHOICES
                if request.kind == PMRequest.Kind.STUCK
                else []
            ),
            status=request.status,
            answer=request.answer,
            tool=request.tool_name,
            arguments=request.arguments,
            why=request.why,
            arguments_shown=[list(pair) for pair in request.arguments_shown],
            note=request.note,
            created_at=request.created_at,
        )


class HopOut(Schema):
    kind: str
    sender: str
    to: str = ""
    enrichment: str = ""
    at: str = ""


class QueryOut(Schema):
    key: str
    status: str
    origin: str | None
    target: str | None
    answered_by: str | None
    question: str
    answer: str
    hops: list[HopOut]
    lines: list[str]  # the hop chain in words, for people

    @classmethod
    def of(cls, query: Query) -> QueryOut:
        return cls(
            key=query.key,
            status=query.status,
            origin=query.origin.name if query.origin_id else None,
            target=query.target.name if query.target_id else None,
            answered_by=query.answered_by.name if query.answered_by_id else None,
            question=query.question,
            answer=query.answer,
            hops=[
                HopOut(
                    kind=h.get("kind", ""),
                    sender=h.get("from", ""),
                    to=h.get("to", ""),
                    enrichment=h.get("enrichment", ""),
                    at=h.get("at", ""),
                )
                for h in query.hops
            ],
            lines=query.hop_lines(),
        )


# --- the live view's panels (consultations, files, anchors, keepers, intents) ------


class ConsultationOut(Schema):
    """One consultant's part of an ask, as the live view's Consultations panel shows it."""

    id: int
    consultant: str  # the profile's name, or "(deleted consultant)"
    model: str
    status: str
    status_label: str
    confidence: float | None
    cost_usd: str
    duration_seconds: float | None
    answer: str
    key_points: list[str]
    suggested_actions: list[dict]
    file_references: list[dict]
    error: str
    dropped: list[dict]  # file references dropped, each {"path", "reason"}

    @classmethod
    def of(cls, consultation) -> ConsultationOut:
        output = consultation.output or {}
        return cls(
            id=consultation.id,
            consultant=consultation.profile.name
            if consultation.profile_id
            else "(deleted consultant)",
            model=consultation.model,
            status=consultation.status,
            status_label=consultation.get_status_display(),
            confidence=output.get("confidence"),
            cost_usd=f"{consultation.cost_usd:.4f}",
            duration_seconds=consultation.duration_seconds,
            answer=output.get("answer", ""),
            key_points=list(output.get("key_points") or []),
            suggested_actions=list(output.get("suggested_actions") or []),
            file_references=list(output.get("file_references") or []),
            error=consultation.error,
            dropped=list(consultation.flagged_files or []),
        )


class ConsultationBatchOut(Schema):
    """One ask for a second opinion: who asked, in which turn, what, and each
    consultant's answer side by side (selectors.team_recent_consultations' shape)."""

    batch: str
    agent: str
    turn: int | None
    prompt: str
    consultations: list[ConsultationOut]

    @classmethod
    def of(cls, batch: dict) -> ConsultationBatchOut:
        return cls(
            batch=str(batch["batch"]),
            agent=batch["agent"],
            turn=batch["turn"],
            prompt=batch["prompt"],
            consultations=[ConsultationOut.of(c) for c in batch["consultations"]],
        )


class WorkspaceFileOut(Schema):
    path: str
    size: int
    agent: str | None  # who wrote it last
    turn: int | None  # in which of its turns
    writes: int
    updated_at: datetime

    @classmethod
    def of(cls, row) -> WorkspaceFileOut:
        return cls(
            path=row.path,
            size=row.size,
            agent=row.agent.name if row.agent_id else None,
            turn=row.turn.number if row.turn_id else None,
            writes=row.writes,
            updated_at=row.updated_at,
        )


class AnchorOut(Schema):
    key: str
    value: str
    source: str  # who pinned it, in words ("the PM", "coder in planning")
    updated_at: datetime

    @classmethod
    def of(cls, anchor) -> AnchorOut:
        return cls(
            key=anchor.key,
            value=anchor.value,
            source=anchor.source_text(),
            updated_at=anchor.updated_at,
        )


class KeeperOut(Schema):
    id: int
    agent: str | None
    topic: str
    messages: int
    created_at: datetime

    @classmethod
    def of(cls, keeper, messages: int) -> KeeperOut:
        return cls(
            id=keeper.id,
            agent=keeper.agent.name if keeper.agent_id else None,
            topic=keeper.topic,
            messages=messages,
            created_at=keeper.created_at,
        )
