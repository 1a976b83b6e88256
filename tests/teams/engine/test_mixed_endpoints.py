"""A mixed team: the coach on Claude (the fake Messages API), the coder on an
OpenAI-style endpoint (the fake Chat Completions server), a consultant the coder asks
on a third id (a second fake server): each request goes to its own server and the
costs add up per agent."""

import json
from decimal import Decimal

import pytest

from teams.lib.catalog import Usage, cost_of
from teams.models import ConsultantProfile, Consultation, Team, Turn
from teams.run import team_actions
from teams.run.budgets import agent_spent
from tests.fakes.messages_api import text
from tests.fakes.openai_api import Completion, ToolCall
from tests.helpers import drain, make_team, per_agent, price_model

pytestmark = pytest.mark.django_db

ADVICE = {
    "answer": "Parse with a table.",
    "confidence": 0.7,
    "key_points": ["Tables are small."],
    "suggested_actions": [],
    "file_references": [],
    "execution_notes": "",
}


def test_each_agent_calls_its_own_endpoint_and_pays_its_own_way(messages_api, openai_api):
    claude = messages_api(per_agent({"coach": [text("Start.", input_tokens=1000)]}))
    coder_api = openai_api(
        [
            Completion(
                "Asking.",
                tool_calls=[ToolCall("ask_peer", json.dumps({"peer": "critic", "prompt": "How?"}))],
                prompt_tokens=2000,
                completion_tokens=100,
            ),
            Completion("Done, with advice.", prompt_tokens=2500, completion_tokens=50),
        ]
    )
    critic_api = openai_api(
        [Completion(json.dumps(ADVICE), prompt_tokens=700, completion_tokens=300)], name="third"
    )
    price_model("fake/gpt-coder", input_usd="1", output_usd="4")
    price_model("third/gpt-critic", input_usd="3", output_usd="9")
    critic = ConsultantProfile.objects.create(
        name="critic", provider="openai", model="third/gpt-critic"
    )
    team = make_team(
        "mixed",
        agents=[
            {"name": "coach", "role": "coach", "model": "claude-haiku-4-5"},
            {"name": "coder", "role": "coder", "model": "fake/gpt-coder"},
        ],
    )
    team.consultants.add(critic)
    team_actions.team_start(team=team)
    drain(team, limit=2)

    assert [r.agent for r in claude.requests] == ["coach"]
    assert [r.body["model"] for r in coder_api.requests] == ["gpt-coder", "gpt-coder"]
    tool_said = [m for m in coder_api.requests[1].body["messages"] if m["role"] == "tool"]
    assert [r.body["model"] for r in critic_api.requests] == ["gpt-critic"], tool_said
    consultation = Consultation.objects.get()
    assert consultation.status == Consultation.Status.DONE, consultation.error
    assert consultation.model == "third/gpt-critic"
    assert consultation.cost_usd == cost_of("third/gpt-critic", Usage(700, 300))

    coach, coder = team.agents.get(name="coach"), team.agents.get(name="coder")
    coach_turn = Turn.objects.get(agent=coach, status=Turn.Status.DONE)
    spoken = Usage(
        coach_turn.input_tokens,
        coach_turn.output_tokens,
        coach_turn.cache_creation_tokens,
        coach_turn.cache_read_tokens,
    )
    assert coach_turn.cost_usd == cost_of("claude-haiku-4-5", spoken)
    coder_turn = Turn.objects.get(agent=coder, status=Turn.Status.DONE)
    own = cost_of("fake/gpt-coder", Usage(2000, 100)) + cost_of("fake/gpt-coder", Usage(2500, 50))
    assert coder_turn.cost_usd == own + consultation.cost_usd
    assert agent_spent(coder) == own + consultation.cost_usd
    assert agent_spent(coach) == coach_turn.cost_usd > 0
    team.refresh_from_db()
    assert team.spent_usd == agent_spent(coach) + agent_spent(coder)
    assert team.status == Team.Status.RUNNING
    assert Decimal(team.spent_usd) > 0
