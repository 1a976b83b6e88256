"""Where a team's money goes: tokens and dollars per agent, phase and tool, and what
passes, offload and caching cut."""

from ninja import Router

from teams import selectors
from teams.api.auth import caller
from teams.api.schemas.common import responses
from teams.api.schemas.spend import SpendOut

router = Router(tags=["spend"])


@router.get(
    "/teams/{team}/spend", response=responses({200: SpendOut}, 404), operation_id="spend_get"
)
def spend_get(request, team: str):
    """Tokens and dollars per agent, per phase and per tool (consultations, smart
    retrieval), and the estimated cut of passes, offload and prompt caching; models
    used without a known price are listed (their calls were counted as free). For the
    PM: an agent's token is refused (403)."""
    who = caller(request)
    row = who.team(team)
    who.require_pm("read the team's spend")
    return selectors.team_spend(team=row)
