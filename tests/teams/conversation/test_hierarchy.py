"""teams/hierarchy.py: the hierarchy writes, each phase's trajectory Loom declares, the team
plan and where anchors come from."""

import pytest

from teams.conversation import hierarchy
from teams.conversation.hierarchy import agent_declare_intent, agent_map_context
from teams.conversation.phase_guide import phase_line
from teams.errors import InvalidInput
from teams.models import PLAN_LIMIT, Agent, Anchor, Team
from teams.run import team_actions


def test_levels_count_context_updates_at_the_current_turn(agents):
    Agent.objects.filter(pk=agents["coder"].pk).update(turns=7)
    coder = hierarchy.agent_declare_intent(agent=agents["coder"], trajectory=" Build it ")
    assert (coder.trajectory, coder.context_updates, coder.last_context_update_turn) == (
        "Build it",
        1,
        7,
    )
    coder = hierarchy.agent_map_context(agent=coder, level="tactic", content="Tests first")
    assert (coder.tactic, coder.context_updates, coder.drift_score) == ("Tests first", 2, 100)
    assert Agent.objects.get(pk=coder.pk).drift_score == 100


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda a: agent_declare_intent(agent=a, trajectory="  "), "Give the trajectory"),
        (lambda a: agent_map_context(agent=a, level="mood", content="x"), "Unknown level"),
        (lambda a: agent_map_context(agent=a, level="action", content=""), "Give the action"),
        (lambda a: agent_map_context(agent=a, level="action", content="a\x00"), "NUL"),
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
    assert hierarchy.plan_section(team.plan) == (
        "## Plan\n- tokenizer\n- [planning done] Plan agreed."
    )


def test_a_full_plan_keeps_what_it_has(team, agents):
    Team.objects.filter(pk=team.pk).update(plan="x" * PLAN_LIMIT)
    team.refresh_from_db()
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="More.")
    team.refresh_from_db()
    assert team.plan == "x" * PLAN_LIMIT and team.phase == "planning"


# --- each phase begins with Loom's trajectory -----------------------------------------


def test_phase_trajectory_is_the_phases_own_work_and_whole(team):
    team.goal = "Write wordfreq.py.\nIt counts  words."
    review = hierarchy.phase_trajectory(team=team, role="coder", phase="code-review")
    assert review == "As coder in code-review: " + phase_line(team, "code-review", "coder")
    assert "wordfreq" not in review and "…" not in review
    assert hierarchy.phase_trajectory(team=team, role="coach", phase="refinement").startswith(
        "As coach in refinement: draw out what the goal means"
    )
    # A team's own long line is shortened after a sentence, never mid-word.
    first = "Read every file the coder wrote and run the tests yourself before you say a word."
    team.phase_guide = {"qa": {"tester": f"{first} {'Then check each edge case listed. ' * 6}"}}
    shortened = hierarchy.phase_trajectory(team=team, role="tester", phase="qa")
    assert shortened == f"As tester in qa: {first}" + " Then check each edge case listed." * 2
    assert len(shortened) <= hierarchy.TRAJECTORY_SHOWN
    assert hierarchy.whole("word " * 60, 50) == ("word " * 9).strip() + "…"


def test_agent_phase_begin_declares_once_per_phase(team, agents, django_assert_num_queries):
    team.goal = "Ship the parser"
    Agent.objects.filter(pk=agents["coder"].pk).update(
        turns=5, tactic="old tactic", action="old action", trajectory_phase="before"
    )
    coder = Agent.objects.get(pk=agents["coder"].pk)
    # One update, and its live event (agent.intent) numbered and kept in one statement
    # (teams.live.event_log).
    with django_assert_num_queries(2):
        hierarchy.agent_phase_begin(agent=coder, team=team, phase="planning")
    stored = Agent.objects.get(pk=coder.pk)
    for row in (coder, stored):
        assert row.trajectory.startswith("As coder in planning: ")
        assert (row.tactic, row.action, row.trajectory_phase) == ("", "", "planning")
        assert (row.context_updates, row.last_context_update_turn, row.drift_score) == (1, 5, 100)
    with django_assert_num_queries(0):
        hierarchy.agent_phase_begin(agent=coder, team=team, phase="planning")


def test_a_stale_copy_counts_the_phase_once(team, agents):
    first, second = (Agent.objects.get(pk=agents["coder"].pk) for _ in range(2))
    hierarchy.agent_phase_begin(agent=first, team=team, phase="planning")
    hierarchy.agent_phase_begin(agent=second, team=team, phase="planning")
    assert Agent.objects.get(pk=first.pk).context_updates == second.context_updates == 1


def test_the_agents_own_trajectory_for_the_phase_is_kept(team, agents):
    coder = hierarchy.agent_declare_intent(
        agent=agents["coder"], trajectory="Build the tokenizer", phase="refinement"
    )
    assert coder.trajectory_phase == "refinement"
    hierarchy.agent_phase_begin(agent=coder, team=team, phase="refinement")
    assert Agent.objects.get(pk=coder.pk).trajectory == "Build the tokenizer"
    hierarchy.agent_phase_begin(agent=coder, team=team, phase="planning")
    assert Agent.objects.get(pk=coder.pk).trajectory.startswith("As coder in planning: ")
    # The caller's copy carries the one line that tells the agent, for its turn's cue.
    assert coder.replaced_trajectory == (
        "[Loom] The planning phase began, and Loom set your trajectory for it (above). Your "
        'own, "Build the tokenizer", was for refinement: declare it again with declare_intent '
        "if it still fits."
    )


def test_replacing_looms_own_trajectory_says_nothing(team, agents):
    coder = agents["coder"]
    hierarchy.agent_phase_begin(agent=coder, team=team, phase="refinement")
    hierarchy.agent_phase_begin(agent=coder, team=team, phase="planning")
    assert not hasattr(coder, "replaced_trajectory")
    old = Agent.objects.get(pk=coder.pk)  # Loom's earlier wording is Loom's too
    Agent.objects.filter(pk=old.pk).update(
        trajectory="Ship it — as coder in planning: break the work", trajectory_phase="planning"
    )
    old.refresh_from_db()
    hierarchy.agent_phase_begin(agent=old, team=team, phase="implementation")
    assert not hasattr(old, "replaced_trajectory")


def test_a_trajectory_mapped_by_the_agent_is_its_own_for_the_phase(team, agents):
    coder = hierarchy.agent_map_context(agent=agents["coder"], level="trajectory", content="Mine")
    assert coder.trajectory_phase == team.phase


# --- declare_intent keeps what it is not given -------------------------------------


def test_declare_intent_keeps_tactic_and_action_unless_replaced(agents):
    coder = hierarchy.agent_declare_intent(agent=agents["coder"], trajectory="Build it")
    coder = hierarchy.agent_map_context(agent=coder, level="tactic", content="Tests first")
    coder = hierarchy.agent_map_context(agent=coder, level="action", content="Tokenizer")
    coder = hierarchy.agent_declare_intent(agent=coder, trajectory="Build it well")
    assert (coder.trajectory, coder.tactic, coder.action) == (
        "Build it well",
        "Tests first",
        "Tokenizer",
    )
    coder = hierarchy.agent_declare_intent(agent=coder, trajectory="Ship", action="Grammar")
    assert (coder.tactic, coder.action, coder.context_updates) == ("Tests first", "Grammar", 5)


def test_declare_intent_for_a_new_phase_starts_without_the_old_levels(agents):
    coder = hierarchy.agent_declare_intent(agent=agents["coder"], trajectory="a", tactic="t")
    coder = hierarchy.agent_declare_intent(agent=coder, trajectory="b", phase="planning")
    assert (coder.trajectory, coder.tactic, coder.trajectory_phase) == ("b", "", "planning")
    coder = hierarchy.agent_declare_intent(agent=coder, trajectory="c", tactic="u", phase="review")
    assert (coder.tactic, coder.trajectory_phase) == ("u", "review")


# --- anchors' source -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "updated_by", "phase", "text"),
    [
        ("pm", "pm (ada)", "", "the PM"),
        ("pm", "pm (ada)", "planning", "the PM in planning"),
        ("pm_answer", "pm", "refinement", "the PM's answer in refinement"),
        ("agent", "coder", "planning", "coder in planning"),
        ("agent", "", "", "an agent"),
    ],
)
def test_anchor_source_text(source, updated_by, phase, text):
    anchor = Anchor(key="k", value="v", source=source, updated_by=updated_by, phase=phase)
    assert hierarchy.anchor_source_text(anchor) == text
