"""A team's model-facing settings through the API: its phase lines, who may use which
tool, its anchor caps and the consultants its agents may ask."""

from teams.catalog import OFFLINE_MODEL
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
    assert in_alpha["file_write"]["phases"] == ["implementation"]
    api.patch("/teams/alpha", {"tool_access": {"file_write": {"roles": ["tester"]}}})
    in_alpha = {t["name"]: t for t in api.get("/tools", team="alpha").json()}
    assert in_alpha["file_write"]["roles"] == ["tester"]
    assert api.get("/tools", team="nope").status_code == 404
