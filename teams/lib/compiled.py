"""Annotations compiled once: the correlated subqueries a hot statement carries (a
claimed turn's read, the rotation, the stuck checks' reads), as RawSQL made from the
SQL the ORM compiles for them the first time, kept per process and database; and the
one hot statement whose values change on every call written in SQL (the history's ids).

The one place Loom goes beyond the public ORM (issue 34). Django builds and compiles
every query anew, and these subqueries were about a third of a steady turn's CPU
(bench/turn_overhead.py: docs/benchmarks.md has the figures). It takes only
expressions with no value of a call's own: correlated to the outer row with OuterRef,
their constants fixed when `build` makes them (no stand-in numbers). It reads the
ORM's compiler (Query.get_compiler, SQLCompiler.compile), which Django does not
promise to keep: tests/teams/lib/test_compiled.py runs each kept set both ways and
compares what they read, so an upgrade that changes them fails there, loudly."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model
from django.db.models.expressions import RawSQL

_kept: dict[tuple, dict[str, RawSQL]] = {}
_kept_lock = threading.Lock()


def compiled(model: type[Model], build: Callable[[], dict]) -> dict[str, RawSQL]:
    """The annotations `build()` makes on a query of `model` (correlated to its
    table), as RawSQL compiled once per process and database vendor."""
    connection = connections[DEFAULT_DB_ALIAS]
    key = (model, build, connection.vendor)
    with _kept_lock:
        found = _kept.get(key)
    if found is None:
        query = model._default_manager.annotate(**build()).query
        compiler = query.get_compiler(connection=connection)
        found = {}
        for name, expression in query.annotations.items():
            sql, params = compiler.compile(expression)
            found[name] = RawSQL(sql, params, output_field=expression.output_field)
        with _kept_lock:
            _kept[key] = found
    return dict(found)


# --- statements written by hand --------------------------------------------------
# A statement whose values change on every call cannot be kept as the ORM compiled it
# (Django binds values while it compiles). The history's ids are read on every turn
# and the ORM's building and compiling them was about a tenth of a steady turn's CPU,
# so they are written here in SQL, the values as plain parameters, for the tables the
# rows' models name. tests/teams/lib/test_compiled.py holds each to the ORM's reading
# (teams.engine.history_rows.history_queryset) on both databases.


@dataclass(frozen=True)
class HistoryKinds:
    """The message kinds the history's terms name (teams.engine.history_rows)."""

    conversation: tuple[str, ...]  # the phase's conversation
    summary: str  # a phase's summary
    record: str  # an agent's own action record (a tool call)
    notes: tuple[str, ...]  # answers and peer notes
    passed: str  # a pass note, never in a history


def history_ids(
    *,
    agent_id: int,
    team_id: int,
    phase: str,
    unseen_after: int,
    until_id: int,
    kinds: HistoryKinds,
) -> list[int]:
    """The ids of the agent's history up to `until_id`, oldest first: the phase's
    conversation, the phases' summaries and the agent's inbox (its records of the phase,
    open questions, other lines of the phase or after `unseen_after`), minus pass notes
    and what the agent offloaded (history_queryset's terms, in its order)."""
    conversation = ", ".join(["%s"] * len(kinds.conversation))
    notes = ", ".join(["%s"] * len(kinds.notes))
    sql = _HISTORY_IDS.format(conversation=conversation, notes=notes)
    params = [
        *kinds.conversation, phase, team_id,  # the phase's conversation
        kinds.summary, team_id,  # the summaries
        agent_id, kinds.record, phase, *kinds.notes, kinds.record, phase, unseen_after,
        kinds.passed, agent_id, until_id,
    ]  # fmt: skip
    with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


_HISTORY_IDS = """SELECT m.id FROM teams_message m
WHERE ((m.kind IN ({conversation}) AND m.phase = %s AND m.recipient_id IS NULL
        AND m.team_id = %s)
    OR (m.kind = %s AND m.team_id = %s)
    OR (m.recipient_id = %s AND ((m.kind = %s AND m.phase = %s)
        OR (m.query_id IS NOT NULL AND NOT (m.kind IN ({notes})))
        OR (NOT (m.kind = %s) AND (m.phase = %s OR m.id > %s)))))
  AND NOT (m.kind = %s)
  AND NOT EXISTS (SELECT 1 FROM teams_keeperentry e
      INNER JOIN teams_keeper k ON e.keeper_id = k.id
      WHERE k.agent_id = %s AND e.message_id = m.id)
  AND m.id <= %s
ORDER BY m.id"""


@dataclass(frozen=True)
class RotationValues:
    """The statuses and kinds the rotation's read names (teams.run.turns.rotation)."""

    active: tuple[str, ...]  # a turn queued or running
    waiting: str  # a turn stopped at a call for approval
    conversation: str  # the team's conversation turn (not an inbox turn)
    external: str  # the role that never takes a turn in the rotation


def rotation_rows(agent_model: type[Model], *, team_id: int, values: RotationValues) -> list:
    """The team's speakers in order (every agent but the external ones), each with what
    the team's unfinished turns say of it: `busy` (a turn of its own queued or
    running), `talking` (the team's conversation turn is), `waiting` (the team's first
    turn stopped at an approval, or None). raw() reads the agents' columns through
    their fields' converters, as a query does; `busy` and `talking` are 0 or 1 on
    SQLite, False or True on PostgreSQL."""
    active = ", ".join(["%s"] * len(values.active))
    params = [
        *values.active, *values.active, values.conversation, values.waiting,
        values.external, team_id,
    ]  # fmt: skip
    return list(agent_model._default_manager.raw(_ROTATION.format(active=active), params))


_ROTATION = """SELECT a.*,
    EXISTS (SELECT 1 FROM teams_turn u WHERE u.team_id = a.team_id
        AND u.status IN ({active}) AND u.agent_id = a.id) AS busy,
    EXISTS (SELECT 1 FROM teams_turn u WHERE u.team_id = a.team_id
        AND u.status IN ({active}) AND u.purpose = %s) AS talking,
    (SELECT u.id FROM teams_turn u WHERE u.team_id = a.team_id AND u.status = %s
        ORDER BY u.id LIMIT 1) AS waiting
FROM teams_agent a
WHERE NOT (a.role = %s) AND a.team_id = %s
ORDER BY a.position, a.id"""
