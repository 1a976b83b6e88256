"""Every tool goes through the team's state table at dispatch, in the agent loop as
through the API: a finished team is only read."""

from teams.models import Message, Team
from teams.run import team_actions
from tools import registry


def finish(team, agents):
    team_actions.team_start(team=team)
    team = Team.objects.get(pk=team.pk)
    while team.status != Team.Status.DONE:
        team = team_actions.phase_complete(team=team, agent=agents["coach"], summary="Ok.")


def test_a_finished_team_refuses_writes_and_still_reads(team, agents, ctx_for):
    ctx = ctx_for("coder")  # the loop's copy of the team, taken while it was idle
    finish(team, agents)
    before = Message.objects.count()
    result = registry.execute("peer_message", {"to": "coach", "content": "Hi"}, ctx)
    assert result.is_error
    assert result.text.startswith("Error: team alpha is finished; peer_message would change it")
    assert Message.objects.count() == before
    agents["coder"].refresh_from_db()
    assert agents["coder"].violations == 0  # the state table, not a forbidden tool
    assert not registry.execute("peer_discovery", {}, ctx).is_error


def test_signal_phase_complete_works_only_while_running(team, agents, ctx_for):
    result = registry.execute("signal_phase_complete", {"summary": "Early."}, ctx_for("coach"))
    assert result.text == (
        "Error: team alpha is idle; signal_phase_complete works only while the team is running."
    )
    team.refresh_from_db()
    assert team.phase_index == 0


def test_every_tool_says_whether_it_writes():
    reads = {t.name for t in registry.all_tools() if not t.writes}
    assert reads == {
        "pass_turn", "scan_hierarchy", "think_back", "check_drift", "peer_discovery",
        "context_retrieve", "file_list", "file_read", "read_consultation",
    }  # fmt: skip
