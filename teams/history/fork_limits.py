"""What a fork or a replay may cost, checked before anything is written: who may make
one, how large, and how often.

A fork or a replay makes a team, so it takes the right to create one
(`teams.add_team`; a superuser has it, an operator's command has no user and is not
asked). Its size is bounded by LOOM_FORK_MAX_MESSAGES: a fork copies the messages up
to its point, a replay runs the whole recorded run again, in the request; over the
limit is refused, saying the limit. And each person makes at most LOOM_FORK_RATE of
them (`count/period`, counted in the cache: Redis with LOOM_REDIS_URL, per process
otherwise)."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache

from teams.errors import InvalidInput, PermissionDenied, RateLimited
from teams.models import Message, Team

PERIODS = {"s": 1, "sec": 1, "min": 60, "m": 60, "hour": 3600, "h": 3600, "day": 86400, "d": 86400}


def parse_rate(rate: str) -> tuple[int, int]:
    """(count, seconds) of "10/hour"; ValueError for anything else."""
    count, _, period = (rate or "").partition("/")
    seconds = PERIODS.get(period.strip().lower())
    if seconds is None or not count.strip().isdigit() or int(count) < 1:
        raise ValueError(f"{rate!r} is not a rate: count/period, period s, min, hour or day.")
    return int(count), seconds


def _permission(user, doing: str) -> None:
    if user is not None and not user.has_perm("teams.add_team"):
        raise PermissionDenied(
            f"User {user.get_username()!r} may not {doing}: it makes a team, and this user "
            "may not create teams (no teams.add_team)."
        )


def _size(team: Team, messages: int, doing: str) -> None:
    limit = settings.LOOM_FORK_MAX_MESSAGES
    if messages > limit:
        raise InvalidInput(
            f"Team {team.slug!r} would {doing} with {messages:,} messages, over the "
            f"{limit:,} a fork or a replay may hold (LOOM_FORK_MAX_MESSAGES); nothing was "
            "stored.",
            field="at_message",
        )


def _rate(user, doing: str) -> None:
    if user is None:
        return
    count, seconds = parse_rate(settings.LOOM_FORK_RATE)
    window = int(time.time() // seconds)
    key = f"loom:forks:{user.pk}:{seconds}:{window}"
    cache.add(key, 0, timeout=seconds + 5)
    try:
        made = cache.incr(key)
    except ValueError:  # expired between add and incr: a new window
        cache.set(key, 1, timeout=seconds + 5)
        made = 1
    if made > count:
        left = int(seconds - time.time() % seconds) + 1
        raise RateLimited(
            f"You made {count} forks or replays within {seconds:,} seconds, the most "
            f"LOOM_FORK_RATE ({settings.LOOM_FORK_RATE}) allows; try again in {left} s."
        )


def fork_allowed(*, team: Team, messages: int, user, doing: str = "fork the team") -> None:
    """Refuse a fork or replay of `team` holding `messages` messages, by `user` (None:
    an operator's command): PermissionDenied, InvalidInput (over the size) or
    RateLimited, in that order (a refused right or size is not counted)."""
    _permission(user, doing)
    _size(team, messages, doing)
    _rate(user, doing)


def messages_up_to(team: Team, message_id: int) -> int:
    return Message.objects.filter(team=team, id__lte=message_id).count()


def messages_of(team: Team) -> int:
    return Message.objects.filter(team=team).count()
