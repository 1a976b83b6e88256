"""PM requests: the coach's ask_pm waits for the human, whose answer resumes the team."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from teams import services
from teams.conversation import approvals
from teams.errors import Conflict, InvalidInput, NotFound, integrity_as
from teams.integrations import webhooks
from teams.live import events
from teams.live.event_payloads import PMRequestOut
from teams.models import Agent, Anchor, Message, PMRequest, Team, Turn, WebhookEvent
from teams.run import budgets, locks, stuck, team_actions, turns
from teams.run.lifecycle import TeamAction


@transaction.atomic
def pm_request_open(
    *, team: Team, question: str, agent: Agent | None = None, turn: Turn | None = None
) -> PMRequest:
    """Record the question; the team waits for the PM if it was running."""
    if not question or not question.strip():
        raise InvalidInput("A PM request needs a question.", field="question")
    services.text_check(question, field="question")
    team = locks.team_lock(team)
    already = Conflict(f"Team {team.slug!r} already has an open PM request.")
    if PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).exists():
        raise already
    with integrity_as(already):
        request = PMRequest.objects.create(team=team, question=question, agent=agent, turn=turn)
    services.team_transition(team=team, action=TeamAction.AWAIT_PM)
    events.publish(events.PMRequestOpened(request=PMRequestOut.of(request)), team_id=team.id)
    webhooks.webhooks_notify(
        team=team,
        event=WebhookEvent.PM_REQUEST_OPENED,
        payload=PMRequestOut.of(request).model_dump(mode="json"),
    )
    return request


@transaction.atomic
def pm_message_post(*, team: Team, content: str, user=None) -> Message:
    """The PM speaks in the team conversation; the next speaker sees it. A done team
    refuses (nobody would read it), saying how to run it again."""
    services.team_done_check(team)
    if not content or not content.strip():
        raise InvalidInput("The message is empty.", field="content")
    services.human_text_check(content, field="message")
    label = "pm" if user is None else f"pm ({user.get_username()})"
    return services.message_add(
        team=team, content=content.strip(), kind=Message.Kind.PM, author_label=label
    )


@transaction.atomic
def pm_request_answer(
    *,
    request_id: int,
    answer: str,
    user=None,
    pin_as: str = "",
    changed_by: str = "",
    note: str = "",
    arguments: dict | None = None,
) -> PMRequest:
    """Answer an open request: the answer joins the conversation and the team resumes.
    With `pin_as`, the answer is also pinned as the anchor of that key, so the
    decision is in every later prompt and survives offload.

    The conditional update makes a second answer (another tab, another PM) fail
    cleanly instead of posting twice."""
    if not answer or not answer.strip():
        raise InvalidInput("The answer is empty.", field="answer")
    services.human_text_check(answer, field="answer")
    approval = PMRequest.objects.filter(pk=request_id, kind=PMRequest.Kind.APPROVAL).first()
    if approval is not None:
        return approvals.approval_answer(
            approval, answer=answer, note=note, arguments=arguments, user=user, pin_as=pin_as
        )
    if note or arguments is not None:
        raise InvalidInput(
            "A note and edited arguments answer an approval request only.",
            field="arguments" if arguments is not None else "note",
        )
    budget_request = PMRequest.objects.filter(pk=request_id, kind=PMRequest.Kind.BUDGET).first()
    if budget_request is not None:
        return _budget_answer(budget_request, answer, user=user, changed_by=changed_by)
    stuck_request = PMRequest.objects.filter(pk=request_id, kind=PMRequest.Kind.STUCK).first()
    if stuck_request is not None:
        return _stuck_answer(stuck_request, answer, user=user, changed_by=changed_by)
    pin_as = (pin_as or "").strip()
    if pin_as:  # checked before anything is written: a bad key changes nothing
        services.anchor_check(key=pin_as, value=answer.strip(), field="pin_as")
    request = PMRequest.objects.select_related("team").filter(pk=request_id).first()
    if request is None:
        raise NotFound(f"No PM request {request_id}.")
    _claim(request, answer, user)
    team = locks.team_lock(request.team)
    pm_message_post(team=team, content=answer, user=user)
    if pin_as:
        label = changed_by or ("pm" if user is None else f"pm ({user.get_username()})")
        services.anchor_save(
            team=team,
            key=pin_as,
            value=answer.strip(),
            changed_by=label,
            source=Anchor.Source.PM_ANSWER,
            phase=team.phase,
        )
    events.publish(events.PMRequestAnswered(request=PMRequestOut.of(request)), team_id=team.id)
    if services.team_transition(team=team, action=TeamAction.PM_ANSWERED):
        turns.enqueue_next(team)
    return request


def _claim(request: PMRequest, answer: str, user) -> None:
    """Mark the open request answered, once: a second answer (another tab, another PM)
    is a Conflict and changes nothing."""
    claimed = PMRequest.objects.filter(pk=request.pk, status=PMRequest.Status.OPEN).update(
        status=PMRequest.Status.ANSWERED,
        answer=answer.strip(),
        answered_by=user if user is not None and user.is_authenticated else None,
        answered_at=timezone.now(),
    )
    request.refresh_from_db()
    if not claimed:
        raise Conflict(f"This PM request was already {request.status}.")


def _budget_answer(request: PMRequest, answer: str, *, user, changed_by: str) -> PMRequest:
    """A budget request's answer sets a new cap (and the team resumes) or stops (the
    team stays paused); either way the conversation says who decided. A bad answer
    changes nothing."""
    decision = budgets.budget_decision(request=request, answer=answer)
    _claim(request, answer, user)
    team = locks.team_lock(request.team)
    who = changed_by or ("pm" if user is None else f"pm ({user.get_username()})")
    budgets.budget_apply(team=team, decision=decision, who=who)
    events.publish(events.PMRequestAnswered(request=PMRequestOut.of(request)), team_id=team.id)
    if decision.new_cap is not None and services.team_transition(
        team=team, action=TeamAction.RESUME
    ):
        turns.enqueue_next(team)
    return request


def _stuck_answer(request: PMRequest, answer: str, *, user, changed_by: str) -> PMRequest:
    """A stuck request's answer does what it says (teams.run.stuck): close the phase, let
    the team go on, or pause it. Another answer changes nothing."""
    choice = stuck.stuck_choice(answer)
    _claim(request, choice, user)
    who = changed_by or ("pm" if user is None else f"pm ({user.get_username()})")
    team = _stuck_apply(request=request, choice=choice, who=who)
    events.publish(events.PMRequestAnswered(request=PMRequestOut.of(request)), team_id=team.id)
    return request


def _go_on(team: Team) -> None:
    """The team runs again: from waiting for the PM, or from a pause the PM made."""
    action = TeamAction.PM_ANSWERED if team.status == Team.Status.AWAITING_PM else TeamAction.RESUME
    if services.team_transition(team=team, action=action):
        turns.enqueue_next(team)


def _stuck_apply(*, request: PMRequest, choice: str, who: str) -> Team:
    """Do what the chosen answer says, on the locked team (the request is claimed)."""
    team = locks.team_lock(request.team)
    services.system_note(team, f"{who} answered the stuck request: {choice}.")
    if choice == stuck.CLOSE_CHOICE:
        coach = team.agents.filter(role=Agent.Role.COACH).order_by("position", "id").first()
        reason = request.question.partition(": ")[2].rpartition(". Close the phase")[0]
        team = team_actions.phase_complete(
            team=team,
            agent=coach,
            summary=f"The PM closed the phase (the team was stuck: {reason}).",
        )
        if team.status != Team.Status.DONE:
            _go_on(team)
    elif choice == stuck.GO_ON_CHOICE:
        _go_on(team)
    elif services.team_transition(team=team, action=TeamAction.PAUSE):
        turns.turns_withdraw(team=team)
    return team
