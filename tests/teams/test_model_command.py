"""`manage.py model endpoint add|list|remove`: the model endpoints from the shell,
with clear errors that change nothing."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from teams.models import ModelEndpoint

pytestmark = pytest.mark.django_db


def model(*args) -> str:
    out = StringIO()
    call_command("model", *args, stdout=out)
    return out.getvalue()


def test_add_list_and_remove(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    said = model(
        "endpoint",
        "add",
        "vllm",
        "--api",
        "openai",
        "--base-url",
        "http://10.0.0.4:8000/v1",
        "--key-env",
        "VLLM_API_KEY",
        "--header",
        "X-Tenant=VLLM_TENANT",
        "--local",
    )
    assert said.startswith("Endpoint 'vllm' added (not usable yet: the endpoint 'vllm' needs")
    assert "Models: vllm/MODEL." in said
    row = ModelEndpoint.objects.get(name="vllm")
    assert (row.local, row.header_vars) == (True, {"X-Tenant": "VLLM_TENANT"})
    lines = {
        json.loads(line)["name"]: json.loads(line)
        for line in model("endpoint", "list", "--json").splitlines()
    }
    assert set(lines) == {"anthropic", "gemini", "ollama", "openai", "openrouter", "vllm"}
    assert lines["ollama"]["usable"] is True and lines["vllm"]["usable"] is False
    text = model("endpoint", "list")
    assert any(line.startswith("vllm") and "openai, local" in line for line in text.splitlines())
    assert model("endpoint", "remove", "vllm").strip() == "Endpoint 'vllm' removed."
    assert not ModelEndpoint.objects.exists()


@pytest.mark.parametrize(
    "args, wording",
    [
        (("endpoint", "add"), "model endpoint add needs the endpoint's NAME"),
        (("endpoint", "add", "lab", "--header", "X-Org"), "write NAME=VAR"),
        (("endpoint", "add", "lab", "--key-env", "sk-123"), "The NAME of an environment variable"),
        (("endpoint", "remove", "openai"), "'openai' is a built-in endpoint"),
        (("endpoint", "remove", "nowhere"), "No model endpoint named 'nowhere'"),
    ],
)
def test_bad_commands_say_why_and_change_nothing(args, wording):
    with pytest.raises(CommandError, match=wording):
        model(*args)
    assert not ModelEndpoint.objects.exists()
