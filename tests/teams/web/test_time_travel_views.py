"""The PM's time-travel pages: "Fork here" on the live view, the fork's live
page with its copied part shown apart, the compare page, the admin's action."""

import pytest

from teams import services
from teams.models import Message, Team
from tests.helpers import client_for, make_team

pytestmark = pytest.mark.django_db


@pytest.fixture
def creator(pm):
    """The PM of alpha, who may create teams (a fork makes one)."""
    from django.contrib.auth.models import Permission

    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    return pm


@pytest.fixture
def said(team, agents):
    lines = [
        services.message_add(team=team, content=f"Line {n}.", author=agents["coder"])
        for n in range(3)
    ]
    return lines


def test_fork_from_here_makes_a_fork_and_opens_its_live_page(creator, team, said):
    pm = creator
    browser = client_for(pm)
    live = browser.get("/teams/alpha/").content.decode()
    assert 'id="fork-form"' in live and "teams/fork.js" in live
    response = browser.post("/teams/alpha/fork/", {"at_message": said[1].pk})
    assert response.status_code == 302 and response["Location"] == "/teams/alpha-2/"
    fork = Team.objects.get(slug="alpha-2")
    assert list(fork.messages.values_list("content", flat=True)) == ["Line 0.", "Line 1."]
    assert pm in fork.managers.all()
    page = browser.get("/teams/alpha-2/").content.decode()
    # The point by the number the live view shows the message with (#2), not its row id.
    assert 'Forked from <a href="/teams/alpha/">alpha</a> at message 2' in page
    assert "/teams/alpha/compare/alpha-2/" in page
    compare = browser.get("/teams/alpha/compare/alpha-2/").content.decode()
    assert "The conversations part at message 3" in compare
    assert "Line 2." in compare and "(nothing more)" in compare


def test_a_refused_fork_says_why_and_stores_nothing(creator, team, said, other_team):
    browser = client_for(creator)
    theirs = Message.objects.create(team=other_team, content="Beta's.")
    response = browser.post("/teams/alpha/fork/", {"at_message": theirs.pk}, follow=True)
    assert f"Team &#x27;alpha&#x27; has no message {theirs.pk}." in response.content.decode()
    assert browser.post("/teams/alpha/fork/", {"at_message": "x"}).status_code == 302
    assert not Team.objects.filter(slug="alpha-2").exists()
    # Another PM's team is not found at all.
    make_team("gamma")
    assert browser.post("/teams/gamma/fork/", {"at_message": said[0].pk}).status_code == 404
    assert browser.get("/teams/alpha/compare/gamma/").status_code == 404


def test_the_admin_forks_at_a_message(superuser, team, said):
    browser = client_for(superuser)
    response = browser.post(
        "/admin/teams/message/",
        {"action": "fork_here", "_selected_action": [said[0].pk]},
        follow=True,
    )
    assert "Forked team &#x27;alpha-2&#x27; from &#x27;alpha&#x27;" in response.content.decode()
    assert Team.objects.get(slug="alpha-2").messages.get().content == "Line 0."


def test_a_pm_who_may_not_create_teams_is_refused_a_fork_saying_why(pm, team, said):
    """Issue 33, finding 5: a fork makes a team; it takes the right to create one."""
    response = client_for(pm).post("/teams/alpha/fork/", {"at_message": said[1].pk}, follow=True)
    assert "may not create teams (no teams.add_team)" in response.content.decode()
    assert not Team.objects.filter(slug="alpha-2").exists()
