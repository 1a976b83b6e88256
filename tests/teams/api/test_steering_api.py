"""The PM steers a run through the API: the next speaker, a nudge, a seat taken.
Each answers 200 with the team, 422 for bad input, 404 for another team's team, and
409 with the reason when the team's state forbids it (a done team)."""

import pytest

from teams.models import Message, Team, Turn
from tests.helpers import drain, state

pytestmark = pytest.mark.django_db

OPERATIONS = [
    ("/teams/alpha/next-speaker", {"agent": "coder"}),
    ("/teams/alpha/agents/coder/nudge", {"text": "Keep it small."}),
    ("/teams/alpha/agents/coder/seat", {"text": "Plan: one file, tests first."}),
]


def test_next_speaker_is_kept_until_that_agent_speaks(api, team):
    response = api.post("/teams/alpha/next-speaker", {"agent": "reviewer"})
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["slug"], body["status"], body["next_speaker"]) == ("alpha", "idle", "reviewer")
    assert api.post("/teams/alpha/start").status_code == 200
    turn = Turn.objects.get(team=team)
    assert turn.agent.name == "reviewer"
    assert api.get("/teams/alpha").json()["next_speaker"] == "reviewer"  # not begun yet
    drain(team, limit=1)
    assert api.get("/teams/alpha").json()["next_speaker"] is None


def test_a_nudge_is_a_private_message_to_its_agent(api, agents):
    response = api.post("/teams/alpha/agents/coder/nudge", {"text": "Keep it small."})
    assert response.status_code == 200, response.content
    assert response.json()["status"] == "idle"
    nudge = Message.objects.get(kind=Message.Kind.NUDGE)
    assert (nudge.recipient, nudge.content) == (agents["coder"], "Keep it small.")
    # Another agent's program does not read it; the coder's does, in its /context.
    assert "Keep it small." not in api.get("/teams/alpha/agents/reviewer/context").content.decode()


def test_a_seat_taken_is_a_turn_of_the_agent_written_by_the_pm(api, team, agents):
    response = api.post("/teams/alpha/agents/coder/seat", {"text": "Plan: one file."})
    assert response.status_code == 200, response.content
    assert response.json()["turn_count"] == 1
    seat = Message.objects.get(kind=Message.Kind.SEAT)
    assert seat.author == seat.turn.agent == agents["coder"]
    assert seat.turn.status == Turn.Status.DONE
    items = api.get("/teams/alpha/messages").json()["messages"]
    assert [(m["kind"], m["speaker"]) for m in items] == [("seat", "coder (written by the PM)")]


@pytest.mark.parametrize(
    ("path", "body", "field"),
    [
        ("/teams/alpha/next-speaker", {"agent": "nobody"}, "agent"),
        ("/teams/alpha/next-speaker", {}, "agent"),
        ("/teams/alpha/next-speaker", {"agent": "coder", "extra": 1}, "extra"),
        ("/teams/alpha/agents/coder/nudge", {"text": ""}, "text"),
        ("/teams/alpha/agents/coder/nudge", {"text": "   "}, "text"),
        ("/teams/alpha/agents/coder/nudge", {"text": "x" * 20_001}, "text"),
        ("/teams/alpha/agents/coder/seat", {"text": "a\x00b"}, "text"),
        ("/teams/alpha/agents/coder/seat", {}, "text"),
    ],
)
def test_bad_input_is_422_and_changes_nothing(api, team, path, body, field):
    before = state()
    response = api.post(path, body)
    assert response.status_code == 422, response.content
    assert any(field in error["loc"] for error in response.json()["detail"]), response.json()
    assert state() == before


def test_an_unknown_agent_in_the_path_is_404(api, team):
    for path in ("/teams/alpha/agents/nobody/nudge", "/teams/alpha/agents/nobody/seat"):
        response = api.post(path, {"text": "Hello."})
        assert response.status_code == 404
        assert response.json() == {"detail": "Team 'alpha' has no agent named 'nobody'."}


@pytest.mark.parametrize(("path", "body"), OPERATIONS)
def test_another_teams_team_is_404(beta_api, team, path, body):
    before = state()
    response = beta_api.post(path, body)
    assert response.status_code == 404
    assert response.json() == {"detail": "No team with slug 'alpha'."}
    assert state() == before


@pytest.mark.parametrize(("path", "body"), OPERATIONS)
def test_a_finished_team_is_409_with_the_reason(api, team, path, body):
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)
    before = state()
    response = api.post(path, body)
    assert response.status_code == 409
    assert response.json()["detail"].startswith("Team 'alpha' is done: ")
    assert "Run it again" in response.json()["detail"]
    assert state() == before


@pytest.mark.parametrize(("path", "body"), OPERATIONS)
def test_an_agents_token_may_not_steer(coder_api, team, path, body):
    response = coder_api.post(path, body)
    assert response.status_code == 403
    assert "acts only as agent 'coder'" in response.json()["detail"]
