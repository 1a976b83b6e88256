"""Row locks in the one order every transaction takes them: a team's row before any
of its turns' rows.

Two transactions that lock the same rows in opposite orders can each hold what the
other waits for: on PostgreSQL one of them is then killed as a deadlock (the sweeper's
turn_fail against a worker's finish, before this module). So a transaction that
writes a team and one of its turns locks the team here first, and only then writes
the turn (its UPDATE takes the turn's lock); a transaction that writes only a turn,
or only a team, needs nothing more. tests/teams/run/test_locks.py runs the pairs
that lock both on PostgreSQL, and checks that no other module locks a team's row."""

from __future__ import annotations

import functools
from collections.abc import Callable

from django.db.models import F, QuerySet

from teams.lib.compiled import compiled
from teams.models import Team


def team_lock(
    team: Team | int, *, add: dict | None = None, read: Callable[[], dict] | None = None
) -> Team:
    """The team's row, locked until the transaction ends, as it is now; with `add`
    ({counter: amount}) the amounts are added first (the UPDATE takes the row's lock
    as SELECT ... FOR UPDATE does, and the read after it sees the sums). `read` gives
    annotations read with the row (teams.run.stuck.checks_read: what the stuck checks
    need, in the statement the finish makes anyway)."""
    team_id = team if isinstance(team, int) else team.pk
    if not team_add(team_id, add=add or {}):
        return _team_read(read, lock=True).get(pk=team_id)
    return _team_read(read, lock=False).get(pk=team_id)


@functools.lru_cache(maxsize=512)
def _team_read(read: Callable[[], dict] | None, *, lock: bool) -> QuerySet[Team]:
    """The statement that reads a locked team, built once per `read` (each call's
    filter makes a copy: its subqueries are resolved once per process)."""
    teams = Team.objects.select_for_update() if lock else Team.objects.all()
    return teams.annotate(**compiled(Team, read)) if read else teams


def team_add(team_id: int, *, add: dict) -> bool:
    """Add the amounts ({counter: amount}) to the team's row, locking it until the
    transaction ends (no read: for a writer that needs the lock and the sums only);
    False when there was nothing to add (and nothing is locked)."""
    add = {field: amount for field, amount in add.items() if amount}
    if add:
        Team.objects.filter(pk=team_id).update(**{f: F(f) + n for f, n in add.items()})
    return bool(add)
