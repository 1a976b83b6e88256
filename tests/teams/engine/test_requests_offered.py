"""What a request offers and says, as a real model reads it: each test runs turns
through the real anthropic client against the fake Messages API and asserts on the
requests it received. Only tools that can do something are offered, each teammate's
abilities are named, a turn's text is in the conversation once, nothing of a closed
phase is lost, and the PM is quoted whole."""

from django.urls import reverse

from teams import services
from teams.files import sandbox
from teams.models import ConsultantProfile, Keeper, Message
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tools import registry
from tools.consult import AskMulti, AskPeer, ReadConsultation
from tools.context import ContextRetrieve
from tools.conversation import SignalPhaseComplete
from tools.mesh import DeclareIntent
from tools.workspace import FileWrite

AGENTS = ("coach", "researcher", "coder", "reviewer")
WRITES_OR_RUNS = {"writes files", "edits files", "runs commands"}
CONSULTATION_TOOLS = {AskPeer.name, AskMulti.name, ReadConsultation.name}


def of(api, name):
    return [r for r in api.requests if r.agent == name]


def test_no_consultation_tool_without_an_enabled_consultant(team, messages_api):
    say = [text("Scope first."), text("Go on.")]
    api = messages_api(per_agent({name: list(say) for name in AGENTS}))
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert CONSULTATION_TOOLS.isdisjoint(of(api, "coach")[0].tool_names)

    profile = ConsultantProfile.objects.create(name="critic", model="loom-offline")
    profile.teams.add(team)
    drain(team, limit=4)  # the others, then the coach again
    assert CONSULTATION_TOOLS <= set(of(api, "coach")[1].tool_names)
    assert CONSULTATION_TOOLS <= set(of(api, "researcher")[0].tool_names)


def test_a_turns_text_is_once_in_the_conversation_and_its_notes_on_the_turn_page(
    team, messages_api, admin_client
):
    notes = "Let me record my tactic before I answer."
    said = "Parse the header first, then the body."
    api = messages_api(
        per_agent(
            {
                "coach": [
                    tool(DeclareIntent.name, {"trajectory": "Order the parser work"}, say=notes),
                    text(said),
                ],
                "researcher": [text("Agreed on the order.")],
            }
        )
    )
    team_actions.team_start(team=team)
    coach_turn, _ = drain(team, limit=2)
    (message,) = Message.objects.filter(team=team, author__name="coach", kind=Message.Kind.CHAT)
    assert message.content == said
    seen = of(api, "researcher")[0].dump
    assert seen.count(said) == 1 and notes not in seen
    page = admin_client.get(reverse("admin:teams_turn_change", args=[coach_turn.pk]))
    assert "Working notes" in page.content.decode() and notes in page.content.decode()


def test_each_teammates_abilities_are_named_and_no_write_tool_in_refinement(team, messages_api):
    api = messages_api(per_agent({name: [text("Noted.")] for name in AGENTS}))
    team_actions.team_start(team=team)
    drain(team, limit=4)
    coach, coder = of(api, "coach")[0], of(api, "coder")[0]
    # run_command is named only where a sandbox runs on this host (it is offered there).
    runs = (
        "; runs commands in pre-code-review, implementation, code-review"
        if not sandbox.sandbox_unavailable()
        else ""
    )
    assert (
        "Your team, and what each of you can do in this phase besides discussing and "
        "reading the workspace:\n"
        "- you (@coach, coach): asks the PM, closes the phase\n"
        "- @researcher (researcher): discusses only\n"
        "- @coder (coder): discusses only (later: writes files in implementation, "
        f"code-review{runs})\n"
        "- @reviewer (reviewer): discusses only (later: writes files in implementation, "
        f"code-review{runs})"
    ) in coach.system_text
    assert "- you (@coder, coder): discusses only (later: writes files in" in coder.system_text
    writers = {t.name for t in registry.all_tools() if t.ability in WRITES_OR_RUNS}
    assert FileWrite.name in writers
    assert writers.isdisjoint(r for request in api.requests for r in request.tool_names)


def test_the_abilities_follow_the_phase_and_the_teams_policies(team, messages_api):
    team.phase_index = team.phases.index("implementation")
    team.tool_approvals = {FileWrite.name: "ask"}
    team.save()
    api = messages_api(per_agent({name: [text("Noted.")] for name in AGENTS}))
    team_actions.team_start(team=team)
    drain(team, limit=1)
    assert (
        "- @coder (coder): writes files (with the PM's approval)" in of(api, "coach")[0].system_text
    )


def _close_refinement(team, messages_api, coach_says, then=()):
    """Refinement with the coach saying `coach_says` and closing it; the others say
    `then` (one reply each) in planning."""
    script = {
        "coach": [
            text(coach_says),
            tool(SignalPhaseComplete.name, {"summary": "Test list agreed (see refinement)."}),
            text("Planning starts."),
        ],
        "researcher": [text("Noted."), *then],
        "coder": [text("Noted.")],
        "reviewer": [text("Noted.")],
    }
    return messages_api(per_agent(script))


def test_a_message_of_a_closed_phase_is_found_by_context_retrieve_in_the_next(team, messages_api):
    tests = "Tests, verbatim: header parsing, empty body, unicode titles, nested lists."
    retrieve = tool(ContextRetrieve.name, {"query": "nested lists", "mode": "raw"})
    api = _close_refinement(team, messages_api, tests, then=[retrieve, text("Found it.")])
    team_actions.team_start(team=team)
    drain(team, limit=8)
    team.refresh_from_db()
    assert team.phase == "planning"
    later = of(api, "researcher")[-1]
    assert later.dump.count(tests) == 1  # in the tool result, not in the history
    result = later.body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and f"[coach]: {tests}" in result["content"]
    assert "context_retrieve searches" in later.system_text


def test_a_retrieval_that_finds_nothing_says_where_it_looked(team, messages_api):
    retrieve = tool(ContextRetrieve.name, {"query": "kubernetes", "mode": "raw"})
    api = _close_refinement(team, messages_api, "Scope agreed.", then=[retrieve, text("No.")])
    team_actions.team_start(team=team)
    drain(team, limit=8)
    result = of(api, "researcher")[-1].body["messages"][-1]["content"][0]["content"]
    keeper = Keeper.objects.get(team=team, topic="phase refinement")
    assert result == (
        f'No relevant context found for: kubernetes (searched 1 keeper: {keeper.id} "phase '
        "refinement\"; this phase's conversation is in your history, not in a keeper). Try "
        "other words, or one keeper by its id."
    )


def test_the_pm_is_quoted_whole_or_pointed_at_never_cut(team, messages_api):
    medium = "1. Plain-text output only. " + "Keep every column aligned by two spaces. " * 9
    long = "3. Plain-text tables. " + "Each row ends without trailing spaces. " * 60
    api = _close_refinement(team, messages_api, "Noted the PM's rules.")
    team_actions.team_start(team=team)
    services.message_add(team=team, content=medium, kind=Message.Kind.PM)
    pm_long = services.message_add(team=team, content=long, kind=Message.Kind.PM)
    drain(team, limit=8)
    later = of(api, "researcher")[-1].dump
    assert f'The PM said: \\"{" ".join(medium.split())}\\"' in later
    assert (
        f"The PM wrote message #{pm_long.id} ({len(' '.join(long.split())):,} characters, too "
        'long to quote here): it is filed whole in the keeper \\"phase refinement\\".'
    ) in later
    assert "…" not in later
