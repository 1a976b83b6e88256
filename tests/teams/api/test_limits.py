"""Every text a person or a program submits has a documented maximum
(docs/pm-pages.md, "Limits"): at the limit it is accepted, one character over it is
a 422 and nothing is stored."""

import pytest

from teams.models import HUMAN_TEXT_LIMIT, PLAN_LIMIT, Anchor, Message, PMRequest, Team


def stored(team):
    """What the refused requests must leave alone."""
    team.refresh_from_db()
    return (
        team.name,
        team.goal,
        team.plan,
        tuple(team.agents.values_list("role_prompt", "trajectory")),
        tuple(Anchor.objects.filter(team=team).values_list("key", "value")),
        Message.objects.filter(team=team).count(),
        tuple(PMRequest.objects.filter(team=team).values_list("status", "answer")),
    )


# (method, path, field, limit, other fields of the body)
# (method, path, field, its limit, the body around it, the status of a body at the limit)
LIMITS = [
    ("post", "/teams/alpha/messages", "content", HUMAN_TEXT_LIMIT, {}, 201),
    ("post", "/teams/alpha/pm-requests/{request}/answer", "answer", HUMAN_TEXT_LIMIT, {}, 200),
    ("patch", "/teams/alpha", "goal", HUMAN_TEXT_LIMIT, {}, 200),
    ("patch", "/teams/alpha", "plan", PLAN_LIMIT, {}, 200),
    ("patch", "/teams/alpha", "name", 120, {}, 200),
    ("patch", "/teams/alpha/agents/coder", "role_prompt", HUMAN_TEXT_LIMIT, {}, 200),
    ("put", "/teams/alpha/anchors/db", "value", HUMAN_TEXT_LIMIT, {}, 200),
    ("post", "/teams/alpha/agents/bot/messages", "content", HUMAN_TEXT_LIMIT, {}, 201),
]


@pytest.mark.parametrize(("method", "path", "field", "limit", "body", "ok"), LIMITS)
def test_one_character_over_the_limit_is_a_422_and_nothing_is_stored(
    api, furnished, team, method, path, field, limit, body, ok
):
    from teams import services

    services.agent_create(team=team, name="bot", role="external")
    request = PMRequest.objects.get(team=team, status="open")
    path = path.format(request=request.id)
    before = stored(team)
    over = getattr(api, method)(path, {**body, field: "x" * (limit + 1)})
    assert over.status_code == 422, over.content
    assert field in str(over.json()["detail"])
    assert stored(team) == before
    at = getattr(api, method)(path, {**body, field: "x" * limit})
    assert at.status_code == ok, at.content


def test_the_pages_form_refuses_an_over_long_goal(admin_client, team):
    from django.urls import reverse

    url = reverse("admin:teams_team_change", args=[team.pk])
    page = admin_client.get(url)
    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k != "managers"}
    data.update(goal="x" * (HUMAN_TEXT_LIMIT + 1), phases='["refinement"]')
    formsets = {
        f"{p}-{n}": 0 for p in ("agents", "anchors") for n in ("TOTAL_FORMS", "INITIAL_FORMS")
    }
    response = admin_client.post(url, {**data, **formsets})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["goal"] == [
        "At most 20000 characters are accepted here (this text has 20001)."
    ]
    assert Team.objects.get(pk=team.pk).goal == "Ship the parser."


def test_a_body_over_the_upload_limit_is_a_413_with_a_json_body(api, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = api.post(
        "/teams/alpha/agents/coder/tools/peer_ask_question", {"question": "x" * 20_000}
    )
    assert response.status_code == 413
    assert response.json() == {
        "detail": "The request body is over 10,000 bytes, the most Loom accepts."
    }
