"""The live events of each team, numbered and kept, so a socket that missed one is sent
it from the database (teams.web.consumers).

Every event published to a team's socket gets the next number of the team's sequence
(`Team.event_seq`), in the transaction that commits the change it announces, by one
statement that moves the counter on and writes the event's row (on SQLite an INSERT
and a trigger). Moving the counter locks the team's row until the commit (the lock
`teams.run.locks.team_lock` takes, so no new lock order), so a team's events commit in the
order of their numbers: when number n is committed, every number below it is too, and
a socket that sees n+1 after n-1 may read n from the database at once. The newest
LIVE_EVENTS_KEPT of a team are kept; older ones are counted as left out when a
catch-up would need them."""

from __future__ import annotations

import json

from django.db import connection
from django.db.models import Count, Q
from django.utils import timezone

from teams.models import LiveEvent, Team

# The newest events kept per team; every PRUNE_EVERY-th event deletes older ones.
LIVE_EVENTS_KEPT = 1000
PRUNE_EVERY = 250


def live_event_record(*, team_id: int, name: str, wire: dict, private_to: int | None) -> int:
    """Number the event and keep it, in the current transaction (or on its own: one
    statement); its sequence number."""
    seq = _next_seq_and_insert(team_id, name, wire, private_to)
    _prune(team_id, [seq])
    return seq


def live_events_record(*, team_id: int, events: list[tuple[str, dict, int | None]]) -> list[int]:
    """Number several events of one team (name, wire, private_to) in order and keep
    them, in the current transaction, by one statement; their sequence numbers."""
    if len(events) == 1:
        name, wire, private_to = events[0]
        return [live_event_record(team_id=team_id, name=name, wire=wire, private_to=private_to)]
    first = _next_seqs_and_insert(team_id, events)
    seqs = list(range(first, first + len(events)))
    _prune(team_id, seqs)
    return seqs


def _prune(team_id: int, seqs: list[int]) -> None:
    """Every PRUNE_EVERY-th number, the team's events older than the newest kept go."""
    if any(seq % PRUNE_EVERY == 0 for seq in seqs) and seqs[-1] > LIVE_EVENTS_KEPT:
        LiveEvent.objects.filter(team_id=team_id, seq__lte=seqs[-1] - LIVE_EVENTS_KEPT).delete()


def _next_seqs_and_insert(team_id: int, events: list[tuple[str, dict, int | None]]) -> int:
    """_next_seq_and_insert for several events: the first of their numbers."""
    team_table = connection.ops.quote_name(Team._meta.db_table)
    event_table = connection.ops.quote_name(LiveEvent._meta.db_table)
    columns = "(team_id, seq, name, payload, private_to, created_at)"
    rows = ", ".join(["(%s, %s, %s, %s)"] * len(events))
    values = [
        value
        for n, (name, wire, private_to) in enumerate(events, 1)
        for value in (n, name, json.dumps(wire), private_to)
    ]
    if connection.vendor == "postgresql":
        sql = (
            f"WITH s AS (UPDATE {team_table} SET event_seq = event_seq + %s WHERE id = %s"
            f" RETURNING id, event_seq - %s AS base) INSERT INTO {event_table} {columns}"
            " SELECT s.id, s.base + v.n, v.name, v.payload::jsonb, v.private_to::bigint, now()"
            f" FROM s, (VALUES {rows}) AS v(n, name, payload, private_to) RETURNING seq"
        )
        params = [len(events), team_id, len(events), *values]
    else:
        # The counter read once, before the rows go in (the trigger moves it on as each
        # does); the rows take the numbers after it.
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        sql = (
            f"WITH s AS MATERIALIZED (SELECT id, event_seq AS base FROM {team_table}"
            f" WHERE id = %s), v(n, name, payload, private_to) AS (VALUES {rows})"
            f" INSERT INTO {event_table} {columns}"
            " SELECT s.id, s.base + v.n, v.name, v.payload, v.private_to, %s FROM s, v"
            " ORDER BY v.n RETURNING seq"
        )
        params = [team_id, *values, now]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        numbers = [row[0] for row in cursor.fetchall()]
    if not numbers:
        raise Team.DoesNotExist(f"No team {team_id} to publish to.")
    return min(numbers)


def _next_seq_and_insert(team_id: int, name: str, wire: dict, private_to: int | None) -> int:
    """One statement: the team's counter moved on (its row locked until the commit)
    and the event's row written."""
    team_table = connection.ops.quote_name(Team._meta.db_table)
    event_table = connection.ops.quote_name(LiveEvent._meta.db_table)
    columns = "(team_id, seq, name, payload, private_to, created_at)"
    if connection.vendor == "postgresql":
        sql = (
            f"WITH s AS (UPDATE {team_table} SET event_seq = event_seq + 1 WHERE id = %s"
            f" RETURNING id, event_seq) INSERT INTO {event_table} {columns}"
            " SELECT id, event_seq, %s, %s::jsonb, %s, now() FROM s RETURNING seq"
        )
        params = [team_id, name, json.dumps(wire), private_to]
    else:
        # SQLite, one writer at a time: the row takes the counter's next number, and a
        # trigger (migration 0022) moves the counter on.
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        sql = (
            f"INSERT INTO {event_table} {columns} SELECT id, event_seq + 1, %s, %s, %s, %s"
            f" FROM {team_table} WHERE id = %s RETURNING seq"
        )
        params = [name, json.dumps(wire), private_to, now, team_id]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        raise Team.DoesNotExist(f"No team {team_id} to publish to.")
    return row[0]


def team_event_head(*, team_id: int) -> int:
    """The sequence number of the team's last committed event (0: none yet)."""
    return Team.objects.filter(pk=team_id).values_list("event_seq", flat=True).first() or 0


def team_events_after(
    *,
    team_id: int,
    after_seq: int,
    upto_seq: int,
    viewer_agent_id: int | None,
    max_events: int,
    max_chars: int,
) -> tuple[list[dict], int]:
    """The events numbered after `after_seq` up to `upto_seq` that the viewer may see
    (teams.live.events.audience_allows), as wire dicts with their `seq`, oldest first:
    the newest within `max_events` and `max_chars` of JSON (at least one), and how
    many were left out (beyond the bounds, or no longer kept)."""
    if upto_seq <= after_seq:
        return [], 0
    in_range = LiveEvent.objects.filter(team_id=team_id, seq__gt=after_seq, seq__lte=upto_seq)
    visible = Q()
    if viewer_agent_id is not None:
        visible = Q(private_to__isnull=True) | Q(private_to=viewer_agent_id)
    counts = in_range.aggregate(kept=Count("id"), visible=Count("id", filter=visible))
    sent, chars = [], 0
    for seq, payload in (
        in_range.filter(visible).order_by("-seq").values_list("seq", "payload")[:max_events]
    ):
        size = len(json.dumps(payload))
        if sent and chars + size > max_chars:
            break
        chars += size
        sent.append({**payload, "seq": seq})
    sent.reverse()
    no_longer_kept = (upto_seq - after_seq) - counts["kept"]
    return sent, counts["visible"] - len(sent) + no_longer_kept
