"""The offline model (`loom-offline`) keeps the cognitive mesh: intents, tactics, the
PM's word pinned as an anchor and a drift check before a phase completes; it writes
a file (the coder), reads it (the reviewer) and consults (the coach, once); and it
stays deterministic."""

from teams.conversation import pm_requests
from teams.engine.offline import OFFLINE_FILE, PM_ANCHOR, OfflineProvider
from teams.lib.catalog import OFFLINE_MODEL
from teams.management.commands.loom_demo import DEMO_CONSULTANTS
from teams.models import (
    Anchor,
    ConsultantProfile,
    Consultation,
    Message,
    PMRequest,
    Team,
    Turn,
    TurnStep,
    WorkspaceFile,
)
from teams.run import team_actions
from tests.helpers import drain
from tools import registry
from tools.consult import AskMulti
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete
from tools.mesh import CheckDrift, DeclareIntent, MapContext, SaveAnchor
from tools.workspace import FileRead, FileWrite

COACH_SYSTEM = [{"type": "text", "text": "Your name is coach and your role is coach."}]
CODER_SYSTEM = [{"type": "text", "text": "Your name is coder and your role is coder."}]
OPENING = "Team goal: Ship the parser.\nCurrent phase: refinement"


def definitions(*tools):
    return [{"name": t.name, "description": "", "input_schema": {}} for t in tools]


def tool_calls(reply):
    return [(b["name"], b["input"]) for b in reply.content if b.get("type") == "tool_use"]


def steps(team, tool):
    return TurnStep.objects.filter(turn__team=team, tool_name=tool.name).order_by("id")


def run_until(team, predicate, limit=80, answer=None):
    """Run queued turns one by one until the predicate holds (or nothing is queued),
    answering the coach's question with `answer` when one is given."""
    for _ in range(limit):
        if predicate():
            return
        request = PMRequest.objects.filter(team=team, status="open").first()
        if request is not None and answer is not None:
            pm_requests.pm_request_answer(request_id=request.id, answer=answer)
        if not drain(team, limit=1):
            break
    assert predicate(), "the condition never held"


def test_each_agent_declares_its_intent_on_its_first_turn_and_still_speaks(team):
    team_actions.team_start(team=team)
    first = drain(team, limit=4)
    assert [t.agent.name for t in first] == ["coach", "researcher", "coder", "reviewer"]
    for turn in first:
        agent = turn.agent
        agent.refresh_from_db()
        assert "Ship the parser." in agent.trajectory
        # Loom declared one for the phase; the agent refined it.
        assert agent.context_updates == 2 and agent.trajectory_phase == "refinement"
        # The intent is declared first, then the agent says its line in the same turn.
        assert [s.tool_name for s in turn.steps.filter(kind="tool")] == [DeclareIntent.name]
        assert turn.outcome == Turn.Outcome.MESSAGE
        line = Message.objects.get(turn=turn, recipient__isnull=True)
        assert line.kind == "chat" and "(offline model)" in line.content
        assert turn.drift_score == 100
    assert team.agents.get(name="coder").trajectory.startswith("Design and build")
    # The whole hierarchy, so the PM's drift card shows no "(not set)" from the start.
    coder = team.agents.get(name="coder")
    assert coder.tactic.startswith("Split the parser") and coder.action.startswith("Propose")


def test_agents_map_their_tactic_now_and_then(team):
    team.tool_access = {MapContext.name: {"phases": []}}  # by default only in work phases
    team.save()
    team_actions.team_start(team=team)
    run_until(team, lambda: steps(team, MapContext).exists(), answer="HTML only.")
    mapped = steps(team, MapContext).first()
    agent = mapped.turn.agent
    agent.refresh_from_db()
    assert agent.tactic and agent.context_updates >= 2
    # Never on an agent's first turn, and only once in the turn that does it.
    assert not mapped.turn.steps.filter(tool_name=DeclareIntent.name).exists()
    assert mapped.turn.steps.filter(tool_name=MapContext.name).count() == 1
    assert Message.objects.filter(turn=mapped.turn, kind="chat").exists()


def test_the_coach_pins_the_pms_answer_then_checks_drift_before_completing_the_phase(team):
    team_actions.team_start(team=team)
    run_until(team, lambda: PMRequest.objects.filter(team=team).exists())
    team.refresh_from_db()
    assert team.status == Team.Status.AWAITING_PM
    assert not Anchor.objects.filter(team=team).exists()
    request = PMRequest.objects.get(team=team)
    # Marked as the offline model's, in the inbox and in the conversation's line.
    assert request.question.endswith("only the core, or more? (offline model)")
    asked = Message.objects.get(team=team, kind="system", content__startswith="(Requesting PM")
    assert asked.content.endswith("(offline model))")
    pm_requests.pm_request_answer(request_id=request.id, answer="HTML only for now.")

    run_until(team, lambda: Anchor.objects.filter(team=team, key=PM_ANCHOR).exists())
    anchor = Anchor.objects.get(team=team, key=PM_ANCHOR)
    assert anchor.value == "HTML only for now." and anchor.updated_by == "coach"
    pinned = steps(team, SaveAnchor).get()
    assert pinned.turn.agent.name == "coach"
    # It is not pinned twice: the anchor is in every later prompt.
    run_until(team, lambda: Turn.objects.filter(team=team, outcome="phase_complete").exists())
    assert steps(team, SaveAnchor).count() == 1

    done = Turn.objects.get(team=team, outcome="phase_complete")
    names = list(done.steps.filter(kind="tool").values_list("tool_name", flat=True))
    # No drift check in refinement: check_drift is for the work phases.
    assert names == [SignalPhaseComplete.name]
    team.refresh_from_db()
    assert team.phase_index == 1
    # The next phase begins with a fresh intent, naming it.
    coach = team.agents.get(name="coach")
    run_until(team, lambda: steps(team, DeclareIntent).filter(turn__agent=coach).count() == 2)
    coach.refresh_from_db()
    assert coach.trajectory.startswith("Guide the team through planning")


def test_an_answer_the_pm_pinned_is_not_pinned_again(team):
    team_actions.team_start(team=team)
    run_until(team, lambda: PMRequest.objects.filter(team=team).exists())
    request = PMRequest.objects.get(team=team)
    pm_requests.pm_request_answer(request_id=request.id, answer="PDF too.", pin_as="format")
    run_until(team, lambda: Turn.objects.filter(team=team, outcome="phase_complete").exists())
    assert not steps(team, SaveAnchor).exists()
    assert list(Anchor.objects.filter(team=team).values_list("key", "value")) == [
        ("format", "PDF too.")
    ]


def test_mesh_tools_are_called_only_when_offered():
    model = OfflineProvider()
    opening = [{"role": "user", "content": f"{OPENING}\n\nIt is your turn, coder."}]
    offered = model.respond(
        model="loom-offline",
        system=CODER_SYSTEM,
        messages=opening,
        tools=definitions(DeclareIntent, PassTurn),
    )
    assert tool_calls(offered) == [
        (
            DeclareIntent.name,
            {
                "trajectory": "Design and build the implementation of: Ship the parser.",
                # The whole hierarchy: the PM's drift card shows a tactic and an action.
                "tactic": "Split the parser into small parts behind one entry point.",
                "action": "Propose the first part of the parser to build in refinement.",
            },
        )
    ]
    bare = model.respond(
        model="loom-offline", system=CODER_SYSTEM, messages=opening, tools=definitions(PassTurn)
    )
    assert all(name != DeclareIntent.name for name, _ in tool_calls(bare))


def test_after_a_mesh_tool_it_speaks_and_after_a_turn_ending_tool_it_stops():
    model = OfflineProvider()
    tools = definitions(DeclareIntent, PassTurn, AskPm)
    opening = {"role": "user", "content": f"{OPENING}\n\nIt is your turn, coder."}

    def after(name):
        use = {"type": "tool_use", "id": "toolu_1", "name": name, "input": {}}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "done"}
        return model.respond(
            model="loom-offline",
            system=CODER_SYSTEM,
            messages=[
                opening,
                {"role": "assistant", "content": [use]},
                {"role": "user", "content": [result]},
            ],
            tools=tools,
        )

    spoke = after(DeclareIntent.name)
    assert spoke.stop_reason == "end_turn" and "(offline model)" in spoke.text
    assert after(PassTurn.name).content == []


def test_the_same_request_gets_the_same_reply():
    model = OfflineProvider()
    messages = [
        {
            "role": "user",
            "content": f"{OPENING}\n\n[pm (alice)]: HTML only.\n\nIt is your turn, coach.",
        }
    ]
    tools = definitions(DeclareIntent, SaveAnchor, MapContext, AskPm)
    replies = [
        model.respond(model="loom-offline", system=COACH_SYSTEM, messages=messages, tools=tools)
        for _ in range(2)
    ]
    assert replies[0].content == replies[1].content
    assert tool_calls(replies[0])[0][0] == DeclareIntent.name


def test_the_coach_pins_the_pms_last_word_unless_an_anchor_holds_it():
    model = OfflineProvider()
    said = "[pm (alice)]: HTML first.\n\nPDF later, maybe."
    messages = [
        {"role": "user", "content": f"{OPENING}\n\n[coder]: A plan."},
        {"role": "assistant", "content": "Let's agree on scope."},
        {"role": "user", "content": f"{said}\n\n[coder]: Fine.\n\nIt is your turn, coach."},
    ]
    tools = definitions(SaveAnchor, AskPm)
    reply = model.respond(model="loom-offline", system=COACH_SYSTEM, messages=messages, tools=tools)
    assert tool_calls(reply) == [
        (SaveAnchor.name, {"key": PM_ANCHOR, "value": "HTML first.\n\nPDF later, maybe."})
    ]
    anchored = [
        *COACH_SYSTEM,
        {
            "type": "text",
            "text": "<immutable-anchors>\n  [format] (pinned by PM answer in refinement): "
            "HTML first.\n\nPDF later, maybe.\n</immutable-anchors>",
        },
    ]
    again = model.respond(model="loom-offline", system=anchored, messages=messages, tools=tools)
    assert all(name != SaveAnchor.name for name, _ in tool_calls(again))


def test_every_mesh_tool_it_calls_exists():
    names = {t.name for t in registry.all_tools()}
    assert {DeclareIntent.name, MapContext.name, SaveAnchor.name, CheckDrift.name} <= names


def test_the_coder_writes_a_file_the_reviewer_reads_it_and_the_coach_consults_once(team):
    for spec in DEMO_CONSULTANTS:  # as loom_demo makes them, enabled for the team
        profile = ConsultantProfile.objects.create(**spec, provider="offline", model=OFFLINE_MODEL)
        team.consultants.add(profile)
    team_actions.team_start(team=team)
    run_until(team, lambda: steps(team, FileRead).exists(), limit=300, answer="HTML only.")

    # The coach asked every consultant once, in the team's second phase, then spoke.
    (asked,) = steps(team, AskMulti)
    assert asked.turn.agent.name == "coach" and asked.turn.phase == team.phases[1]
    assert "2 of 2 consultants answered." in asked.content[0]["content"]
    answers = Consultation.objects.filter(team=team)
    assert sorted(a.profile.name for a in answers) == ["architect", "critic"]
    assert len({a.batch for a in answers}) == 1
    assert all(a.status == Consultation.Status.DONE and a.turn == asked.turn for a in answers)
    said = Message.objects.get(turn=asked.turn, kind="chat").content
    assert "2 of 2 answered" in said and "(offline model)" in said

    # The coder wrote one file in the implementation phase and said so ...
    (write,) = steps(team, FileWrite)
    assert write.turn.agent.name == "coder" and write.turn.phase == "implementation"
    row = WorkspaceFile.objects.get(team=team)
    assert (row.path, row.agent.name, row.turn, row.writes) == (
        OFFLINE_FILE,
        "coder",
        write.turn,
        1,
    )
    assert Message.objects.get(turn=write.turn, kind="chat").content.startswith(
        f"I wrote {OFFLINE_FILE} in the workspace"
    )
    # ... and the reviewer read it on a later turn, and said so.
    (read,) = steps(team, FileRead)
    assert read.turn.agent.name == "reviewer" and read.turn.id > write.turn.id
    assert "Ship the parser." in read.content[0]["content"]
    assert Message.objects.get(turn=read.turn, kind="chat").content.startswith(
        f"I read {OFFLINE_FILE}"
    )

    # Once each: the rest of the phase writes, reads and consults no more.
    run_until(
        team,
        lambda: Turn.objects.filter(
            team=team, phase="implementation", outcome="phase_complete"
        ).exists(),
        limit=200,
    )
    assert steps(team, FileWrite).count() == steps(team, FileRead).count() == 1
    assert steps(team, AskMulti).count() == 1


def test_file_and_consultation_tools_are_called_only_when_offered():
    model = OfflineProvider()
    opening = [
        {
            "role": "user",
            "content": "Team goal: Ship it.\nCurrent phase: implementation\n\n"
            "It is your turn, coder.",
        },
        {"role": "assistant", "content": "A line."},
        {"role": "user", "content": "[reviewer]: Fine.\n\nIt is your turn, coder."},
    ]
    offered = model.respond(
        model="loom-offline", system=CODER_SYSTEM, messages=opening, tools=definitions(FileWrite)
    )
    assert [name for name, _ in tool_calls(offered)] == [FileWrite.name]
    bare = model.respond(model="loom-offline", system=CODER_SYSTEM, messages=opening, tools=[])
    assert tool_calls(bare) == [] and "(offline model)" in bare.text
