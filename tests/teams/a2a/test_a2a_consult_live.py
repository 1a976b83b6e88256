"""A Loom agent consults a published team of another Loom site over A2A: `manage.py
serve` (a child process on the test database) serves the team on the offline model,
and the agent's ask_peer goes through the a2a-sdk client to it, as to any A2A agent.
The run's coach asks its PM first, so the hired task is input-required: the coach's
question is the consultant's answer."""

from __future__ import annotations

import pytest

from teams.engine import consult as engine_consult
from teams.models import ConsultantProfile, Consultation, Team
from tests import live_site
from tests.helpers import api_token, make_team, make_user
from tests.teams.a2a.test_a2a_live import AGENTS
from tools import registry


@pytest.fixture
def sites(transactional_db, request):
    sites = live_site.Sites(request.node.name)
    yield sites
    sites.close()


def test_an_agent_consults_a_team_another_loom_site_serves(
    sites, team, ctx_for, loopback_allowed, monkeypatch
):
    served = make_team("hire", goal="Small command-line tools, designed.", agents=AGENTS)
    Team.objects.filter(pk=served.pk).update(a2a=True)
    key = api_token(user=make_user("hirer-pm", manages=[served]), label="alpha's consultant")
    monkeypatch.setenv("HIRE_A2A_TOKEN", key)
    monkeypatch.setattr(engine_consult, "A2A_TIMEOUT_SECONDS", 90)
    site = sites.start()
    profile = ConsultantProfile.objects.create(
        name="hire",
        provider="a2a",
        model="a2a",
        a2a_url=f"{site.url}/a2a/hire/",
        key_env="HIRE_A2A_TOKEN",
    )
    team.consultants.add(profile)

    result = registry.execute(
        "ask_peer", {"peer": "hire", "prompt": "Design a word counter."}, ctx_for("coder")
    )

    record = Consultation.objects.get()
    assert record.status == "done", (record.error, site.log()[-2000:])
    assert "coach asks:" in result.text and record.output["answer"].startswith("coach asks:")
    run = Team.objects.get(hired_from=served)
    assert run.hired_by == "token alpha's consultant"
    assert "Design a word counter." in run.goal
    assert record.cost_usd == 0
