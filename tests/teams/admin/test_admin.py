import re
from decimal import Decimal

import pytest
from django.contrib import admin
from django.urls import reverse
from django.utils.timezone import now

from teams import services
from teams.conversation import pm_requests, questions
from teams.files import workspace
from teams.integrations import mcp_servers, webhooks
from teams.models import (
    Agent,
    ApiToken,
    ConsultantProfile,
    Keeper,
    KeeperEntry,
    Message,
    ModelEndpoint,
    ModelPrice,
    Team,
    TurnStep,
    WorkerHeartbeat,
    WorkspaceFile,
)
from tests.helpers import make_consultation, make_turn


def one_of_each(team) -> dict:
    """One row of every teams-app model for `team` (which has a coach and a coder),
    by model; its texts name the team. The consultant profile is shared."""
    coach = team.agents.get(name="coach")
    message = services.message_add(team=team, content=f"<b>hello</b> {team.slug}", author=coach)
    anchor = services.anchor_save(team=team, key="lang", value=f"Python for {team.slug}")
    pm_request = pm_requests.pm_request_open(team=team, question=f"Scope {team.slug}?", agent=coach)
    query = questions.ask(team=team, question=f"Why {team.slug}?", origin=coach, target="coder")
    turn = make_turn(coach, status="done", input_tokens=10)
    step = TurnStep.objects.create(turn=turn, index=0, kind="model", content=[{"type": "text"}])
    keeper = Keeper.objects.create(team=team, agent=coach, topic=f"auth {team.slug}")
    entry = KeeperEntry.objects.create(
        keeper=keeper, message=message, position=0, role="coach", content=f"x {team.slug}"
    )
    profile, _ = ConsultantProfile.objects.get_or_create(name="critic", model="claude-haiku-4-5")
    price, _ = ModelPrice.objects.get_or_create(
        model="claude-sonnet",
        defaults={"input_usd": 3, "output_usd": 15, "cache_write_usd": 3.75, "cache_read_usd": 0.3},
    )
    consultation = make_consultation(coach, profile=profile, prompt=f"Check {team.slug}")
    token, _ = services.api_token_create(team=team, label=f"ci-{team.slug}")
    workspace.file_write(
        team=team,
        agent=team.agents.get(name="coder"),
        turn=turn,
        path=f"notes-{team.slug}.md",
        content=f"<b>notes</b> of {team.slug}\n",
        writes_this_turn=0,
    )
    file = WorkspaceFile.objects.get(team=team)
    webhook, _ = webhooks.webhook_create(
        team=team, url=f"https://hooks.example.test/{team.slug}", events=["team.done"]
    )
    (delivery,) = webhooks.webhooks_notify(team=team, event="team.done", payload={"n": 1})
    rows = [team, coach, message, anchor, pm_request, query, turn, step, keeper, entry]
    rows += [profile, consultation, token, anchor.revisions.first(), file, webhook, delivery]
    mcp = mcp_servers.mcp_server_create(
        team=team,
        name=f"docs-{team.slug}",
        transport="http",
        url=f"https://mcp.example.test/{team.slug}",
    )
    beat, _ = WorkerHeartbeat.objects.get_or_create(
        worker="host-a:41:n1",
        defaults={"host": "host-a", "pid": 41, "started_at": now(), "last_seen": now()},
    )
    endpoint, _ = ModelEndpoint.objects.get_or_create(
        name="lab", defaults={"api": "openai", "base_url": "http://10.0.0.3/v1", "local": True}
    )
    rows += [price, mcp, beat, endpoint]
    return {type(row): row for row in rows}


@pytest.fixture
def populated(team, agents):
    one_of_each(team)
    return team


def test_every_changelist_and_change_page_renders(admin_client, populated):
    models = [m for m in admin.site._registry if m._meta.app_label == "teams"]
    assert len(models) == 21
    for model in models:
        opts = model._meta
        changelist = reverse(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        response = admin_client.get(changelist)
        assert response.status_code == 200, changelist
        obj = model.objects.first()
        assert obj is not None, opts.model_name
        change = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[obj.pk])
        response = admin_client.get(change)
        assert response.status_code == 200, change


def test_history_rows_are_read_only(admin_client, populated):
    message = Message.objects.first()
    url = reverse("admin:teams_message_change", args=[message.pk])
    response = admin_client.post(url, {"content": "rewritten"})
    assert response.status_code == 403
    message.refresh_from_db()
    assert message.content == "<b>hello</b> alpha"
    assert admin_client.get(reverse("admin:teams_message_add")).status_code == 403


def test_a_workspace_files_page_shows_it_escaped_or_that_it_is_binary(admin_client, populated):
    file = WorkspaceFile.objects.get()
    url = reverse("admin:teams_workspacefile_change", args=[file.pk])
    page = admin_client.get(url).content.decode()
    assert "&lt;b&gt;notes&lt;/b&gt; of alpha" in page and "<b>notes</b>" not in page
    assert '<pre class="workspace-file"' in page
    (workspace.workspace_root(populated) / file.path).write_bytes(b"\x00\x01\x02")
    assert "binary, 3 bytes" in admin_client.get(url).content.decode()
    (workspace.workspace_root(populated) / file.path).unlink()
    page = admin_client.get(url).content.decode()
    assert "Not readable now: No file &#x27;notes-alpha.md&#x27; in the workspace." in page
    changelist = admin_client.get(reverse("admin:teams_workspacefile_changelist")).content
    assert b"notes-alpha.md" in changelist
    assert admin_client.post(url, {"path": "x"}).status_code == 403
    delete = reverse("admin:teams_workspacefile_delete", args=[file.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403


def test_agent_output_is_escaped_in_admin(admin_client, populated):
    response = admin_client.get(reverse("admin:teams_message_changelist"))
    assert b"&lt;b&gt;hello&lt;/b&gt;" in response.content
    assert b"<b>hello</b>" not in response.content


def test_admin_tokens_bind_to_an_agent_of_their_team_and_are_revoked(
    admin_client, team, other_team
):
    coder = team.agents.get(name="coder")
    response = admin_client.post(
        reverse("admin:teams_apitoken_add"), {"team": other_team.pk, "agent": coder.pk, "name": "x"}
    )
    assert (
        response.status_code == 200
        and "Agent coder is not in team beta." in response.content.decode()
    )
    assert not ApiToken.objects.exists()
    admin_client.post(reverse("admin:teams_apitoken_add"), {"team": team.pk, "agent": coder.pk})
    token = ApiToken.objects.get()
    assert token.agent == coder
    admin_client.post(
        reverse("admin:teams_apitoken_changelist"),
        {"action": "revoke", "_selected_action": [token.pk]},
    )
    token.refresh_from_db()
    assert token.revoked_at is not None


def test_add_api_token_in_admin_shows_key_once_and_never_in_a_cookie(admin_client, team):
    """Bug: the raw key went into a message, i.e. the signed but readable cookie."""
    response = admin_client.post(
        reverse("admin:teams_apitoken_add"), {"team": team.pk, "name": "bot"}
    )
    assert response.status_code == 200
    page = response.content.decode()
    raw_key = re.search(r'<code id="api-token-key"[^>]*>(loom_[A-Za-z0-9_-]+)</code>', page)[1]
    assert "Copy it now" in page and reverse("admin:teams_apitoken_changelist") in page
    assert "no-store" in response["Cache-Control"]
    token = team.api_tokens.get(name="bot")
    assert token.key_hash == ApiToken.hash_key(raw_key) and token.prefix == raw_key[:12]
    assert raw_key not in str(ApiToken.objects.filter(pk=token.pk).values().get())
    for cookie in [*response.cookies.values(), *admin_client.cookies.values()]:
        assert raw_key not in cookie.value
    assert raw_key not in str(dict(admin_client.session))
    assert list(response.context["messages"]) == []
    listing = admin_client.get(reverse("admin:teams_apitoken_changelist")).content.decode()
    assert raw_key not in listing and token.prefix in listing  # shown once, only then


def test_admin_makes_expiring_read_only_tokens_and_lists_their_use(admin_client, team):
    """Issue 22: expiry and read-only scope in the admin; the list shows the last use."""
    from datetime import timedelta

    from django.utils import timezone

    add = reverse("admin:teams_apitoken_add")
    page = admin_client.post(add, {"team": team.pk, "name": "x", "expires_in": "soon"})
    assert "a number and a unit: 30m, 12h or 90d" in page.content.decode()
    assert not ApiToken.objects.exists()
    page = admin_client.post(
        add, {"team": team.pk, "name": "reader", "expires_in": "30d", "read_only": "on"}
    )
    assert "read-only (no writes, no tool calls); it expires at" in page.content.decode()
    token = ApiToken.objects.get()
    assert token.read_only
    assert timedelta(days=29, hours=23) < token.expires_at - timezone.now() <= timedelta(days=30)
    token.last_used_at = timezone.now()
    token.save()
    listing = admin_client.get(reverse("admin:teams_apitoken_changelist")).content.decode()
    for column in ("column-last_used_at", "column-expires_at", "column-read_only"):
        assert column in listing
    change = admin_client.get(reverse("admin:teams_apitoken_change", args=[token.pk]))
    assert change.status_code == 200
    # A made token's scope and expiry are shown, not changed.
    admin_client.post(
        reverse("admin:teams_apitoken_change", args=[token.pk]),
        {"name": "renamed", "read_only": "", "expires_at": ""},
    )
    token.refresh_from_db()
    assert token.name == "renamed" and token.read_only and token.expires_at is not None


def test_admin_add_duplicate_agent_is_a_form_error(admin_client, team):
    response = admin_client.post(
        reverse("admin:teams_agent_add"),
        {
            "team": team.pk,
            "name": "coder",
            "role": "coder",
            "position": 9,
            "context_budget_tokens": 1000,
        },
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    assert team.agents.filter(name="coder").count() == 1


def test_admin_start_pause_resume_actions(admin_client, team):
    url = reverse("admin:teams_team_changelist")
    admin_client.post(url, {"action": "start_teams", "_selected_action": [team.pk]})
    team.refresh_from_db()
    assert team.status == "running"
    response = admin_client.post(
        url, {"action": "start_teams", "_selected_action": [team.pk]}, follow=True
    )
    assert "already running" in response.content.decode()
    admin_client.post(url, {"action": "pause_teams", "_selected_action": [team.pk]})
    team.refresh_from_db()
    assert team.status == "paused"
    admin_client.post(url, {"action": "resume_teams", "_selected_action": [team.pk]})
    team.refresh_from_db()
    assert team.status == "running"


def test_admin_actions_say_what_really_happened(admin_client, team):
    """A team with no agents is not started ("Empty: started." was shown for a team
    that had paused at once); one out of budget says it paused and why."""
    url = reverse("admin:teams_team_changelist")
    empty = services.team_create(slug="empty", agents=[])
    response = admin_client.post(
        url, {"action": "start_teams", "_selected_action": [empty.pk]}, follow=True
    )
    page = response.content.decode()
    assert "Team &#x27;empty&#x27; has no agents: add some, then start it." in page
    assert "started" not in page.split('class="messagelist"')[1].split("</ul>")[0]
    empty.refresh_from_db()
    assert empty.status == "idle"

    Team.objects.filter(pk=team.pk).update(max_turns=3, turn_count=3)
    response = admin_client.post(
        url, {"action": "start_teams", "_selected_action": [team.pk]}, follow=True
    )
    assert (
        "Team &#x27;alpha&#x27; started, but it is paused now: Turn budget reached (3 of 3 turns)."
        in response.content.decode()
    )
    team.refresh_from_db()
    assert team.status == "paused"


def test_admin_answers_pm_request_once(admin_client, team, agents):
    from teams.conversation import pm_requests
    from teams.models import PMRequest
    from teams.run import team_actions

    team_actions.team_start(team=team)
    request = pm_requests.pm_request_open(
        team=team, agent=agents["coach"], question="Scope?", turn=None
    )
    url = reverse("admin:teams_pmrequest_change", args=[request.pk])
    response = admin_client.post(url, {"answer": ""})
    assert response.status_code == 200 and response.context["adminform"].form.errors
    admin_client.post(url, {"answer": "Keep it small."})
    request.refresh_from_db()
    assert request.status == "answered" and request.answered_by.username == "admin"
    assert Message.objects.filter(kind="pm", content="Keep it small.").count() == 1
    response = admin_client.post(url, {"answer": "Again"})
    assert Message.objects.filter(kind="pm").count() == 1
    assert PMRequest.objects.get(pk=request.pk).answer == "Keep it small."


def test_query_change_page_shows_the_hop_chain(admin_client, team, agents):
    from teams.conversation import questions

    query = questions.ask(team=team, origin=agents["coach"], question="Q?", target="coder")
    questions.forward(
        team=team,
        key=query.key,
        forwarder=agents["coder"],
        target="reviewer",
        enrichment="<i>half</i>",
    )
    questions.answer(team=team, key=query.key, answerer=agents["reviewer"], text="Done")
    page = admin_client.get(reverse("admin:teams_query_change", args=[query.pk])).content.decode()
    assert "1. coach asked coder" in page
    assert "2. coder forwarded to reviewer: &lt;i&gt;half&lt;/i&gt;" in page
    assert "3. reviewer answered" in page


def test_team_admin_links_to_live_view_and_shows_totals(admin_client, team, agents):
    from teams.models import Team

    make_turn(
        agents["coach"], status="done", input_tokens=1200, output_tokens=300, cost_usd="0.0081"
    )
    Team.objects.filter(pk=team.pk).update(spent_usd="0.0081")
    page = admin_client.get(reverse("admin:teams_team_change", args=[team.pk])).content.decode()
    assert 'href="/teams/alpha/"' in page
    assert "input 1,200 · output 300" in page and "$0.0081" in page
    assert (
        'href="/teams/alpha/"'
        in admin_client.get(reverse("admin:teams_team_changelist")).content.decode()
    )


def test_agent_console_shows_drift_report_and_chart(admin_client, team, agents):

    coach = agents["coach"]
    coach.trajectory = "Ship <b>v1</b>"
    coach.save()
    services.anchor_save(team=team, key="lang", value="<i>Python</i>")
    for n, score in enumerate([90, 70, 40], start=1):
        make_turn(coach, status="done", number=n, input_tokens=100 * n, drift_score=score)
    page = admin_client.get(reverse("admin:teams_agent_change", args=[coach.pk])).content.decode()
    assert "=== DRIFT REPORT ===" in page and "Original: Ship &lt;b&gt;v1&lt;/b&gt;" in page
    assert "<svg" in page and page.count('class="bar"') == 3 and "<polyline" in page
    assert "&lt;i&gt;Python&lt;/i&gt;" in page
    # The score with what it means, the hierarchy, the chain breaks and the advice.
    assert '<strong class="drift-score" style="font-size:1.4em">100</strong>' in page
    assert '<strong class="drift-meaning">on track</strong>' in page
    assert "<dt>trajectory</dt><dd>Ship &lt;b&gt;v1&lt;/b&gt;</dd>" in page
    assert "<dt>tactic</dt><dd>(not set)</dd><dt>action</dt><dd>(not set)</dd>" in page
    assert "chain breaks: none" in page and "On track. Continue working." in page
    # The chart's axes are labelled.
    for label in (">turn</text>", ">drift score</text>", ">input tokens</text>"):
        assert label in page
    changelist = admin_client.get(reverse("admin:teams_agent_changelist")).content.decode()
    assert "100 · on track" in changelist and "70 · on track" in changelist


# Rows only Loom writes (the records of what happened, turns, PM requests, workers'
# heartbeats): no add page, even for a superuser.
NOT_ADDED_BY_HAND = {
    "message",
    "turn",
    "turnstep",
    "keeperentry",
    "anchorrevision",
    "consultation",
    "workspacefile",
    "webhookdelivery",
    "pmrequest",
    "workerheartbeat",
}


def test_every_add_page_renders_or_is_refused(admin_client, populated):
    for model in [m for m in admin.site._registry if m._meta.app_label == "teams"]:
        opts = model._meta
        response = admin_client.get(reverse(f"admin:{opts.app_label}_{opts.model_name}_add"))
        expected = 403 if opts.model_name in NOT_ADDED_BY_HAND else 200
        assert response.status_code == expected, opts.model_name


def test_admin_team_form_rejects_a_zero_turn_budget(admin_client, team):
    response = admin_client.post(
        reverse("admin:teams_team_add"),
        {
            "slug": "zero",
            "name": "Zero",
            "phases": '["one"]',
            "phase_index": 0,
            "status": "idle",
            "max_turns": 0,
            "max_cost_usd": "1",
            "turn_count": 0,
            "spent_usd": "0",
            "agents-TOTAL_FORMS": 0,
            "agents-INITIAL_FORMS": 0,
            "anchors-TOTAL_FORMS": 0,
            "anchors-INITIAL_FORMS": 0,
        },
    )
    assert response.status_code == 200
    assert response.context["adminform"].form.errors
    from teams.models import Team

    assert not Team.objects.filter(slug="zero").exists()


def form_data(response) -> dict:
    """What the browser would post back: the change form as it was rendered, inlines
    included."""
    data = {}
    forms = [response.context["adminform"].form]
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        forms += list(formset.forms)
        forms.append(formset.management_form)
    for form in forms:
        for name, field in form.fields.items():
            value = form[name].value()
            if value is None or value is False:
                continue
            if isinstance(value, list | tuple) and name != "phases":
                data[form.add_prefix(name)] = [str(v) for v in value]
            else:
                data[form.add_prefix(name)] = (
                    field.widget.format_value(value) if name == "phases" else value
                )
    return data


def test_stale_team_form_never_writes_back_live_state(admin_client, team, agents):
    """Bug: saving a team form opened before a pause (elsewhere) put the team back to
    running, a phase back, and the counters back."""
    from teams.models import Team
    from teams.run import team_actions

    team_actions.team_start(team=team)
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Scope agreed.")
    url = reverse("admin:teams_team_change", args=[team.pk])
    stale = form_data(admin_client.get(url))  # the PM opens the page: running, planning

    team_actions.team_pause(team=team)  # ...someone pauses the team elsewhere
    Team.objects.filter(pk=team.pk).update(turn_count=7, spent_usd="0.1234")
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Plan agreed.")

    from teams.models import Agent

    Agent.objects.filter(team=team).update(turns=3)
    stale["max_turns"] = "300"  # the PM changed the turn budget and one agent's model
    coder_form = next(k for k, v in stale.items() if k.endswith("-name") and v == "coder")
    stale[coder_form.replace("-name", "-model")] = "loom-offline"
    response = admin_client.post(url, stale)
    assert response.status_code == 302, response.context["adminform"].form.errors
    team.refresh_from_db()
    assert team.max_turns == 300
    assert team.status == "paused"
    assert team.phase == "pre-code-review"
    assert (team.turn_count, str(team.spent_usd)) == (7, "0.123400")
    assert team.messages.filter(content__startswith="[Phase planning complete]").count() == 1
    assert list(team.agents.values_list("turns", flat=True)) == [3, 3, 3, 3]
    assert team.agents.get(name="coder").model == "loom-offline"


def test_team_live_state_is_read_only_in_the_admin(admin_client, team):
    page = admin_client.get(reverse("admin:teams_team_change", args=[team.pk])).content.decode()
    for field in ("status", "phase_index", "turn_count", "spent_usd"):
        assert f'name="{field}"' not in page, field
    assert "Idle" in page  # shown, not editable


def test_saving_an_agent_keeps_the_counters_that_moved_meanwhile(admin_client, team, agents):
    from teams.models import Agent

    coder = agents["coder"]
    url = reverse("admin:teams_agent_change", args=[coder.pk])
    stale = form_data(admin_client.get(url))
    Agent.objects.filter(pk=coder.pk).update(turns=5, drift_score=55)  # turns finish meanwhile
    stale["role_prompt"] = "Write small modules."
    assert admin_client.post(url, stale).status_code == 302
    coder.refresh_from_db()
    assert coder.role_prompt == "Write small modules."
    assert (coder.turns, coder.drift_score) == (5, 55)


def test_an_anchor_edited_in_the_admin_keeps_its_history_and_author(admin_client, team):
    from teams.models import Anchor

    anchor = services.anchor_save(team=team, key="lang", value="Python", changed_by="coach")
    url = reverse("admin:teams_anchor_change", args=[anchor.pk])
    data = form_data(admin_client.get(url))
    data["value"] = "Python 3.11"
    assert admin_client.post(url, data).status_code == 302
    anchor = Anchor.objects.get(pk=anchor.pk)
    assert anchor.value == "Python 3.11" and anchor.updated_by == "pm (admin)"
    assert [r.value for r in anchor.revisions.order_by("id")] == ["Python", "Python 3.11"]


def test_a_turns_page_shows_what_the_model_read(admin_client, team, messages_api):
    from teams.run import team_actions
    from tests.fakes.messages_api import text
    from tests.helpers import drain

    messages_api(lambda request: text("Welcome <b>team</b>."))
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    page = admin_client.get(reverse("admin:teams_turn_change", args=[turn.pk])).content.decode()
    assert "What the model read" in page and "It is your turn, coach." in page
    assert "Your name is coach and your role is coach." in page
    assert "<b>team</b>" not in page  # the model's words are escaped


def test_team_page_shows_the_phase_lines_agents_read(admin_client, team):
    page = admin_client.get(reverse("admin:teams_team_change", args=[team.pk])).content.decode()
    assert "Phase lines as agents read them" in page
    assert "say what is feasible and what would be costly to build" in page


def test_an_approval_is_answered_in_the_admin(team, superuser, messages_api):
    """The PM request page shows the call and takes Deny with a note, or edited
    arguments (a bad edit is a form error that changes nothing)."""
    import json as _json

    from teams.models import PMRequest
    from tests.helpers import PEER_CALL, client_for, stop_at_approval

    stop_at_approval(team, messages_api)
    request = PMRequest.objects.get(team=team)
    client = client_for(superuser)
    url = f"/admin/teams/pmrequest/{request.id}/change/"
    page = client.get(url).content.decode()
    assert "peer_message" in page and "Note for the agent" in page
    assert "&quot;content&quot;: &quot;check my layout&quot;" in page
    bad = client.post(url, {"answer": "Approve", "note": "", "edited_arguments": '{"to": 1}'})
    assert bad.status_code == 200 and "do not fit peer_message" in bad.content.decode()
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN
    unchanged = _json.dumps(PEER_CALL, indent=2)  # the box as the page filled it
    client.post(url, {"answer": "Deny", "note": "Not yet.", "edited_arguments": unchanged})
    request.refresh_from_db()
    assert (request.status, request.answer, request.note) == ("answered", "Deny", "Not yet.")


@pytest.mark.parametrize("figure", ["-5", "١٥٠", "１５０", "1e3", "0", "5,00"])
def test_an_agents_budget_is_ascii_dollars_above_zero(admin_client, team, agents, figure):
    """Issue 22: the agent's cost budget took "-5" and "١٥٠" (read as 150)."""
    from tests.helpers import state

    url = reverse("admin:teams_agent_change", args=[agents["coder"].pk])
    data = {**form_data(admin_client.get(url)), "max_cost_usd": figure}
    before = state()
    response = admin_client.post(url, data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["max_cost_usd"]
    assert errors and ("digits 0-9" in errors[0] or "above $0" in errors[0]), errors
    assert state() == before
    data["max_cost_usd"] = "7.50"
    assert admin_client.post(url, data).status_code == 302
    agents["coder"].refresh_from_db()
    assert str(agents["coder"].max_cost_usd) == "7.5000"


def test_an_agents_budget_changed_in_the_admin_warns_again(admin_client, agents):
    """As through the API: a new cap re-arms the agent's 80% warning; saving the page
    with the same cap does not."""
    coder = agents["coder"]
    Agent.objects.filter(pk=coder.pk).update(max_cost_usd=Decimal("1.00"), cost_warned_at=now())
    url = reverse("admin:teams_agent_change", args=[coder.pk])
    data = form_data(admin_client.get(url))
    assert admin_client.post(url, {**data, "role_prompt": "Be brief."}).status_code == 302
    assert Agent.objects.get(pk=coder.pk).cost_warned_at is not None
    assert admin_client.post(url, {**data, "max_cost_usd": "2.00"}).status_code == 302
    raised = Agent.objects.get(pk=coder.pk)
    assert raised.max_cost_usd == Decimal("2") and raised.cost_warned_at is None


def test_a_teams_budget_in_the_admin_is_ascii_dollars_too(admin_client, team):
    url = reverse("admin:teams_team_change", args=[team.pk])
    data = form_data(admin_client.get(url))
    for figure in ("-5", "١٥٠"):
        response = admin_client.post(url, {**data, "max_cost_usd": figure})
        assert response.status_code == 200
        assert "max_cost_usd" in response.context["adminform"].form.errors
    team.refresh_from_db()
    assert str(team.max_cost_usd) == "5.0000"


def test_a_refused_answer_shows_the_error_never_changed_successfully(admin_client, team):
    """Issue 22: a budget answer the service refused said "was changed successfully"."""
    from teams.models import PMRequest
    from teams.run import budgets, team_actions

    team_actions.team_start(team=team)
    request = budgets.budget_stop(team=team, budget="cost")
    url = reverse("admin:teams_pmrequest_change", args=[request.pk])
    response = admin_client.post(url, {"answer": "lots, please"})
    assert response.status_code == 200
    said = [str(m) for m in response.context["messages"]]
    assert not any("success" in m or "Answer sent" in m for m in said), said
    errors = response.context["adminform"].form.errors["answer"]
    assert errors[0].startswith("Answer a budget request with")
    assert "lots, please" in response.content.decode()  # the PM's words are kept
    request.refresh_from_db()
    assert request.status == PMRequest.Status.OPEN
    team.refresh_from_db()
    assert str(team.max_cost_usd) == "5.0000"
    # A good answer after it goes through, and says so.
    response = admin_client.post(url, {"answer": "Double"}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert "Answer sent; team alpha resumes." in said
    request.refresh_from_db()
    assert request.status == PMRequest.Status.ANSWERED


def test_a_slug_taken_meanwhile_is_a_form_error_and_nothing_is_saved(
    admin_client, team, monkeypatch
):
    """The team form's own check passed, then the service refused (a race): the edit
    is rolled back, inline rows too, and the form says why."""
    url = reverse("admin:teams_team_change", args=[team.pk])
    data = form_data(admin_client.get(url))
    coder = next(k for k, v in data.items() if k.endswith("-name") and v == "coder")
    data.update({"goal": "Changed.", coder.replace("-name", "-model"): "loom-offline"})

    def refuse(**kwargs):
        raise services.slug_unavailable("alpha")

    monkeypatch.setattr(services, "team_update", refuse)
    response = admin_client.post(url, data)
    assert response.status_code == 200
    said = [str(m) for m in response.context["messages"]]
    assert not any("success" in m for m in said), said
    form = response.context["adminform"].form
    assert form.errors["slug"] == ["The slug 'alpha' is not available: choose another."]
    team.refresh_from_db()
    assert team.goal == "Ship the parser."
    assert team.agents.get(name="coder").model != "loom-offline"


def test_a_pm_renaming_to_a_taken_slug_learns_nothing_of_whose(team, other_team, pm):
    """The admin's unique check says what the API says: not available, whether the
    slug is the PM's own team's (gamma) or one they cannot see (beta)."""
    from teams.management.commands.loom_demo import pm_group_ensure
    from tests.helpers import client_for, make_team

    pm.groups.add(pm_group_ensure())
    make_team("gamma").managers.add(pm)
    client = client_for(pm)
    url = reverse("admin:teams_team_change", args=[team.pk])
    data = form_data(client.get(url))
    for slug in ("gamma", "beta"):
        response = client.post(url, {**data, "slug": slug})
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["slug"] == [
            "This slug is not available: choose another."
        ]
        assert "already exists" not in response.content.decode()
    team.refresh_from_db()
    assert team.slug == "alpha"


def test_a_stop_answer_says_the_team_stays_paused(admin_client, team):
    """The admin said "team resumes" after a budget's "Stop"."""
    from teams.run import budgets, team_actions

    team_actions.team_start(team=team)
    request = budgets.budget_stop(team=team, budget="cost")
    url = reverse("admin:teams_pmrequest_change", args=[request.pk])
    response = admin_client.post(url, {"answer": "Stop"}, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert "Answer sent; team alpha is paused." in said


def test_the_pm_request_page_says_what_each_answer_does(admin_client, team, agents):
    """Before answering: a budget's "Stop" leaves the team paused, the others resume."""
    from teams.run import budgets, team_actions

    team_actions.team_start(team=team)
    request = budgets.budget_stop(team=team, budget="cost")
    page = admin_client.get(reverse("admin:teams_pmrequest_change", args=[request.pk]))
    said = page.content.decode()
    assert "“Stop” keeps the budget and leaves the team paused" in said
    assert "“Double” raises the budget and the team resumes" in said
    pm_requests.pm_request_answer(request_id=request.id, answer="Double", user=None)
    question = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="PDF?")
    page = admin_client.get(reverse("admin:teams_pmrequest_change", args=[question.pk]))
    assert "Your answer joins the conversation and the team resumes." in page.content.decode()
    assert "leaves the team paused" not in page.content.decode()


def test_worker_heartbeats_are_in_the_admin_read_only(admin_client, client, team):
    from datetime import timedelta

    from django.utils import timezone

    from teams.models import WorkerHeartbeat
    from tests.helpers import make_user

    now = timezone.now()
    WorkerHeartbeat.objects.create(
        worker="host-a:41:n1",
        host="host-a",
        pid=41,
        started_at=now,
        last_seen=now,
        running_turns=2,
    )
    WorkerHeartbeat.objects.create(
        worker="host-b:7:n2",
        host="host-b",
        pid=7,
        started_at=now - timedelta(hours=1),
        last_seen=now - timedelta(hours=1),
    )
    listing = admin_client.get(reverse("admin:teams_workerheartbeat_changelist"))
    text = listing.content.decode()
    assert listing.status_code == 200 and "host-a:41:n1" in text and "host-b:7:n2" in text
    assert text.count('alt="True"') == 1 and text.count('alt="False"') == 1  # alive or not
    beat = WorkerHeartbeat.objects.get(pid=41)
    change = reverse("admin:teams_workerheartbeat_change", args=[beat.pk])
    page = admin_client.get(change)
    assert page.status_code == 200 and 'name="running_turns"' not in page.content.decode()
    admin_client.post(change, {"running_turns": 9})
    assert WorkerHeartbeat.objects.get(pk=beat.pk).running_turns == 2
    assert admin_client.get(reverse("admin:teams_workerheartbeat_add")).status_code == 403
    delete = reverse("admin:teams_workerheartbeat_delete", args=[beat.pk])
    assert admin_client.post(delete, {"post": "yes"}).status_code == 403
    assert WorkerHeartbeat.objects.count() == 2
    # A PM (staff, not a superuser) does not see the deployment's workers.
    client.force_login(make_user("pam", manages=[team]))
    assert client.get(reverse("admin:teams_workerheartbeat_changelist")).status_code == 403


def test_the_agents_admin_page_steers_through_the_same_services(admin_client, team, agents):
    """Speak next, a nudge and a seat taken from the coder's admin page; a done team
    refuses with the reason and nothing changes."""
    from teams.models import Message, Team

    url = reverse("admin:teams_agent_change", args=[agents["coder"].pk])
    data = form_data(admin_client.get(url))
    data.update(speak_next="on", nudge="Keep it small.", take_seat="Plan: one file.")
    response = admin_client.post(url, data, follow=True)
    said = [str(m) for m in response.context["messages"]]
    assert "coder speaks next, and is nudged, and has a turn written by you." in said, said
    team.refresh_from_db()
    assert team.next_speaker == agents["coder"] and team.turn_count == 1
    nudge = Message.objects.get(kind=Message.Kind.NUDGE)
    assert (nudge.recipient, nudge.content) == (agents["coder"], "Keep it small.")
    assert Message.objects.get(kind=Message.Kind.SEAT).speaker == "coder (written by the PM)"

    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)
    before = Message.objects.count()
    data = form_data(admin_client.get(url))
    data.update(nudge="Too late.")
    response = admin_client.post(url, data)
    assert "is done: no agent will read a nudge" in response.content.decode()
    assert Message.objects.count() == before
