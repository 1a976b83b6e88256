"""Out schemas of the domain's rows: the payloads of live events, and (next) the
REST API's responses (django-ninja takes pydantic models as they are). Each is built
from its row by one classmethod. Plain pydantic models rather than ninja.Schema:
they are built from rows explicitly, so ninja's attribute resolver (DjangoGetter,
run on every field of every instance) would only cost time on each turn."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel as Schema

from teams import lifecycle
from teams.models import Message, PMRequest, Query, Team, Turn


class TeamStatusOut(Schema):
    status: str
    status_label: str
    phase: str
    turn_count: int
    spent_usd: str
    actions: list[str]

    @classmethod
    def of(cls, team: Team) -> TeamStatusOut:
        return cls(
            status=team.status,
            status_label=team.get_status_display(),
            phase=team.phase,
            turn_count=team.turn_count,
            spent_usd=f"{team.spent_usd:.4f}",
            actions=lifecycle.pm_actions(team.status),
        )


class MessageOut(Schema):
    id: int
    kind: str
    speaker: str
    recipient: str | None
    phase: str
    content: str
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
            created_at=message.created_at,
        )


class TurnOut(Schema):
    id: int
    agent: str
    number: int
    status: str
    outcome: str
    cost_usd: str
    error: str

    @classmethod
    def of(cls, turn: Turn) -> TurnOut:
        return cls(
            id=turn.id,
            agent=turn.agent.name,
            number=turn.number,
            status=turn.status,
            outcome=turn.outcome,
            cost_usd=str(turn.cost_usd),
            error=turn.error,
        )


class PMRequestOut(Schema):
    id: int
    team: str
    team_name: str
    team_id: int
    agent: str | None
    question: str
    status: str
    answer: str
    created_at: datetime

    @classmethod
    def of(cls, request: PMRequest) -> PMRequestOut:
        return cls(
            id=request.id,
            team=request.team.slug,
            team_name=request.team.name,
            team_id=request.team_id,
            agent=request.agent.name if request.agent_id else None,
            question=request.question,
            status=request.status,
            answer=request.answer,
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
