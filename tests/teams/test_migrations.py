"""Data migrations, run forward over rows written by the code before them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("teams", "0002_keeper_full_text_search")]
AFTER = [("teams", "0003_typed_turn_end_and_validators")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_old_tool_steps_learn_how_they_ended_the_turn():
    """A turn in flight during the upgrade resumes ending the way its tool said."""
    apps = migrate(BEFORE)
    Team, Agent = apps.get_model("teams", "Team"), apps.get_model("teams", "Agent")
    Turn, TurnStep = apps.get_model("teams", "Turn"), apps.get_model("teams", "TurnStep")
    team = Team.objects.create(slug="old", name="Old")
    agent = Agent.objects.create(team=team, name="coder", role="coder")
    turn = Turn.objects.create(team=team, agent=agent, status="running")
    calls = [
        {"type": "tool_use", "id": "t1", "name": "peer_discovery", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "pass_turn", "input": {"reason": "agree"}},
    ]
    TurnStep.objects.create(turn=turn, index=0, kind="model", content=calls)
    for index, (use, name) in enumerate([("t1", "peer_discovery"), ("t2", "pass_turn")], 1):
        result = [{"type": "tool_result", "tool_use_id": use, "content": "ok"}]
        TurnStep.objects.create(turn=turn, index=index, kind="tool", tool_name=name, content=result)

    apps = migrate(AFTER)
    steps = apps.get_model("teams", "TurnStep").objects.filter(kind="tool").order_by("index")
    assert [(s.ends_turn, s.end_reason) for s in steps] == [("", ""), ("pass", "agree")]
    migrate(MigrationExecutor(connection).loader.graph.leaf_nodes())
