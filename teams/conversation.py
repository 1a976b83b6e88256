"""The team conversation as people drive it: start, pause, resume, and the phases.

Each status change goes through the state table (teams.lifecycle); a change the
table refuses is a Conflict that says why."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from teams import mesh, services, turns
from teams.errors import Conflict
from teams.lifecycle import TeamAction, refusal
from teams.models import Agent, Message, Team, Turn


def _transition(team: Team, action: TeamAction) -> Team:
    team = services.team_lock(team)
    if not services.team_transition(team=team, action=action):
        raise Conflict(f"Team {team.slug!r} {refusal(team.status, action)}")
    return team


@transaction.atomic
def team_start(*, team: Team) -> Team:
    team = _transition(team, TeamAction.START)
    turns.enqueue_next(team)
    return team


@transaction.atomic
def team_resume(*, team: Team) -> Team:
    team = _transition(team, TeamAction.RESUME)
    turns.enqueue_next(team)
    return team


@transaction.atomic
def team_pause(*, team: Team) -> Team:
    team = _transition(team, TeamAction.PAUSE)
    # A queued turn is withdrawn; a running one finishes and is not followed.
    Turn.objects.filter(team=team, status=Turn.Status.QUEUED).update(
        status=Turn.Status.CANCELLED, finished_at=timezone.now()
    )
    return team


# What each person-facing action calls, by the lifecycle's action name.
PM_ACTION_SERVICES = {
    TeamAction.START: team_start,
    TeamAction.PAUSE: team_pause,
    TeamAction.RESUME: team_resume,
}


@transaction.atomic
def phase_complete(*, team: Team, agent: Agent, summary: str) -> Team:
    """Record the coach's summary (what later phases see) and advance the phase."""
    team = services.team_lock(team)
    finished = team.phase
    services.message_add(
        team=team,
        content=f"[Phase {finished} complete] {summary.strip()}",
        kind=Message.Kind.PHASE_SUMMARY,
        author=agent,
    )
    mesh.team_plan_add_summary(team=team, phase=finished, summary=summary)
    if team.phase_index + 1 >= len(team.phases):
        services.system_note(team, f"All phases are complete after {finished}.")
        services.team_transition(team=team, action=TeamAction.FINISH)
        return team
    team.phase_index = F("phase_index") + 1
    team.save(update_fields=["phase_index", "updated_at"])
    team.refresh_from_db()
    services.system_note(team, f"Phase advanced to {team.phase}.")
    services.team_status_publish(team)
    return team
