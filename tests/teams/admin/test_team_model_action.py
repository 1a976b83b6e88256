"""The team list sets the same model for every agent of the selected teams in one
action, checking the model id first; and the live view's roster says each agent's
model and endpoint."""

import pytest
from django.urls import reverse

from teams.models import Agent
from tests.helpers import client_for, state

pytestmark = pytest.mark.django_db


def set_model(client, team, model):
    return client.post(
        reverse("admin:teams_team_changelist"),
        {"action": "set_model", "_selected_action": [team.pk], "model": model},
        follow=True,
    )


def test_every_agent_of_the_team_gets_the_model(admin_client, team):
    response = set_model(admin_client, team, "ollama/qwen3:8b")
    said = [str(m) for m in response.context["messages"]]
    assert said == ["alpha: ollama/qwen3:8b for coach, researcher, coder, reviewer."]
    assert set(Agent.objects.filter(team=team).values_list("model", flat=True)) == {
        "ollama/qwen3:8b"
    }


def test_a_model_that_cannot_be_used_changes_no_agent(admin_client, team, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    before = state()
    response = set_model(admin_client, team, "openai/gpt-5-mini")
    said = [str(m) for m in response.context["messages"]]
    assert said == [
        "No agent changed: the endpoint 'openai' needs its key: the variable OPENAI_API_KEY "
        "is not set"
    ]
    assert state() == before


def test_the_roster_says_each_agents_model_and_endpoint(team, agents, pm):
    agents["coder"].model = "ollama/qwen3:8b"
    agents["coder"].save(update_fields=["model"])
    page = client_for(pm).get(reverse("team-live", args=[team.slug])).content.decode()
    assert '<small class="agent-model"' in page
    assert "qwen3:8b on ollama (local)</small>" in page
