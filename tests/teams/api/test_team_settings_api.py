"""A team's model-facing settings through the API: its phase lines, who may use which
tool, its anchor caps and the consultants its agents may ask."""

from teams.lib.catalog import OFFLINE_MODEL
from teams.models import ConsultantProfile


def test_the_phase_guide_and_tool_access_are_team_data(api, team):
    response = api.patch(
        "/teams/alpha",
        {
            "phase_guide": {"planning": {"coder": "estimate each task in hours"}},
            "tool_access": {"file_write": {"roles": ["tester"], "phases": []}},
            "max_anchors": 5,
        },
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["effective_phase_guide"]["planning"]["coder"] == "estimate each task in hours"
    assert body["effective_phase_guide"]["refinement"]["produce"].startswith("an agreed")
    assert body["tool_access"] == {"file_write": {"roles": ["tester"], "phases": []}}
    team.refresh_from_db()
    assert team.max_anchors == 5 and team.phase_guide["planning"]["coder"]


def test_bad_settings_are_refused_and_change_nothing(api, team):
    for body, field in [
        ({"tool_access": {"no_such_tool": {"roles": ["coder"]}}}, "tool_access"),
        ({"tool_access": {"file_write": {"roles": ["wizard"]}}}, "tool_access"),
        ({"phase_guide": {"planning": {"wizard": "x"}}}, "phase_guide"),
        ({"consultants": ["nobody"]}, "consultants"),
    ]:
        response = api.patch("/teams/alpha", body)
        assert response.status_code == 422, (body, response.json())
        assert field in str(response.json()), response.json()
    team.refresh_from_db()
    assert team.tool_access == {} and team.phase_guide == {}
    assert not team.consultants.exists()


def test_consultants_are_enabled_per_team(api, team, other_team):
    ConsultantProfile.objects.create(name="critic", provider="offline", model=OFFLINE_MODEL)
    response = api.patch("/teams/alpha", {"consultants": ["critic"]})
    assert response.status_code == 200 and response.json()["consultants"] == ["critic"]
    assert not other_team.consultants.exists()
    assert api.patch("/teams/alpha", {"consultants": []}).json()["consultants"] == []


def test_the_tool_list_says_who_has_each_tool_in_a_team(api, team):
    default = {t["name"]: t for t in api.get("/tools").json()}
    assert default["file_write"]["roles"] == ["coder", "reviewer"]
    assert default["file_write"]["phase_rule"].startswith("implementation-like phases")
    in_alpha = {t["name"]: t for t in api.get("/tools", team="alpha").json()}
    # Implementation, and the review after it, where a finding is fixed in place.
    assert in_alpha["file_write"]["phases"] == ["implementation", "code-review"]
    api.patch("/teams/alpha", {"tool_access": {"file_write": {"roles": ["tester"]}}})
    in_alpha = {t["name"]: t for t in api.get("/tools", team="alpha").json()}
    assert in_alpha["file_write"]["roles"] == ["tester"]
    assert api.get("/tools", team="nope").status_code == 404


def test_tool_approvals_are_a_team_setting(api, team):
    """PATCH sets built-in tools' approval policies; the tool list shows them; an
    unknown tool or policy is a 422 that changes nothing."""
    changed = api.patch(f"/teams/{team.slug}", {"tool_approvals": {"file_write": "ask"}})
    assert changed.status_code == 200 and changed.json()["tool_approvals"] == {"file_write": "ask"}
    listed = {t["name"]: t["approval"] for t in api.get(f"/tools?team={team.slug}").json()}
    assert listed["file_write"] == "ask" and listed["peer_message"] == "auto"
    for bad in ({"no_such_tool": "ask"}, {"file_write": "sometimes"}):
        assert api.patch(f"/teams/{team.slug}", {"tool_approvals": bad}).status_code == 422
    team.refresh_from_db()
    assert team.tool_approvals == {"file_write": "ask"}


def test_a_taken_slug_is_not_available_in_the_same_words_whoever_has_it(team, other_team, pm):
    """No slug oracle (issue 22): renaming, running again or creating with a taken slug
    answers the same 409 whether the team is the caller's own (gamma) or one it cannot
    see (beta, a 404 to it): it never says a team "exists"."""
    from django.contrib.auth.models import Permission

    from teams.services import SLUG_UNAVAILABLE
    from tests.helpers import ApiClient, api_token, make_team, state

    make_team("gamma").managers.add(pm)
    pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    api = ApiClient(api_token(user=pm))
    assert api.get("/teams/beta").status_code == 404
    before = state()
    for slug in ("gamma", "beta"):
        for response in (
            api.patch("/teams/alpha", {"slug": slug}),
            api.post("/teams/alpha/clone", {"slug": slug}),
            api.post("/teams", {"slug": slug}),
        ):
            assert response.status_code == 409, response.content
            assert response.json() == {"detail": SLUG_UNAVAILABLE.format(slug=slug)}
            assert "exist" not in response.content.decode()
    assert state() == before


def test_a_budget_in_other_digits_or_below_zero_is_refused(api, team):
    for figure in ("١٥٠", "-5", "1e3", "５"):
        response = api.patch("/teams/alpha", {"max_cost_usd": figure})
        assert response.status_code == 422, (figure, response.content)
    team.refresh_from_db()
    assert str(team.max_cost_usd) == "5.0000"
    assert api.patch("/teams/alpha", {"max_cost_usd": "7.50"}).status_code == 200
