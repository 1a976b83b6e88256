"""What a real model reads: each request, as the fake Messages API received it through
the real anthropic client, carries the phase, the agent's own earlier actions, who
passed, and nothing that invites a fake tool call; and `manage.py team prompt`
prints exactly that request."""

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from teams import services
from teams.conversation import pm_requests
from teams.engine import prompts
from teams.models import Message, PMRequest
from teams.run import team_actions
from tests.fakes.messages_api import text, tool
from tests.helpers import drain, per_agent
from tools.conversation import AskPm, PassTurn
from tools.mesh import DeclareIntent


def texts(request) -> list[str]:
    """The text blocks of a request's messages, in order."""
    return [
        block["text"]
        for message in request.body["messages"]
        for block in message["content"]
        if block.get("type") == "text"
    ]


def of(api, name):
    return [r for r in api.requests if r.agent == name]


def passing(n=3):
    return [tool(PassTurn.name, {"reason": "agree"}) for _ in range(n)]


def test_every_member_reads_the_phase_its_line_and_who_closes_it(team, messages_api):
    api = messages_api(
        per_agent({name: [text("Noted.")] for name in ("coach", "researcher", "coder", "reviewer")})
    )
    team_actions.team_start(team=team)
    drain(team, limit=4)
    coder = of(api, "coder")[0].system_text
    assert (
        "Phases, in order: [refinement] → planning → pre-code-review → implementation → "
        "code-review. This phase: refinement." in coder
    )
    assert "This phase should produce: an agreed statement of the goal" in coder
    assert "Your part as coder: say what is feasible and what would be costly to build." in coder
    assert "The coach closes the phase with signal_phase_complete" in coder
    reviewer = of(api, "reviewer")[0].system_text
    assert "Your part as reviewer: point out ambiguities and missing requirements." in reviewer
    coach = of(api, "coach")[0].system_text
    assert "Your summary is what later phases read of this one" in coach


def test_a_teams_own_phase_line_replaces_the_default(team, messages_api):
    team.phase_guide = {"refinement": {"coder": "sketch the parser's grammar"}}
    services.team_update(team=team, fields=["phase_guide"])
    api = messages_api(per_agent({n: [text("Ok.")] for n in ("coach", "researcher", "coder")}))
    team_actions.team_start(team=team)
    drain(team, limit=3)
    assert "Your part as coder: sketch the parser's grammar." in of(api, "coder")[0].system_text


def test_the_coachs_cue_names_who_passed_and_says_to_close_when_all_did(team, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [text("Scope: JSON only. Objections?"), text("Closing soon.")],
                "researcher": passing(1),
                "coder": [text("Fine by me, with one note: no comments.")],
                "reviewer": passing(1),
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=5)
    cue = texts(of(api, "coach")[1])[-1]
    assert cue.startswith("It is your turn, coach.")
    assert "Since you last spoke, researcher, reviewer passed (nothing to add)." in cue
    assert "agree" not in cue  # names, not reasons


def test_when_everyone_passed_the_cue_says_so(team, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [text("Scope: JSON only. Objections?"), text("Closing.")],
                "researcher": passing(1),
                "coder": passing(1),
                "reviewer": passing(1),
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=5)
    cue = texts(of(api, "coach")[1])[-1]
    assert "everyone passed (researcher, coder, reviewer)" in cue
    assert "close it with signal_phase_complete" in cue


def test_an_agent_sees_its_own_tool_calls_later_in_the_phase_only(team, messages_api):
    tactic = {"trajectory": "Parse it.", "tactic": "Tokenizer first, then the grammar."}
    api = messages_api(
        per_agent(
            {
                "coach": [text("Go."), text("Go on.")],
                "researcher": [text("Ok."), text("Ok.")],
                "coder": [tool(DeclareIntent.name, tactic), text("Planned."), text("Next.")],
                "reviewer": [text("Ok."), text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=7)
    later = texts(of(api, "coder")[2])  # its next turn (its first made two calls)
    records = [t for t in later if t.startswith("[Your action]")]
    assert len(records) == 1 and "Tokenizer first, then the grammar." in records[0]
    # Nobody else reads the coder's record.
    for name in ("coach", "researcher", "reviewer"):
        assert not any("[Your action]" in t for r in of(api, name) for t in texts(r))
    # A new phase starts without it.
    message = Message.objects.get(kind=Message.Kind.TOOL_CALL)
    assert message.recipient.name == "coder" and message.phase == "refinement"


def test_ask_pm_is_recorded_as_what_it_is(team, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [tool(AskPm.name, {"question": "HTML or PDF?"}), text("Thanks.")],
                "researcher": [text("Noted the answer.")],
                "coder": [text("Ok.")],
                "reviewer": [text("Ok.")],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=1)
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="HTML only.")
    drain(team, limit=1)
    researcher = texts(of(api, "researcher")[0])
    assert "[Loom] coach asked the PM: HTML or PDF?" in "\n".join(researcher)
    dump = "\n".join(t for r in api.requests for t in texts(r))
    assert "Requesting PM input" not in dump  # never prose an agent could imitate
    # The coach's own record says it asked; no assistant turn of the coach claims it.
    drain(team, limit=3)  # the coder, the reviewer, the coach
    coach_later = of(api, "coach")[1]
    assert any(
        t.startswith('[Your action] You asked the PM: "HTML or PDF?"') for t in texts(coach_later)
    )
    assert all(
        "asked the PM" not in json.dumps(m["content"])
        for m in coach_later.body["messages"]
        if m["role"] == "assistant"
    )


def test_file_write_follows_the_teams_tool_access(team, messages_api):
    team.phases = ["build", "review"]
    team.tool_access = {"file_write": {"roles": ["tester"], "phases": ["review"]}}
    services.team_update(team=team, fields=["phases", "tool_access"])
    services.agent_create(team=team, name="tess", role="tester")
    api = messages_api(per_agent({n: [text("Ok.")] for n in ("coach", "researcher", "coder")}))
    team_actions.team_start(team=team)
    drain(team, limit=3)
    coder = of(api, "coder")[0]
    assert "file_write" not in coder.tool_names
    assert "Workspace files: you read them; testers write them (in review)." in coder.system_text


def test_by_default_coders_and_reviewers_write_in_implementation_like_phases(team, messages_api):
    team.phases = ["design", "build-it"]
    services.team_update(team=team, fields=["phases"])
    api = messages_api(
        per_agent(
            {n: [text("Ok."), text("Ok.")] for n in ("coach", "researcher", "coder", "reviewer")}
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=4)
    assert "file_write" not in of(api, "coder")[0].tool_names  # design is not building
    team.refresh_from_db()
    team_actions.phase_complete(team=team, agent=team.agents.get(name="coach"), summary="Done.")
    api.requests.clear()
    drain(team, limit=5)
    assert "file_write" in of(api, "coder")[0].tool_names
    assert "file_write" in of(api, "reviewer")[0].tool_names
    assert "file_write" not in of(api, "researcher")[0].tool_names


def test_team_prompt_prints_exactly_what_the_model_received(team, messages_api):
    api = messages_api(
        per_agent(
            {
                "coach": [text("Welcome.")],
                "researcher": [text("Prior art: none.")],
                "coder": [
                    tool(DeclareIntent.name, {"trajectory": "lexer"}),
                    text("Ok."),
                ],
            }
        )
    )
    team_actions.team_start(team=team)
    drain(team, limit=3)
    out = StringIO()
    call_command("team", "prompt", team.slug, "coder", stdout=out)
    printed = json.loads(out.getvalue())
    received = of(api, "coder")[-1].body
    for part in ("system", "messages", "tools", "model", "max_tokens"):
        assert printed[part] == received[part], part
    first = StringIO()
    call_command("team", "prompt", team.slug, "coder", "--call", "1", "--text", stdout=first)
    shown = first.getvalue()
    assert "model call 1 of 2" in shown and "It is your turn, coder." in shown
    assert "TOOLS (" in shown and "- declare_intent:" in shown
    with pytest.raises(CommandError, match="made 2 model call.s.: --call takes 1 to 2"):
        call_command("team", "prompt", team.slug, "coder", "--call", "3", stdout=StringIO())


def test_phase_summary_carries_the_pms_words(team, agents):
    team_actions.team_start(team=team)
    services.message_add(team=team, content="Only HTML.", kind=Message.Kind.PM, author_label="pm")
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Scope agreed.")
    summary = Message.objects.get(kind=Message.Kind.PHASE_SUMMARY).content
    assert summary == '[Phase refinement complete] Scope agreed.\nThe PM said: "Only HTML."'


def test_a_pinned_pm_decision_reads_once_in_later_phases_as_its_anchor(team, agents):
    """The PM's answer pinned as an anchor: later phases read it in the anchors (with who
    pinned it, in which phase), not again as a "The PM said" or "Anchors pinned" line of
    the summary; the coach's own summary stays as written."""
    team_actions.team_start(team=team)
    services.message_add(team=team, content="Only HTML.", kind=Message.Kind.PM, author_label="pm")
    services.message_add(team=team, content="And fast.", kind=Message.Kind.PM, author_label="pm")
    services.anchor_save(team=team, key="pm-decision", value="Only HTML.", phase="refinement")
    summary = "Scope agreed: the PM said only HTML."
    team_actions.phase_complete(team=team, agent=agents["coach"], summary=summary)
    record = Message.objects.get(kind=Message.Kind.PHASE_SUMMARY).content
    # What was not pinned still reaches later phases through the summary.
    assert record == f'[Phase refinement complete] {summary}\nThe PM said: "And fast."'
    team.refresh_from_db()  # in planning now
    prompt = prompts.build(agents["coder"], team)
    read = prompt.system[-1]["text"] + "".join(m["content"] for m in prompt.messages)
    assert read.count("Only HTML.") == 1
    assert "[pm-decision] (pinned by the PM in refinement): Only HTML." in read
    assert "only HTML" in read and "Anchors pinned" not in read


def test_a_turns_files_line_is_of_its_own_phase(team, agents):
    """A request rebuilt for a turn (a replay, `team prompt`, a turn resumed after the
    team moved on) tells the agent what it could do in that turn's phase."""
    team.phases = ["build", "review"]
    team.tool_access = {"file_write": {"phases": ["build"]}}
    services.team_update(team=team, fields=["phases", "tool_access"])
    team.phase_index = 1  # the team has moved on to review
    built = prompts.build(agents["coder"], team, phase="build")
    system = built.system[0]["text"]
    assert "This phase: build." in system
    assert "Workspace files: you may write them with file_write in this phase." in system
    now = prompts.build(agents["coder"], team, phase="review")
    assert (
        "Workspace files: you read them now; you may write them in build." in now.system[0]["text"]
    )
