"""Fork, replay and compare over the API: for a person who manages the team and may
create teams; a missing point (another team's included) is a 404, a taken slug a 409."""

import pytest

from teams.models import Message, Replay, Team
from teams.run import team_actions
from tests.fakes.messages_api import text
from tests.helpers import ApiClient, api_token, client_for, drain, per_agent

pytestmark = pytest.mark.django_db


@pytest.fixture
def pm_api(pm):
    """The PM of alpha, who may create teams (a fork or a replay makes one)."""
    from django.contrib.auth.models import Permission

    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    return ApiClient(api_token(user=pm))


@pytest.fixture
def talked(team, messages_api):
    """Alpha after three turns through the fake Messages API."""
    api = messages_api(
        per_agent(
            {
                "coach": [text("Let us start.")],
                "researcher": [text("I looked around.")],
                "coder": [text("I can build it.")],
                "reviewer": [text("Fine by me.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=3)
    team_actions.team_pause(team=team)
    return api


def test_a_pm_forks_at_a_message_with_edits(pm_api, team, talked):
    point = Message.objects.get(team=team, content="I looked around.")
    response = pm_api.post(
        "/teams/alpha/fork",
        {
            "at_message": point.pk,
            "slug": "alpha-b",
            "goal": "Ship the lexer.",
            "anchors": {"lang": "Rust"},
            "message": "I looked elsewhere.",
        },
    )
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["slug"], body["forked_from"], body["forked_at"], body["status"]) == (
        "alpha-b",
        "alpha",
        "message 2",  # by the number the pages show it with (#2), not its row id
        "idle",
    )
    assert (body["copied_turns"], body["spent_usd"]) == (2, "0.000000")
    fork = Team.objects.get(slug="alpha-b")
    assert fork.goal == "Ship the lexer." and fork.anchors.get().value == "Rust"
    assert fork.messages.order_by("id").last().content == "I looked elsewhere."
    assert team.messages.filter(content="I looked around.").exists()


def test_a_fork_is_refused_clearly(pm_api, team, other_team, talked):
    theirs = Message.objects.create(team=other_team, content="Beta's.")
    missing = pm_api.post("/teams/alpha/fork", {"at_message": 999999, "slug": "alpha-x"})
    assert (missing.status_code, missing.json()) == (
        404,
        {"detail": "Team 'alpha' has no message 999999."},
    )
    # Another team's message is answered as a missing one: no oracle of ids.
    other = pm_api.post("/teams/alpha/fork", {"at_message": theirs.pk, "slug": "alpha-x"})
    assert (other.status_code, other.json()) == (
        404,
        {"detail": f"Team 'alpha' has no message {theirs.pk}."},
    )
    point = Message.objects.filter(team=team).first().pk
    taken = pm_api.post("/teams/alpha/fork", {"at_message": point, "slug": "beta"})
    assert taken.status_code == 409
    assert not Team.objects.filter(slug="alpha-x").exists()


def test_a_replay_over_the_api_matches_and_asks_no_model(pm_api, team, talked):
    calls = len(talked.requests)
    response = pm_api.post("/teams/alpha/replay", {"slug": "alpha-again"})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["status"] == "matched", body
    assert (body["team"], body["turns_replayed"], body["model_steps"]) == ("alpha-again", 3, 3)
    assert len(talked.requests) == calls
    assert Replay.objects.get().team.slug == "alpha-again"
    assert pm_api.post("/teams/beta/replay", {}).status_code == 404


def test_numbers_past_the_database_columns_are_refused_before_any_query(pm_api, team):
    huge = 2**63
    replay = pm_api.post("/teams/alpha/replay", {"until_turn": huge})
    assert replay.status_code == 422 and "until_turn" in str(replay.json())
    fork = pm_api.post("/teams/alpha/fork", {"at_turn": huge, "slug": "alpha-x"})
    assert fork.status_code == 422 and "at_turn" in str(fork.json())
    assert not Team.objects.filter(slug__in=["alpha-x", "alpha-replay"]).exists()


def test_compare_two_teams(pm_api, pm, team, talked):
    point = Message.objects.get(team=team, content="I looked around.")
    pm_api.post(
        "/teams/alpha/fork",
        {"at_message": point.pk, "slug": "alpha-b", "message": "I looked elsewhere."},
    )
    body = pm_api.get("/teams/alpha/compare/alpha-b").json()
    assert (body["a"]["slug"], body["b"]["slug"]) == ("alpha", "alpha-b")
    assert (body["a"]["turns"], body["b"]["turns"], body["b"]["copied_turns"]) == (3, 2, 2)
    difference = body["first_difference"]
    assert difference["a"]["content"] == "I looked around."
    assert difference["b"]["content"] == "I looked elsewhere."
    assert pm_api.get("/teams/alpha/compare/nope").status_code == 404
    # The same comparison as a page, for the PM logged in (a token is not a session).
    assert pm_api.client.get("/teams/alpha/compare/alpha-b/").status_code == 302
    page = client_for(pm).get("/teams/alpha/compare/alpha-b/")
    assert page.status_code == 200
    assert "I looked elsewhere." in page.content.decode()
