"""GET /api/teams/{team}/spend (teams/api/spend.py, selectors.team_spend): where a
team's money goes, per agent, phase and tool, and what passes, offload and caching
cut; the same on the team's admin page."""

from decimal import Decimal

import pytest
from django.urls import reverse

from teams import services
from teams.lib import catalog
from teams.lib.catalog import Usage
from teams.models import Keeper, KeeperEntry, ModelCall, Team
from teams.run import team_actions
from teams.run.usage import model_call_record
from tests.fakes.messages_api import text, tool
from tests.helpers import ApiClient, api_token, client_for, drain, make_consultation


@pytest.fixture(autouse=True)
def fresh_prices():
    catalog.prices_invalidate()


def reply(request):
    if request.agent == "researcher":
        return tool("pass_turn", {"reason": "agree"})
    if request.agent == "coach":  # the coach's history is read from the prompt cache
        return text("Go on.", cache_read_input_tokens=10_000)
    return text("Done.")


@pytest.fixture
def spent(team, agents, messages_api):
    """Five turns (coach, researcher passes, coder, reviewer, coach), a keeper the coder
    offloaded 400 characters to before its turn, a consultation and a smart retrieval."""
    note = services.message_add(team=team, content="old talk", author=agents["coder"])
    keeper = Keeper.objects.create(team=team, agent=agents["coder"], topic="old talk")
    KeeperEntry.objects.create(
        keeper=keeper, message=note, position=0, role="coder", content="x" * 400
    )
    messages_api(reply)
    team_actions.team_start(team=team)
    drain(team, limit=5)
    team_actions.team_pause(team=Team.objects.get(pk=team.pk))
    make_consultation(
        agents["coder"],
        prompt="Is this sound?",
        model="claude-haiku-4-5",
        input_tokens=1000,
        output_tokens=200,
        cost_usd=Decimal("0.002"),
    )
    model_call_record(
        team=team,
        agent=agents["reviewer"],
        model="claude-sonnet-4-6",
        usage=Usage(input_tokens=2000, output_tokens=100),
        purpose=ModelCall.Purpose.SMART_RETRIEVAL,
    )
    return team


def test_the_spend_per_agent_phase_tool_and_cut(spent, pm):
    response = ApiClient(client=client_for(pm)).get("/teams/alpha/spend")
    assert response.status_code == 200
    spend = response.json()
    agents = {row["agent"]: row for row in spend["agents"]}
    assert agents["coach"]["turns"] == 2
    assert agents["coach"]["cache_read_tokens"] == 20_000
    # 100 in x $3 + 20 out x $15 + 10,000 cache reads x $0.30, per million, twice
    assert Decimal(agents["coach"]["cost_usd"]) == Decimal("0.0072")
    assert agents["researcher"]["turns"] == 1
    assert [p["phase"] for p in spend["phases"]] == ["refinement"]
    assert spend["phases"][0]["turns"] == 5
    tools = {row["tool"]: row for row in spend["tools"]}
    assert tools["consultations"]["calls"] == 1
    assert Decimal(tools["consultations"]["cost_usd"]) == Decimal("0.002")
    assert tools["smart retrieval"]["calls"] == 1
    assert tools["smart retrieval"]["input_tokens"] == 2000
    assert Decimal(tools["smart retrieval"]["cost_usd"]) == Decimal("0.0075")
    cuts = {row["mechanism"]: row for row in spend["cuts"]}
    # "(researcher passes: agree)": 6 tokens kept out of the 3 later calls.
    assert cuts["passes"]["count"] == 1 and cuts["passes"]["tokens"] == 18
    # 400 characters offloaded: 100 tokens kept out of the coder's one later call.
    assert cuts["offload"]["count"] == 1 and cuts["offload"]["tokens"] == 100
    # 20,000 cache reads at $3 - $0.30 a million cheaper.
    assert cuts["caching"]["tokens"] == 20_000
    assert Decimal(cuts["caching"]["usd"]) == Decimal("0.054")
    assert spend["unknown_prices"] == []
    # The smart retrieval made outside a turn counts on the team.
    team = Team.objects.get(pk=spent.pk)
    assert Decimal(spend["spent_usd"]) == team.spent_usd


def test_an_agents_token_may_not_read_the_spend(spent):
    token = api_token(team=spent, agent=spent.agents.get(name="coder"))
    assert ApiClient(token).get("/teams/alpha/spend").status_code == 403


def test_the_team_page_shows_where_the_money_goes(spent, superuser):
    page = client_for(superuser).get(reverse("admin:teams_team_change", args=[spent.pk]))
    html = page.content.decode()
    assert "Where the money goes" in html
    assert "smart retrieval" in html and "consultations" in html
    assert "caching" in html and "$0.0540" in html
