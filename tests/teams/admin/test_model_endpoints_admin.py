"""Model endpoints in the admin (superusers only), and an agent's model checked and
its endpoint shown on its page."""

import pytest
from django.urls import reverse

from teams.models import ModelEndpoint
from tests.helpers import client_for, state
from tests.teams.admin.test_admin import form_data

pytestmark = pytest.mark.django_db


def test_a_superuser_adds_an_endpoint_and_its_status_says_what_is_missing(
    admin_client, monkeypatch
):
    monkeypatch.delenv("LAB_API_KEY", raising=False)
    add = reverse("admin:teams_modelendpoint_add")
    data = {
        "name": "lab",
        "api": "openai",
        "base_url": "http://10.0.0.3:8000/v1",
        "key_env": "LAB_API_KEY",
        "header_vars": "{}",
        "local": "on",
    }
    assert admin_client.post(add, data).status_code == 302
    row = ModelEndpoint.objects.get(name="lab")
    page = admin_client.get(reverse("admin:teams_modelendpoint_change", args=[row.pk]))
    assert "cannot be called: the endpoint &#x27;lab&#x27; needs its key" in page.content.decode()
    listing = admin_client.get(reverse("admin:teams_modelendpoint_changelist")).content.decode()
    assert "Built in (no row needed" in listing and "openrouter" in listing


def test_a_private_address_needs_the_local_mark(admin_client, settings):
    settings.LOOM_OUTBOUND_ALLOW_PRIVATE = False
    before = state()
    data = {"name": "lab", "api": "openai", "base_url": "http://10.0.0.3/v1", "header_vars": "{}"}
    response = admin_client.post(reverse("admin:teams_modelendpoint_add"), data)
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors["base_url"]
    assert "Mark the endpoint local to allow it." in errors[0]
    assert state() == before


def test_a_pm_cannot_see_endpoints(pm):
    page = client_for(pm).get(reverse("admin:teams_modelendpoint_changelist"))
    assert page.status_code == 403


def test_an_agents_model_is_checked_when_it_changes_and_its_endpoint_shown(
    admin_client, agents, monkeypatch
):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    url = reverse("admin:teams_agent_change", args=[agents["coder"].pk])
    data = form_data(admin_client.get(url))
    before = state()
    response = admin_client.post(url, {**data, "model": "openai/gpt-5-mini"})
    errors = response.context["adminform"].form.errors["model"]
    assert errors == [
        "This model cannot be used: the endpoint 'openai' needs its key: the variable "
        "OPENAI_API_KEY is not set"
    ]
    assert state() == before
    assert admin_client.post(url, {**data, "model": "ollama/qwen3:8b"}).status_code == 302
    page = admin_client.get(url).content.decode()
    assert "ollama (openai API, local), model qwen3:8b" in page
