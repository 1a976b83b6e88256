"""The PM's pages without a browser: access, CSRF, scoping and the no-JavaScript path."""

import pytest
from django.test import Client

from teams import conversation, pm_requests, services
from teams.models import Message, PMRequest
from tests.helpers import client_for


@pytest.fixture
def manager(pm):
    return client_for(pm)


def open_request(team, question="HTML or PDF?"):
    conversation.team_start(team=team)
    return pm_requests.pm_request_open(
        team=team, agent=team.agents.get(name="coach"), question=question, turn=None
    )


@pytest.mark.parametrize("url", ["/", "/teams/alpha/", "/pm/"])
def test_anonymous_users_are_sent_to_log_in(client, team, url):
    response = client.get(url)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_non_staff_users_are_sent_to_log_in(outsider):
    assert client_for(outsider).get("/teams/alpha/").status_code == 302


def test_live_view_shows_conversation_escaped(manager, team, agents):
    services.message_add(
        team=team,
        author=agents["coder"],
        content='<script>alert(1)</script><img src=x onerror="alert(2)">',
    )
    services.message_add(
        team=team, author=agents["reviewer"], kind="pass_note", content="(reviewer passes: fine)"
    )
    page = manager.get("/teams/alpha/").content.decode()
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>alert(1)" not in page and "<img src=x" not in page
    assert 'class="msg kind-pass_note"' in page
    assert "agents run on the offline model" in page


def test_manager_sees_only_their_teams(manager, other_team):
    assert manager.get("/teams/beta/").status_code == 404
    page = manager.get("/").content.decode()
    assert "/teams/alpha/" in page and "/teams/beta/" not in page
    assert manager.post("/teams/beta/action/", {"action": "start"}).status_code == 404
    assert manager.post("/teams/beta/post/", {"content": "hi"}).status_code == 404


def test_inbox_is_scoped_and_answering_another_teams_request_is_404(manager, team, other_team):
    mine = open_request(team, "Mine?")
    theirs = open_request(other_team, "Theirs?")
    page = manager.get("/pm/").content.decode()
    assert "Mine?" in page and "Theirs?" not in page
    response = manager.post(f"/pm/{theirs.id}/answer/", {"answer": "x"})
    assert response.status_code == 404
    assert PMRequest.objects.get(pk=theirs.pk).status == "open"
    assert PMRequest.objects.get(pk=mine.pk).status == "open"


def test_superuser_sees_every_team(admin_client, team, other_team):
    open_request(other_team, "Theirs?")
    assert admin_client.get("/teams/beta/").status_code == 200
    assert "Theirs?" in admin_client.get("/pm/").content.decode()


def test_answer_without_javascript_then_again(manager, team):
    request = open_request(team)
    response = manager.post(f"/pm/{request.id}/answer/", {"answer": "HTML only."}, follow=True)
    assert "Answer sent; team alpha resumes." in response.content.decode()
    team.refresh_from_db()
    assert team.status == "running"
    response = manager.post(f"/pm/{request.id}/answer/", {"answer": "PDF."}, follow=True)
    assert "This PM request was already answered." in response.content.decode()
    assert Message.objects.filter(kind="pm").count() == 1


def test_answer_redirects_only_to_this_site(manager, team):
    request = open_request(team)
    response = manager.post(
        f"/pm/{request.id}/answer/", {"answer": "ok", "next": "https://evil.example/"}
    )
    assert response["Location"] == "/pm/"


def test_answer_with_a_nul_byte_is_refused_and_the_request_stays_open(manager, team):
    request = open_request(team)
    response = manager.post(f"/pm/{request.id}/answer/", {"answer": "yes\x00"}, follow=True)
    assert "may not contain NUL characters" in response.content.decode()
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN


def test_actions_and_pm_post(manager, team):
    page = manager.get("/teams/alpha/").content.decode()
    # Only what the status allows is shown: an idle team offers Start, never Resume.
    assert 'value="start">Start' in page and 'value="pause" disabled hidden>Pause' in page
    assert 'value="resume" disabled hidden>Resume' in page
    response = manager.post("/teams/alpha/action/", {"action": "start"}, follow=True)
    assert "Team alpha started." in response.content.decode()
    page = response.content.decode()
    assert 'value="start" disabled hidden>Start' in page and 'value="pause">Pause' in page
    response = manager.post("/teams/alpha/action/", {"action": "start"}, follow=True)
    assert "already running" in response.content.decode()
    manager.post("/teams/alpha/post/", {"content": "Focus on HTML."})
    assert Message.objects.get(kind="pm").content == "Focus on HTML."
    response = manager.post("/teams/alpha/post/", {"content": "  "}, follow=True)
    assert "The message is empty." in response.content.decode()
    # A NUL byte (which PostgreSQL cannot store) is a form error, never a 500.
    response = manager.post("/teams/alpha/post/", {"content": "a\x00b"}, follow=True)
    assert response.status_code == 200
    assert "may not contain NUL characters" in response.content.decode()
    assert Message.objects.filter(kind="pm").count() == 1
    assert manager.get("/teams/alpha/action/").status_code == 405


def test_every_form_needs_a_csrf_token(team, superuser):
    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    request = open_request(team)
    for url, data in [
        ("/teams/alpha/action/", {"action": "pause"}),
        ("/teams/alpha/post/", {"content": "hi"}),
        (f"/pm/{request.id}/answer/", {"answer": "x"}),
    ]:
        assert client.post(url, data).status_code == 403, url
    page = client.get("/teams/alpha/").content.decode()
    # Every post form carries a token (actions, answer, post as PM, log out).
    assert page.count('method="post"') == page.count('name="csrfmiddlewaretoken"') == 4
    assert 'name="csrfmiddlewaretoken"' in client.get("/pm/").content.decode()
    team.refresh_from_db()
    assert team.status == "awaiting_pm" and not Message.objects.filter(kind="pm").exists()


def test_live_view_says_how_many_older_messages_it_leaves_out(
    manager, admin_client, team, agents, monkeypatch
):
    monkeypatch.setattr("teams.selectors.TRANSCRIPT_LIMIT", 2)
    for n in range(5):
        services.message_add(team=team, content=f"line {n}", author=agents["coach"])
    page = manager.get("/teams/alpha/").content.decode()
    assert "line 4" in page and "line 3" in page and "line 2" not in page
    assert "3 earlier messages not shown here" in page
    assert f"/admin/teams/message/?team__id__exact={team.id}" in page
    older = admin_client.get(f"/admin/teams/message/?team__id__exact={team.id}")
    assert older.status_code == 200 and "5 messages" in older.content.decode()
    monkeypatch.setattr("teams.selectors.TRANSCRIPT_LIMIT", 500)
    assert "earlier message" not in manager.get("/teams/alpha/").content.decode()


def test_pages_offer_a_working_log_out(manager):
    page = manager.get("/").content.decode()
    assert 'action="/admin/logout/"' in page and "Log out" in page
    manager.post("/admin/logout/")
    assert manager.get("/")["Location"].startswith("/admin/login/")


def test_live_view_warns_about_agents_whose_model_cannot_run(manager, team, agents, settings):
    settings.ANTHROPIC_API_KEY = None
    agents["coder"].model = "claude-sonnet-4-6"
    agents["coder"].save(update_fields=["model"])
    page = manager.get("/teams/alpha/").content.decode()
    assert "coder: ANTHROPIC_API_KEY is not set" in page


def test_a_megabyte_pm_post_is_a_form_error_and_nothing_is_stored(manager, team):
    response = manager.post("/teams/alpha/post/", {"content": "x" * 1_000_000}, follow=True)
    assert response.status_code == 200
    assert "at most 20,000 are accepted" in response.content.decode()
    assert not Message.objects.filter(kind="pm").exists()
