"""An agent's reply token limit (issue 35): `max_tokens` on the agents' operations, its
default by model, and the requests of a turn carrying it, through the real anthropic
client and the fake Messages API."""

import pytest

from teams.lib.catalog import CLAUDE_MAX_TOKENS
from teams.models import Agent
from teams.run import team_actions
from tests.fakes.messages_api import text
from tests.helpers import drain, state

pytestmark = pytest.mark.django_db


def test_max_tokens_is_shown_set_and_cleared(api, agents):
    listed = {a["name"]: a for a in api.get("/teams/alpha/agents").json()}
    assert listed["coder"]["max_tokens"] is None
    changed = api.patch("/teams/alpha/agents/coder", {"max_tokens": 16000})
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["max_tokens"], changed.json()["reply_tokens"]) == (16000, 16000)
    assert Agent.objects.get(pk=agents["coder"].pk).max_tokens == 16000
    cleared = api.patch("/teams/alpha/agents/coder", {"max_tokens": None})
    assert cleared.json()["max_tokens"] is None
    made = api.post("/teams/alpha/agents", {"name": "bot", "role": "coder", "max_tokens": 4096})
    assert made.status_code == 201 and made.json()["max_tokens"] == 4096


@pytest.mark.parametrize("value", [0, 255, 128_001, "many", 1.5, -1])
def test_a_bad_max_tokens_is_a_422_that_changes_nothing(api, agents, value):
    before = state()
    response = api.patch("/teams/alpha/agents/coder", {"max_tokens": value})
    assert response.status_code == 422, response.json()
    assert response.json()["detail"][0]["loc"][-1] == "max_tokens"
    assert state() == before


def test_requests_carry_max_tokens_as_configured(team, agents, messages_api):
    Agent.objects.filter(pk=agents["coder"].pk).update(max_tokens=12_000)
    api = messages_api(lambda request: text("Noted."))
    team_actions.team_start(team=team)
    drain(team, limit=4)
    by_agent = {request.agent: request.body["max_tokens"] for request in api.requests}
    assert by_agent == {
        "coach": CLAUDE_MAX_TOKENS,
        "researcher": CLAUDE_MAX_TOKENS,
        "coder": 12_000,
        "reviewer": CLAUDE_MAX_TOKENS,
    }
    assert CLAUDE_MAX_TOKENS == 8192
