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

from django.db.models import F

from teams.models import Team


def team_lock(team: Team | int, *, add: dict | None = None) -> Team:
    """The team's row, locked until the transaction ends, as it is now; with `add`
    ({counter: amount}) the amounts are added first (the UPDATE takes the row's lock
    as SELECT ... FOR UPDATE does, and the read after it sees the sums)."""
    team_id = team if isinstance(team, int) else team.pk
    if not team_add(team_id, add=add or {}):
        return Team.objects.select_for_update().get(pk=team_id)
    return Team.objects.get(pk=team_id)


def team_add(team_id: int, *, add: dict) -> bool:
    """Add the amounts ({counter: amount}) to the team's row, locking it until the
    transaction ends (no read: for a writer that needs the lock and the sums only);
    False when there was nothing to add (and nothing is locked)."""
    add = {field: amount for field, amount in add.items() if amount}
    if add:
        Team.objects.filter(pk=team_id).update(**{f: F(f) + n for f, n in add.items()})
    return bool(add)
