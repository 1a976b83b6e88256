"""Agents: the roster, each agent's drift, and what a program driving an external
agent needs (its context, and posting as it)."""

from ninja import Query, Router, Status

from teams import selectors, services
from teams.access import Caller
from teams.api.auth import caller
from teams.api.paging import MAX_ID, Limit, page_of, within_chars
from teams.api.schemas.agents import (
    AgentIn,
    AgentOut,
    AgentPatch,
    ContextMessageOut,
    ContextOut,
    DriftOut,
    DriftTurnOut,
)
from teams.api.schemas.common import responses
from teams.api.schemas.messages import MessageIn
from teams.conversation import questions
from teams.engine.history_rows import history_queryset
from teams.errors import InvalidInput
from teams.integrations import model_endpoints
from teams.live.event_payloads import MessageOut, QueryOut
from teams.models import Agent, Anchor, Team, Turn
from teams.run.drift import chain_breaks, drift_report, health, recommendation, score

router = Router(tags=["agents"])


def team_and_agent(who: Caller, team: str, agent: str) -> tuple[Team, Agent]:
    row = who.team(team)
    return row, selectors.agent_get(team=row, name=agent)


@router.get(
    "/teams/{team}/agents",
    response=responses({200: list[AgentOut]}, 404),
    operation_id="agents_list",
)
def agents_list(request, team: str):
    return [AgentOut.model_validate(agent) for agent in caller(request).team(team).agents.all()]


def _model_check(model: str | None) -> None:
    """A model id given must be usable now: its endpoint exists, its key is set, it has
    a price (empty: the default model)."""
    problem = model_endpoints.model_id_problem(model) if model else ""
    if problem:
        raise InvalidInput(f"The model cannot be used: {problem}", field="model")


@router.post(
    "/teams/{team}/agents",
    response=responses({201: AgentOut}, 400, 404, 409),
    operation_id="agents_create",
)
def agents_create(request, team: str, payload: AgentIn):
    who = caller(request)
    row = who.team(team)
    who.require_pm("add agents")
    _model_check(payload.model)
    return Status(
        201, AgentOut.model_validate(services.agent_create(team=row, **payload.model_dump()))
    )


@router.get(
    "/teams/{team}/agents/{agent}",
    response=responses({200: AgentOut}, 404),
    operation_id="agents_get",
)
def agents_get(request, team: str, agent: str):
    return AgentOut.model_validate(team_and_agent(caller(request), team, agent)[1])


@router.patch(
    "/teams/{team}/agents/{agent}",
    response=responses({200: AgentOut}, 400, 404, 409),
    operation_id="agents_update",
)
def agents_update(request, team: str, agent: str, payload: AgentPatch):
    """Change an agent's settings; only the fields given change."""
    who = caller(request)
    _, row = team_and_agent(who, team, agent)
    who.require_pm("change agents")
    fields = list(payload.model_dump(exclude_unset=True))
    if "model" in fields:
        _model_check(payload.model)
    for field in fields:
        setattr(row, field, getattr(payload, field))
    services.agent_update(agent=row, fields=fields)
    row.refresh_from_db()
    return AgentOut.model_validate(row)


@router.delete(
    "/teams/{team}/agents/{agent}",
    response=responses({204: None}, 404, 409),
    operation_id="agents_delete",
)
def agents_delete(request, team: str, agent: str):
    """Remove an agent; refused (409) while it is in a turn."""
    who = caller(request)
    _, row = team_and_agent(who, team, agent)
    who.require_pm("remove agents")
    services.agent_delete(agent=row)
    return Status(204, None)


@router.get(
    "/teams/{team}/agents/{agent}/drift",
    response=responses({200: DriftOut}, 404),
    operation_id="agents_drift",
)
def agents_drift(request, team: str, agent: str, limit: int = Limit):
    """The agent's drift score, its hierarchy, check_drift's report and the score
    after each of its latest `limit` turns (oldest first)."""
    _, row = team_and_agent(caller(request), team, agent)
    scored = (
        Turn.objects.filter(agent=row, drift_score__isnull=False)
        .order_by("-id")
        .values_list("number", "drift_score", "finished_at")[:limit]
    )
    value = score(row)
    breaks = chain_breaks(row)
    return DriftOut(
        agent=row.name,
        score=value,
        meaning=health(value),
        trajectory=row.trajectory,
        tactic=row.tactic,
        action=row.action,
        chain_breaks=breaks,
        recommendation=recommendation(value, breaks),
        context_updates=row.context_updates,
        files_touched=list(row.files_touched or []),
        violations=row.violations,
        report=drift_report(row),
        turns=[
            DriftTurnOut(number=n, drift_score=s, finished_at=f) for n, s, f in reversed(scored)
        ],
    )


@router.get(
    "/teams/{team}/agents/{agent}/context",
    response=responses({200: ContextOut}, 404),
    operation_id="agents_context",
)
def agents_context(
    request,
    team: str,
    agent: str,
    after: int = Query(0, ge=0, le=MAX_ID, description="The last message id you have seen."),
    limit: int = Limit,
):
    """What the agent would see on its turn: the phase's conversation, the phase
    summaries and its inbox (queries with their IDs, answers, peer messages), newer
    than `after`; poll with the returned `next_after`."""
    return agent_context(caller(request), team, agent, after=after, limit=limit)


def agent_context(who: Caller, team: str, agent: str, *, after: int, limit: int) -> ContextOut:
    """An agent's context as its caller may read it (the MCP face's read_context too)."""
    row, member = team_and_agent(who, team, agent)
    who.require_agent(member)  # an agent's inbox is its own
    messages, has_more = page_of(history_queryset(member, row).filter(id__gt=after), limit)
    messages, has_more = within_chars(
        questions.delivered(messages), has_more, size=lambda m: len(m.content)
    )
    waiting = selectors.agent_open_queries(agent=member)
    return ContextOut(
        agent=member.name,
        role=member.role,
        team=row.slug,
        goal=row.goal,
        status=row.status,
        phase=row.phase,
        anchors=dict(Anchor.objects.filter(team=row).order_by("key").values_list("key", "value")),
        open_queries=[QueryOut.of(query) for query in waiting],
        messages=[
            ContextMessageOut(
                id=m.id,
                kind=m.kind,
                speaker=m.speaker,
                to_you=m.recipient_id == member.id,
                query=m.query.key if m.query_id else None,
                phase=m.phase,
                content=m.content,
                created_at=m.created_at,
            )
            for m in messages
        ],
        next_after=messages[-1].id if messages else after,
        has_more=has_more,
    )


@router.post(
    "/teams/{team}/agents/{agent}/messages",
    response=responses({201: MessageOut}, 400, 404, 409),
    operation_id="agents_post_message",
)
def agents_post_message(request, team: str, agent: str, payload: MessageIn):
    """An external agent speaks in the team conversation, as itself."""
    who = caller(request)
    _, member = team_and_agent(who, team, agent)
    who.require_agent(member)
    message = services.agent_message_post(agent=member, content=payload.content)
    return Status(201, MessageOut.of(message))
