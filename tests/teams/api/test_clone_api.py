"""POST /api/teams/{team}/clone: run a team again over the API, as whoever may make
teams, for a team they can see; and a done team's 409 on posts."""

import pytest
from django.contrib.auth.models import Permission

from teams import services
from teams.files import workspace
from teams.models import Message, Team
from tests.helpers import ApiClient, api_token, state

pytestmark = pytest.mark.django_db


def may_make_teams(user):
    user.user_permissions.add(Permission.objects.get(codename="add_team"))
    return ApiClient(api_token(user=user))


def finished(team):
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)


def test_run_again_makes_an_idle_copy(root_api, team, agents):
    services.anchor_save(team=team, key="db", value="SQLite", changed_by="pm")
    workspace.file_write(
        team=team,
        agent=agents["coder"],
        turn=None,
        path="notes.md",
        content="LALR.",
        writes_this_turn=0,
    )
    finished(team)
    response = root_api.post("/teams/alpha/clone", {})
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["slug"] == "alpha-2" and body["name"] == "Alpha (run 2)"
    assert body["status"] == "idle" and body["actions"] == ["start"]
    assert body["goal"] == "Ship the parser." and body["workspace"] == ""
    assert [a["name"] for a in body["agents"]] == ["coach", "researcher", "coder", "reviewer"]
    assert all(a["turns"] == 0 for a in body["agents"])
    # Its anchor and file are there, read through the API like any team's.
    assert root_api.get("/teams/alpha-2/anchors").json()[0]["value"] == "SQLite"
    content = root_api.get("/teams/alpha-2/files/content", path="notes.md").json()
    assert content["text"] == "LALR." and content["written_by"] == "coder"
    # A slug and a name of one's own.
    response = root_api.post("/teams/alpha/clone", {"slug": "alpha-next", "name": "Alpha next"})
    assert response.status_code == 201
    assert (response.json()["slug"], response.json()["name"]) == ("alpha-next", "Alpha next")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"slug": "beta"}, 409),
        ({"slug": "alpha"}, 409),
        ({"slug": "Not A Slug"}, 422),
        ({"slug": "x" * 61}, 422),
        ({"name": "y" * 121}, 422),
        ({"slug": "alpha-2", "goal": "a typo'd field"}, 422),
    ],
)
def test_a_taken_or_invalid_slug_changes_nothing(root_api, team, other_team, body, status):
    before = state()
    response = root_api.post("/teams/alpha/clone", body)
    assert response.status_code == status, response.content
    if status == 409:
        assert response.json() == {"detail": services.SLUG_UNAVAILABLE.format(slug=body["slug"])}
    else:
        assert isinstance(response.json()["detail"], list)
    assert state() == before


def test_team_tokens_cannot_make_teams(api, coder_api, team):
    before = state()
    response = api.post("/teams/alpha/clone", {})
    assert response.status_code == 403
    assert "A team token cannot run the team again" in response.json()["detail"]
    response = coder_api.post("/teams/alpha/clone", {})
    assert response.status_code == 403
    assert response.json()["detail"] == (
        "This token acts only as agent 'coder'; it cannot run the team again."
    )
    assert state() == before


def test_the_teams_pm_runs_it_again_and_manages_the_copy(pm, team):
    pm_api = ApiClient(api_token(user=pm))
    assert not pm.has_perm("teams.add_team")
    assert pm_api.post("/teams/alpha/clone", {"slug": "alpha-b"}).status_code == 201
    assert [t["slug"] for t in pm_api.get("/teams").json()] == ["alpha", "alpha-b"]


def test_another_pms_team_is_not_found(other_pm, team):
    other_api = may_make_teams(other_pm)
    before = state()
    response = other_api.post("/teams/alpha/clone", {})
    assert response.status_code == 404
    assert response.json() == {"detail": "No team with slug 'alpha'."}
    assert state() == before


def test_a_done_team_refuses_posts_with_409_saying_how_to_run_it_again(api, team):
    services.agent_create(team=team, name="bot", role="external")
    finished(team)
    expected = {
        "detail": "Team 'alpha' is done: nobody will read this. Run it again to go on: the "
        "Run again button on its page, `manage.py team clone alpha NEW_SLUG`, or "
        "POST /api/teams/alpha/clone."
    }
    before = state()
    response = api.post("/teams/alpha/messages", {"content": "Still there?"})
    assert (response.status_code, response.json()) == (409, expected)
    response = api.post("/teams/alpha/agents/bot/messages", {"content": "Hello?"})
    assert (response.status_code, response.json()) == (409, expected)
    assert state() == before
    assert not Message.objects.exists()
