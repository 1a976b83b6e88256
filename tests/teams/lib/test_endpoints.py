"""Model ids: `ENDPOINT/MODEL` routes to that endpoint, a bare claude-… id to the
anthropic one, loom-offline to the offline model; the built-in endpoints, and rows
that add or replace them."""

import pytest

from teams.lib import catalog, endpoints
from teams.models import ModelEndpoint, ModelPrice

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    "model_id, endpoint, model",
    [
        ("ollama/qwen3:8b", "ollama", "qwen3:8b"),
        ("openai/gpt-5-mini", "openai", "gpt-5-mini"),
        ("openrouter/meta-llama/llama-4-scout", "openrouter", "meta-llama/llama-4-scout"),
        ("gemini/gemini-2.5-flash", "gemini", "gemini-2.5-flash"),
        ("claude-sonnet-4-6", "anthropic", "claude-sonnet-4-6"),
        ("anthropic/claude-haiku-4-5", "anthropic", "claude-haiku-4-5"),
    ],
)
def test_an_id_routes_to_its_endpoint_and_its_model_name(model_id, endpoint, model):
    route = endpoints.route(model_id)
    assert (route.endpoint.name, route.model, route.problem) == (endpoint, model, "")


def test_the_offline_model_has_no_endpoint():
    route = endpoints.route("loom-offline")
    assert route.endpoint is None and route.problem == ""


def test_an_unknown_endpoint_is_named_with_the_ones_that_exist():
    problem = endpoints.route("nowhere/some-model").problem
    assert problem.startswith("'nowhere/some-model' names the endpoint 'nowhere', which does not")
    assert "anthropic, gemini, ollama, openai, openrouter" in problem


def test_a_row_adds_an_endpoint_and_a_row_named_like_a_built_in_replaces_it():
    ModelEndpoint.objects.create(name="lab", api="openai", base_url="http://10.0.0.7:8000/v1")
    ModelEndpoint.objects.create(
        name="ollama", api="anthropic", base_url="http://127.0.0.1:11434", local=True
    )
    assert endpoints.route("lab/llama").endpoint.base_url == "http://10.0.0.7:8000/v1"
    replaced = endpoints.route("ollama/qwen3:8b").endpoint
    assert (replaced.api, replaced.builtin) == ("anthropic", False)
    ModelEndpoint.objects.filter(name="ollama").delete()  # a queryset delete: no save()
    endpoints.endpoints_invalidate()
    assert endpoints.route("ollama/qwen3:8b").endpoint.api == "openai"


def test_a_key_variable_unset_is_said_and_the_key_is_read_from_the_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    openai = endpoints.BUILTINS["openai"]
    assert openai.problem() == (
        "the endpoint 'openai' needs its key: the variable OPENAI_API_KEY is not set"
    )
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    assert openai.problem() == "" and openai.key() == "sk-from-env"
    assert endpoints.BUILTINS["ollama"].problem() == ""  # no key needed


def test_a_local_endpoints_models_are_free_unless_priced():
    assert catalog.price_for("ollama/qwen3:8b") == catalog.FREE
    assert catalog.priced_as_local("ollama/qwen3:8b")
    assert catalog.price_problem("ollama/qwen3:8b") == ""
    ModelPrice.objects.create(
        model="ollama/qwen3", input_usd=1, output_usd=2, cache_write_usd=1, cache_read_usd=0
    )
    assert catalog.price_for("ollama/qwen3:8b").output == 2
    assert not catalog.priced_as_local("ollama/qwen3:8b")


def test_a_hosted_endpoints_model_without_a_price_is_refused_and_anthropic_ids_share_prices():
    assert catalog.price_for("openai/gpt-5-mini") is None
    assert "No price is known for the model 'openai/gpt-5-mini'" in catalog.price_problem(
        "openai/gpt-5-mini"
    )
    assert catalog.price_for("anthropic/claude-sonnet-4-6") == catalog.price_for(
        "claude-sonnet-4-6"
    )
