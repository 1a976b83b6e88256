"""Consultant profiles are enabled per team: loom_demo enables its two offline
consultants for the demo team only, and a team made afterwards asks none of them."""

from django.core.management import call_command

from teams.engine.loop import tool_context
from teams.models import Team
from tests.helpers import make_team
from tools import registry


def test_loom_demo_enables_its_consultants_for_the_demo_team_only(db, monkeypatch):
    monkeypatch.delenv("LOOM_ADMIN_PASSWORD", raising=False)
    other = make_team("alpha")
    call_command("loom_demo")
    call_command("loom_demo")  # twice: still the same two
    demo = Team.objects.get(slug="demo")
    assert sorted(demo.consultants.values_list("name", flat=True)) == ["architect", "critic"]
    assert not other.consultants.exists()
    later = make_team("beta")
    assert not later.consultants.exists()

    coder = later.agents.get(name="coder")
    result = registry.execute(
        "ask_multi", {"prompt": "Which design?"}, tool_context(team=later, agent=coder)
    )
    assert result.text == (
        "Error: no consultants are enabled for this team; a PM can enable them in the admin."
    )
    demo_coder = demo.agents.get(name="coder")
    asked = registry.execute(
        "ask_multi", {"prompt": "Which design?"}, tool_context(team=demo, agent=demo_coder)
    )
    assert asked.text.startswith("2 of 2 consultants answered.")
