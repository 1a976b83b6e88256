"""The team status table: what the pages offer is exactly what the services accept."""

import pytest

from teams.errors import Conflict
from teams.live.event_payloads import TeamStatusOut
from teams.models import Team
from teams.run import team_actions


@pytest.mark.parametrize("status", Team.Status.values)
@pytest.mark.parametrize("action", ["start", "pause", "resume"])
def test_offered_actions_are_exactly_those_the_services_accept(team, agents, status, action):
    Team.objects.filter(pk=team.pk).update(status=status)
    team.refresh_from_db()
    offered = action in TeamStatusOut.of(team).actions
    try:
        getattr(team_actions, f"team_{action}")(team=team)
    except Conflict:
        accepted = False
    else:
        accepted = True
    assert offered == accepted


@pytest.mark.parametrize(
    "status, offered",
    [
        ("idle", ["start"]),
        ("running", ["pause"]),
        ("awaiting_pm", ["pause"]),
        ("paused", ["resume"]),
        ("done", []),
    ],
)
def test_start_and_resume_are_never_offered_together(team, status, offered):
    Team.objects.filter(pk=team.pk).update(status=status)
    team.refresh_from_db()
    assert TeamStatusOut.of(team).actions == offered


@pytest.mark.parametrize(
    "status, action, reason",
    [
        ("paused", "start", "Team 'alpha' is paused: resume it instead."),
        ("idle", "resume", "Team 'alpha' has not started yet: start it instead."),
        ("awaiting_pm", "resume", "Team 'alpha' is waiting for the PM: answer its request"),
        ("done", "pause", "Team 'alpha' is done, not running."),
    ],
)
def test_a_refused_action_says_why_and_changes_nothing(team, status, action, reason):
    Team.objects.filter(pk=team.pk).update(status=status)
    team.refresh_from_db()
    with pytest.raises(Conflict) as refused:
        getattr(team_actions, f"team_{action}")(team=team)
    assert refused.value.message.startswith(reason)
    team.refresh_from_db()
    assert team.status == status and not team.turn_set.exists()
