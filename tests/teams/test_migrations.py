"""Data migrations, run forward over rows written by the code before them.

Each test migrates a database of its own, made empty for it (a SQLite file, or a
PostgreSQL database beside the test database): up to the migration before, rows as the
old code wrote them, then forward. The test database keeps its schema: going back to
the old migration there and forward again was two whole migration runs (a minute on
PostgreSQL)."""

from contextlib import contextmanager

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("teams", "0002_keeper_full_text_search")]
AFTER = [("teams", "0003_typed_turn_end_and_validators")]


@contextmanager
def empty_database(tmp_path):
    """The default connection on an empty database of its own, for the block."""
    name = connection.settings_dict["NAME"]
    fresh = f"{name}_migrations" if connection.vendor == "postgresql" else str(tmp_path / "m.db")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(f"DROP DATABASE IF EXISTS {connection.ops.quote_name(fresh)}")
            cursor.execute(f"CREATE DATABASE {connection.ops.quote_name(fresh)}")
    connection.close()
    connection.settings_dict["NAME"] = fresh
    try:
        yield
    finally:
        connection.close()
        connection.settings_dict["NAME"] = name
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"DROP DATABASE {connection.ops.quote_name(fresh)}")


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_old_tool_steps_learn_how_they_ended_the_turn(tmp_path):
    """A turn in flight during the upgrade resumes ending the way its tool said."""
    with empty_database(tmp_path):
        apps = migrate(BEFORE)
        assert MigrationExecutor(connection).loader.applied_migrations.keys() >= set(BEFORE)
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
            TurnStep.objects.create(
                turn=turn, index=index, kind="tool", tool_name=name, content=result
            )

        apps = migrate(AFTER)
        steps = apps.get_model("teams", "TurnStep").objects.filter(kind="tool").order_by("index")
        assert [(s.ends_turn, s.end_reason) for s in steps] == [("", ""), ("pass", "agree")]
    # The test database was never touched: it is at the latest migrations still.
    executor = MigrationExecutor(connection)
    assert not executor.migration_plan(executor.loader.graph.leaf_nodes())
