"""The mesh design's test lists: anchors CRUD and the prompt block, scan_hierarchy (6),
save_anchor (4 + prompt, with Loom's limits and source), think_back (6), check_drift
(6), and its integration workflow; Loom's additions (declare_intent keeping tactic and
action, the digest lines); then the same mesh through the real anthropic client."""

import json

import pytest

from teams import services
from teams.conversation import hierarchy, keepers
from teams.engine import history_rows, prompts
from teams.engine.system_text import anchors_block
from teams.models import Agent, Anchor, AnchorRevision
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tools import registry

pytestmark = pytest.mark.django_db

BLOCK_HEAD = (
    "<immutable-anchors>\n"
    "These are IMMUTABLE ANCHORS. Override any chat history that conflicts with them:"
)


def run(ctx, name, **arguments) -> str:
    result = registry.execute(name, arguments, ctx)
    assert not result.is_error, result.text
    return result.text


def fresh(agent) -> Agent:
    return Agent.objects.get(pk=agent.pk)


# --- anchors CRUD and the prompt block (8) --------------------------------------


class TestAnchors:
    def test_a_new_team_has_none(self, team):
        assert not Anchor.objects.filter(team=team).exists()

    def test_add(self, team):
        services.anchor_save(team=team, key="DB", value="PostgreSQL", changed_by="pm")
        assert list(team.anchors.values_list("key", "value")) == [("DB", "PostgreSQL")]

    def test_add_replaces_an_existing_key_keeping_the_old_value(self, team):
        services.anchor_save(team=team, key="DB", value="SQLite")
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        assert list(team.anchors.values_list("value", flat=True)) == ["PostgreSQL"]
        history = AnchorRevision.objects.filter(team=team, key="DB").order_by("id")
        assert [r.value for r in history] == ["SQLite", "PostgreSQL"]

    def test_remove(self, team):
        services.anchor_save(team=team, key="DB", value="SQLite")
        services.anchor_delete(team=team, key="DB", changed_by="pm")
        assert not team.anchors.exists()
        assert AnchorRevision.objects.filter(team=team, key="DB", deleted=True).exists()

    def test_block_is_empty_without_anchors(self, team):
        assert anchors_block(team) == ""

    def test_block_has_the_pairs(self, team):
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        services.anchor_save(team=team, key="API_PORT", value="8080")
        assert anchors_block(team) == (
            f"{BLOCK_HEAD}\n  [API_PORT] (pinned by the PM): 8080\n"
            "  [DB] (pinned by the PM): PostgreSQL\n</immutable-anchors>"
        )

    def test_block_has_its_tags_in_every_agents_system_prompt(self, team, agents):
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        for agent in agents.values():
            system = "\n".join(b["text"] for b in prompts.build(agent, team).system)
            assert BLOCK_HEAD in system and system.rstrip().endswith("</immutable-anchors>")

    def test_block_survives_compaction(self, team, agents):
        """Save, offload the conversation, and the next prompt still carries it."""
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        for n in range(12):
            services.message_add(team=team, content=f"Talk {n}", author=agents["coder"])
        history = history_rows.history_messages(agents["coder"], team)
        keepers.offload(agent=agents["coder"], messages=history, topic="everything")
        after = prompts.build(agents["coder"], team)
        assert "Talk 3" not in str(after.messages)
        assert "  [DB] (pinned by the PM): PostgreSQL" in "\n".join(b["text"] for b in after.system)


# --- scan_hierarchy (6) ----------------------------------------------------------


class TestScanHierarchy:
    def test_no_session_until_an_intent_is_declared(self, ctx_for):
        assert run(ctx_for("coder"), "scan_hierarchy") == (
            "No active session. Call declare_intent to start."
        )

    def test_json_with_the_session(self, ctx_for, team):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        state = json.loads(run(ctx_for("coder"), "scan_hierarchy"))
        assert state["session"]["id"] == "alpha/coder"
        assert state["session"]["mode"] == team.phase == "refinement"
        assert (state["session"]["status"], state["session"]["role"]) == ("idle", "coder")
        assert len(state["session"]["date"]) == 10

    def test_hierarchy_levels(self, ctx_for):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        run(ctx_for("coder"), "map_context", level="tactic", content="Recursive descent")
        run(ctx_for("coder"), "map_context", level="action", content="Tokenizer first")
        assert json.loads(run(ctx_for("coder"), "scan_hierarchy"))["hierarchy"] == {
            "trajectory": "Build the parser",
            "tactic": "Recursive descent",
            "action": "Tokenizer first",
        }

    def test_metrics(self, ctx_for, agents):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        Agent.objects.filter(pk=agents["coder"].pk).update(turns=4, files_touched=["a.py"])
        metrics = json.loads(run(ctx_for("coder"), "scan_hierarchy"))["metrics"]
        assert metrics == {
            "turns": 4,
            "drift_score": 84,  # 100 - 3 x (4 - 2) stale turns - 10 for files with no action
            "drift_lowered_by": [
                "4 turns since you last updated your intent (-6)",
                "files touched with no action set (-10)",
            ],
            "files_touched": 1,
            "context_updates": 1,
        }

    def test_anchors_list(self, ctx_for, team):
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        assert json.loads(run(ctx_for("coder"), "scan_hierarchy"))["anchors"] == [
            "[DB]: PostgreSQL"
        ]

    def test_not_set_for_empty_levels(self, ctx_for):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        hierarchy = json.loads(run(ctx_for("coder"), "scan_hierarchy"))["hierarchy"]
        assert (hierarchy["tactic"], hierarchy["action"]) == ("(not set)", "(not set)")


# --- save_anchor (4 + prompt) ------------------------------------------------------


class TestSaveAnchor:
    def test_saves_the_anchor(self, ctx_for, team):
        run(ctx_for("coder"), "save_anchor", key="DB_SCHEMA", value="users(id, name)")
        anchor = team.anchors.get(key="DB_SCHEMA")
        assert (anchor.value, anchor.updated_by) == ("users(id, name)", "coder")

    def test_replaces_an_existing_key(self, ctx_for, team):
        run(ctx_for("coder"), "save_anchor", key="API_PORT", value="8080")
        run(ctx_for("reviewer"), "save_anchor", key="API_PORT", value="9090")
        assert list(team.anchors.values_list("value", flat=True)) == ["9090"]
        revisions = AnchorRevision.objects.filter(team=team, key="API_PORT").order_by("id")
        assert [(r.value, r.changed_by) for r in revisions] == [
            ("8080", "coder"),
            ("9090", "reviewer"),
        ]

    def test_confirms_with_the_count_and_never_echoes_the_value(self, ctx_for, team):
        spec = "wordfreq.count(text) returns a dict of lowercased words. " * 17
        coder = ctx_for("coder")
        assert run(coder, "save_anchor", key="A", value="one") == "Anchor A saved (1 of 30)."
        said = run(coder, "save_anchor", key="WORDFREQ_SPEC", value=spec)
        assert said == "Anchor WORDFREQ_SPEC saved (2 of 30)."
        assert run(coder, "save_anchor", key="A", value="two") == "Anchor A replaced (2 of 30)."
        assert run(coder, "save_anchor", key="A", value="two") == (
            "Anchor A kept: it already had this value (2 of 30)."
        )

    def test_survives_compaction(self, ctx_for, team, agents):
        run(ctx_for("coder"), "save_anchor", key="DB", value="PostgreSQL")
        keepers.offload(
            agent=agents["coder"],
            messages=[services.message_add(team=team, content=f"m{n}") for n in range(6)],
            topic="old",
        )
        assert team.anchors.get(key="DB").value == "PostgreSQL"

    def test_the_next_system_prompt_carries_it(self, ctx_for, team, agents):
        run(ctx_for("coder"), "save_anchor", key="DB", value="PostgreSQL")
        system = "\n".join(b["text"] for b in prompts.build(agents["reviewer"], team).system)
        assert (
            BLOCK_HEAD in system and "  [DB] (pinned by coder in refinement): PostgreSQL" in system
        )

    def test_a_bad_key_is_an_error_and_saves_nothing(self, ctx_for, team):
        result = registry.execute(
            "save_anchor", {"key": "no spaces!", "value": "x"}, ctx_for("coder")
        )
        assert result.is_error and "Anchor keys start with a letter or digit" in result.text
        assert not team.anchors.exists()


# --- think_back (6) --------------------------------------------------------------


class TestThinkBack:
    def test_no_session(self, ctx_for):
        assert run(ctx_for("coder"), "think_back").startswith("No active session.")

    def test_where_you_are(self, ctx_for):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        run(ctx_for("coder"), "map_context", level="tactic", content="Recursive descent")
        text_ = run(ctx_for("coder"), "think_back")
        assert text_.startswith("=== THINK BACK: Context Refresh ===\n\n## Where You Are\n")
        assert (
            "Mode: refinement\nTrajectory: Build the parser\nTactic: Recursive descent\n" in text_
        )
        assert text_.endswith("=== END THINK BACK ===")

    def test_session_health(self, ctx_for, agents):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        Agent.objects.filter(pk=agents["coder"].pk).update(turns=3)
        text_ = run(ctx_for("coder"), "think_back")
        assert (
            "## Session Health\nTurns: 3 | Drift: 97/100: 3 turns since you last updated your "
            "intent (-3)\nFiles touched: 0\n"
        ) in text_
        assert "Context updates: 1" in text_

    def test_anchors(self, ctx_for, team):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        assert "## Immutable Anchors\n  [DB]: PostgreSQL\n" in run(ctx_for("coder"), "think_back")

    def test_chain_breaks_and_files(self, ctx_for, agents):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        files = [f"src/m{n}.py" for n in range(12)]
        Agent.objects.filter(pk=agents["coder"].pk).update(
            action="Write tests", files_touched=files
        )
        text_ = run(ctx_for("coder"), "think_back")
        assert "⚠ Chain breaks:\n  - Action set without a tactic." in text_
        assert "## Files Touched\n  - src/m0.py\n" in text_ and "  - src/m9.py" in text_
        assert "src/m10.py" not in text_ and "  ... and 2 more" in text_

    def test_plan_section(self, ctx_for, team, agents):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        team.plan = "# Parser\n\n## Plan\n- tokenizer\n- grammar\n\n## Notes\nNot this."
        services.team_update(team=team, fields=["plan"])
        team_actions.phase_complete(team=team, agent=agents["coach"], summary="Scope agreed.")
        text_ = run(ctx_for("coder"), "think_back")
        assert "## Plan\n- tokenizer\n- grammar\n- [refinement done] Scope agreed.\n" in text_
        assert "Not this." not in text_


# --- check_drift (6) ---------------------------------------------------------------


class TestCheckDrift:
    def test_no_session(self, ctx_for):
        assert run(ctx_for("coder"), "check_drift").startswith("No active session.")

    def test_score_with_its_emoji(self, ctx_for, agents):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        assert "✅ Drift Score: 100/100" in run(ctx_for("coder"), "check_drift")
        Agent.objects.filter(pk=agents["coder"].pk).update(violations=3)
        assert "⚠️ Drift Score: 70/100" not in run(ctx_for("coder"), "check_drift")
        assert "✅ Drift Score: 70/100" in run(ctx_for("coder"), "check_drift")
        Agent.objects.filter(pk=agents["coder"].pk).update(turns=8)  # 100 - 30 - 3 x 6
        assert "⚠️ Drift Score: 52/100" in run(ctx_for("coder"), "check_drift")

    def test_trajectory_alignment(self, ctx_for):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        run(ctx_for("coder"), "map_context", level="tactic", content="Recursive descent")
        report = run(ctx_for("coder"), "check_drift")
        assert (
            "## Trajectory Alignment\nOriginal: Build the parser\n"
            "Current tactic: Recursive descent\n"
        ) in report

    def test_chain_intact(self, ctx_for):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        assert "## Chain Integrity\n✅ Hierarchy chain is intact." in run(
            ctx_for("coder"), "check_drift"
        )

    def test_chain_broken(self, ctx_for, agents):
        run(ctx_for("coder"), "map_context", level="action", content="Write tests")
        report = run(ctx_for("coder"), "check_drift")
        assert "❌ Action set without a tactic." in report
        assert "⚠ No trajectory set. Use declare_intent to set your focus." in report

    def test_recommendation_follows_the_score(self, ctx_for, agents, team):
        run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
        services.anchor_save(team=team, key="DB", value="PostgreSQL")
        healthy = run(ctx_for("coder"), "check_drift")
        assert (
            "## Anchor Compliance\nVerify your work respects these immutable constraints:\n"
            "  ☐ [DB]: PostgreSQL"
        ) in healthy
        assert "## Recommendation\n✅ On track. Continue working." in healthy
        Agent.objects.filter(pk=agents["coder"].pk).update(turns=14, violations=2)  # 50
        assert "⚠ Some drift detected. Consider using map_context" in run(
            ctx_for("coder"), "check_drift"
        )
        Agent.objects.filter(pk=agents["coder"].pk).update(violations=3, trajectory="")
        lost = run(ctx_for("coder"), "check_drift")
        assert "❌ Significant drift. Use map_context to re-focus, or context_offload" in lost
        assert lost.endswith("=== END DRIFT REPORT ===")


# --- the mesh design's integration workflow ---------------------------------------


def test_workflow_anchor_think_back_drift_check(ctx_for, team, agents):
    coder = ctx_for("coder")
    assert run(coder, "declare_intent", trajectory="Build the parser").startswith(
        'Trajectory set: "Build the parser".'
    )
    run(coder, "map_context", level="tactic", content="Recursive descent")
    run(coder, "map_context", level="action", content="Tokenizer first")
    run(coder, "save_anchor", key="LANG", value="Python 3.11")
    refresh = run(coder, "think_back")
    assert "Trajectory: Build the parser" in refresh and "  [LANG]: Python 3.11" in refresh
    assert "✅ On track. Continue working." in run(coder, "check_drift")  # healthy when aligned
    # Turns pass with no context update, and a call its role does not allow: drifting.
    Agent.objects.filter(pk=agents["coder"].pk).update(turns=12)
    registry.execute("ask_pm", {"question": "?"}, coder, registry.toolset(agents["coder"], team))
    report = run(ctx_for("coder"), "check_drift")
    assert "⚠ Violations: 1" in report
    assert "⚠ Some drift detected." in report or "❌ Significant drift." in report
    assert fresh(agents["coder"]).violations == 1


def test_a_drift_score_below_100_says_what_lowers_it(ctx_for, agents):
    run(ctx_for("coder"), "declare_intent", trajectory="Write wordfreq.py")
    assert run(ctx_for("coder"), "map_context", level="action", content="Write the tests") == (
        'Action updated: "Write the tests". Drift score: 85/100: your tactic is not set in this '
        "phase, under your action (-15)."
    )
    assert run(ctx_for("coder"), "map_context", level="tactic", content="Tests first") == (
        'Tactic updated: "Tests first". Drift score: 100/100.'
    )
    Agent.objects.filter(pk=agents["coder"].pk).update(turns=5, violations=1)
    report = run(ctx_for("coder"), "check_drift")
    assert (
        "✅ Drift Score: 81/100\nLowered by: 5 turns since you last updated your intent (-9); "
        "1 tool call your role or phase does not allow (-10)\n\n## Trajectory Alignment"
    ) in report


def test_declare_intent_keeps_the_levels_under_it_unless_replaced(ctx_for, agents):
    run(ctx_for("coder"), "declare_intent", trajectory="Build the parser")
    run(ctx_for("coder"), "map_context", level="tactic", content="Recursive descent")
    run(ctx_for("coder"), "map_context", level="action", content="Tokenizer first")
    assert run(ctx_for("coder"), "declare_intent", trajectory="Write the docs") == (
        'Trajectory set: "Write the docs". Tactic kept: "Recursive descent". '
        'Action kept: "Tokenizer first". Drift score: 100/100.'
    )
    coder = fresh(agents["coder"])
    assert (coder.trajectory, coder.tactic, coder.action) == (
        "Write the docs",
        "Recursive descent",
        "Tokenizer first",
    )
    assert (coder.context_updates, coder.trajectory_phase) == (4, "refinement")
    result = run(ctx_for("coder"), "declare_intent", trajectory="Ship", action="Grammar")
    assert result == (
        'Trajectory set: "Ship". Tactic kept: "Recursive descent". Action set: "Grammar". '
        "Drift score: 100/100."
    )


def test_declare_intent_describes_when_to_call_it_and_its_optional_levels():
    definition = registry.get("declare_intent").definition()
    assert "Declare what you are working on: your trajectory" in definition["description"]
    assert (
        "Loom declares a trajectory for you when each phase begins" in (definition["description"])
    )
    assert "stay as they are unless you give new ones" in definition["description"]
    schema = definition["input_schema"]
    assert schema["required"] == ["trajectory"]
    assert set(schema["properties"]) == {"trajectory", "tactic", "action"}


def test_map_context_refuses_an_unknown_level(ctx_for):
    result = registry.execute("map_context", {"level": "mood", "content": "x"}, ctx_for("coder"))
    assert result.is_error and "level" in result.text


# --- save_anchor: Loom's limits and source -------------------------------------------


class TestSaveAnchorLimits:
    def test_an_agents_anchor_records_the_agent_and_the_phase(self, ctx_for, team):
        run(ctx_for("coder"), "save_anchor", key="db-engine", value="PostgreSQL 16")
        anchor = team.anchors.get(key="db-engine")
        assert (anchor.source, anchor.updated_by, anchor.phase) == ("agent", "coder", "refinement")
        assert hierarchy.anchor_source_text(anchor) == "coder in refinement"
        assert "  [db-engine] (pinned by coder in refinement): PostgreSQL 16" in anchors_block(team)

    def test_a_new_key_over_the_cap_is_refused_naming_the_cap(self, ctx_for, team):
        team.max_anchors = 2
        team.save(update_fields=["max_anchors"])
        run(ctx_for("coder"), "save_anchor", key="A", value="one")
        run(ctx_for("coder"), "save_anchor", key="B", value="two")
        result = registry.execute("save_anchor", {"key": "C", "value": "x"}, ctx_for("coder"))
        assert result.is_error
        assert result.text == (
            "Error: Team 'alpha' already has 2 anchors, its limit. Save under an existing key "
            "to replace its value, or have the PM delete an anchor or raise the team's limit "
            "(max anchors)."
        )
        assert run(ctx_for("coder"), "save_anchor", key="B", value="three") == (
            "Anchor B replaced (2 of 2)."
        )
        assert sorted(team.anchors.values_list("key", flat=True)) == ["A", "B"]

    def test_an_agents_value_is_bounded_by_the_team(self, ctx_for, team):
        team.anchor_value_limit = 10
        team.save(update_fields=["anchor_value_limit"])
        result = registry.execute("save_anchor", {"key": "A", "value": "x" * 11}, ctx_for("coder"))
        assert result.is_error and result.text.startswith(
            "Error: An anchor an agent saves holds at most 10 characters (the team's limit); "
            "this value has 11."
        )
        assert not team.anchors.exists()
        assert run(ctx_for("coder"), "save_anchor", key="A", value="x" * 10) == (
            "Anchor A saved (1 of 30)."
        )

    def test_the_description_suggests_no_secret_and_names_the_teams_limits(self, team):
        tool = registry.get("save_anchor")
        described = tool.definition()["description"]
        assert described.startswith(
            "Save a critical constraint or fact that must not be forgotten, even after "
            "session compaction. Use for database schemas,"
        )
        assert "API keys" not in described and "never a secret" in described
        team.max_anchors, team.anchor_value_limit = 12, 1500
        own = tool.definition_for(team)["description"]
        assert own.startswith(described)
        assert own.endswith(
            "at most 12 anchors, and a value you save has at most 1,500 characters."
        )
        for other in registry.all_tools():
            assert "API key" not in other.definition_for(team)["description"]


# --- the agent's record of its own mesh calls ------------------------------------------


def test_digest_lines(ctx_for):
    coder = ctx_for("coder")
    records = {
        name: registry.execute(name, arguments, coder).digest
        for name, arguments in [
            ("declare_intent", {"trajectory": "Build the parser", "tactic": "Tests first"}),
            ("map_context", {"level": "action", "content": "Tokenizer"}),
            ("save_anchor", {"key": "db-engine", "value": "PostgreSQL 16"}),
            ("scan_hierarchy", {}),
            ("think_back", {}),
            ("check_drift", {}),
        ]
    }
    assert records == {
        "declare_intent": 'You declared your trajectory: "Build the parser"; tactic: "Tests first"',
        "map_context": 'You set your action: "Tokenizer"',
        "save_anchor": 'You saved anchor db-engine: "PostgreSQL 16"',
        "scan_hierarchy": "",
        "think_back": "",
        "check_drift": "You checked your drift: 100/100 (on track).",
    }


def test_the_tools_the_drift_advice_names_are_the_mesh_tools():
    from teams.run import drift

    assert drift.ADVICE_TOOLS == {
        "declare": "declare_intent",
        "refocus": "map_context",
        "reset": "context_offload",
    }
    assert all(registry.get(name) for name in drift.ADVICE_TOOLS.values())


# --- through the real anthropic client ----------------------------------------------


def test_a_saved_anchor_reaches_every_agent_and_check_drift_reaches_the_model(team, messages_api):
    team.phase_index = team.phases.index("implementation")  # check_drift: a work phase's
    team.save()
    api = messages_api(
        per_agent(
            {
                "coach": [
                    tool("save_anchor", {"key": "FORMAT", "value": "HTML only"}, "toolu_anchor"),
                    text("Pinned the format."),
                ],
                "researcher": [
                    tool("declare_intent", {"trajectory": "Find prior art"}, "toolu_intent"),
                    tool("check_drift", {}, "toolu_drift"),
                    text("On track."),
                ],
                "coder": [text("Layout next.")],
                "reviewer": [text("Fine.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=4)
    after_anchor = api.requests[1:]  # every request after the coach called save_anchor
    by_agent = {}
    for request in after_anchor:
        by_agent.setdefault(request.agent, request)
    assert set(by_agent) == {"coach", "researcher", "coder", "reviewer"}
    for request in by_agent.values():
        assert "  [FORMAT] (pinned by coach in implementation): HTML only" in request.system_text
    researcher = [r for r in api.requests if r.agent == "researcher"]
    drift_result = next(
        b
        for b in researcher[2].body["messages"][-1]["content"]
        if b.get("type") == "tool_result" and b["tool_use_id"] == "toolu_drift"
    )
    assert drift_result["content"].startswith("=== DRIFT REPORT ===")
    assert "Original: Find prior art" in drift_result["content"]
    assert hierarchy.has_session(Agent.objects.get(team=team, name="researcher"))


def test_a_declared_trajectory_is_visible_to_its_agent_on_later_turns(team, messages_api):
    intent = {"trajectory": "Map the prior art on markdown parsers", "tactic": "CommonMark first"}
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go."), text("Go on.")],
                "researcher": [tool("declare_intent", intent), text("Looking."), text("Found.")],
                "coder": [text("Ok."), text("Ok.")],
                "reviewer": [text("Ok."), text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=6)
    researcher = [r for r in api.requests if r.agent == "researcher"]
    later = researcher[2]  # its next turn (its first made two requests)
    read = later.system_text + "\n".join(
        block.get("text", "")
        for message in later.body["messages"]
        for block in (message["content"] if isinstance(message["content"], list) else [])
    )
    assert (
        'You declared your trajectory: "Map the prior art on markdown parsers"; '
        'tactic: "CommonMark first"'
    ) in read
    for request in api.requests:
        if request.agent != "researcher":
            assert "Map the prior art" not in request.dump
