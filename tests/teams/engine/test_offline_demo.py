"""With no key, one run of the demo shows every mechanism: the offline model talks
about the team's goal, asks a peer a question that is answered and one that is
forwarded, offloads context to a keeper and recalls it, passes, asks the PM once,
pins the PM's word, checks drift, consults, writes a file, and its phase summaries
say what happened in each phase."""

import re

import pytest
from django.core.management import call_command

from teams import services
from teams.conversation import pm_requests
from teams.conversation.phase_guide import work_phase
from teams.engine.offline import subject_of
from teams.management.commands.loom_demo import DEMO_GOAL, DEMO_SLUG
from teams.models import (
    Anchor,
    Consultation,
    Keeper,
    Message,
    PMRequest,
    Query,
    Team,
    Turn,
    TurnStep,
    WorkspaceFile,
)
from teams.run import team_actions
from tests.helpers import FOUR_AGENTS, drain, rows_for_the_module
from tools.context import ContextOffload, ContextRetrieve
from tools.mesh import CheckDrift
from tools.questions import PeerAnswerQuestion, PeerAskQuestion, PeerForwardQuestion

PM_ANSWER = "Only the core for now."


def run_to_the_end(team, limit=400) -> Team:
    """Run the team's turns one by one as a worker would, the PM answering the coach's
    request when it opens, until nothing is queued (the team is done or out of turns)."""
    for _ in range(limit):
        request = PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).first()
        if request is not None:
            approval = request.kind == PMRequest.Kind.APPROVAL
            answer = "Approve" if approval else PM_ANSWER
            pm_requests.pm_request_answer(request_id=request.id, answer=answer)
        if not drain(team, limit=1):
            break
    team.refresh_from_db()
    return team


def tool_steps(team, tool):
    return TurnStep.objects.filter(turn__team=team, tool_name=tool.name).order_by("id")


def said_in(step) -> str:
    """The line the agent wrote in the turn of a tool step."""
    return Message.objects.get(turn=step.turn, kind=Message.Kind.CHAT).content


@pytest.fixture(scope="module")
def demo_run(django_db_setup, django_db_blocker, tmp_path_factory):
    """One whole run of the demo for the tests of this module that read it."""
    data_dir = tmp_path_factory.mktemp("demo-data")
    with rows_for_the_module(django_db_blocker, data_dir) as monkeypatch:
        monkeypatch.setenv("LOOM_ADMIN_PASSWORD", "correct horse battery")
        call_command("loom_demo")
        team = Team.objects.get(slug=DEMO_SLUG)
        team_actions.team_start(team=team)
        yield run_to_the_end(team).pk


@pytest.fixture
def demo(demo_run, db):
    return Team.objects.get(pk=demo_run)


def test_one_offline_run_of_the_demo_shows_every_mechanism(demo):
    team = demo
    assert team.status == Team.Status.DONE, team.status
    assert team.turn_count < team.max_turns
    assert not Turn.objects.filter(team=team, status=Turn.Status.FAILED).exists()

    # A peer question answered by the agent asked, in the first phase.
    answered = Query.objects.filter(team=team, status=Query.Status.ANSWERED).order_by("id")
    first = answered[0]
    assert (first.origin.name, first.target.name, first.answered_by.name) == (
        "researcher",
        "coder",
        "coder",
    )
    assert [hop["kind"] for hop in first.hops] == ["ask", "answer"]
    # One forwarded to the agent it names, who answers it, in the second phase.
    forwarded = [q for q in answered if any(h["kind"] == "forward" for h in q.hops)]
    assert len(forwarded) == 1
    (query,) = forwarded
    assert [(h["kind"], h["from"], h.get("to")) for h in query.hops] == [
        ("ask", "coder", "researcher"),
        ("forward", "researcher", "reviewer"),
        ("answer", "reviewer", None),
    ]
    assert "@reviewer may know best" in query.question
    assert any(e.startswith("researcher: ") for e in query.enrichments)
    assert not Query.objects.filter(team=team, status=Query.Status.OPEN).exists()
    # Each through its tool, and said in the conversation with its id.
    assert tool_steps(team, PeerAskQuestion).count() == 2
    assert tool_steps(team, PeerForwardQuestion).count() == 1
    assert tool_steps(team, PeerAnswerQuestion).count() == 2
    answered_in = tool_steps(team, PeerAnswerQuestion).first().turn
    assert said_in(tool_steps(team, PeerAnswerQuestion).first()).startswith(
        f"I answered @researcher's question ({first.key})"
    )
    # The next speaker has nothing to add to the answer: it passes.
    after = Turn.objects.filter(team=team, id__gt=answered_in.id).order_by("id").first()
    assert after.outcome == Turn.Outcome.PASS
    assert Message.objects.get(turn=after, recipient__isnull=True).content == (
        f"({after.agent.name} passes: nothing to add to coder's answer)"
    )

    # A keeper: the reviewer offloaded once, and recalled from it on a later turn
    # (smart retrieval, answered by the offline model). (The team's own keepers hold
    # each closed phase, "phase <name>".)
    (keeper,) = Keeper.objects.filter(team=team, agent__isnull=False)
    assert keeper.agent.name == "reviewer" and keeper.entries.exists()
    (offload,) = tool_steps(team, ContextOffload)
    (recall,) = tool_steps(team, ContextRetrieve)
    assert recall.turn.agent.name == "reviewer" and recall.turn.id > offload.turn.id
    assert recall.content[0]["content"].startswith("From the keepers (offline model):")
    assert said_in(recall).startswith("I recalled from the keepers: ")

    # Passes, one PM request (answered and pinned), drift checks, a consultation, a file.
    assert Turn.objects.filter(team=team, outcome=Turn.Outcome.PASS).exists()
    (request,) = PMRequest.objects.filter(team=team, kind=PMRequest.Kind.QUESTION)
    assert request.status == PMRequest.Status.ANSWERED
    # The coder's one call of the demo MCP server's word_count, approved by the PM.
    (approval,) = PMRequest.objects.filter(team=team, kind=PMRequest.Kind.APPROVAL)
    assert (approval.tool_name, approval.answer) == ("demo__word_count", "Approve")
    counted = TurnStep.objects.get(turn__team=team, tool_name="demo__word_count")
    assert " words, " in counted.content[0]["content"]
    assert Anchor.objects.filter(team=team, value=PM_ANSWER).exists()
    # A drift check before closing each work phase (check_drift is offered only there).
    checked = {step.turn.phase for step in tool_steps(team, CheckDrift).select_related("turn")}
    assert (
        checked
        == {p for p in team.phases if work_phase(p)}
        == {
            "pre-code-review",
            "implementation",
            "code-review",
        }
    )
    assert Consultation.objects.filter(team=team, status=Consultation.Status.DONE).exists()
    assert WorkspaceFile.objects.filter(team=team, agent__name="coder").exists()


def test_the_demos_lines_are_about_its_goal(demo):
    subject = subject_of(DEMO_GOAL)
    assert subject == "a static-site generator for Markdown notes"
    lines = Message.objects.filter(team=demo, kind=Message.Kind.CHAT, turn__isnull=False)
    for agent in demo.agents.all():
        own = [m.content for m in lines if m.author_id == agent.id]
        assert own and all(line.endswith("(offline model)") or "PM input" in line for line in own)
        assert sum(subject in line for line in own) >= len(own) // 2, (agent.name, own)
    # No canned topic of another goal.
    assert not [m for m in lines if re.search(r"parser|PDF|HTML|renderer", m.content)]


def test_each_phase_summary_says_what_happened_in_it(demo):
    summaries = list(
        Message.objects.filter(team=demo, kind=Message.Kind.PHASE_SUMMARY).order_by("id")
    )
    assert [s.phase for s in summaries] == demo.phases
    texts = [s.content for s in summaries]
    assert len(set(texts)) == len(texts)
    pm_phases = set(
        Message.objects.filter(team=demo, kind=Message.Kind.PM).values_list("phase", flat=True)
    )
    assert pm_phases == {demo.phases[0]}
    for summary in summaries:
        assert "PM input received" not in summary.content
        assert (f'The PM said: "{PM_ANSWER}"' in summary.content) == (summary.phase in pm_phases)
        assert summary.content.startswith(f"[Phase {summary.phase} complete] Phase {summary.phase}")
        assert "static-site generator for Markdown notes" in summary.content
        assert "coach" in summary.content and "reviewer" in summary.content
    refinement, planning, _, implementation, _ = texts
    assert "researcher asked coder a question; coder answered researcher's question" in refinement
    assert "reviewer offloaded older context to a keeper" in refinement
    assert "reviewer recalled it from the keepers" in refinement
    assert "coach asked the consultants for a second opinion (2 of 2 answered)" in planning
    assert "coder asked researcher a question; researcher passed it on to reviewer" in planning
    assert "reviewer answered coder's question" in planning
    assert "coder wrote notes/plan.md; reviewer read notes/plan.md" in implementation


def test_a_haiku_generator_team_talks_about_haiku_not_parsers(db):
    team = services.team_create(
        slug="haiku", name="Haiku", goal="a haiku generator", agents=FOUR_AGENTS
    )
    team_actions.team_start(team=team)
    team = run_to_the_end(team)
    assert team.status == Team.Status.DONE
    said = list(
        Message.objects.filter(team=team)
        .exclude(kind=Message.Kind.PM)
        .values_list("content", flat=True)
    )
    file_steps = TurnStep.objects.filter(turn__team=team, kind=TurnStep.Kind.TOOL)
    written = [str(step.content) for step in file_steps]
    offenders = [t for t in said + written if re.search(r"parser|pdf|html|renderer", t, re.I)]
    assert not offenders, offenders
    assert sum("a haiku generator" in text for text in said) > len(said) // 2
    # The PM was asked about the haiku generator, once.
    (request,) = PMRequest.objects.filter(team=team)
    assert "a haiku generator" in request.question


@pytest.mark.parametrize(
    ("goal", "subject"),
    [
        ("Ship the parser.", "the parser"),
        ("a haiku generator", "a haiku generator"),
        ("A CSV parser that handles quoted fields", "a CSV parser"),
        ("Build v1.2 of the importer: fast and safe.", "v1.2 of the importer"),
        ("(none given)", "the goal"),
        ("", "the goal"),
    ],
)
def test_the_subject_of_a_goal_is_what_the_lines_talk_about(goal, subject):
    assert subject_of(goal) == subject
