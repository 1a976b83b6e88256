"""Where a fork is: a message of a team (everything up to and including it) or a turn
(up to its last message), moved back so it never cuts a turn in half
(teams.history.forking holds what a fork copies from there).

A point inside a turn that had not finished (an agent was mid-turn: its tool calls
had written messages, files or queries, but not its end) moves back to the last
finished turn before it; `Point.label` says where the fork really is, a message by
the number the pages show it with (teams.selectors.message_number)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, Min, Q

from teams import selectors
from teams.errors import InvalidInput, NotFound
from teams.models import Message, Team, Turn

FINISHED = (Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.CANCELLED)


@dataclass(frozen=True)
class Point:
    """Where a fork is: up to message id `message_id` (0: before any), at `at`."""

    message_id: int
    at: datetime | None
    label: str  # "message 12" (its number as the pages show it), "turn 5", "the start"
    turn_ids: frozenset[int]  # the finished turns it includes
    moved_back: bool = False


def _newest_id(team: Team, upto: int) -> int:
    return Message.objects.filter(team=team, id__lte=upto).aggregate(n=Max("id"))["n"] or 0


def _settle(team: Team, message_id: int, label: str, *, moved: bool = False) -> Point:
    """Move the point back until no turn is cut in half by it."""
    while True:
        mine = Message.objects.filter(team=team, id__lte=message_id, turn__isnull=False)
        touched = set(mine.values_list("turn_id", flat=True).distinct())
        later = set(
            Message.objects.filter(team=team, id__gt=message_id, turn_id__in=touched)
            .values_list("turn_id", flat=True)
            .distinct()
        )
        unfinished = set(
            Turn.objects.filter(pk__in=touched)
            .exclude(status__in=FINISHED)
            .values_list("pk", flat=True)
        )
        cut = later | unfinished
        if not cut:
            break
        first = Message.objects.filter(turn_id__in=cut).aggregate(n=Min("id"))["n"]
        message_id, moved = _newest_id(team, first - 1), True
    at = Message.objects.filter(pk=message_id).values_list("created_at", flat=True).first()
    included = frozenset(
        Turn.objects.filter(team=team, status__in=FINISHED)
        .filter(Q(messages__id__lte=message_id) | Q(messages__isnull=True, finished_at__lte=at))
        .values_list("pk", flat=True)
        .distinct()
        if at is not None
        else []
    )
    if moved:
        label = f"{label} (moved back to the last finished turn before it)"
    return Point(message_id, at, label, included, moved)


def fork_point(team: Team, *, at_message: int | None = None, at_turn: int | None = None) -> Point:
    """The point `at_message` or `at_turn` (one of them) names in `team`'s run; NotFound
    when the team has no such message or turn (another team's included: one answer,
    whatever the reason), InvalidInput when both or neither are given."""
    if (at_message is None) == (at_turn is None):
        raise InvalidInput(
            "Fork at one point: give at_message (a message id) or at_turn (a turn id).",
            field="at_message",
        )
    if at_message is not None:
        # Another team's message is answered as a missing one: no id oracle.
        message = Message.objects.filter(pk=at_message, team=team).only("team_id").first()
        if message is None:
            raise NotFound(f"Team {team.slug!r} has no message {at_message}.")
        number = selectors.message_number(team=team, message_id=message.pk)
        return _settle(team, message.pk, f"message {number}")
    turn = Turn.objects.filter(pk=at_turn, team=team).first()
    if turn is None:
        raise NotFound(f"Team {team.slug!r} has no turn {at_turn}.")
    label = f"turn {turn.number}"
    own = Message.objects.filter(turn=turn).aggregate(first=Min("id"), last=Max("id"))
    if turn.status in FINISHED:
        last = own["last"]
        if last is None:
            last = (
                Message.objects.filter(team=team, created_at__lte=turn.finished_at).aggregate(
                    n=Max("id")
                )["n"]
                or 0
            )
        return _settle(team, last, label)
    before = (own["first"] or (turn.snapshot_message_id or 0) + 1) - 1
    return _settle(team, _newest_id(team, before), label, moved=True)


def start_point(team: Team) -> Point:
    """Before anything happened: no message, no turn (what a replay starts from)."""
    first = Turn.objects.filter(team=team).order_by("id").first()
    return Point(0, first.queued_at if first else None, "the start", frozenset())


__all__ = ["FINISHED", "Point", "fork_point", "start_point"]
