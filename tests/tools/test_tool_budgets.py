"""Money holds everywhere: every model call a tool makes (each consultant of ask_peer and
ask_multi, smart retrieval) passes the pre-call check a turn's call passes
(teams.run.budgets.call_refusal). A call that would cross the team's or the agent's cost
budget is never sent (the fake servers receive no request for it), the tool answers
"Error: ..." and the team pauses with a budget request; a model with no price is
refused by name."""

from decimal import Decimal

import pytest

from teams import services
from teams.conversation import keepers
from teams.models import ConsultantProfile, Consultation, Message, PMRequest, Team, Turn
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tests.tools.test_consult import anthropic_fake, by_lens, enabled, keys, openai_fake, peer_reply
from tests.tools.test_consult import peer_output as peer_output_data
from tools import registry

# The fake vendor APIs listen on loopback: the outbound guard is told to allow it.
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("loopback_allowed")]
__all__ = ["anthropic_fake", "keys", "openai_fake"]  # fixtures, used by name


def fresh(team) -> Team:
    return Team.objects.get(pk=team.pk)


def opus_profile(url, name, strengths):
    """A consultant on Opus ($15/$75): its 2,000 tokens of answer may cost $0.15."""
    return enabled(
        ConsultantProfile.objects.create(
            name=name,
            provider="anthropic",
            model="claude-opus-4-1",
            base_url=url,
            key_env="TEST_CLAUDE_API_KEY",
            strengths=strengths,
        )
    )


def test_ask_multi_never_sends_the_call_that_would_cross_the_budget(
    team, agents, anthropic_fake, messages_api
):
    """$0.40 pays for two Opus consultants' calls as estimated, not three: the third is
    never sent, the first two answer, and the team waits for the PM."""
    Team.objects.filter(pk=team.pk).update(max_cost_usd=Decimal("0.40"))
    # The coach's own calls are estimated at 2,048 reply tokens, so they fit what is left.
    team.agents.filter(name="coach").update(max_tokens=2048)
    server = anthropic_fake(by_lens)
    for name, lens in {"architect": "architecture", "critic": "correctness"}.items():
        opus_profile(server.url, name, lens)
    opus_profile(server.url, "tester", "testing")
    model = messages_api(
        per_agent(
            {
                "coach": [
                    tool("ask_multi", {"prompt": "Which parser design?"}, "toolu_multi"),
                    text("Noted."),
                ]
            }
        )
    )
    team_actions.team_start(team=fresh(team))
    drain(team, limit=1)
    systems = [request.body["system"] for request in server.requests]
    assert len(systems) == 2 and not any("testing" in s for s in systems)
    (result,) = model.requests[1].body["messages"][-1]["content"]
    content = result["content"]
    assert content.startswith("2 of 3 consultants answered.")
    tester = Consultation.objects.get(profile__name="tester")
    assert tester.status == "failed" and tester.cost_usd == 0
    assert tester.error.startswith("The consultation of tester for coach (up to $0.1")
    assert "would cross the team's cost budget; it was not made. The team is paused" in (
        tester.error
    )
    assert f"## tester (claude-opus-4-1), consultation {tester.pk}\nError: The consult" in content
    team = fresh(team)
    assert team.status == Team.Status.PAUSED
    (request,) = PMRequest.objects.filter(team=team, kind=PMRequest.Kind.BUDGET)
    assert request.question.startswith("Budget reached: $0.0") and request.agent is None
    note = Message.objects.filter(kind=Message.Kind.SYSTEM).order_by("id").last().content
    assert note.startswith("The consultation of tester for coach (up to $0.1")
    assert "The team is paused until the PM decides (a budget request in the PM inbox)" in note


def test_ask_peer_over_the_agents_own_budget_is_not_sent(ctx_for, agents, anthropic_fake):
    server = anthropic_fake([peer_reply(peer_output_data())])
    opus_profile(server.url, "critic", "correctness")
    coder = agents["coder"]
    coder.max_cost_usd = Decimal("0.05")
    coder.save()
    Team.objects.filter(pk=coder.team_id).update(status=Team.Status.RUNNING)
    result = registry.execute(
        "ask_peer", {"peer": "critic", "prompt": "Review it."}, ctx_for("coder")
    )
    assert server.requests == []
    assert "Error: The consultation of critic for coder (up to $0.1" in result.text
    assert "would cross its own cost budget; it was not made." in result.text
    request = PMRequest.objects.get(kind=PMRequest.Kind.BUDGET)
    assert request.agent == coder and "(the budget of coder)" in request.question
    assert fresh(coder.team).status == Team.Status.PAUSED


def test_a_consultant_without_a_price_is_refused_by_name(ctx_for, openai_fake):
    server = openai_fake([])
    enabled(
        ConsultantProfile.objects.create(
            name="mystery",
            provider="openai",
            model="gpt-unpriced-1",
            base_url=server.url,
            key_env="TEST_OPENAI_API_KEY",
        )
    )
    result = registry.execute("ask_multi", {"prompt": "Any idea?"}, ctx_for("coder"))
    assert server.requests == []
    assert result.text.startswith("0 of 1 consultants answered.")
    assert "Error: No price is known for the model 'gpt-unpriced-1', so Loom does not" in (
        result.text
    )
    assert "A superuser adds its price in the admin, Model prices" in result.text
    assert not PMRequest.objects.exists()  # not a budget: nothing for the PM to raise


def test_the_offline_consultant_is_free_and_always_allowed(ctx_for, team):
    Team.objects.filter(pk=team.pk).update(max_cost_usd=Decimal("0"))
    enabled(ConsultantProfile.objects.create(name="critic", model="loom-offline"))
    result = registry.execute("ask_peer", {"peer": "critic", "prompt": "Hm?"}, ctx_for("coder"))
    assert "(offline model) Looking at this through general engineering" in result.text
    assert not PMRequest.objects.exists()


@pytest.fixture
def offloaded(agents):
    note = services.message_add(team=agents["coder"].team, content="Tokens are signed.")
    return keepers.offload(agent=agents["coder"], messages=[note, note], topic="auth")


def test_smart_retrieval_over_the_budget_is_not_sent(
    ctx_for, team, agents, offloaded, messages_api
):
    api = messages_api([text("They are signed with HMAC.")])
    Team.objects.filter(pk=team.pk).update(
        status=Team.Status.RUNNING, max_cost_usd=Decimal("1.00"), spent_usd=Decimal("0.999")
    )
    turn = Turn.objects.create(
        team=team, agent=agents["coder"], status="running", model="claude-sonnet-4-6"
    )
    result = registry.execute(
        "context_retrieve", {"query": "How are tokens signed?"}, ctx_for("coder", turn=turn)
    )
    assert api.requests == []
    assert result.is_error
    assert result.text.startswith("Error: A smart retrieval of coder (up to $0.01")
    assert "would cross the team's cost budget; it was not made." in result.text
    assert fresh(team).status == Team.Status.PAUSED
    assert PMRequest.objects.filter(kind=PMRequest.Kind.BUDGET).count() == 1


def test_smart_retrieval_within_the_budget_is_sent(ctx_for, team, agents, offloaded, messages_api):
    api = messages_api([text("They are signed with HMAC.")])
    result = registry.execute(
        "context_retrieve", {"query": "How are tokens signed?"}, ctx_for("coder")
    )
    assert result.text == "They are signed with HMAC." and len(api.requests) == 1
