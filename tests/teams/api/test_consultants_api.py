"""Consultants and consultations through the API."""

import pytest

from teams.models import ConsultantProfile
from tests.helpers import ApiClient, api_token, state

pytestmark = pytest.mark.django_db

TOKEN = "a2a-secret-7f3c9d"


def test_a_superuser_adds_and_changes_consultants(root_api, monkeypatch):
    monkeypatch.delenv("TEST_GPT_API_KEY", raising=False)
    created = root_api.post(
        "/consultants",
        {
            "name": "gpt",
            "provider": "openai",
            "model": "gpt-4.1-mini",
            "base_url": "https://api.openai.com/v1",
            "key_env": "TEST_GPT_API_KEY",
            "strengths": "breadth",
        },
    )
    assert created.status_code == 201
    assert created.json()["key_status"] == "the key variable TEST_GPT_API_KEY is not set"
    monkeypatch.setenv("TEST_GPT_API_KEY", "sk-x")
    listed = root_api.get("/consultants").json()
    assert [(c["name"], c["key_status"]) for c in listed] == [("gpt", "ready")]
    assert "sk-x" not in str(listed)
    changed = root_api.patch("/consultants/gpt", {"enabled": False, "strengths": "depth"})
    assert (changed.json()["enabled"], changed.json()["strengths"]) == (False, "depth")

    before = state()
    duplicate = root_api.post("/consultants", {"name": "gpt", "model": "loom-offline"})
    assert duplicate.status_code == 409 and state() == before
    bad = root_api.post("/consultants", {"name": "x", "model": "m", "key_env": "sk-live-123"})
    assert bad.status_code == 422 and state() == before  # a key, not a variable name
    # Loom's own settings are never a consultant's key (it would be sent to its server).
    secret = root_api.post(
        "/consultants", {"name": "x", "model": "m", "key_env": "LOOM_SECRET_KEY"}
    )
    assert secret.status_code == 422 and "LOOM_ and DJANGO_" in str(secret.json())
    assert state() == before
    assert root_api.patch("/consultants/nobody", {"enabled": True}).status_code == 404


def test_consultations_are_listed_with_their_output(api, team):
    critic = ConsultantProfile.objects.create(
        name="critic", model="loom-offline", strengths="logic"
    )
    architect = ConsultantProfile.objects.create(
        name="architect", model="loom-offline", strengths="design"
    )
    team.consultants.add(critic, architect)  # a team's agents ask only the ones it enabled
    asked = api.post("/teams/alpha/agents/coder/tools/ask_multi", {"prompt": "Which parser?"})
    assert asked.json()["result"].startswith("2 of 2 consultants answered.")
    listed = api.get("/teams/alpha/consultations").json()
    assert {c["consultant"] for c in listed} == {"critic", "architect"}
    assert len({c["batch"] for c in listed}) == 1
    assert all(c["status"] == "done" and c["output"]["confidence"] == 0.5 for c in listed)
    assert all(c["agent"] == "coder" and c["duration_seconds"] is not None for c in listed)


def test_only_superusers_see_how_consultants_are_reached(api, root_api, pm, monkeypatch):
    """Issue 22: anyone else sees a consultant's name, strengths and availability, not
    its endpoint, key variable, extra prompt or model (the admin shows them to
    superusers only)."""
    monkeypatch.delenv("TEST_GPT_API_KEY", raising=False)
    ConsultantProfile.objects.create(
        name="gpt",
        provider="openai",
        model="gpt-secret-tune",
        base_url="https://internal.example.test/v1",
        key_env="TEST_GPT_API_KEY",
        strengths="breadth",
        extra_prompt="Internal instructions.",
    )
    ConsultantProfile.objects.create(name="critic", model="loom-offline", strengths="logic")
    hidden = ("internal.example.test", "TEST_GPT_API_KEY", "Internal instructions", "gpt-secret")
    for client in (api, ApiClient(api_token(user=pm))):
        response = client.get("/consultants")
        assert response.status_code == 200
        listed = {c["name"]: c for c in response.json()}
        assert (listed["gpt"]["strengths"], listed["gpt"]["available"]) == ("breadth", False)
        assert (listed["critic"]["strengths"], listed["critic"]["available"]) == ("logic", True)
        assert all(word not in response.content.decode() for word in hidden)
    full = {c["name"]: c for c in root_api.get("/consultants").json()}["gpt"]
    assert full["base_url"] == "https://internal.example.test/v1"
    assert (full["key_env"], full["extra_prompt"]) == ("TEST_GPT_API_KEY", "Internal instructions.")
    assert full["key_status"] == "the key variable TEST_GPT_API_KEY is not set"


def test_an_a2a_consultant_is_added_and_what_the_guard_refuses_is_a_clear_422(
    root_api, settings, monkeypatch
):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    monkeypatch.setenv("SCOUT_A2A_TOKEN", TOKEN)
    body = {"name": "scout", "provider": "a2a", "model": "a2a", "key_env": "SCOUT_A2A_TOKEN"}
    inside = root_api.post("/consultants", {**body, "a2a_url": "http://127.0.0.1:9/a/"})
    assert inside.status_code == 422
    (detail,) = inside.json()["detail"]
    assert detail["loc"] == ["body", "a2a_url"] and "loopback" in detail["msg"]
    missing = root_api.post("/consultants", body).json()["detail"][0]
    assert missing["loc"] == ["body", "a2a_url"] and "needs its agent card's URL" in missing["msg"]
    secret = root_api.post(
        "/consultants", {**body, "a2a_url": "https://a.example.test/", "key_env": TOKEN}
    )
    assert secret.status_code == 422 and TOKEN not in str(ConsultantProfile.objects.all())
    created = root_api.post("/consultants", {**body, "a2a_url": "https://a.example.test/a2a/x/"})
    assert created.status_code == 201, created.json()
    out = created.json()
    assert (out["provider"], out["a2a_url"], out["key_status"]) == (
        "a2a",
        "https://a.example.test/a2a/x/",
        "ready",
    )
    other = root_api.patch("/consultants/scout", {"provider": "openai"}).json()["detail"][0]
    assert other["loc"] == ["body", "a2a_url"] and "Only an A2A consultant" in other["msg"]
    moved = root_api.patch("/consultants/scout", {"a2a_url": "http://10.0.0.5/a2a/x/"})
    assert moved.status_code == 422
    assert ConsultantProfile.objects.get().a2a_url == "https://a.example.test/a2a/x/"
