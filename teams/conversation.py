"""The team conversation: starting, pausing, resuming, the round-robin rotation,
PM requests and phases. Services: keyword-only, atomic, LoomError on failure."""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from teams import events
from teams.errors import Conflict, InvalidInput, NotFound
from teams.models import Agent, Message, PMRequest, Team, Turn
from teams.services import message_add, pm_request_open, text_check

log = logging.getLogger("loom.conversation")

ACTIVE_TURN = (Turn.Status.QUEUED, Turn.Status.RUNNING)


def message_payload(message: Message) -> dict:
    return {
        "id": message.id,
        "kind": message.kind,
        "speaker": message.speaker,
        "recipient": message.recipient.name if message.recipient_id else None,
        "phase": message.phase,
        "content": message.content,
        "created_at": message.created_at.isoformat(),
    }


def post(team: Team, content: str, **kwargs) -> Message:
    """Add a message and tell live viewers about it once it is committed."""
    message = message_add(team=team, content=content, **kwargs)
    events.publish(team.id, "message.created", message=message_payload(message))
    return message


def turn_finished_payload(turn: Turn, team: Team) -> dict:
    return {
        "turn": {
            "id": turn.id,
            "agent": turn.agent.name,
            "number": turn.number,
            "status": turn.status,
            "outcome": turn.outcome,
            "cost_usd": str(turn.cost_usd),
            "error": turn.error,
        },
        "team": team_status_payload(team),
    }


# Which of team_start / team_pause / team_resume each status accepts; the pages
# offer only these buttons (tests hold this table to the services' own checks).
ACTIONS_BY_STATUS = {
    Team.Status.IDLE: ("start", "resume"),
    Team.Status.RUNNING: ("pause",),
    Team.Status.AWAITING_PM: ("pause",),
    Team.Status.PAUSED: ("start", "resume"),
    Team.Status.DONE: (),
}


def team_status_payload(team: Team) -> dict:
    return {
        "actions": list(ACTIONS_BY_STATUS.get(team.status, ())),
        "status": team.status,
        "status_label": team.get_status_display(),
        "phase": team.phase,
        "turn_count": team.turn_count,
        "spent_usd": f"{team.spent_usd:.4f}",
    }


def set_status(team: Team, status: str) -> None:
    team.status = status
    team.save(update_fields=["status", "updated_at"])
    events.publish(team.id, "team.status", **team_status_payload(team))


def _lock(team: Team) -> Team:
    return Team.objects.select_for_update().get(pk=team.pk)


def rotation(team: Team) -> list[Agent]:
    """Speakers in order: every agent but the external ones, coach included."""
    return list(team.agents.exclude(role=Agent.Role.EXTERNAL).order_by("position", "id"))


def next_speaker(team: Team, after: Agent | None = None) -> Agent | None:
    """The agent after `after` (default: the last conversation speaker) in the rotation."""
    speakers = rotation(team)
    if not speakers:
        return None
    if after is not None:
        last = after.id
    else:
        last = (
            Turn.objects.filter(team=team, purpose=Turn.Purpose.CONVERSATION)
            .exclude(status=Turn.Status.CANCELLED)
            .order_by("-id")
            .values_list("agent_id", flat=True)
            .first()
        )
    ids = [a.id for a in speakers]
    if last not in ids:
        return speakers[0]
    return speakers[(ids.index(last) + 1) % len(speakers)]


def budget_exhausted(team: Team) -> str:
    """Why the team may not take another turn, or "" when it may."""
    if team.turn_count >= team.max_turns:
        return f"Turn budget reached ({team.turn_count} of {team.max_turns} turns)."
    if team.spent_usd >= team.max_cost_usd:
        return f"Cost budget reached (${team.spent_usd:.4f} of ${team.max_cost_usd:.4f})."
    return ""


def _enqueue_next(team: Team, after: Agent | None = None) -> Turn | None:
    """Queue the next speaker's turn if the team is running and has budget."""
    if team.status != Team.Status.RUNNING:
        return None
    reason = budget_exhausted(team)
    if reason:
        post(
            team,
            f"{reason} The team is paused; raise the budget and resume.",
            kind="system",
            author_label="system",
        )
        set_status(team, Team.Status.PAUSED)
        return None
    agent = next_speaker(team, after)
    if agent is None:
        post(
            team,
            "The team has no agents to speak; add some and resume.",
            kind="system",
            author_label="system",
        )
        set_status(team, Team.Status.PAUSED)
        return None
    # One conversation turn at a time, and the speaker may be busy with an inbox
    # turn (whose finish hands the floor on again).
    busy = Q(team=team, purpose=Turn.Purpose.CONVERSATION) | Q(agent=agent)
    if Turn.objects.filter(busy, status__in=ACTIVE_TURN).exists():
        return None
    return turn_enqueue(team=team, agent=agent, number=team.turn_count + 1)


def turn_enqueue(*, team: Team, agent: Agent, number: int, purpose=Turn.Purpose.CONVERSATION):
    """Queue a turn and wake a worker for it once the transaction commits."""
    turn = Turn.objects.create(
        team=team,
        agent=agent,
        purpose=purpose,
        phase=team.phase,
        number=number,
        model=agent.effective_model,
    )
    events.wake_worker(turn.id)
    return turn


@transaction.atomic
def team_start(*, team: Team) -> Team:
    team = _lock(team)
    if team.status == Team.Status.RUNNING:
        raise Conflict(f"Team {team.slug!r} is already running.")
    if team.status == Team.Status.AWAITING_PM:
        raise Conflict(f"Team {team.slug!r} is waiting for the PM: answer its request first.")
    if team.status == Team.Status.DONE:
        raise Conflict(f"Team {team.slug!r} is done.")
    set_status(team, Team.Status.RUNNING)
    _enqueue_next(team)
    return team


@transaction.atomic
def team_pause(*, team: Team) -> Team:
    team = _lock(team)
    if team.status not in (Team.Status.RUNNING, Team.Status.AWAITING_PM):
        raise Conflict(f"Team {team.slug!r} is {team.get_status_display().lower()}, not running.")
    # A queued turn is withdrawn; a running one finishes and is not followed.
    Turn.objects.filter(team=team, status=Turn.Status.QUEUED).update(
        status=Turn.Status.CANCELLED, finished_at=timezone.now()
    )
    set_status(team, Team.Status.PAUSED)
    return team


@transaction.atomic
def team_resume(*, team: Team) -> Team:
    team = _lock(team)
    if team.status == Team.Status.AWAITING_PM:
        raise Conflict(f"Team {team.slug!r} is waiting for the PM: answer its request to resume.")
    if team.status not in (Team.Status.PAUSED, Team.Status.IDLE):
        raise Conflict(f"Team {team.slug!r} is {team.get_status_display().lower()}, not paused.")
    set_status(team, Team.Status.RUNNING)
    _enqueue_next(team)
    return team


@transaction.atomic
def pm_message_post(*, team: Team, content: str, user=None) -> Message:
    """The PM speaks in the team conversation; the next speaker sees it."""
    if not content or not content.strip():
        raise InvalidInput("The message is empty.", field="content")
    label = "pm" if user is None else f"pm ({user.get_username()})"
    return post(team, content.strip(), kind=Message.Kind.PM, author_label=label)


@transaction.atomic
def pm_request_ask(*, team: Team, agent: Agent, question: str, turn: Turn | None) -> PMRequest:
    team = _lock(team)
    request = pm_request_open(team=team, question=question, agent=agent, turn=turn)
    if team.status == Team.Status.RUNNING:
        set_status(team, Team.Status.AWAITING_PM)
    events.publish(team.id, "pm_request.opened", request=pm_request_payload(request))
    events.publish_inbox("pm_request.opened", request=pm_request_payload(request))
    return request


def pm_request_payload(request: PMRequest) -> dict:
    return {
        "id": request.id,
        "team": request.team.slug,
        "team_name": request.team.name,
        "team_id": request.team_id,
        "agent": request.agent.name if request.agent_id else None,
        "question": request.question,
        "status": request.status,
        "answer": request.answer,
        "created_at": request.created_at.isoformat(),
    }


@transaction.atomic
def pm_request_answer(*, request_id: int, answer: str, user=None) -> PMRequest:
    """Answer an open request: the answer joins the conversation and the team resumes.

    The conditional update makes a second answer (another tab, another PM) fail
    cleanly instead of posting twice."""
    if not answer or not answer.strip():
        raise InvalidInput("The answer is empty.", field="answer")
    text_check(answer, field="answer")
    request = PMRequest.objects.select_related("team").filter(pk=request_id).first()
    if request is None:
        raise NotFound(f"No PM request {request_id}.")
    claimed = PMRequest.objects.filter(pk=request_id, status=PMRequest.Status.OPEN).update(
        status=PMRequest.Status.ANSWERED,
        answer=answer.strip(),
        answered_by=user if user is not None and user.is_authenticated else None,
        answered_at=timezone.now(),
    )
    if not claimed:
        request.refresh_from_db()
        raise Conflict(f"This PM request was already {request.status}.")
    request.refresh_from_db()
    team = _lock(request.team)
    pm_message_post(team=team, content=answer, user=user)
    events.publish(team.id, "pm_request.answered", request=pm_request_payload(request))
    events.publish_inbox("pm_request.answered", request=pm_request_payload(request))
    if team.status == Team.Status.AWAITING_PM:
        set_status(team, Team.Status.RUNNING)
        _enqueue_next(team)
    return request


@transaction.atomic
def phase_complete(*, team: Team, agent: Agent, summary: str) -> Team:
    """Record the coach's summary (what later phases see) and advance the phase."""
    team = _lock(team)
    finished = team.phase
    post(
        team,
        f"[Phase {finished} complete] {summary.strip()}",
        kind=Message.Kind.PHASE_SUMMARY,
        author=agent,
    )
    if team.phase_index + 1 >= len(team.phases):
        post(
            team, f"All phases are complete after {finished}.", kind="system", author_label="system"
        )
        set_status(team, Team.Status.DONE)
        return team
    team.phase_index = F("phase_index") + 1
    team.save(update_fields=["phase_index", "updated_at"])
    team.refresh_from_db()
    post(team, f"Phase advanced to {team.phase}.", kind="system", author_label="system")
    events.publish(team.id, "team.status", **team_status_payload(team))
    return team


@transaction.atomic(savepoint=False)  # nested in the turn's finish: all or nothing
def turn_finished(*, turn: Turn) -> None:
    """Count the turn and hand the floor to the next speaker."""
    counted = {"turns": F("turns") + 1}
    if turn.drift_score is not None:
        counted["drift_score"] = turn.drift_score
    Agent.objects.filter(pk=turn.agent_id).update(**counted)
    if turn.purpose == Turn.Purpose.CONVERSATION:
        Team.objects.filter(pk=turn.team_id).update(turn_count=F("turn_count") + 1)
    team = _lock(turn.team)
    events.publish(team.id, "turn.finished", **turn_finished_payload(turn, team))
    # After an inbox turn the conversation may have been waiting for this agent.
    _enqueue_next(team, after=turn.agent if turn.purpose == Turn.Purpose.CONVERSATION else None)


def teams_restart_stalled() -> int:
    """Running teams with no conversation turn queued or running get their next one.

    Nothing should leave a team so, but the sweeper checks: a team must never wait
    for a turn nobody will run."""
    active = Turn.objects.filter(
        team=OuterRef("pk"), purpose=Turn.Purpose.CONVERSATION, status__in=ACTIVE_TURN
    )
    restarted = 0
    for team in Team.objects.filter(status=Team.Status.RUNNING).exclude(Exists(active)):
        with transaction.atomic():
            if _enqueue_next(_lock(team)) is not None:
                restarted += 1
    return restarted
