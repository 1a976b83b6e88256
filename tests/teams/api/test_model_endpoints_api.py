"""Model endpoints through the API: a superuser adds, reads, changes and removes
them; a PM reads names and whether each is usable, nothing else; agents are given
only model ids that can be used, and show their endpoint."""

import pytest

from teams.models import ModelEndpoint
from tests.helpers import state

pytestmark = pytest.mark.django_db


def test_a_superuser_adds_changes_and_removes_an_endpoint(root_api, monkeypatch):
    monkeypatch.delenv("LAB_API_KEY", raising=False)
    created = root_api.post(
        "/model-endpoints",
        {
            "name": "lab",
            "api": "openai",
            "base_url": "http://10.0.0.9:8000/v1",
            "key_env": "LAB_API_KEY",
            "header_vars": {"X-Team": "LAB_TEAM_ID"},
            "local": True,
        },
    )
    assert created.status_code == 201
    body = created.json()
    assert (body["name"], body["usable"], body["local"], body["builtin"]) == (
        "lab",
        False,
        True,
        False,
    )
    assert body["problem"].endswith("the variable LAB_API_KEY is not set")
    monkeypatch.setenv("LAB_API_KEY", "sk-lab")
    monkeypatch.setenv("LAB_TEAM_ID", "t-1")
    assert root_api.get("/model-endpoints/lab").json()["usable"] is True
    changed = root_api.patch("/model-endpoints/lab", {"base_url": "http://10.0.0.10:8000/v1"})
    assert changed.json()["base_url"] == "http://10.0.0.10:8000/v1"
    assert "sk-lab" not in str(root_api.get("/model-endpoints").json())
    assert root_api.delete("/model-endpoints/lab").status_code == 204
    assert root_api.get("/model-endpoints/lab").status_code == 404


def test_bad_input_is_a_clear_4xx_that_changes_nothing(root_api, settings):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    before = state()
    private = root_api.post(
        "/model-endpoints", {"name": "lab", "api": "openai", "base_url": "http://192.168.0.5/v1"}
    )
    assert private.status_code == 422
    assert "Mark the endpoint local to allow it." in str(private.json()["detail"])
    assert root_api.post("/model-endpoints", {"name": "Lab!", "api": "openai"}).status_code == 422
    a_key = root_api.post("/model-endpoints", {"name": "lab", "key_env": "sk-live-1"})
    assert a_key.status_code == 422
    assert root_api.patch("/model-endpoints/nowhere", {"local": True}).status_code == 404
    removed = root_api.delete("/model-endpoints/openai")
    assert removed.status_code == 409 and "built-in" in removed.json()["detail"]
    assert state() == before


def test_a_pm_reads_names_and_usability_only(api, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    listed = {e["name"]: e for e in api.get("/model-endpoints").json()}
    assert set(listed) == {"anthropic", "gemini", "ollama", "openai", "openrouter"}
    assert listed["ollama"]["usable"] is True and listed["openai"]["usable"] is False
    hidden = ("api", "base_url", "key_env", "header_vars", "local", "builtin", "problem")
    assert all(listed["openai"][field] is None for field in hidden)
    before = state()
    refused = api.post("/model-endpoints", {"name": "lab", "api": "openai"})
    assert (
        refused.status_code == 403
        and "Only a superuser may add model endpoints" in (refused.json()["detail"])
    )
    assert api.patch("/model-endpoints/ollama", {"local": False}).status_code == 403
    assert api.delete("/model-endpoints/ollama").status_code == 403
    assert state() == before and not ModelEndpoint.objects.exists()


def test_an_agents_model_is_checked_and_its_endpoint_shown(api, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    before = state()
    cases = {
        "nowhere/x": "names the endpoint 'nowhere', which does not exist",
        "gpt-5": "is a model no endpoint serves",
        "openai/gpt-5-mini": "the variable OPENAI_API_KEY is not set",
    }
    for model, why in cases.items():
        refused = api.patch("/teams/alpha/agents/coder", {"model": model})
        assert refused.status_code == 422 and why in str(refused.json()["detail"]), model
    monkeypatch.setenv("OPENAI_API_KEY", "sk-x")
    unpriced = api.post(
        "/teams/alpha/agents", {"name": "gpt", "role": "coder", "model": "openai/o9"}
    )
    assert unpriced.status_code == 422 and "No price is known" in str(unpriced.json()["detail"])
    assert state() == before
    local = api.patch("/teams/alpha/agents/coder", {"model": "ollama/qwen3:8b"})
    assert local.status_code == 200
    assert (local.json()["model"], local.json()["endpoint"]) == ("ollama/qwen3:8b", "ollama")
    assert api.get("/teams/alpha/agents/coach").json()["endpoint"] == ""  # the offline model
