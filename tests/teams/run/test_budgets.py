"""Budgets as PM decisions (teams/run/budgets.py), through the agent loop: the real
anthropic client against the fake Messages API, whose replies cost money (Sonnet:
100k input and 2k output tokens are $0.33 a call).

A call that would cross a cost budget is not made; at 80% the PM is warned once; at
the cap the team pauses with a budget request, answered with a quick choice or a
new cap, and the conversation says who decided."""

from decimal import Decimal

import pytest

from teams.conversation import pm_requests
from teams.errors import InvalidInput
from teams.integrations import webhooks
from teams.models import Message, PMRequest, Team, Turn, WebhookDelivery
from teams.run import budgets, team_actions
from tests.fakes.messages_api import text
from tests.helpers import client_for, drain, state

CALL = Decimal("0.33")


def costly(request):
    return text("Noted.", input_tokens=100_000, output_tokens=2000)


@pytest.fixture
def hooked(team):
    """Budget warnings and PM requests are queued for the PM's server (no delivery
    runs in these tests: the rows are what the PM's server would be sent)."""
    webhooks.webhook_create(
        team=team,
        url="https://hooks.example.test/loom",
        events=["budget.warning", "pm_request.opened"],
    )


def deliveries(event):
    return [d.payload["data"] for d in WebhookDelivery.objects.filter(event=event).order_by("id")]


def fresh(team) -> Team:
    return Team.objects.get(pk=team.pk)


def notes():
    return [m.content for m in Message.objects.filter(kind=Message.Kind.SYSTEM).order_by("id")]


@pytest.fixture
def at_the_cap(team, hooked, messages_api):
    """Alpha with a $1.00 budget after three $0.33 calls: the fourth would cross it."""
    Team.objects.filter(pk=team.pk).update(max_cost_usd=Decimal("1.00"))
    api = messages_api(costly)
    team_actions.team_start(team=fresh(team))
    drain(team)
    return api


def test_a_call_that_would_cross_the_cost_budget_is_not_made(at_the_cap, team):
    assert len(at_the_cap.requests) == 3  # the fourth speaker's call never left
    team = fresh(team)
    assert team.spent_usd == 3 * CALL and team.status == Team.Status.PAUSED
    blocked = Turn.objects.order_by("id").last()
    assert blocked.agent.name == "reviewer" and blocked.status == Turn.Status.CANCELLED
    assert blocked.cost_usd == 0
    assert (
        notes()[-1].startswith("The next model call of reviewer (up to $0.")
        and "would cross the team's cost budget; it was not made." in notes()[-1]
    )


def test_the_warning_and_the_budget_request_come_once_each(at_the_cap, team):
    assert deliveries("budget.warning") == [
        {"budget": "cost", "used": 0.99, "limit": 1.0, "percent": 99.0}
    ]
    (request,) = PMRequest.objects.filter(team=team)
    assert request.kind == PMRequest.Kind.BUDGET and request.status == PMRequest.Status.OPEN
    assert request.question == "Budget reached: $0.99 of $1.00"
    assert [d["question"] for d in deliveries("pm_request.opened")] == [request.question]
    assert deliveries("pm_request.opened")[0]["choices"] == ["Raise by 50%", "Double", "Stop"]
    # Resuming without deciding stops again at once, with no second request.
    team_actions.team_resume(team=fresh(team))
    drain(team)
    assert len(at_the_cap.requests) == 3
    assert fresh(team).status == Team.Status.PAUSED
    assert PMRequest.objects.filter(team=team).count() == 1
    assert len(deliveries("budget.warning")) == 1


def test_raise_by_50_percent_raises_the_cap_and_the_team_resumes(at_the_cap, team, pm):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="Raise by 50%", user=pm)
    team = fresh(team)
    assert team.max_cost_usd == Decimal("1.50") and team.status == Team.Status.RUNNING
    assert team.cost_warned_at is None  # the warning is armed again, for the new cap
    assert "Cost budget raised from $1.00 to $1.50 by pm (alice)." in notes()
    request.refresh_from_db()
    assert request.status == "answered" and request.answered_by == pm
    # The blocked speaker goes first; its call is made now.
    assert Turn.objects.get(status=Turn.Status.QUEUED).agent.name == "reviewer"
    drain(team)
    assert len(at_the_cap.requests) == 5  # $1.32 + up to $0.05 fits; then $1.65 is over
    assert at_the_cap.requests[3].agent == "reviewer"
    assert [w["limit"] for w in deliveries("budget.warning")] == [1.0, 1.5]
    latest = PMRequest.objects.filter(team=team).first()
    assert latest.question == "Budget reached: $1.65 of $1.50" and latest.status == "open"
    assert fresh(team).status == Team.Status.PAUSED


def test_stop_leaves_the_team_paused(at_the_cap, team, pm):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="stop", user=pm)
    team = fresh(team)
    assert team.status == Team.Status.PAUSED and team.max_cost_usd == Decimal("1.00")
    request.refresh_from_db()
    assert request.status == "answered" and request.answer == "stop"
    assert notes()[-1] == "Cost budget kept at $1.00 by pm (alice): the team stays paused."
    assert not Turn.objects.filter(status=Turn.Status.QUEUED).exists()
    assert len(at_the_cap.requests) == 3


def test_a_figure_sets_the_new_cap(at_the_cap, team, pm):
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="$2", user=pm)
    assert fresh(team).max_cost_usd == Decimal("2.00")
    assert "Cost budget raised from $1.00 to $2.00 by pm (alice)." in notes()


@pytest.mark.parametrize(
    "answer, error",
    [
        ("$0.50", "A budget of $0.50 is not above the $0.99 used already"),
        ("0.99", "A budget of $0.99 is not above the $0.99 used already"),
        ("maybe later", "Answer a budget request with Raise by 50%, Double, Stop or a figure"),
        ("-3", "Answer a budget request with"),
        ("50 turns", "Answer a budget request with"),
    ],
)
def test_bad_answers_are_refused_and_change_nothing(at_the_cap, team, pm, answer, error):
    request = PMRequest.objects.get(team=team)
    before = state()
    with pytest.raises(InvalidInput, match=error.replace("$", r"\$")):
        pm_requests.pm_request_answer(request_id=request.id, answer=answer, user=pm)
    assert state() == before


def test_the_turn_budget_asks_the_pm_too(team, pm, messages_api):
    Team.objects.filter(pk=team.pk).update(max_turns=3)
    api = messages_api(lambda r: text("Noted."))
    team_actions.team_start(team=fresh(team))
    drain(team)
    request = PMRequest.objects.get(team=team)
    assert request.question == "Turn budget reached: 3 of 3 turns"
    assert request.budget == "turns" and fresh(team).status == Team.Status.PAUSED
    with pytest.raises(InvalidInput, match="not above the 3 turns used already"):
        pm_requests.pm_request_answer(request_id=request.id, answer="2", user=pm)
    pm_requests.pm_request_answer(request_id=request.id, answer="Double", user=pm)
    assert "Turn budget raised from 3 to 6 by pm (alice)." in notes()
    assert fresh(team).turns_warned_at is None
    drain(team)
    assert len(api.requests) == 6
    assert PMRequest.objects.filter(team=team).first().question == (
        "Turn budget reached: 6 of 6 turns"
    )


def test_an_agents_own_budget(team, agents, pm, messages_api):
    coder = agents["coder"]
    coder.max_cost_usd = Decimal("0.02")  # less than its first call may cost
    coder.save()
    api = messages_api(costly)
    team_actions.team_start(team=fresh(team))
    drain(team)
    assert [r.agent for r in api.requests] == ["coach", "researcher"]
    request = PMRequest.objects.get(team=team)
    assert request.question == "Budget reached: $0.00 of $0.02 (the budget of coder)"
    assert request.agent == coder
    pm_requests.pm_request_answer(request_id=request.id, answer="1", user=pm)
    coder.refresh_from_db()
    assert coder.max_cost_usd == Decimal("1.00")
    assert "Cost budget of coder raised from $0.02 to $1.00 by pm (alice)." in notes()
    assert fresh(team).max_cost_usd == Decimal("5.00")  # the team's is unchanged
    drain(team, limit=1)
    assert api.requests[-1].agent == "coder"


def test_the_estimate_counts_the_request_and_the_output_it_may_take(db):
    system = [{"type": "text", "text": "x" * 4000}]
    estimate = budgets.call_estimate(
        model="claude-sonnet-4-6", system=system, messages=[], tools=[], max_tokens=1000
    )
    # ~1,000 input tokens at $3 and 1,000 output tokens at $15 per million.
    assert Decimal("0.018") <= estimate <= Decimal("0.0185")
    free = budgets.call_estimate(
        model="loom-offline", system=system, messages=[], tools=[], max_tokens=1000
    )
    assert free == 0


def test_the_inbox_offers_the_quick_choices_and_lists_the_warning(at_the_cap, team, pm):
    page = client_for(pm).get("/pm/").content.decode()
    assert "Budget reached: $0.99 of $1.00" in page
    for choice in ("Raise by 50%", "Double", "Stop"):
        assert f'value="{choice}"' in page
    assert "99% of the cost budget used ($0.99 of $1.00)" in page


def test_the_api_answers_a_budget_request(at_the_cap, team, pm):
    from tests.helpers import ApiClient

    request = PMRequest.objects.get(team=team)
    api = ApiClient(client=client_for(pm))
    listed = api.get("/teams/alpha/pm-requests", status="open").json()
    assert listed[0]["kind"] == "budget" and listed[0]["choices"][0] == "Raise by 50%"
    refused = api.post(f"/teams/alpha/pm-requests/{request.id}/answer", {"answer": "soon"})
    assert refused.status_code == 422
    answered = api.post(f"/teams/alpha/pm-requests/{request.id}/answer", {"answer": "Double"})
    assert answered.status_code == 200 and answered.json()["status"] == "answered"
    assert fresh(team).max_cost_usd == Decimal("2.00")


def test_a_budget_changed_in_the_settings_warns_again_at_80_percent(team):
    """Raising a cap in the admin or through PATCH re-arms its warning, as a budget
    request's answer does; saving the same cap again does not."""
    from teams import services

    Team.objects.filter(pk=team.pk).update(spent_usd=Decimal("4.50"), turn_count=170)
    assert budgets.budget_check(fresh(team)) == ["cost", "turns"]
    same = fresh(team)
    services.team_update(team=same, fields=["max_cost_usd", "max_turns"])
    assert budgets.budget_check(fresh(team)) == []  # unchanged caps: told already
    raised = fresh(team)
    raised.max_cost_usd, raised.max_turns = Decimal("5.50"), 210
    services.team_update(team=raised, fields=["max_cost_usd", "max_turns"])
    assert budgets.budget_check(fresh(team)) == ["cost", "turns"]  # 82% and 81% of the new caps


@pytest.fixture
def asked(team):
    """Alpha paused at its cost and turn budgets' requests (made as the loop makes them)."""

    def ask(budget):
        PMRequest.objects.filter(team=team).delete()
        return budgets.budget_stop(team=fresh(team), budget=budget)

    return ask


@pytest.mark.parametrize("budget", ["cost", "turns"])
@pytest.mark.parametrize("answer", ["١٥٠", "$١٥٠", "１５０", "-5", "-5.00", "1e3", "٢٠٠.٥"])
def test_a_new_cap_is_written_in_ascii_digits_and_above_zero(asked, team, pm, budget, answer):
    """Issue 22: "١٥٠" (Arabic-Indic digits) was read as 150."""
    request = asked(budget)
    before = state()
    with pytest.raises(InvalidInput, match="Answer a budget request with"):
        pm_requests.pm_request_answer(request_id=request.id, answer=answer, user=pm)
    assert state() == before


def test_the_api_and_the_inbox_refuse_other_digits(asked, team, pm):
    from tests.helpers import ApiClient

    request = asked("cost")
    api = ApiClient(client=client_for(pm))
    refused = api.post(f"/teams/alpha/pm-requests/{request.id}/answer", {"answer": "١٥٠"})
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["msg"].startswith("Answer a budget request with")
    page = client_for(pm).post(f"/pm/{request.id}/answer/", {"answer": "١٥٠"}, follow=True)
    assert "Answer a budget request with" in page.content.decode()
    assert PMRequest.objects.get(pk=request.pk).status == PMRequest.Status.OPEN
    assert fresh(team).max_cost_usd == Decimal("5.00")
    answered = api.post(f"/teams/alpha/pm-requests/{request.id}/answer", {"answer": "150"})
    assert answered.status_code == 200
    assert fresh(team).max_cost_usd == Decimal("150")


# --- an agent's own cost budget warns too ----------------------------------------


def agent_warnings():
    return [d for d in deliveries("budget.warning") if "agent" in d]


def test_an_agents_own_budget_warns_once_at_80_percent_naming_it(
    team, agents, hooked, pm, messages_api
):
    """The coder's first turn takes it to 82.5% of its $1.00: the PM is told once, live
    and by webhook, naming the coder; its next turn (still over 80%) tells nobody; a
    cap raised through the budget request warns again at 80% of the new cap."""
    from teams.models import Agent, LiveEvent
    from tests.helpers import per_agent

    free = text("Noted.", input_tokens=0, output_tokens=0)
    coder = agents["coder"]
    Agent.objects.filter(pk=coder.pk).update(max_cost_usd=Decimal("1.00"))
    messages_api(
        per_agent(
            {
                "coder": [text("Done.", input_tokens=270_000, output_tokens=1000)] + [free] * 5,
                **{name: [free] * 5 for name in ("coach", "researcher", "reviewer")},
            }
        )
    )
    team_actions.team_start(team=fresh(team))
    drain(team, limit=2)  # the coach and the researcher: nothing spent
    assert deliveries("budget.warning") == []
    drain(team, limit=1)  # the coder: $0.825 of its $1.00
    warned = {"budget": "cost", "used": 0.825, "limit": 1.0, "percent": 82.5, "agent": "coder"}
    assert deliveries("budget.warning") == [warned]  # the team's $5 budget: no warning
    (live,) = LiveEvent.objects.filter(team=team, name="budget.warning")
    assert {k: live.payload[k] for k in warned} == warned
    assert live.payload["team"] == "alpha"
    assert Agent.objects.get(pk=coder.pk).cost_warned_at is not None
    page = client_for(pm).get("/pm/").content.decode()
    assert "coder has used 82% of its $1.00 cost budget ($0.82)" in page
    live_page = client_for(pm).get("/teams/alpha/").content.decode()
    assert 'data-agent="coder">⚠ coder has used 82% of its $1.00 cost budget' in live_page

    drain(team, limit=4)  # its next turn: still over 80%, told already
    assert Turn.objects.filter(agent=coder, status=Turn.Status.DONE).count() == 2
    assert deliveries("budget.warning") == [warned]

    # The PM raises its cap through a budget request: 80% of the new cap warns again.
    coder.refresh_from_db()
    request = budgets.budget_stop(team=fresh(team), budget="cost", agent=coder)
    pm_requests.pm_request_answer(request_id=request.id, answer="1.02", user=pm)
    assert Agent.objects.get(pk=coder.pk).cost_warned_at is None
    assert "Cost budget of coder raised from $1.00 to $1.02 by pm (alice)." in notes()
    drain(team, limit=4)
    assert Turn.objects.filter(agent=coder, status=Turn.Status.DONE).count() == 3
    assert [(w["limit"], w["percent"]) for w in agent_warnings()] == [(1.0, 82.5), (1.02, 80.9)]


def test_an_agent_without_a_budget_of_its_own_costs_no_query(team, agents):
    """The check runs after every turn: an agent with no cap of its own is not even
    measured (tests/teams/engine/test_history_kept.py counts a turn's statements)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    coder, team = agents["coder"], fresh(team)
    assert coder.max_cost_usd is None
    with CaptureQueriesContext(connection) as queries:
        assert budgets.agent_budget_check(team, coder) is False
    assert queries.captured_queries == []


def test_an_agents_warning_is_taken_once_and_only_for_the_cap_measured(team, agents, hooked):
    """Two finishes racing warn once (the conditional update); a finish that read the
    cap before the PM changed it does not warn on the old cap."""
    from teams.models import Agent
    from tests.helpers import make_turn

    coder = agents["coder"]
    Agent.objects.filter(pk=coder.pk).update(max_cost_usd=Decimal("1.00"))
    Turn.objects.filter(pk=make_turn(coder, number=1).pk).update(cost_usd=Decimal("0.90"))
    stale = Agent.objects.get(pk=coder.pk)  # read before the PM raised the cap
    Agent.objects.filter(pk=coder.pk).update(max_cost_usd=Decimal("2.00"))
    assert budgets.agent_budget_check(fresh(team), stale) is False
    assert Agent.objects.get(pk=coder.pk).cost_warned_at is None
    first, second = Agent.objects.get(pk=coder.pk), Agent.objects.get(pk=coder.pk)
    Agent.objects.filter(pk=coder.pk).update(max_cost_usd=Decimal("1.00"))
    first.max_cost_usd = second.max_cost_usd = Decimal("1.00")
    assert budgets.agent_budget_check(fresh(team), first) is True
    assert budgets.agent_budget_check(fresh(team), second) is False
    assert agent_warnings() == [
        {"budget": "cost", "used": 0.9, "limit": 1.0, "percent": 90.0, "agent": "coder"}
    ]
