"""The admin shows a PM their teams only (issue 9, finding 1): every teams-app list,
page, action, filter and choice list, for a PM in the "PM" group and even for one
holding every teams permission. Alpha is the team they do not manage."""

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.test import RequestFactory
from django.urls import reverse

from teams import services
from teams.conversation import pm_requests
from teams.management.commands.loom_demo import pm_group_ensure
from teams.models import (
    Agent,
    AnchorRevision,
    ConsultantProfile,
    KeeperEntry,
    Message,
    ModelEndpoint,
    ModelPrice,
    PMRequest,
    Team,
    TurnStep,
    WebhookDelivery,
    WorkerHeartbeat,
)
from teams.run import team_actions
from tests.helpers import FOUR_AGENTS, client_for
from tests.teams.admin.test_admin import form_data, one_of_each

TEAMS_MODELS = sorted(
    (m for m in admin.site._registry if m._meta.app_label == "teams"),
    key=lambda m: m._meta.model_name,
)


@pytest.fixture
def beta_team(other_team):
    """The shared other_team (beta, a coach) with the usual team's other three agents."""
    for agent in FOUR_AGENTS[1:]:
        services.agent_create(team=other_team, **agent)
    return other_team


@pytest.fixture
def worlds(team, beta_team):
    """One row of every teams-app model in alpha and in beta."""
    return {"alpha": one_of_each(team), "beta": one_of_each(beta_team)}


@pytest.fixture(params=["pm-group", "every-teams-permission"])
def beta_pm(request, other_pm):
    """Staff managing beta only: in the PM group, or given every teams permission
    (scoping must not rest on the permissions)."""
    if request.param == "pm-group":
        other_pm.groups.add(pm_group_ensure())
    else:
        other_pm.user_permissions.set(Permission.objects.filter(content_type__app_label="teams"))
    return other_pm


def url(obj_or_model, view, *args):
    opts = obj_or_model._meta
    if view in ("changelist", "add"):
        return reverse(f"admin:teams_{opts.model_name}_{view}", args=args)
    return reverse(f"admin:teams_{opts.model_name}_{view}", args=[obj_or_model.pk, *args])


def team_of(obj) -> Team:
    if isinstance(obj, Team):
        return obj
    if hasattr(obj, "team_id"):
        return obj.team
    parents = {TurnStep: "turn", KeeperEntry: "keeper", AnchorRevision: "anchor"}
    parent = {**parents, WebhookDelivery: "webhook"}[type(obj)]
    return getattr(obj, parent).team


def may_see(user, model) -> bool:
    if model in (ConsultantProfile, ModelEndpoint, ModelPrice, WorkerHeartbeat):
        return user.is_superuser
    name = model._meta.model_name
    return user.has_perm(f"teams.view_{name}") or user.has_perm(f"teams.change_{name}")


def snapshot() -> dict:
    """Every row of the teams app, and every team's managers."""
    rows = {m: list(m.objects.order_by("pk").values()) for m in TEAMS_MODELS}
    rows["managers"] = sorted(Team.managers.through.objects.values_list("team_id", "user_id"))
    return rows


def scoped_choices(form) -> list:
    """The rows a form's foreign-key and many-to-many fields offer (not an inline
    form's hidden own id: the formset only ever looks it up among the parent's rows,
    see test_an_inline_cannot_reach_another_teams_row; nor the consultant profiles,
    which are site-wide: every team may enable any of them)."""
    offered = []
    for name, field in form.fields.items():
        if name == form._meta.model._meta.pk.name:
            continue
        queryset = getattr(field, "queryset", None)
        if queryset is None or queryset.model is ConsultantProfile:
            continue
        if queryset.model._meta.app_label == "teams":
            offered.append(list(queryset))
    return offered


def test_every_changelist_shows_nothing_of_another_team(beta_pm, worlds):
    client = client_for(beta_pm)
    seen = []
    for model in TEAMS_MODELS:
        response = client.get(url(model, "changelist"))
        if not may_see(beta_pm, model):
            assert response.status_code == 403, model
            continue
        assert response.status_code == 200, model
        page = response.content.decode()
        assert url(worlds["alpha"][model], "change") not in page, model
        assert url(worlds["beta"][model], "change") in page, model
        assert "alpha" not in page.lower(), model  # rows, filters, counts
        seen.append(model._meta.model_name)
        if hasattr(model, "team_id"):
            filtered = client.get(
                url(model, "changelist") + f"?team__id__exact={worlds['alpha'][Team].pk}"
            )
            assert "alpha" not in filtered.content.decode().lower(), model
    assert {"team", "agent", "message", "pmrequest", "apitoken", "keeperentry"} <= set(seen)


def refusals(user, model) -> dict:
    """What the admin answers `user` for a row of `model` it cannot see, by view: 302
    to the index ("doesn't exist") where the user holds the view's permission, 403
    where not (Django asks for the permission first, except on the history page)."""
    request = RequestFactory().get("/")
    request.user = user
    model_admin = admin.site._registry[model]

    def status(allowed: bool) -> int:
        return 302 if allowed else 403

    return {
        "change": status(model_admin.has_view_or_change_permission(request)),
        "delete": status(model_admin.has_delete_permission(request)),
        "history": 302,
        "post change": status(model_admin.has_change_permission(request)),
    }


def test_no_page_of_another_teams_object_opens_or_changes_it(beta_pm, worlds):
    client = client_for(beta_pm)
    before = snapshot()
    for model, obj in worlds["alpha"].items():
        if model in (ConsultantProfile, ModelEndpoint, ModelPrice, WorkerHeartbeat):
            continue  # shared by both teams: superusers only, tested below
        expected = refusals(beta_pm, model)
        for view in ("change", "delete", "history"):
            response = client.get(url(obj, view))
            assert response.status_code == expected[view], (model, view)
            if response.status_code == 302:
                assert response.url == reverse("admin:index"), (model, view)
                shown = client.get(response.url).content.decode()
                assert "doesn’t exist" in shown and "alpha" not in shown.lower(), (model, view)
        response = client.post(url(obj, "change"), {})
        assert response.status_code == expected["post change"], model
        response = client.post(url(obj, "delete"), {"post": "yes"})
        assert response.status_code == expected["delete"], model
    profile = worlds["alpha"][ConsultantProfile]
    for view in ("change", "delete", "history"):
        assert client.get(url(profile, view)).status_code == 403
    assert client.get(url(ConsultantProfile, "add")).status_code == 403
    assert snapshot() == before


def test_no_admin_action_touches_another_teams_objects(beta_pm, worlds):
    client = client_for(beta_pm)
    before = snapshot()
    tried = set()
    for model, obj in worlds["alpha"].items():
        response = client.get(url(model, "changelist"))
        if response.status_code != 200:
            continue
        if response.context["action_form"] is None:
            continue  # no action for this user here
        choices = response.context["action_form"].fields["action"].choices
        for action in [name for name, _ in choices if name]:
            client.post(
                url(model, "changelist"),
                {"action": action, "_selected_action": [obj.pk], "index": 0, "post": "yes"},
            )
            tried.add(action)
    assert {"start_teams", "pause_teams", "resume_teams"} <= tried
    if beta_pm.has_perm("teams.delete_agent"):
        assert "delete_selected" in tried
    assert snapshot() == before


def test_an_action_on_every_row_acts_on_own_teams_only(beta_pm, worlds):
    client_for(beta_pm).post(
        url(Team, "changelist"),
        {
            "action": "start_teams",
            "select_across": 1,
            "_selected_action": [worlds["beta"][Team].pk],
        },
    )
    statuses = dict(Team.objects.values_list("slug", "status"))
    assert statuses == {"alpha": "idle", "beta": "running"}


def test_choices_on_add_and_change_forms_offer_own_teams_only(beta_pm, worlds):
    client = client_for(beta_pm)
    alpha, checked = worlds["alpha"][Team], []
    pages = [url(model, "add") for model in TEAMS_MODELS]
    pages += [url(obj, "change") for obj in worlds["beta"].values()]
    for page in pages:
        response = client.get(page)
        if response.status_code != 200:
            continue
        forms = [response.context["adminform"].form]
        for inline in response.context["inline_admin_formsets"]:
            forms += list(inline.formset.forms)
        for form in forms:
            for offered in scoped_choices(form):
                assert offered, page  # beta's own rows are offered...
                assert all(team_of(row) != alpha for row in offered), (page, offered)
                checked.append(page)
    assert url(worlds["beta"][Agent], "change") in checked  # the agent's team select
    if beta_pm.has_perm("teams.add_agent"):
        assert url(Agent, "add") in checked
        response = client.post(
            url(Agent, "add"),
            {"team": alpha.pk, "name": "mole", "role": "coder", "position": 9},
        )
        assert "team" in response.context["adminform"].form.errors
        assert not Agent.objects.filter(name="mole").exists()


def test_an_inline_cannot_reach_another_teams_row(beta_pm, worlds):
    client = client_for(beta_pm)
    beta, alpha_coach = worlds["beta"][Team], worlds["alpha"][Agent]
    data = form_data(client.get(url(beta, "change")))
    id_key = next(k for k, v in data.items() if k.startswith("agents-") and k.endswith("-id"))
    data[id_key] = str(alpha_coach.pk)
    data[id_key.replace("-id", "-model")] = "loom-offline-mole"
    client.post(url(beta, "change"), data)
    alpha_coach.refresh_from_db()
    assert alpha_coach.model != "loom-offline-mole" and alpha_coach.team_id != beta.pk


def test_a_pm_cannot_add_managers_a_workspace_or_a_team(beta_pm, worlds, pm):
    client = client_for(beta_pm)
    beta = worlds["beta"][Team]
    page = client.get(url(beta, "change"))
    assert "managers" not in page.context["adminform"].form.fields
    assert "workspace" not in page.context["adminform"].form.fields
    data = form_data(page)
    data.update({"managers": [str(beta_pm.pk), str(pm.pk)], "workspace": "/", "max_turns": "77"})
    assert client.post(url(beta, "change"), data).status_code == 302
    beta.refresh_from_db()
    assert beta.max_turns == 77 and beta.workspace == ""
    assert list(beta.managers.all()) == [beta_pm]
    alpha = worlds["alpha"][Team]
    client.post(url(alpha, "change"), {**data, "managers": [str(beta_pm.pk)]})
    assert list(alpha.managers.all()) == [pm]
    assert client.get(url(Team, "add")).status_code == 403
    client.post(url(Team, "add"), {**data, "slug": "mine", "name": "Mine"})
    assert not Team.objects.filter(slug="mine").exists()


def test_superuser_still_sees_and_edits_everything(superuser, worlds, pm):
    client = client_for(superuser)
    for model in TEAMS_MODELS:
        page = client.get(url(model, "changelist")).content.decode()
        for world in ("alpha", "beta"):
            assert url(worlds[world][model], "change") in page, (model, world)
            assert client.get(url(worlds[world][model], "change")).status_code == 200
    agent_add = client.get(url(Agent, "add")).context["adminform"].form
    assert set(agent_add.fields["team"].queryset) == {worlds["alpha"][Team], worlds["beta"][Team]}
    beta = worlds["beta"][Team]
    data = form_data(client.get(url(beta, "change")))
    data["managers"] = [str(pm.pk)]
    assert client.post(url(beta, "change"), data).status_code == 302
    assert list(beta.managers.all()) == [pm]


def test_a_pm_in_the_pm_group_runs_their_team_in_the_admin(pm, team, beta_team, agents):
    pm.groups.add(pm_group_ensure())
    client = client_for(pm)
    index = client.get(reverse("admin:index")).content.decode()
    assert "PM requests" in index and "Consultant profiles" not in index
    listing = client.get(url(Team, "changelist")).content.decode()
    assert url(team, "change") in listing and url(beta_team, "change") not in listing
    assert "beta" not in listing.lower()
    assert client.get(url(team, "change")).status_code == 200
    assert client.get(url(agents["coder"], "change")).status_code == 200

    changelist = url(Team, "changelist")
    client.post(changelist, {"action": "start_teams", "_selected_action": [team.pk]})
    team.refresh_from_db()
    assert team.status == "running"
    client.post(changelist, {"action": "pause_teams", "_selected_action": [team.pk]})
    team.refresh_from_db()
    assert team.status == "paused"
    client.post(changelist, {"action": "resume_teams", "_selected_action": [team.pk]})

    request = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    team_actions.team_start(team=beta_team)
    theirs = pm_requests.pm_request_open(team=beta_team, question="Theirs?")
    inbox = client.get(url(PMRequest, "changelist")).content.decode()
    assert url(request, "change") in inbox and url(theirs, "change") not in inbox
    assert client.post(url(request, "change"), {"answer": "Keep it small."}).status_code == 302
    request.refresh_from_db()
    assert request.status == "answered" and request.answered_by == pm
    assert Message.objects.filter(team=team, kind="pm", content="Keep it small.").exists()
    client.post(url(theirs, "change"), {"answer": "Mine now."})
    theirs.refresh_from_db()
    assert theirs.status == "open" and theirs.answer == ""


def test_outsiders_and_pms_without_the_group_get_no_admin(outsider, pm, team):
    assert client_for(outsider).get(url(Team, "changelist")).status_code == 302  # to login
    assert client_for(pm).get(url(Team, "changelist")).status_code == 403
