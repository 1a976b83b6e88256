"""The conversation: messages, the PM's requests and answers, and the turns."""

from typing import Literal

from ninja import Query, Router, Status

from teams import selectors
from teams.api.auth import caller
from teams.api.paging import MAX_ID, Limit, page_of, within_chars
from teams.api.schemas.common import responses
from teams.api.schemas.messages import AnswerIn, MessageIn, MessageKindFilter, MessagePage, TurnPage
from teams.conversation import pm_requests
from teams.errors import NotFound
from teams.live.event_payloads import MessageOut, PMRequestOut, TurnOut
from teams.models import PMRequest, Turn, TurnStatus

router = Router(tags=["conversation"])

After = Query(0, ge=0, le=MAX_ID, description="Return what comes after this id (a cursor).")


@router.get(
    "/teams/{team}/messages",
    response=responses({200: MessagePage}, 404),
    operation_id="messages_list",
)
def messages_list(
    request,
    team: str,
    after: int = After,
    limit: int = Limit,
    kind: MessageKindFilter | None = Query(None, description="Only messages of this kind."),
    agent: str | None = Query(None, max_length=40, description="Only messages by this agent."),
):
    """The team conversation, oldest first (inboxes are in each agent's context)."""
    row = caller(request).team(team)
    messages = selectors.team_conversation(team=row).filter(id__gt=after)
    if kind is not None:
        messages = messages.filter(kind=kind)
    if agent is not None:
        messages = messages.filter(author=selectors.agent_get(team=row, name=agent))
    page, has_more = page_of(messages.select_related("recipient"), limit)
    page, has_more = within_chars(page, has_more, size=lambda m: len(m.content))
    return MessagePage(
        messages=[MessageOut.of(m) for m in page],
        next_after=page[-1].id if page else after,
        has_more=has_more,
    )


@router.post(
    "/teams/{team}/messages",
    response=responses({201: MessageOut}, 400, 404, 409),
    operation_id="messages_post",
)
def messages_post(request, team: str, payload: MessageIn):
    """Post as the PM: the next speaker sees it."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("post as the PM")
    message = pm_requests.pm_message_post(team=row, content=payload.content, user=who.user)
    return Status(201, MessageOut.of(message))


@router.get(
    "/teams/{team}/pm-requests",
    response=responses({200: list[PMRequestOut]}, 404),
    operation_id="pm_requests_list",
)
def pm_requests_list(
    request,
    team: str,
    status: Literal["open", "answered", "cancelled"] | None = None,
    limit: int = Limit,
):
    """The team's requests for the PM, newest first."""
    row = caller(request).team(team)
    requests = PMRequest.objects.filter(team=row).select_related("team", "agent")
    if status is not None:
        requests = requests.filter(status=status)
    return [PMRequestOut.of(r) for r in requests.order_by("-id")[:limit]]


@router.post(
    "/teams/{team}/pm-requests/{request_id}/answer",
    response=responses({200: PMRequestOut}, 400, 404, 409),
    operation_id="pm_requests_answer",
)
def pm_requests_answer(request, team: str, request_id: int, payload: AnswerIn):
    """Answer an open request: the answer joins the conversation and the team
    resumes. An answered request is a 409. An approval request is answered "Approve",
    "Always approve" or "Deny", with an optional `note` and, to approve, optional edited
    `arguments`; a bad combination is a 422."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("answer the PM's requests")
    if not (0 < request_id <= MAX_ID) or not row.pm_requests.filter(pk=request_id).exists():
        raise NotFound(f"Team {row.slug!r} has no PM request {request_id}.")
    answered = pm_requests.pm_request_answer(
        request_id=request_id,
        answer=payload.answer,
        user=who.user,
        pin_as=payload.pin_as or "",
        changed_by=who.label,
        note=payload.note or "",
        arguments=payload.arguments,
    )
    return PMRequestOut.of(answered)


@router.get(
    "/teams/{team}/turns", response=responses({200: TurnPage}, 404), operation_id="turns_list"
)
def turns_list(
    request,
    team: str,
    after: int = After,
    limit: int = Limit,
    status: TurnStatus | None = None,
    agent: str | None = Query(None, max_length=40),
):
    """Turns, oldest first: status, outcome, tokens, cost and duration."""
    row = caller(request).team(team)
    turns = Turn.objects.filter(team=row, id__gt=after).select_related("agent").order_by("id")
    if status is not None:
        turns = turns.filter(status=status)
    if agent is not None:
        turns = turns.filter(agent=selectors.agent_get(team=row, name=agent))
    page, has_more = page_of(turns, limit)
    return TurnPage(
        turns=[TurnOut.of(t) for t in page],
        next_after=page[-1].id if page else after,
        has_more=has_more,
    )
