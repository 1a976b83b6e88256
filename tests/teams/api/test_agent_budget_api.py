"""An agent's own cost budget through the API (issue 27): `max_cost_usd` on the
agents' operations, set, cleared and refused as a team's is, and a changed cap
warning again at 80% (teams.run.budgets.agent_budget_check)."""

from decimal import Decimal

import pytest

from teams.integrations import webhooks
from teams.models import Agent, Team, WebhookDelivery
from teams.run import budgets
from tests.helpers import make_turn, state

pytestmark = pytest.mark.django_db


def coder() -> Agent:
    return Agent.objects.get(team__slug="alpha", name="coder")


def test_an_agents_budget_is_shown_set_and_cleared(api, agents):
    listed = {a["name"]: a for a in api.get("/teams/alpha/agents").json()}
    assert listed["coder"]["max_cost_usd"] is None  # none: the team's applies
    changed = api.patch("/teams/alpha/agents/coder", {"max_cost_usd": "1.5"})
    assert changed.status_code == 200, changed.json()
    assert changed.json()["max_cost_usd"] == "1.5000"
    assert coder().max_cost_usd == Decimal("1.5")
    assert api.get("/teams/alpha").json()["agents"][2]["max_cost_usd"] == "1.5000"
    # Not given: unchanged; null: cleared.
    kept = api.patch("/teams/alpha/agents/coder", {"role_prompt": "Be brief."})
    assert kept.json()["max_cost_usd"] == "1.5000"
    cleared = api.patch("/teams/alpha/agents/coder", {"max_cost_usd": None})
    assert cleared.status_code == 200 and cleared.json()["max_cost_usd"] is None
    assert coder().max_cost_usd is None


def test_an_agent_is_created_with_a_budget(api, team):
    made = api.post("/teams/alpha/agents", {"name": "bot", "role": "coder", "max_cost_usd": 2})
    assert made.status_code == 201 and made.json()["max_cost_usd"] == "2.0000"
    assert team.agents.get(name="bot").max_cost_usd == Decimal("2")
    plain = api.post("/teams/alpha/agents", {"name": "bot2", "role": "coder"})
    assert plain.json()["max_cost_usd"] is None


@pytest.mark.parametrize(
    "value",
    [0, "0.00", -1, "-0.5", "abc", "١٥٠", "1.00001", "12345678", "NaN", "Infinity", True, {}],
)
def test_a_bad_budget_is_a_422_that_changes_nothing(api, agents, value):
    Agent.objects.filter(pk=agents["coder"].pk).update(max_cost_usd=Decimal("1"))
    before = state()
    response = api.patch("/teams/alpha/agents/coder", {"max_cost_usd": value})
    assert response.status_code == 422, response.json()
    assert response.json()["detail"][0]["loc"][-1] == "max_cost_usd"
    made = api.post("/teams/alpha/agents", {"name": "x", "role": "coder", "max_cost_usd": value})
    assert made.status_code == 422
    assert state() == before


def test_an_agents_token_may_not_change_its_own_budget(coder_api, agents):
    before = state()
    assert coder_api.patch("/teams/alpha/agents/coder", {"max_cost_usd": 100}).status_code == 403
    assert state() == before


def test_a_cap_changed_through_the_api_warns_again_at_80_percent(api, team, agents):
    """Warned at 90% of $1.00; PATCHing the same cap keeps it told, a new cap of
    $1.10 (82%) warns again, naming the coder."""
    webhooks.webhook_create(
        team=team, url="https://hooks.example.test/loom", events=["budget.warning"]
    )
    api.patch("/teams/alpha/agents/coder", {"max_cost_usd": "1.00"})
    make_turn(coder(), number=1, cost_usd=Decimal("0.90"))
    team = Team.objects.get(pk=team.pk)
    assert budgets.agent_budget_check(team, coder()) is True
    assert budgets.agent_budget_check(team, coder()) is False  # told once
    api.patch("/teams/alpha/agents/coder", {"max_cost_usd": 1})  # the same cap
    assert coder().cost_warned_at is not None
    assert budgets.agent_budget_check(team, coder()) is False
    api.patch("/teams/alpha/agents/coder", {"max_cost_usd": "1.10"})
    assert coder().cost_warned_at is None
    assert budgets.agent_budget_check(team, coder()) is True
    sent = [d.payload["data"] for d in WebhookDelivery.objects.order_by("id")]
    assert [(d["agent"], d["limit"], d["percent"]) for d in sent] == [
        ("coder", 1.0, 90.0),
        ("coder", 1.1, 81.8),
    ]
