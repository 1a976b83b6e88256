"""teams/mesh.py: the hierarchy writes and the team plan."""

import pytest

from teams import mesh, team_actions
from teams.errors import InvalidInput
from teams.models import PLAN_LIMIT, Agent, Team


def test_levels_count_context_updates_at_the_current_turn(agents):
    Agent.objects.filter(pk=agents["coder"].pk).update(turns=7)
    coder = mesh.agent_declare_intent(agent=agents["coder"], trajectory=" Build it ")
    assert (coder.trajectory, coder.context_updates, coder.last_context_update_turn) == (
        "Build it",
        1,
        7,
    )
    coder = mesh.agent_map_context(agent=coder, level="tactic", content="Tests first")
    assert (coder.tactic, coder.context_updates, coder.drift_score) == ("Tests first", 2, 100)
    assert Agent.objects.get(pk=coder.pk).drift_score == 100


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: mesh.agent_declare_intent(agent=a, trajectory="  "), "Give the trajectory"),
        (lambda a: mesh.agent_map_context(agent=a, level="mood", content="x"), "Unknown level"),
        (lambda a: mesh.agent_map_context(agent=a, level="action", content=""), "Give the action"),
        (lambda a: mesh.agent_map_context(agent=a, level="action", content="a\x00"), "NUL"),
    ],
)
def test_bad_levels_change_nothing(agents, call, message):
    with pytest.raises(InvalidInput, match=message):
        call(agents["coder"])
    coder = Agent.objects.get(pk=agents["coder"].pk)
    assert (coder.trajectory, coder.action, coder.context_updates) == ("", "", 0)


def test_phase_summaries_join_the_plan_section(team, agents):
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Scope agreed.")
    team.refresh_from_db()
    assert team.plan == "## Plan\n- [refinement done] Scope agreed."
    team.plan = "# Parser\n## Plan\n- tokenizer\n\n## Notes\nkeep"
    team.save()
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Plan agreed.")
    team.refresh_from_db()
    assert team.plan == (
        "# Parser\n## Plan\n- tokenizer\n- [planning done] Plan agreed.\n\n## Notes\nkeep"
    )
    assert mesh.plan_section(team.plan) == "## Plan\n- tokenizer\n- [planning done] Plan agreed."


def test_a_full_plan_keeps_what_it_has(team, agents):
    Team.objects.filter(pk=team.pk).update(plan="x" * PLAN_LIMIT)
    team.refresh_from_db()
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="More.")
    team.refresh_from_db()
    assert team.plan == "x" * PLAN_LIMIT and team.phase == "planning"
