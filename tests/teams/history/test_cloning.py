"""Running a team again: a fresh idle copy of what the team is (agents, anchors, plan,
workspace files), none of what happened to it; and a done team refusing posts with
the way to run it again."""

import html
import os
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from teams import services
from teams.conversation import hierarchy, keepers, pm_requests, questions
from teams.errors import Conflict, InvalidInput
from teams.files import workspace
from teams.history import cloning, team_state
from teams.models import (
    Agent,
    AnchorRevision,
    ConsultantProfile,
    Keeper,
    McpServer,
    Message,
    PMRequest,
    Query,
    Team,
    Turn,
    WorkspaceFile,
)
from tests.helpers import client_for, make_turn, make_user, state

pytestmark = pytest.mark.django_db

DONE_ALPHA = (
    "Team 'alpha' is done: nobody will read this. Run it again to go on: the Run again "
    "button on its page, `manage.py team clone alpha NEW_SLUG`, or POST /api/teams/alpha/clone."
)


@pytest.fixture
def lived(team, agents, pm):
    """Alpha after a life: plan, budgets, a manager, counters and mesh levels on its
    agents, two anchors (one changed), a conversation, a turn, a query, a keeper, a
    PM request, two files the coder wrote (one in a folder), a file the PM put
    there, a link out of the workspace; and done."""
    Team.objects.filter(pk=team.pk).update(
        plan="## Plan\n1. Lexer\n2. Parser",
        phases=["design", "build"],
        phase_index=1,
        max_turns=40,
        max_cost_usd=Decimal("2.5000"),
        turn_count=12,
        spent_usd=Decimal("0.75"),
    )
    team.refresh_from_db()
    Agent.objects.filter(pk=agents["coder"].pk).update(
        model="claude-sonnet-4-5",
        role_prompt="Write small functions.",
        context_budget_tokens=50_000,
        trajectory="Ship the parser.",
        tactic="Tests first.",
        action="Writing the lexer.",
        turns=5,
        context_updates=2,
        last_context_update_turn=9,
        violations=3,
        drift_score=40,
    )
    services.anchor_save(team=team, key="lang", value="Python 3.10", changed_by="pm")
    services.anchor_save(team=team, key="lang", value="Python 3.11", changed_by="pm")
    services.anchor_save(
        team=team, key="db", value="SQLite", changed_by="coach", source="agent", phase="planning"
    )
    for n in range(3):
        services.message_add(team=team, author=agents["coach"], content=f"Note {n}.")
    turn = make_turn(agents["coder"], status="done", number=12)
    questions.ask(team=team, origin=agents["researcher"], question="Which parser?", target="coder")
    keepers.offload(
        agent=agents["coach"], messages=list(team.messages.filter(kind="chat")), topic="old"
    )
    pm_requests.pm_request_open(team=team, agent=agents["coach"], question="Scope?")
    coder = Agent.objects.get(pk=agents["coder"].pk)
    for path, text in (("notes.md", "# Notes\nLALR.\n"), ("src/lexer.py", "TOKENS = []\n")):
        workspace.file_write(
            team=team, agent=coder, turn=turn, path=path, content=text, writes_this_turn=0
        )
    root = workspace.workspace_root(team)
    (root / "brief.txt").write_text("From the PM.\n")
    os.symlink("/etc", root / "etc-link")
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)
    team.refresh_from_db()
    return team


def test_the_copy_is_what_the_team_is_and_none_of_what_happened(lived, pm):
    said = Message.objects.filter(team=lived).count()
    clone = cloning.team_clone(team=lived, slug="alpha-2")
    clone.refresh_from_db()
    assert clone.status == Team.Status.IDLE and clone.phase_index == 0
    assert (clone.turn_count, clone.spent_usd) == (0, Decimal("0"))
    assert (clone.name, clone.goal, clone.plan) == ("Alpha (run 2)", lived.goal, lived.plan)
    assert clone.phases == ["design", "build"]
    assert (clone.max_turns, clone.max_cost_usd) == (40, Decimal("2.5000"))
    assert list(clone.managers.all()) == [pm]
    assert clone.workspace == ""

    names = ["coach", "researcher", "coder", "reviewer"]
    assert [a.name for a in clone.agents.all()] == names
    assert [a.role for a in clone.agents.all()] == [a.role for a in lived.agents.all()]
    coder = clone.agents.get(name="coder")
    assert coder.model == "claude-sonnet-4-5" and coder.role_prompt == "Write small functions."
    assert coder.context_budget_tokens == 50_000
    # The source's intent was for another phase: the copy begins its first phase with
    # the trajectory Loom declares, never the old run's text.
    assert (coder.trajectory_phase, coder.tactic, coder.action) == ("design", "", "")
    assert coder.trajectory == hierarchy.phase_trajectory(team=clone, role="coder", phase="design")
    fresh = (0, 0, 0, [], 0, 0)
    for agent in clone.agents.all():
        counters = (
            agent.turns,
            agent.context_updates,
            agent.last_context_update_turn,
            agent.files_touched,
            agent.violations,
            agent.drift_score,
        )
        assert counters == fresh, agent.name

    # The current anchors, each with one revision saying where it came from.
    assert {a.key: a.value for a in clone.anchors.all()} == {"db": "SQLite", "lang": "Python 3.11"}
    # Who pinned each, and when, reads as in the source (the anchors block shows it).
    assert {a.key: a.source_text() for a in clone.anchors.all()} == {
        "db": "coach in planning",
        "lang": "the PM",
    }
    history = AnchorRevision.objects.filter(team=clone)
    assert sorted(history.values_list("key", "value", "changed_by")) == [
        ("db", "SQLite", "run again from alpha"),
        ("lang", "Python 3.11", "run again from alpha"),
    ]

    # Nothing of its life: no conversation, turns, queries, keepers, PM requests.
    for model in (Message, Turn, Query, Keeper, PMRequest):
        assert not model.objects.filter(team=clone).exists(), model.__name__
    # The source is untouched.
    assert lived.agents.get(name="coder").turns == 5
    assert Message.objects.filter(team=lived).count() == said > 0


def test_the_workspace_is_copied_into_a_folder_of_its_own(lived, settings):
    clone = cloning.team_clone(team=lived, slug="alpha-2")
    root = workspace.workspace_root(clone)
    assert root == (Path(settings.DATA_DIR) / "workspaces" / str(clone.folder)).resolve()
    assert root != workspace.workspace_root(lived)
    assert workspace.file_read(clone, "notes.md").text == "# Notes\nLALR.\n"
    assert workspace.file_read(clone, "src/lexer.py").text == "TOKENS = []\n"
    assert workspace.file_read(clone, "brief.txt").text == "From the PM.\n"
    # A link is not copied (this one led out of the workspace).
    assert sorted(e.name for e in workspace.file_list(clone)) == ["brief.txt", "notes.md", "src"]
    # Who wrote each file comes along, as the copy's agent of that name, with no turn.
    rows = {
        row.path: (row.agent.name, row.turn, row.writes, row.size)
        for row in WorkspaceFile.objects.filter(team=clone).select_related("agent")
    }
    assert rows == {"notes.md": ("coder", None, 1, 14), "src/lexer.py": ("coder", None, 1, 12)}
    assert workspace.file_written(clone, "notes.md")["written_by"] == "coder"
    # The copies are the copy's: writing one leaves the source's file as it was.
    workspace.file_write(
        team=clone,
        agent=clone.agents.get(name="coder"),
        turn=None,
        path="notes.md",
        content="Rewritten.",
        writes_this_turn=0,
    )
    assert workspace.file_read(lived, "notes.md").text == "# Notes\nLALR.\n"
    # No staging folder is left behind.
    assert sorted(p.name for p in (Path(settings.DATA_DIR) / "workspaces").iterdir()) == sorted(
        [str(lived.folder), str(clone.folder)]
    )


def test_a_custom_workspace_is_copied_into_the_data_dir_never_shared(team, tmp_path, settings):
    custom = tmp_path / "project"
    custom.mkdir()
    (custom / "README.md").write_text("Hello.\n")
    Team.objects.filter(pk=team.pk).update(workspace=str(custom))
    team.refresh_from_db()
    clone = cloning.team_clone(team=team, slug="alpha-2", name="Alpha, again")
    assert clone.workspace == "" and clone.name == "Alpha, again"
    own = Path(settings.DATA_DIR) / "workspaces" / str(clone.folder)
    assert workspace.workspace_root(clone) == own.resolve()
    assert workspace.file_read(clone, "README.md").text == "Hello.\n"


def test_the_person_running_it_again_manages_the_copy(team, pm, superuser):
    other = make_user("carol")
    clone = cloning.team_clone(team=team, slug="alpha-2", user=other)
    assert set(clone.managers.all()) == {pm, other}
    clone = cloning.team_clone(team=team, slug="alpha-3", user=superuser)
    assert set(clone.managers.all()) == {pm}


@pytest.mark.parametrize(
    ("slug", "error", "message"),
    [
        ("beta", Conflict, "The slug 'beta' is not available: choose another."),
        ("alpha", Conflict, "The slug 'alpha' is not available: choose another."),
        ("Not A Slug", InvalidInput, "Team slugs are lowercase letters, digits and dashes."),
        ("", InvalidInput, "Team slugs are lowercase letters, digits and dashes."),
    ],
)
def test_a_taken_or_invalid_slug_stores_nothing(lived, other_team, settings, slug, error, message):
    before = state()
    folders = sorted(os.listdir(Path(settings.DATA_DIR) / "workspaces"))
    with pytest.raises(error) as refused:
        cloning.team_clone(team=lived, slug=slug)
    assert message in refused.value.message and refused.value.field == "slug"
    assert state() == before
    assert sorted(os.listdir(Path(settings.DATA_DIR) / "workspaces")) == folders


def test_a_folder_left_under_the_slug_is_never_mixed_in_nor_shown(team, settings):
    # A folder named like the slug (an old install's, or anything else's) is nobody's:
    # the copy has a folder of its own, and no message names a place on the server.
    leftover = Path(settings.DATA_DIR) / "workspaces" / "alpha-2"
    leftover.mkdir(parents=True)
    (leftover / "old.txt").write_text("an earlier team's")
    clone = cloning.team_clone(team=team, slug="alpha-2")
    assert workspace.file_list(clone).total == 0
    assert cloning.next_free_slug("alpha") == "alpha-3"


def test_next_free_slug_counts_on():
    assert cloning.next_free_slug("demo") == "demo-2"
    services.team_create(slug="demo-2")
    services.team_create(slug="demo-3")
    assert cloning.next_free_slug("demo") == "demo-4"
    assert cloning.next_free_slug("demo-3") == "demo-4"
    assert cloning.next_free_slug("release-2024") == "release-2024-2"
    long = "x" * 60
    assert cloning.next_free_slug(long) == "x" * 58 + "-2"


def test_a_too_big_workspace_is_refused_before_anything_is_stored(team, monkeypatch):
    workspace.workspace_root(team).joinpath("big.txt").write_text("x" * 100)
    monkeypatch.setattr(cloning, "MAX_COPY_BYTES", 50)
    before = state()
    with pytest.raises(Conflict, match="is too big to copy"):
        cloning.team_clone(team=team, slug="alpha-2")
    assert state() == before


def test_made_message_says_what_was_made(lived):
    clone = cloning.team_clone(team=lived, slug="alpha-2")
    assert cloning.made_message(team=clone, source=lived) == (
        "Made team 'alpha-2' from 'alpha': 4 agents, 2 anchors, 3 workspace files."
    )


# --- a done team refuses posts -------------------------------------------------------


def test_posting_to_a_done_team_is_refused_with_how_to_run_it_again(lived):
    before = state()
    with pytest.raises(Conflict) as refused:
        pm_requests.pm_message_post(team=lived, content="Are you there?")
    assert refused.value.message == DONE_ALPHA
    assert state() == before


def test_an_external_agent_cannot_post_to_a_done_team(team):
    bot = services.agent_create(team=team, name="bot", role="external")
    Team.objects.filter(pk=team.pk).update(status=Team.Status.DONE)
    before = state()
    with pytest.raises(Conflict, match="^Team 'alpha' is done: nobody will read this."):
        services.agent_message_post(agent=bot, content="Hello?")
    assert state() == before


def test_the_copy_takes_posts(lived):
    clone = cloning.team_clone(team=lived, slug="alpha-2")
    message = pm_requests.pm_message_post(team=clone, content="Go on from the plan.")
    assert message.team == clone


def test_the_page_refuses_a_post_to_a_done_team_and_says_how_to_go_on(lived, pm):
    response = client_for(pm).post("/teams/alpha/post/", {"content": "Hello?"}, follow=True)
    assert DONE_ALPHA in [str(m) for m in response.context["messages"]]
    assert not Message.objects.filter(kind="pm").exists()


# --- the faces: the command, the page, the admin ---------------------------------------


def test_team_clone_command(lived, capsys):
    call_command("team", "clone", "alpha", "alpha-next", "--name", "Alpha 2")
    out = capsys.readouterr().out
    assert out.strip() == (
        "Made team 'alpha-next' from 'alpha': 4 agents, 2 anchors, 3 workspace files. "
        "Start it with: manage.py team start alpha-next"
    )
    clone = Team.objects.get(slug="alpha-next")
    assert clone.name == "Alpha 2" and clone.status == Team.Status.IDLE
    call_command("team", "clone", "alpha")  # no new slug: the next free one
    assert "Made team 'alpha-2' from 'alpha'" in capsys.readouterr().out
    with pytest.raises(CommandError, match="The slug 'alpha-next' is not available"):
        call_command("team", "clone", "alpha", "alpha-next")
    with pytest.raises(CommandError, match="No team with slug 'nope'"):
        call_command("team", "clone", "nope", "nope-2")
    # The other actions work as before.
    call_command("team", "status", "alpha-next")
    assert "status: idle" in capsys.readouterr().out


def test_run_again_on_the_page_lands_on_the_copy(lived, superuser):
    page = client_for(superuser).get("/teams/alpha/").content.decode()
    assert 'id="run-again"' in page and reverse("team-run-again", args=["alpha"]) in page
    response = client_for(superuser).post("/teams/alpha/run-again/", follow=True)
    assert response.redirect_chain == [("/teams/alpha-2/", 302)]
    clone = Team.objects.get(slug="alpha-2")
    assert clone.status == Team.Status.IDLE and clone.agents.count() == 4
    assert [str(m) for m in response.context["messages"]] == [
        "Made team 'alpha-2' from 'alpha': 4 agents, 2 anchors, 3 workspace files. "
        "Start it when ready."
    ]


def test_the_teams_pm_runs_it_again_from_the_page_and_manages_the_copy(lived, pm, other_pm):
    from django.contrib.auth.models import Permission

    before = state()
    # Another team's PM, even one who may make teams, finds no such team.
    other_pm.user_permissions.add(Permission.objects.get(codename="add_team"))
    assert client_for(other_pm).post("/teams/alpha/run-again/").status_code == 404
    assert client_for(pm).get("/teams/alpha/run-again/").status_code == 405
    assert state() == before
    # Its own PM (no right to make teams from scratch) runs it again and manages the copy.
    assert not pm.has_perm("teams.add_team")
    response = client_for(pm).post("/teams/alpha/run-again/")
    assert response["Location"] == "/teams/alpha-2/"
    assert client_for(pm).get("/teams/alpha-2/").status_code == 200


def test_admin_action_runs_teams_again_and_links_them(admin_client, lived, other_team):
    url = reverse("admin:teams_team_changelist")
    response = admin_client.post(
        url, {"action": "run_again", "_selected_action": [lived.pk, other_team.pk]}, follow=True
    )
    shown = [html.unescape(str(m)) for m in response.context["messages"]]
    assert shown[0].startswith(
        "Made team 'alpha-2' from 'alpha': 4 agents, 2 anchors, 3 workspace files. "
        '<a href="/teams/alpha-2/">Watch it live</a>'
    )
    assert shown[1].startswith("Made team 'beta-2' from 'beta': 1 agent, 0 anchors")
    assert Team.objects.get(slug="beta-2").status == Team.Status.IDLE


def test_the_admin_action_is_for_those_who_change_teams(lived, pm):
    from django.contrib.auth.models import Permission

    pm.user_permissions.add(Permission.objects.get(codename="view_team"))
    page = client_for(pm).get(reverse("admin:teams_team_changelist")).content.decode()
    assert "run_again" not in page
    pm.user_permissions.add(Permission.objects.get(codename="change_team"))
    page = client_for(pm).get(reverse("admin:teams_team_changelist")).content.decode()
    assert "start_teams" in page and "run_again" in page


def test_the_copy_keeps_each_agents_own_cost_budget(team, agents):
    """An agent's cost budget is part of what the team is: running it again keeps it."""
    Agent.objects.filter(pk=agents["coder"].pk).update(max_cost_usd=Decimal("0.5000"))
    clone = cloning.team_clone(team=team, slug="alpha-2")
    assert clone.agents.get(name="coder").max_cost_usd == Decimal("0.5000")
    assert clone.agents.get(name="coach").max_cost_usd is None


def test_the_copy_keeps_every_setting_the_mcp_servers_and_the_consultants(lived):
    """Run again copies what the team is set up with: a rerun of the demo still asks
    the PM before its MCP tool, and its agents still may consult."""
    Team.objects.filter(pk=lived.pk).update(
        tool_approvals={"write_file": "ask"},
        tool_access={"read_file": {"roles": ["coder"], "phases": []}},
        phase_guide={"design": {"produce": "a sketch"}},
        max_exchanges=3,
        max_pass_rounds=2,
        max_phase_turns=9,
        max_anchors=7,
        anchor_value_limit=500,
    )
    lived.refresh_from_db()
    server = McpServer.objects.create(
        team=lived,
        name="notes",
        transport="stdio",
        command=["python", "-m", "notes"],
        approval="ask",
        tools=[{"name": "search", "description": "Search.", "input_schema": {}}],
    )
    profile = ConsultantProfile.objects.create(name="second", model="loom-offline")
    lived.consultants.add(profile)

    clone = cloning.team_clone(team=lived, slug="alpha-2")

    for field in team_state.TEAM_SETTINGS:
        assert getattr(clone, field) == getattr(lived, field), field
    copied = clone.mcp_servers.get()
    assert (copied.name, copied.command, copied.approval, copied.tools) == (
        "notes",
        ["python", "-m", "notes"],
        "ask",
        server.tools,
    )
    assert list(clone.consultants.all()) == [profile]


def test_copies_are_named_for_what_they_are(lived):
    second = cloning.team_clone(team=lived, slug=cloning.next_free_slug(lived.slug))
    third = cloning.team_clone(team=second, slug=cloning.next_free_slug(second.slug))
    named = cloning.team_clone(team=lived, slug="mine", name="My copy")
    unnumbered = cloning.team_clone(team=lived, slug="other")
    assert [second.name, third.name, named.name, unnumbered.name] == [
        "Alpha (run 2)",
        "Alpha (run 3)",
        "My copy",
        "Alpha (run again)",
    ]


def test_run_again_of_the_demo_still_asks_the_pm_before_its_mcp_tool(db):
    """Issue 37: a rerun of the demo kept no MCP server, so it never showed an approval."""
    from django.core.management import call_command

    from tools import registry

    call_command("loom_demo", stdout=open(os.devnull, "w"))
    demo = Team.objects.get(slug="demo")
    rerun = cloning.team_clone(team=demo, slug=cloning.next_free_slug(demo.slug))
    server = rerun.mcp_servers.get()
    assert (server.name, server.approval) == ("demo", "ask")
    assert server.listed_at is not None and server.tools
    coder = rerun.agents.get(name="coder")
    offered = {tool.name: tool for tool in registry.toolset(coder, rerun)}
    assert offered["demo__word_count"].approval == "ask"
    assert rerun.name == "Demo team (run 2)"
