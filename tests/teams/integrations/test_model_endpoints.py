"""Model endpoints as data: add, change, remove, with clear errors that change
nothing; and whether a model id can be used now, and why not."""

import pytest

from teams.errors import Conflict, InvalidInput, NotFound
from teams.integrations import model_endpoints
from teams.models import ModelEndpoint, ModelPrice
from tests.helpers import state

pytestmark = pytest.mark.django_db


def test_add_list_and_remove_an_endpoint(monkeypatch):
    monkeypatch.delenv("LAB_API_KEY", raising=False)
    model_endpoints.model_endpoint_add(
        name="lab",
        api="openai",
        base_url="http://10.1.2.3:8000/v1",
        key_env="LAB_API_KEY",
        local=True,
    )
    listed = {v.endpoint.name: v for v in model_endpoints.endpoint_list()}
    assert set(listed) == {"anthropic", "gemini", "lab", "ollama", "openai", "openrouter"}
    assert listed["lab"].problem.endswith("the variable LAB_API_KEY is not set")
    assert (listed["lab"].builtin, listed["lab"].changed) == (False, True)
    assert model_endpoints.model_endpoint_remove(name="lab") == "Endpoint 'lab' removed."
    assert not ModelEndpoint.objects.exists()


def test_a_private_address_is_refused_unless_the_endpoint_is_local(settings):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    before = state()
    with pytest.raises(InvalidInput) as refused:
        model_endpoints.model_endpoint_add(name="lab", api="openai", base_url="http://10.1.2.3/v1")
    assert refused.value.field == "base_url"
    assert "Mark the endpoint local to allow it." in refused.value.message
    assert state() == before
    model_endpoints.model_endpoint_add(
        name="lab", api="openai", base_url="http://10.1.2.3/v1", local=True
    )


@pytest.mark.parametrize(
    "fields, wording",
    [
        ({"name": "Big Lab"}, "lowercase letters, digits and -"),
        ({"name": "lab", "api": "grpc"}, "is not a valid choice"),
        ({"name": "lab", "key_env": "sk-live-123"}, "The NAME of an environment variable"),
        ({"name": "lab", "key_env": "LOOM_SECRET_KEY"}, "LOOM_ and DJANGO_"),
        ({"name": "lab", "header_vars": {"X-Org": "DJANGO_SECRET"}}, "may not send Loom's own"),
        ({"name": "lab", "header_vars": {"X-Org": "org-123"}}, "not the NAME of an environment"),
    ],
)
def test_bad_settings_are_refused_saying_why(fields, wording):
    before = state()
    with pytest.raises(InvalidInput, match=wording):
        model_endpoint_add_with(**fields)
    assert state() == before


def model_endpoint_add_with(**fields):
    return model_endpoints.model_endpoint_add(**{"api": "openai", **fields})


def test_a_built_in_is_changed_as_a_row_and_comes_back_when_it_is_removed():
    model_endpoints.model_endpoint_update(
        name="ollama", changes={"base_url": "http://192.168.1.20:11434/v1"}
    )
    view = model_endpoints.endpoint_get("ollama")
    assert view.endpoint.base_url == "http://192.168.1.20:11434/v1" and view.endpoint.local
    assert model_endpoints.model_endpoint_remove(name="ollama") == (
        "Endpoint 'ollama' is the built-in one again."
    )
    assert model_endpoints.endpoint_get("ollama").endpoint.base_url == "http://127.0.0.1:11434/v1"
    with pytest.raises(Conflict, match="'openai' is a built-in endpoint: it cannot be removed"):
        model_endpoints.model_endpoint_remove(name="openai")
    with pytest.raises(NotFound, match="No model endpoint named 'nowhere'"):
        model_endpoints.model_endpoint_remove(name="nowhere")


def test_the_name_cannot_change_and_a_second_add_is_a_conflict():
    model_endpoints.model_endpoint_add(name="lab", api="openai", local=True)
    with pytest.raises(InvalidInput, match="An endpoint's name cannot change"):
        model_endpoints.model_endpoint_update(name="lab", changes={"name": "lab2"})
    with pytest.raises(Conflict, match="already exists"):
        model_endpoints.model_endpoint_add(name="lab", api="anthropic")


def test_an_endpoint_an_agent_uses_is_not_removed(team, agents):
    model_endpoints.model_endpoint_add(name="lab", api="openai", local=True)
    agents["coder"].model = "lab/qwen3"
    agents["coder"].save(update_fields=["model"])
    with pytest.raises(Conflict, match=r"in use \(agent alpha/coder\)"):
        model_endpoints.model_endpoint_remove(name="lab")
    assert ModelEndpoint.objects.filter(name="lab").exists()


def test_why_a_model_id_cannot_be_used(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    problem = model_endpoints.model_id_problem
    assert "names the endpoint 'nowhere', which does not exist" in problem("nowhere/x")
    assert problem("openai/gpt-5-mini").endswith("the variable OPENAI_API_KEY is not set")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    assert problem("openai/gpt-5-mini").startswith("No price is known for the model")
    ModelPrice.objects.create(
        model="openai/gpt-5-mini", input_usd=1, output_usd=2, cache_write_usd=1, cache_read_usd=0
    )
    assert problem("openai/gpt-5-mini") == ""
    assert problem("ollama/qwen3:8b") == ""  # local, no key: free and ready
    assert problem("loom-offline") == ""
