"""The PM's pages without a browser: access, CSRF, scoping and the no-JavaScript path."""

import re

import pytest
from django.test import Client

from teams import services
from teams.conversation import pm_requests
from teams.models import Message, PMRequest
from teams.run import team_actions
from tests.helpers import client_for, make_turn


@pytest.fixture
def manager(pm):
    return client_for(pm)


def open_request(team, question="HTML or PDF?"):
    team_actions.team_start(team=team)
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
    assert "Team &#x27;alpha&#x27; started." in response.content.decode()
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
        ("/teams/alpha/run-again/", {}),
        (f"/pm/{request.id}/answer/", {"answer": "x"}),
        ("/teams/alpha/steer/", {"op": "nudge", "agent": "coder", "nudge_text": "x"}),
    ]:
        assert client.post(url, data).status_code == 403, url
    page = client.get("/teams/alpha/").content.decode()
    # Every post form carries a token (actions, run again twice: the header's and the
    # finished team's, answer, post as PM, fork from here, log out, and the roster's
    # steering form of each of the four agents).
    assert page.count('method="post"') == page.count('name="csrfmiddlewaretoken"') == 11
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


# --- drift and pinned answers ---------------------------------------------------


def drift_to(agent, *, trajectory="", tactic="", action="", violations=0):
    """Set an agent's mesh state as the tools would leave it."""
    from teams.run import drift

    agent.trajectory, agent.tactic, agent.action = trajectory, tactic, action
    agent.violations = violations
    agent.drift_score = drift.score(agent)
    agent.save()
    return agent.drift_score


def test_live_view_shows_each_agents_drift_and_flags_significant_drift(manager, team, agents):
    assert drift_to(agents["coach"], trajectory="Guide the team") == 100
    assert drift_to(agents["researcher"], violations=1) == 60
    # No trajectory (-30), a tactic and an action without one (-15), 3 violations (-30).
    assert drift_to(agents["coder"], tactic="Hack <b>it</b>", violations=3) == 25
    page = manager.get("/teams/alpha/").content.decode()
    panel = page[
        page.index('id="drift-panel"') : page.index("</section>", page.index("drift-panel"))
    ]
    assert panel.count('class="drift-agent') == 4
    assert 'data-agent="coach"' in panel and "drift-on-track" in panel
    assert '<span class="drift-score">100</span>' in panel
    assert '<span class="drift-meaning">on track</span>' in panel
    assert '<span class="drift-score">60</span>' in panel
    assert '<span class="drift-meaning">some drift</span>' in panel
    assert '<span class="drift-meaning">significant drift</span>' in panel
    assert "drift-significant-drift drift-flagged" in panel
    # The hierarchy ("(not set)" when empty, escaped), the chain breaks and the advice.
    assert '<dd data-level="trajectory" title="Guide the team">Guide the team</dd>' in panel
    tactic = "Hack &lt;b&gt;it&lt;/b&gt;"
    assert f'<dd data-level="tactic" title="{tactic}">{tactic}</dd>' in panel
    assert '<dd data-level="action" title="(not set)">(not set)</dd>' in panel
    assert "Tactic set without a trajectory." in panel
    assert "Significant drift. Use map_context" in panel
    assert "On track. Continue working." in panel
    # Agents below 40 are flagged at the top, and only they.
    assert "⚠ coder: significant drift (25)" in page
    assert "⚠ researcher" not in page and "⚠ coach" not in page
    # The script gets the bands to word a live score, and where to ask for the rest.
    assert '"drift_bands": [[70, "on track"], [40, "some drift"], [0, "significant drift"]]' in page
    assert '"drift_url": "/teams/alpha/drift/"' in page and '"drift_flag_below": 40' in page


def test_the_drift_panel_as_json_for_the_live_view(manager, team, agents, other_team):
    drift_to(agents["coder"], trajectory="Build it", tactic="Parser first")
    body = manager.get("/teams/alpha/drift/").json()
    coder = next(d for d in body["agents"] if d["agent"] == "coder")
    assert coder == {
        "agent": "coder",
        "role": "coder",
        "score": 100,
        "meaning": "on track",
        "band": "on-track",
        "flagged": False,
        "hierarchy": [
            ["trajectory", "Build it"],
            ["tactic", "Parser first"],
            ["action", "(not set)"],
        ],
        "breaks": [],
        # The words alone on the pages: no emoji font needed to read the advice.
        "recommendation": "On track. Continue working.",
    }
    assert [d["agent"] for d in body["agents"]] == ["coach", "researcher", "coder", "reviewer"]
    assert manager.get("/teams/beta/drift/").status_code == 404


def test_team_list_flags_agents_below_40(manager, team, agents):
    drift_to(agents["reviewer"], violations=3)  # 100 - 30 - 30
    drift_to(agents["coder"], trajectory="Build it")
    page = manager.get("/").content.decode()
    assert "⚠ reviewer: significant drift (40)" not in page  # 40 is some drift, not flagged
    drift_to(agents["reviewer"], tactic="Nitpick", violations=3)  # and a chain break: 25
    page = manager.get("/").content.decode()
    assert '<span class="drift-flag">⚠ reviewer: significant drift (25)</span>' in page
    assert "⚠ coder" not in page


def test_answer_pinned_as_an_anchor_from_the_live_view_and_the_inbox(manager, team):
    from teams.models import Anchor

    page = manager.get("/teams/alpha/").content.decode()
    form = page[
        page.index('id="pm-answer-form"') : page.index("</form>", page.index("pm-answer-form"))
    ]
    assert 'name="pin_as"' in form and "Pin as anchor" in form
    request = open_request(team)
    inbox = manager.get("/pm/").content.decode()
    assert 'name="pin_as"' in inbox and "Pin as anchor" in inbox
    response = manager.post(
        f"/pm/{request.id}/answer/",
        {"answer": "HTML only.", "pin_as": "output-format", "next": "/teams/alpha/"},
        follow=True,
    )
    assert "Answer sent; team alpha resumes." in response.content.decode()
    anchor = Anchor.objects.get(team=team, key="output-format")
    assert anchor.value == "HTML only." and anchor.updated_by == "pm (alice)"


def test_a_bad_pin_key_says_why_and_changes_nothing(manager, team):
    from teams.models import Anchor

    request = open_request(team)
    response = manager.post(
        f"/pm/{request.id}/answer/", {"answer": "HTML only.", "pin_as": "no spaces!"}, follow=True
    )
    page = response.content.decode()
    assert response.redirect_chain[-1][0] == "/pm/"
    assert "alpha: Anchor keys start with a letter or digit" in page
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN
    assert not Anchor.objects.exists() and not Message.objects.filter(kind="pm").exists()
    # Answered without a key, the same request goes through and pins nothing.
    manager.post(f"/pm/{request.id}/answer/", {"answer": "HTML only.", "pin_as": ""})
    request.refresh_from_db()
    assert request.status == PMRequest.Status.ANSWERED and not Anchor.objects.exists()


def test_pages_say_loom_and_have_an_icon(client, manager, team, agents):
    """Issue 13: the login page said "Django administration", /favicon.ico was a 404,
    and a chip read "coach coach" when an agent's name was its role."""
    login = client.get("/admin/login/").content.decode()
    assert "Loom administration" in login and "Django administration" not in login
    from django.contrib.staticfiles import finders

    icon = client.get("/favicon.ico")  # the site's static handler serves the target
    assert icon.status_code == 301 and icon["Location"] == "/static/teams/favicon.svg"
    assert "<svg" in open(finders.find("teams/favicon.svg")).read()
    page = manager.get(f"/teams/{team.slug}/").content.decode()
    assert 'href="/static/teams/favicon.svg"' in page
    # Named after its role: once (the roster's chip, then its steering controls).
    # (its model, since issue 36, comes after it, never its role).
    model = r'(\s*<small class="agent-model"[^>]*>[^<]*</small>)?'
    assert re.search(r'<span class="agent-name">coach</span>' + model + r'\s*<form', page)
    assert '<span class="agent-name">coder</span>' in page and "<small>coder</small>" not in page


def test_the_pages_script_posts_in_place_and_gets_json(manager, team):
    """The live view's script posts with Accept: application/json: a confirmation or
    the refusal comes back as JSON (no redirect); nothing refused is stored."""
    headers = {"HTTP_ACCEPT": "application/json"}
    posted = manager.post("/teams/alpha/post/", {"content": "Ship Friday."}, **headers)
    assert posted.status_code == 201
    assert posted.json()["detail"] == "Posted; the next agent to speak reads it."
    assert Message.objects.get(pk=posted.json()["id"]).content == "Ship Friday."
    for content, status, says in [
        ("   ", 400, "The message is empty."),
        ("x" * 200_000, 400, "The message has 200,000 characters; at most 20,000 are accepted."),
    ]:
        refused = manager.post("/teams/alpha/post/", {"content": content}, **headers)
        assert (refused.status_code, refused.json()) == (status, {"detail": says})
    assert Message.objects.filter(kind="pm").count() == 1


def test_live_view_shows_times_turn_figures_and_budgets(manager, team, agents):
    from datetime import timedelta

    from django.utils import timezone

    from teams.models import Team, Turn

    started = timezone.now()
    turn = make_turn(
        agents["coder"],
        number=1,
        status=Turn.Status.DONE,
        model="claude-sonnet-4-6",
        input_tokens=1_000,
        cache_read_tokens=2_000,
        output_tokens=50,
        cost_usd="0.004350",
        started_at=started,
        finished_at=started + timedelta(seconds=3.4),
    )
    services.message_add(team=team, author=agents["coder"], content="Done.", turn=turn)
    page = manager.get("/teams/alpha/").content.decode()
    assert "3,050 tokens · $0.0044 · 3.4 s" in page
    assert "1,000 input, 2,000 read from cache, 0 written to cache, 50 output tokens" in page
    assert '<time class="when" datetime="' in page
    assert 'of $<span id="team-max-cost">5.00</span>' in page
    assert "of the cost budget used" not in page
    # From 80% of a budget the page warns.
    Team.objects.filter(pk=team.pk).update(spent_usd="4.10", turn_count=170)
    page = manager.get("/teams/alpha/").content.decode()
    assert "⚠ 82% of the cost budget used ($4.10 of $5.00)" in page
    assert "⚠ 85% of the turn budget used (170 of 200)" in page
    listing = manager.get("/").content.decode()
    assert "$4.1000 / $5.00" in listing and "budget-warn" in listing


def test_team_list_counts_open_pm_requests_per_team(manager, team):
    open_request(team)
    listing = manager.get("/").content.decode()
    assert 'data-field="requests"><a href="/pm/">1</a>' in listing
    assert '<span id="open-requests">1</span> open PM request' in listing
