"""The PM steers a running team: picks who speaks next, nudges one agent, takes an
agent's seat for a turn; and Loom tells the PM (and the agent) when an agent drifts.

Each steering service checks the team's state table (teams.run.lifecycle: allowed until
the team is done, the status unchanged), says what happened in a live event, and
leaves the rotation to go on:

- the next speaker is kept on the team (Team.next_speaker) until its turn begins
  (teams.run.turns.turn_claim), once: a pause before then keeps the choice; the rotation
  resumes after it (teams.run.turns.enqueue_next reads it);
- a nudge is a private message to one agent (Message kind nudge): the PM's pages and
  the admin show it, no other agent's request has it; the agent's next turn reads it
  whole, in its cue (cue_lines), and its later turns in the phase a short record of it
  (nudge_record) in their history, where that turn began;
- a seat taken is a turn of the agent written by the PM: a done conversation turn
  with the PM's message (kind seat), shown as written by the PM, counted as a turn.

The agent's cue for a turn (cue_lines) also carries a drift alert (teams.run.drift_alerts)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from teams import services
from teams.errors import Conflict, InvalidInput
from teams.live import events
from teams.models import Agent, Message, Team, Turn
from teams.run import drift_alerts, locks, turns
from teams.run.lifecycle import TeamAction, next_status, refusal


def _who(user) -> str:
    return "pm" if user is None else f"pm ({user.get_username()})"


def _allowed(team: Team, action: TeamAction) -> Team:
    """The team's row, locked, when the state table allows `action`; a Conflict that
    says why otherwise (nothing changed)."""
    team = locks.team_lock(team)
    if next_status(team.status, action) is None:
        raise Conflict(f"Team {team.slug!r} {refusal(team.status, action)}")
    return team


def _speaker(team: Team, agent: Agent, doing: str) -> Agent:
    """An agent of the rotation (not external: a program drives that one)."""
    if agent.team_id != team.id:
        raise InvalidInput(f"Agent {agent.name!r} is not in team {team.slug!r}.", field="agent")
    if agent.role == Agent.Role.EXTERNAL:
        raise InvalidInput(
            f"Agent {agent.name!r} is external (its program speaks for it, outside the "
            f"rotation): you cannot {doing} it.",
            field="agent",
        )
    return agent


def _text(text: str, field: str = "text") -> str:
    if not text or not text.strip():
        raise InvalidInput(f"The {field} is empty.", field=field)
    services.human_text_check(text, field=field)
    return text.strip()


def _unclaimed(team: Team, **filters):
    """Conversation turns queued and never claimed (no step, no snapshot yet)."""
    return Turn.objects.filter(
        team=team,
        purpose=Turn.Purpose.CONVERSATION,
        status=Turn.Status.QUEUED,
        attempts=0,
        **filters,
    )


# --- next speaker ----------------------------------------------------------------


@transaction.atomic
def team_next_speaker_set(*, team: Team, agent: Agent, user=None) -> Team:
    """The PM chooses who speaks next, once. A turn queued for someone else and not
    yet begun gives way; a turn under way ends first."""
    team = _allowed(team, TeamAction.NEXT_SPEAKER)
    agent = _speaker(team, agent, "choose")
    team.next_speaker = agent
    team.save(update_fields=["next_speaker", "updated_at"])
    services.system_note(team, f"The PM chose {agent.name} to speak next.")
    events.publish(events.NextSpeakerChosen(agent=agent.name, by=_who(user)), team_id=team.id)
    if team.status == Team.Status.RUNNING:
        turns.turns_withdraw(team=team, queued=_unclaimed(team).exclude(agent=agent))
        turns.enqueue_next(team)
    return team


# --- nudge -----------------------------------------------------------------------


@transaction.atomic
def agent_nudge(*, agent: Agent, text: str, user=None) -> Message:
    """A private note from the PM to one agent: its next turn's cue shows it (and its
    later turns in the phase a record of it)."""
    team = _allowed(agent.team, TeamAction.NUDGE)
    agent = _speaker(team, agent, "nudge")
    text = _text(text)
    message = services.message_add(
        team=team, content=text, kind=Message.Kind.NUDGE, author_label=_who(user), recipient=agent
    )
    events.publish(
        events.AgentNudged(agent=agent.name, by=_who(user), private_to=agent.id), team_id=team.id
    )
    return message


# --- take a seat -----------------------------------------------------------------


@transaction.atomic
def agent_seat_take(*, agent: Agent, text: str, user=None) -> Message:
    """The PM writes one turn as `agent`: a turn of the agent's, shown as the PM's.
    The agent's own turn queued and not begun is replaced by it; one under way must
    end first. The rotation goes on after the agent."""
    team = _allowed(agent.team, TeamAction.SEAT)
    agent = _speaker(team, agent, "take the seat of")
    text = _text(text)
    if Turn.objects.filter(agent=agent, status=Turn.Status.RUNNING).exists():
        raise Conflict(
            f"{agent.name} is speaking now: take its seat when its turn has ended, or pause "
            "the team first."
        )
    turns.turns_withdraw(team=team, queued=_unclaimed(team, agent=agent))
    now = timezone.now()
    turn = Turn.objects.create(
        team=team,
        agent=agent,
        phase=team.phase,
        number=team.turn_count + 1,
        status=Turn.Status.DONE,
        outcome=Turn.Outcome.MESSAGE,
        started_at=now,
        finished_at=now,
    )
    message = services.message_add(
        team=team,
        content=text,
        kind=Message.Kind.SEAT,
        author=agent,
        author_label=_who(user),
        turn=turn,
        phase=team.phase,
    )
    Team.objects.filter(pk=team.pk).update(turn_count=team.turn_count + 1)
    team.refresh_from_db()
    events.publish(
        events.SeatTaken(agent=agent.name, by=_who(user), turn_id=turn.id), team_id=team.id
    )
    services.team_status_publish(team)
    if team.status == Team.Status.RUNNING:
        turns.enqueue_next(team)
    return message


# How a nudge opens in the agent's cue, whole, on the turn it is new to.
NUDGE_CUE = "[Private note from the PM, to you only; act on it now]:"
# How the later turns of the phase remember it, where the turn that read it began: the
# PM's words (shortened), so the agent knows what it was told and does not ask again.
NUDGE_RECORD = "[Private note from the PM, to you only, given for your next turn]:"
NUDGE_RECORD_CHARS = 300


def nudge_record(nudge: Message) -> str:
    """The line of a nudge in the history of the agent's later turns in the phase."""
    text = " ".join(nudge.content.split())
    if len(text) > NUDGE_RECORD_CHARS:
        text = text[: NUDGE_RECORD_CHARS - 1] + "…"
    return f"{NUDGE_RECORD} {text}"


def cue_lines(agent: Agent, nudges: list[Message], until_id: int | None) -> list[str]:
    """What the agent's cue adds for this turn: the PM's nudges new to it (the prompt
    reads them with its inbox, after its previous request's snapshot), a drift alert."""
    lines = [f"{NUDGE_CUE} {nudge.content}" for nudge in nudges]
    alert = drift_alerts.drift_cue(agent, until_id)
    return [*lines, alert] if alert else lines
