"""The one lock order (teams.run.locks): a team's row before its turns' rows.

On PostgreSQL two transactions that lock the same team and turn in opposite orders
deadlock, and one is killed. Each pair below is a worker's finish (the team first)
against a transaction that writes the same turn and its team (the sweeper's
turn_fail, turn_cancel, a model call's usage): a third connection holds the team's
row while the finish queues for it and the other starts, then lets go. Before the
order was kept by code, the other took the turn's row first and one of the two was
killed as a deadlock."""

from __future__ import annotations

import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.db import connection, connections, transaction

from teams.lib.catalog import Usage
from teams.models import Team, Turn
from teams.run import turns, usage
from tests.helpers import make_team, make_turn

ROOT = Path(__file__).resolve().parents[3]


def _waiting_backends() -> int:
    """Connections of this database waiting for a lock now (a row's lock is waited for
    as its holder's transaction id: no database on that pg_locks row)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")  # pg_stat_activity as it is now
        cursor.execute(
            "SELECT count(DISTINCT l.pid) FROM pg_locks l JOIN pg_stat_activity a "
            "ON a.pid = l.pid WHERE NOT l.granted AND a.datname = current_database()"
        )
        return cursor.fetchone()[0]


def _until_waiting(count: int, errors: list) -> None:
    deadline = time.monotonic() + 10
    while _waiting_backends() < count:
        assert not errors, errors
        assert time.monotonic() < deadline, f"{count} transaction(s) never queued for the lock"
        time.sleep(0.01)


def _race(first, second) -> list[Exception]:
    """Run `first` then `second` in threads of their own while the team's row is held
    here, each queued for it before the next starts; the errors they raised."""
    errors: list[Exception] = []

    def run(work):
        try:
            work()
        except Exception as exc:  # a deadlock is the failure this test is about
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(work,)) for work in (first, second)]
    with transaction.atomic():
        Team.objects.select_for_update().get(pk=Team.objects.get().pk)
        for number, thread in enumerate(threads, start=1):
            thread.start()
            _until_waiting(number, errors)
    for thread in threads:
        thread.join(30)
    return errors


def _running_turn():
    team = make_team("alpha")
    Team.objects.filter(pk=team.pk).update(status=Team.Status.RUNNING)
    coder = team.agents.get(name="coder")
    made = make_turn(coder, number=1, status=Turn.Status.RUNNING, claimed_by="w1", attempts=1)
    return lambda: Turn.objects.select_related("team", "agent").get(pk=made.pk)


def _fail(turn):
    turns.turn_fail(turn=turn, worker="w1", error="Gave up after 3 attempts.")


def _cancel(turn):
    turns.turn_cancel(turn=turn, worker="w1")


def _add_usage(turn):
    usage.turn_add_usage(
        turn=turn, model="claude-sonnet-4-6", usage=Usage(input_tokens=1000, output_tokens=100)
    )


@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks: PostgreSQL only")
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("other", [_fail, _cancel, _add_usage], ids=lambda f: f.__name__)
def test_a_finish_and_another_write_of_the_turn_and_its_team_never_deadlock(other):
    turn = _running_turn()
    finish = turn()
    errors = _race(
        lambda: turns.turn_finish(turn=finish, worker="w1", text="The parser is done."),
        lambda: other(turn()),
    )
    assert errors == []
    done = turn()
    assert done.status == Turn.Status.DONE  # the finish was first in the queue
    if other is _add_usage:
        assert done.input_tokens == 1000 and done.team.spent_usd > Decimal(0)
    else:
        assert done.team.status == Team.Status.RUNNING  # the sweeper's fail found it done


def test_only_the_locks_module_locks_a_teams_row():
    """Every transaction takes the team's lock through teams.run.locks, in its order."""
    found = [
        str(path.relative_to(ROOT))
        for folder in ("teams", "tools")
        for path in (ROOT / folder).rglob("*.py")
        if "Team.objects.select_for_update" in path.read_text()
    ]
    assert found == ["teams/run/locks.py"]
