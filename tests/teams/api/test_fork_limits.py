"""Issue 33, finding 5: forks and replays take the right to create a team, are bounded
in size (LOOM_FORK_MAX_MESSAGES, refused before any row is written) and rate limited
per person (LOOM_FORK_RATE)."""

import pytest
from django.contrib.auth.models import Permission
from django.core.cache import cache

from teams import services
from teams.models import Message, Team, Turn
from tests.helpers import ApiClient, api_token

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fresh_counts():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def said(team, agents):
    lines = [services.message_add(team=team, content=f"Line {n}.") for n in range(6)]
    Turn.objects.create(team=team, agent=agents["coder"], number=1, status=Turn.Status.DONE)
    return lines


def rows() -> tuple[int, int]:
    return Team.objects.count(), Message.objects.count()


def test_a_pm_without_add_team_gets_a_403_on_fork_and_replay(pm, team, said):
    api = ApiClient(api_token(user=pm))
    before = rows()
    fork = api.post("/teams/alpha/fork", {"at_message": said[2].pk, "slug": "alpha-f"})
    assert fork.status_code == 403
    assert fork.json()["detail"] == (
        "User 'alice' may not fork the team: it makes a team, and this user may not "
        "create teams (no teams.add_team)."
    )
    replay = api.post("/teams/alpha/replay", {"slug": "alpha-r"})
    assert replay.status_code == 403 and "may not replay the team" in replay.json()["detail"]
    assert rows() == before
    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    again = ApiClient(api_token(user=pm)).post(
        "/teams/alpha/fork", {"at_message": said[2].pk, "slug": "alpha-f"}
    )
    assert again.status_code == 201


def test_a_fork_over_the_limit_is_refused_before_any_row_is_written(root_api, team, said, settings):
    settings.LOOM_FORK_MAX_MESSAGES = 4
    before = rows()
    over = root_api.post("/teams/alpha/fork", {"at_message": said[4].pk, "slug": "alpha-f"})
    assert over.status_code == 422
    assert over.json()["detail"][0]["msg"] == (
        "Team 'alpha' would fork the team with 5 messages, over the 4 a fork or a replay "
        "may hold (LOOM_FORK_MAX_MESSAGES); nothing was stored."
    )
    replay = root_api.post("/teams/alpha/replay", {"slug": "alpha-r"})
    assert replay.status_code == 422 and "with 6 messages, over the 4" in str(replay.json())
    assert rows() == before
    within = root_api.post("/teams/alpha/fork", {"at_message": said[3].pk, "slug": "alpha-f"})
    assert within.status_code == 201


def test_forks_are_rate_limited_per_person(root_api, pm, team, said, settings):
    settings.LOOM_FORK_RATE = "2/hour"
    for n in range(2):
        made = root_api.post("/teams/alpha/fork", {"at_message": said[1].pk, "slug": f"a-{n}"})
        assert made.status_code == 201
    over = root_api.post("/teams/alpha/fork", {"at_message": said[1].pk, "slug": "a-3"})
    assert over.status_code == 429
    assert over.json()["detail"].startswith(
        "You made 2 forks or replays within 3,600 seconds, the most LOOM_FORK_RATE (2/hour) "
        "allows; try again in "
    )
    assert not Team.objects.filter(slug="a-3").exists()
    # Another person has their own count.
    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    theirs = ApiClient(api_token(user=pm)).post(
        "/teams/alpha/fork", {"at_message": said[1].pk, "slug": "a-4"}
    )
    assert theirs.status_code == 201
