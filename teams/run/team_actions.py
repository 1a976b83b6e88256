"""A team's run as people drive it: start, pause, resume, and the phases.

Each status change goes through the state table (teams.run.lifecycle); a change the
table refuses is a Conflict that says why."""

from __future__ import annotations

from typing import NamedTuple

from django.db import transaction
from django.db.models import F

from teams import services
from teams.conversation import hierarchy, keepers
from teams.errors import Conflict
from teams.integrations import webhooks
from teams.models import (
    Agent,
    Anchor,
    FileRevision,
    Message,
    Team,
    Turn,
    WebhookEvent,
    WorkspaceFile,
)
from teams.run import locks, turns
from teams.run.lifecycle import TeamAction, refusal


def _transition(team: Team, action: TeamAction) -> Team:
    team = locks.team_lock(team)
    if not services.team_transition(team=team, action=action):
        raise Conflict(f"Team {team.slug!r} {refusal(team.status, action)}")
    return team


def _speakers_check(team: Team, action: TeamAction) -> None:
    """A team with nobody to speak is not started (it would stop at once)."""
    if not team.agents.exists():
        raise Conflict(
            f"Team {team.slug!r} has no agents: add some, then {action.label.lower()} it."
        )


@transaction.atomic
def team_start(*, team: Team) -> Team:
    _speakers_check(team, TeamAction.START)
    team = _transition(team, TeamAction.START)
    turns.enqueue_next(team)
    return team


@transaction.atomic
def team_resume(*, team: Team) -> Team:
    _speakers_check(team, TeamAction.RESUME)
    team = _transition(team, TeamAction.RESUME)
    turns.enqueue_next(team)
    return team


@transaction.atomic
def team_pause(*, team: Team) -> Team:
    team = _transition(team, TeamAction.PAUSE)
    # A queued turn is withdrawn; a running one finishes and is not followed.
    turns.turns_withdraw(team=team)
    return team


# What each person-facing action calls, by the lifecycle's action name.
PM_ACTION_SERVICES = {
    TeamAction.START: team_start,
    TeamAction.PAUSE: team_pause,
    TeamAction.RESUME: team_resume,
}
PAST_TENSE = {TeamAction.START: "started", TeamAction.PAUSE: "paused", TeamAction.RESUME: "resumed"}
# The status each action leads to when nothing stops the team at once.
EXPECTED = {
    TeamAction.START: Team.Status.RUNNING,
    TeamAction.PAUSE: Team.Status.PAUSED,
    TeamAction.RESUME: Team.Status.RUNNING,
}


class ActionReport(NamedTuple):
    text: str
    stopped: bool  # the team did not stay in the status the action leads to


def team_pm_action(*, team: Team, action: TeamAction) -> ActionReport:
    """Run a person's action and say truthfully what it did: "Team 'x' started.", or,
    when the team stopped at once (its budget was spent), that and why."""
    team = PM_ACTION_SERVICES[action](team=team)
    done = f"Team {team.slug!r} {PAST_TENSE[action]}"
    if team.status == EXPECTED[action]:
        return ActionReport(f"{done}.", stopped=False)
    why = Message.objects.filter(team=team, kind=Message.Kind.SYSTEM).order_by("-id").first()
    because = f": {why.content}" if why else "."
    return ActionReport(
        f"{done}, but it is {team.get_status_display().lower()} now{because}", stopped=True
    )


RECORD_ITEM_CHARS = 1200  # a PM message quoted whole in a phase's record; longer: a pointer


def phase_record(team: Team) -> list[str]:
    """What Loom adds to the coach's summary of the phase ending now, since later
    phases see only the summary: the PM's words not pinned as an anchor, and the files
    written in it. Anchors are not repeated here: every request shows them, as they
    stand, with who pinned them and in which phase (system_text.anchors_block)."""

    def flat(text: str) -> str:
        return " ".join(text.split())

    def quoted(message: Message) -> str:
        """The PM whole, or a pointer: a quote cut mid-sentence reads as what was said."""
        text = flat(message.content)
        if len(text) <= RECORD_ITEM_CHARS:
            return f'The PM said: "{text}"'
        return (
            f"The PM wrote message #{message.id} ({len(text):,} characters, too long to "
            f'quote here): it is filed whole in the keeper "{keepers.phase_topic(phase)}".'
        )

    phase = team.phase
    said = Message.objects.filter(team=team, phase=phase, kind=Message.Kind.PM).order_by("id")
    pinned = [
        flat(value) for value in Anchor.objects.filter(team=team).values_list("value", flat=True)
    ]
    written = (
        WorkspaceFile.objects.filter(team=team, turn__phase=phase)
        .select_related("agent")
        .order_by("path")
    )
    lines = [quoted(m) for m in said if not any(flat(m.content) in value for value in pinned)]
    if written:
        writers = _writers(team, phase, [f.path for f in written])
        last = {f.path: f.agent.name if f.agent else "?" for f in written}
        files = [
            f"{f.path} ({f.size:,} bytes, by {writers.get(f.path) or last[f.path]})"
            for f in written
        ]
        lines.append("Files written: " + ", ".join(files))
    return lines


def _writers(team: Team, phase: str, paths: list[str]) -> dict[str, str]:
    """Who wrote each file in the phase, in the order they first did ("coder, then
    reviewer"): the last writer alone credited another's work to the reviewer who
    fixed one line of it."""
    names: dict[str, list[str]] = {}
    revisions = (
        FileRevision.objects.filter(team=team, turn__phase=phase, path__in=paths)
        .order_by("id")
        .values_list("path", "agent__name")
    )
    for path, name in revisions:
        seen = names.setdefault(path, [])
        if name and name not in seen:
            seen.append(name)
    return {path: ", then ".join(who) for path, who in names.items() if who}


@transaction.atomic
def phase_complete(
    *, team: Team, agent: Agent, summary: str, words: str = "", turn: Turn | None = None
) -> Team:
    """Record the coach's summary (what later phases see) and advance the phase;
    `words`, what the coach said closing it in `turn`, come first, in that phase (the
    turn's end posts no message of a turn that closed a phase: teams.run.turns)."""
    team = locks.team_lock(team)
    if team.status == Team.Status.DONE:  # no second summary, no second team.done webhook
        raise Conflict(f"Team {team.slug!r} is finished: every phase is complete.")
    finished = team.phase
    if words.strip():
        services.message_add(
            team=team, content=words.strip(), author=agent, turn=turn, phase=finished
        )
    record = "\n".join([f"[Phase {finished} complete] {summary.strip()}", *phase_record(team)])
    services.message_add(team=team, content=record, kind=Message.Kind.PHASE_SUMMARY, author=agent)
    hierarchy.team_plan_add_summary(team=team, phase=finished, summary=summary)
    keepers.phase_file(team=team, phase=finished)  # what the summary refers to, searchable
    if team.phase_index + 1 >= len(team.phases):
        services.system_note(team, f"All phases are complete after {finished}.")
        services.team_transition(team=team, action=TeamAction.FINISH)
        webhooks.webhooks_notify(
            team=team,
            event=WebhookEvent.TEAM_DONE,
            payload={
                "phase": finished,
                "summary": summary.strip(),
                "turn_count": team.turn_count,
                "spent_usd": f"{team.spent_usd:.4f}",
            },
        )
        return team
    team.phase_index = F("phase_index") + 1
    team.save(update_fields=["phase_index", "updated_at"])
    team.refresh_from_db()
    services.system_note(team, f"Phase advanced to {team.phase}.")
    services.team_status_publish(team)
    return team
