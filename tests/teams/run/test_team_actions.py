import pytest

from teams import services
from teams.conversation import pm_requests
from teams.errors import Conflict, InvalidInput, NotFound
from teams.models import Message, Team, Turn
from teams.run import team_actions
from tests.helpers import drain


def test_start_enqueues_first_speaker_once(team):
    team_actions.team_start(team=team)
    with pytest.raises(Conflict, match="already running"):
        team_actions.team_start(team=team)
    (turn,) = Turn.objects.filter(status="queued")
    assert turn.agent.name == "coach" and turn.number == 1 and turn.phase == "refinement"


def test_round_robin_includes_coach_and_skips_external(team):
    services.agent_create(team=team, name="bot", role="external")
    team_actions.team_start(team=team)
    drain(team, limit=6)
    speakers = list(Turn.objects.order_by("id").values_list("agent__name", flat=True))
    assert speakers[:6] == ["coach", "researcher", "coder", "reviewer", "coach", "researcher"]


def test_pause_withdraws_queued_turn_and_resume_continues(team):
    team_actions.team_start(team=team)
    drain(team, limit=1)
    team_actions.team_pause(team=team)
    assert not Turn.objects.filter(status="queued").exists()
    drain(team)
    assert Turn.objects.filter(status="done").count() == 1
    with pytest.raises(Conflict):
        team_actions.team_pause(team=team)
    team_actions.team_resume(team=team)
    assert Turn.objects.get(status="queued").agent.name == "researcher"


def test_turn_budget_pauses_the_team(team):
    Team.objects.filter(pk=team.pk).update(max_turns=3)
    team.refresh_from_db()
    team_actions.team_start(team=team)
    drain(team)
    team.refresh_from_db()
    assert team.turn_count == 3 and team.status == Team.Status.PAUSED
    assert "Turn budget reached" in Message.objects.filter(kind="system").last().content


def test_pm_post_and_answer_validation(team, agents):
    with pytest.raises(InvalidInput):
        pm_requests.pm_message_post(team=team, content="  ")
    message = pm_requests.pm_message_post(team=team, content="Focus on HTML.")
    assert message.kind == "pm" and message.speaker == "pm"
    with pytest.raises(NotFound):
        pm_requests.pm_request_answer(request_id=999, answer="x")
    request = pm_requests.pm_request_open(team=team, agent=agents["coach"], question="?", turn=None)
    with pytest.raises(InvalidInput):
        pm_requests.pm_request_answer(request_id=request.id, answer="")


def test_phase_complete_advances_and_summary_carries_over(team, agents):
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Scope agreed.")
    team.refresh_from_db()
    assert team.phase == "planning"
    from teams.engine import history_rows

    history = history_rows.history_messages(agents["coder"], team)
    assert [m.kind for m in history] == ["phase_summary", "system"]
    assert "Scope agreed." in history[0].content


def test_last_phase_complete_makes_team_done(db):
    team = services.team_create(
        slug="solo", phases=["only"], agents=[{"name": "c", "role": "coach"}]
    )
    team_actions.team_start(team=team)
    team_actions.phase_complete(team=team, agent=team.agents.get(), summary="All done.")
    team.refresh_from_db()
    assert team.status == Team.Status.DONE


def test_conversation_waits_for_an_inbox_turn_then_continues(team, agents):
    from teams.conversation import questions

    questions.ask(team=team, question="Quick one?", target="coach")  # idle: coach woken
    inbox_turn = Turn.objects.get(purpose="inbox")
    team_actions.team_start(team=team)
    assert not Turn.objects.filter(purpose="conversation").exists()  # coach is busy
    drain(team, limit=1)
    inbox_turn.refresh_from_db()
    assert inbox_turn.status == "done"
    assert Turn.objects.get(purpose="conversation", status="queued").agent.name == "coach"


def test_sweeper_restarts_a_stalled_team(team):
    from teams.engine import worker

    Team.objects.filter(pk=team.pk).update(status=Team.Status.RUNNING)
    assert worker.sweep()["restarted"] == 1
    assert Turn.objects.get(status="queued").agent.name == "coach"
    assert worker.sweep()["restarted"] == 0


def test_a_phases_record_names_every_writer_of_a_file_in_order(team, agents):
    """Bug: "Files written" named the last writer alone, so a reviewer who fixed one
    line of the coder's module was credited with both files in every later request."""
    from teams.files import workspace
    from tests.helpers import make_turn

    team.phase_index = team.phases.index("implementation")
    team.save(update_fields=["phase_index"])
    for number, (name, content) in enumerate(
        [("coder", "def f():\n    return 1\n"), ("reviewer", "def f():\n    return 2\n")], 1
    ):
        turn = make_turn(agents[name], number=number, phase="implementation", status="done")
        workspace.file_write(
            team=team,
            agent=agents[name],
            turn=turn,
            path="f.py",
            content=content,
            writes_this_turn=0,
        )
    notes = make_turn(agents["reviewer"], number=3, phase="implementation", status="done")
    workspace.file_write(
        team=team,
        agent=agents["reviewer"],
        turn=notes,
        path="notes.md",
        content="ok\n",
        writes_this_turn=0,
    )
    team_actions.phase_complete(team=team, agent=agents["coach"], summary="Built.")
    summary = Message.objects.get(team=team, kind=Message.Kind.PHASE_SUMMARY).content
    assert summary.splitlines()[-1] == (
        "Files written: f.py (22 bytes, by coder, then reviewer), notes.md (3 bytes, by reviewer)"
    )
