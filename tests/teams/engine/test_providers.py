"""Model providers are chosen by the model id, never by whether a key is set."""

import pytest

from teams import services
from teams.engine.offline import OfflineProvider
from teams.engine.providers import AnthropicProvider, model_problem, provider_for
from teams.errors import ModelError
from teams.lib.catalog import OFFLINE_MODEL, default_model
from teams.models import Message, Team, Turn
from teams.run import team_actions
from tests.fakes.messages_api import text
from tests.helpers import drain


def test_offline_id_is_the_offline_model_even_with_a_key(db, settings):
    settings.ANTHROPIC_API_KEY = "sk-set"
    assert isinstance(provider_for(OFFLINE_MODEL), OfflineProvider)
    assert isinstance(provider_for("claude-haiku-4-5"), AnthropicProvider)


def test_claude_without_a_key_says_which_variable_is_missing(db, settings):
    settings.ANTHROPIC_API_KEY = None
    with pytest.raises(ModelError, match="ANTHROPIC_API_KEY is not set"):
        provider_for("claude-sonnet-4-6")
    assert "loom-offline" in model_problem("claude-sonnet-4-6")
    assert model_problem(OFFLINE_MODEL) == ""


def test_an_unknown_model_id_is_refused_clearly(db):
    for model in ("gpt-9", "claude-", "loom-offline-2"):
        with pytest.raises(ModelError, match=f"'{model}' is a model no endpoint serves"):
            provider_for(model)
    with pytest.raises(ModelError, match="names the endpoint 'nowhere', which does not exist"):
        provider_for("nowhere/some-model")


def test_default_model_follows_the_key_unless_loom_model_is_set(settings):
    settings.LOOM_MODEL, settings.ANTHROPIC_API_KEY = None, None
    assert default_model() == OFFLINE_MODEL
    settings.ANTHROPIC_API_KEY = "sk-set"
    assert default_model() == "claude-sonnet-4-6"
    settings.LOOM_MODEL = "claude-haiku-4-5"
    assert default_model() == "claude-haiku-4-5"


def test_a_claude_agent_without_a_key_fails_its_turn_saying_so(db, settings):
    settings.ANTHROPIC_API_KEY = None
    team = services.team_create(
        slug="keyless",
        agents=[{"name": "coach", "role": "coach", "model": "claude-sonnet-4-6"}],
    )
    team_actions.team_start(team=team)
    (turn,) = drain(team)
    assert turn.status == Turn.Status.FAILED and "ANTHROPIC_API_KEY is not set" in turn.error
    team.refresh_from_db()
    assert team.status == Team.Status.PAUSED
    note = Message.objects.get(kind="system")
    assert "ANTHROPIC_API_KEY is not set" in note.content and "resume to retry" in note.content


def test_an_offline_agent_in_a_team_with_a_key_never_calls_the_api(team, agents, messages_api):
    api = messages_api([text("From Claude.")])
    coach = agents["coach"]
    coach.model = OFFLINE_MODEL
    coach.save(update_fields=["model"])
    team_actions.team_start(team=team)
    (turn,) = drain(team, limit=1)
    assert turn.model == OFFLINE_MODEL and turn.status == Turn.Status.DONE
    assert api.requests == []
    assert "(offline model)" in Message.objects.get(kind="chat").content


def test_every_endpoint_api_and_the_offline_model_have_a_provider():
    from teams.engine.providers import PROVIDERS
    from teams.models import EndpointApi

    assert set(PROVIDERS) == {OFFLINE_MODEL, *EndpointApi.values}


def test_an_anthropic_style_endpoint_with_its_own_address_uses_the_anthropic_sdk(
    team, messages_api
):
    from teams.models import ModelEndpoint
    from tests.fakes.messages_api import FakeMessagesAPI

    messages_api([])  # Claude's own fake: it must receive nothing
    with FakeMessagesAPI([text("From llama.cpp.")]) as local:
        ModelEndpoint.objects.create(
            name="llamacpp", api="anthropic", base_url=local.url, local=True
        )
        coach = team.agents.get(name="coach")
        coach.model = "llamacpp/qwen3-8b"
        coach.save(update_fields=["model"])
        team_actions.team_start(team=team)
        (turn,) = drain(team, limit=1)
    assert turn.status == Turn.Status.DONE and turn.cost_usd == 0  # local, unpriced
    assert [r.body["model"] for r in local.requests] == ["qwen3-8b"]
    assert Message.objects.get(kind="chat").content == "From llama.cpp."
