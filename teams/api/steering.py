"""The PM steers a running team: who speaks next, a private nudge to one agent, a
turn written in an agent's seat (teams.run.steering). Each answers with the team; a
state that forbids it (a done team) is a 409 with the reason."""

from ninja import Router

from teams import selectors
from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.steering import NextSpeakerIn, SteerTextIn
from teams.api.schemas.teams import TeamOut
from teams.errors import InvalidInput, NotFound
from teams.run import steering

router = Router(tags=["steering"])


@router.post(
    "/teams/{team}/next-speaker",
    response=responses({200: TeamOut}, 400, 404, 409),
    operation_id="teams_next_speaker",
)
def teams_next_speaker(request, team: str, payload: NextSpeakerIn):
    """The PM chooses who speaks next, once; the rotation resumes after that agent. A
    turn queued for another agent and not begun gives way; one under way ends first.
    An unknown or external agent is a 422."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("choose the next speaker")
    try:
        agent = selectors.agent_get(team=row, name=payload.agent)
    except NotFound as exc:
        raise InvalidInput(exc.message, field="agent") from None
    steering.team_next_speaker_set(team=row, agent=agent, user=who.user)
    row.refresh_from_db()
    return TeamOut.of(row)


@router.post(
    "/teams/{team}/agents/{agent}/nudge",
    response=responses({200: TeamOut}, 400, 404, 409),
    operation_id="agents_nudge",
)
def agents_nudge(request, team: str, agent: str, payload: SteerTextIn):
    """A private note from the PM to one agent: its next turn's cue shows it, once; no
    other agent reads it. The PM's pages and the admin list it as a nudge."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("nudge an agent")
    target = selectors.agent_get(team=row, name=agent)
    steering.agent_nudge(agent=target, text=payload.text, user=who.user)
    row.refresh_from_db()
    return TeamOut.of(row)


@router.post(
    "/teams/{team}/agents/{agent}/seat",
    response=responses({200: TeamOut}, 400, 404, 409),
    operation_id="agents_seat",
)
def agents_seat(request, team: str, agent: str, payload: SteerTextIn):
    """The PM writes one turn as the agent: a turn of the agent's, marked as written
    by the PM; the rotation goes on after it. While the agent is speaking, a 409."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("take an agent's seat")
    target = selectors.agent_get(team=row, name=agent)
    steering.agent_seat_take(agent=target, text=payload.text, user=who.user)
    row.refresh_from_db()
    return TeamOut.of(row)
