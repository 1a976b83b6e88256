"""Each `chat` span names the provider its model id's endpoint is (the GenAI
conventions' gen_ai.provider.name) and the model, on every provider."""

import pytest
from django.core.cache import cache
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from teams.models import ModelEndpoint
from teams.observability import telemetry
from teams.run import team_actions
from tests.fakes.openai_api import Completion
from tests.helpers import drain, make_team

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "model, provider",
    [
        ("claude-sonnet-4-6", "anthropic"),
        ("anthropic/claude-haiku-4-5", "anthropic"),
        ("openai/gpt-5-mini", "openai"),
        ("gemini/gemini-2.5-flash", "gcp.gemini"),
        ("openrouter/meta-llama/llama-4-scout", "openrouter"),
        ("ollama/qwen3:8b", "ollama"),
        ("loom-offline", "loom.offline"),
        ("nowhere/x", "unknown"),
    ],
)
def test_the_provider_name_of_each_id(model, provider):
    assert telemetry.provider_name(model) == provider


def test_an_endpoint_a_superuser_added_is_named_by_its_api():
    ModelEndpoint.objects.create(
        name="lab", api="anthropic", base_url="http://10.0.0.2", local=True
    )
    assert telemetry.provider_name("lab/llama") == "anthropic"


def test_a_turn_on_an_openai_style_endpoint_is_traced_with_its_provider_and_model(openai_api):
    openai_api([Completion("Traced.", prompt_tokens=300, completion_tokens=20)])
    exporter = InMemorySpanExporter()
    cache.clear()
    telemetry.install(exporter, batch=False)
    try:
        team = make_team("traced", agents=[{"name": "coach", "role": "coach", "model": "fake/m1"}])
        team_actions.team_start(team=team)
        drain(team, limit=1)
    finally:
        telemetry.shutdown()
        cache.clear()
    (chat,) = [s for s in exporter.get_finished_spans() if s.name.startswith("chat ")]
    assert chat.name == "chat fake/m1"
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "fake/m1"
    assert chat.attributes["gen_ai.usage.input_tokens"] == 300
