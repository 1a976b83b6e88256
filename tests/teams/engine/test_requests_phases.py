"""What a request offers and says phase by phase (issue 35), as a real model reads it:
turns through the real anthropic client against the fake Messages API. The mesh's
reads and map_context only in work phases, a review after an implementation lets the
writers fix what it finds, and a summary that replaces earlier ones leaves them as
pointers."""

from teams.models import Message
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tools.conversation import SignalPhaseComplete
from tools.workspace import FileEdit, FileWrite

AGENTS = ("coach", "researcher", "coder", "reviewer")
EVERY_PHASE = {"declare_intent", "save_anchor"}
WORK_ONLY = {"map_context", "scan_hierarchy", "think_back", "check_drift"}


def of(api, name):
    return [r for r in api.requests if r.agent == name]


def in_phase(team, phase, **fields):
    team.phase_index = team.phases.index(phase)
    for name, value in fields.items():
        setattr(team, name, value)
    team.save()


def noted(api_factory):
    return api_factory(per_agent({name: [text("Noted.")] for name in AGENTS}))


def test_talk_phases_offer_only_the_mesh_tools_that_help_there(team, messages_api):
    api = noted(messages_api)
    team_actions.team_start(team=team)
    drain(team, limit=4)
    for request in api.requests:  # refinement
        assert EVERY_PHASE <= set(request.tool_names)
        assert WORK_ONLY.isdisjoint(request.tool_names), request.agent
    assert "map_context" not in of(api, "coder")[0].system_text


def test_work_phases_offer_every_mesh_tool(team, messages_api):
    in_phase(team, "implementation")
    api = noted(messages_api)
    team_actions.team_start(team=team)
    drain(team, limit=4)
    for request in api.requests:
        assert EVERY_PHASE | WORK_ONLY <= set(request.tool_names), request.agent


def test_the_pms_tool_access_offers_a_mesh_tool_in_any_phase(team, messages_api):
    in_phase(team, "refinement", tool_access={"scan_hierarchy": {"phases": []}})
    api = noted(messages_api)
    team_actions.team_start(team=team)
    drain(team, limit=1)
    names = set(of(api, "coach")[0].tool_names)
    assert "scan_hierarchy" in names and "think_back" not in names


def test_a_review_after_the_implementation_lets_the_writers_fix_what_it_finds(team, messages_api):
    in_phase(team, "code-review")
    api = noted(messages_api)
    team_actions.team_start(team=team)
    drain(team, limit=4)
    writes = {FileWrite.name, FileEdit.name}
    for name in AGENTS:
        offered = set(of(api, name)[0].tool_names)
        assert (writes <= offered) == (name in ("coder", "reviewer")), name
        assert offered & writes in (set(), writes)
    coach = of(api, "coach")[0].system_text
    assert (
        "A finding: have the reviewer name it (the file, what is wrong, what would be "
        "right); the coder or reviewer who wrote that part fixes it in place with file_edit "
        "and runs the tests again; the reviewer re-checks the fix."
    ) in coach
    coder = of(api, "coder")[0].system_text
    assert "Your part as coder: walk the others through what was built; fix each finding " in coder
    assert "Workspace files: you may write them with file_write in this phase." in coder
    reviewer = of(api, "reviewer")[0].system_text
    assert "name each finding (the file, what is wrong, what would be right)" in reviewer


def test_a_team_without_a_reviewer_is_told_the_coach_reviews(team, messages_api):
    """A coach and a coder only: the coach was asked to "have the reviewer name it" in a
    team with no reviewer (the hand-model run's coach and coder both stalled on it)."""
    team.agents.filter(role__in=["reviewer", "researcher"]).delete()
    in_phase(team, "code-review")
    api = messages_api(per_agent({name: [text("Noted.")] for name in ("coach", "coder")}))
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert (
        "A finding: this team has no reviewer, so you review: read the files against the "
        "goal and name each one (the file, what is wrong, what would be right); the coder "
        "or reviewer who wrote that part fixes it in place with file_edit and runs the "
        "tests again; you re-check the fix."
    ) in of(api, "coach")[0].system_text


def test_a_review_before_any_implementation_writes_nothing(team, messages_api):
    in_phase(team, "pre-code-review")
    api = noted(messages_api)
    team_actions.team_start(team=team)
    drain(team, limit=4)
    assert all(FileWrite.name not in r.tool_names for r in api.requests)
    assert "A finding:" not in of(api, "coach")[0].system_text


def test_without_edits_in_the_review_a_finding_is_an_open_item(team, messages_api):
    in_phase(team, "code-review", tool_access={FileEdit.name: {"phases": ["implementation"]}})
    api = noted(messages_api)
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert (
        "A finding: no one may edit files in this phase, so have it named (the file, what "
        "is wrong) and list it in your summary as an open item."
    ) in of(api, "coach")[0].system_text


def close(summary, **more):
    return tool(SignalPhaseComplete.name, {"summary": summary, **more})


def test_a_summary_that_replaces_an_earlier_one_leaves_it_as_a_pointer(team, messages_api):
    first = "Columns are separated by at least two spaces."
    second = "Columns are separated by exactly two spaces; the first rule is void."
    api = messages_api(
        per_agent(
            {
                "coach": [
                    close(first),
                    text("Planning."),
                    close("x", replaces=["implementation"]),  # not an earlier phase
                    text("Tried."),
                    close(second, replaces=["refinement"]),
                    text("Review next."),
                ],
                **{name: [text("Noted.") for _ in range(6)] for name in AGENTS[1:]},
            }
        )
    )
    team_actions.team_start(team=team)
    for _ in range(20):
        drain(team, limit=1)
        team.refresh_from_db()
        if team.phase == "pre-code-review":
            break
    drain(team, limit=2)  # the coach opens the review, the researcher reads it
    assert team.phase == "pre-code-review"
    refused = [
        b
        for r in of(api, "coach")
        for m in r.body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result" and b.get("is_error")
    ]
    assert refused[0]["content"] == (
        "Error: replaces names 'implementation', not an earlier phase of this team (those "
        "are: refinement). The phase is not closed."
    )
    later = of(api, "researcher")[-1].dump
    assert first not in later and later.count(second) == 1
    assert (
        "[Loom] [Phase refinement complete] Its summary is replaced by the summary of "
        'planning, below; the phase\'s conversation is in the keeper \\"phase refinement\\".'
    ) in later
    assert "[Phase planning complete] (Replaces the summary of refinement.) " + second in later
    # The record itself keeps both (the PM's pages show every summary whole).
    records = Message.objects.filter(team=team, kind=Message.Kind.PHASE_SUMMARY)
    assert [m.content.split("\n")[0] for m in records.order_by("id")] == [
        f"[Phase refinement complete] {first}",
        f"[Phase planning complete] (Replaces the summary of refinement.) {second}",
    ]


def test_the_keeper_example_names_one_of_the_teams_own_phases(team, messages_api):
    """Agents looked for a keeper "phase planning" in teams with no planning phase: the
    norms' example is the team's own first phase."""
    api = noted(messages_api)
    team.phases = ["discovery", "build"]
    team.save()
    team_actions.team_start(team=team)
    drain(team, limit=1)
    (request,) = api.requests
    assert 'filed in a keeper named after it ("phase discovery")' in request.system_text
    assert "phase planning" not in request.system_text
