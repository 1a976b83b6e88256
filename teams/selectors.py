"""Reads. Query-building lives here so views, API, admin and the engine agree."""

import re

from django.db.models import Exists, OuterRef, QuerySet, Sum
from django.db.models.functions import Length

from teams.errors import NotFound
from teams.models import (
    AGENT_NAME_PATTERN,
    Agent,
    Consultation,
    Message,
    PMRequest,
    Query,
    Team,
    Turn,
)

AGENT_NAME = re.compile(AGENT_NAME_PATTERN.removeprefix("^").removesuffix("$"))


def team_get(*, slug: str) -> Team:
    try:
        return Team.objects.get(slug=slug)
    except Team.DoesNotExist:
        raise NotFound(f"No team with slug {slug!r}.") from None


def agent_get(*, team: Team, name: str) -> Agent:
    agent = team.agents.filter(name=name).first() if AGENT_NAME.fullmatch(name) else None
    if agent is None:
        raise NotFound(f"Team {team.slug!r} has no agent named {name!r}.")
    return agent


def agent_open_queries(*, agent: Agent) -> QuerySet[Query]:
    """Open questions delivered to this agent's inbox (asked of it, broadcast to the
    team, or forwarded to it), oldest first."""
    delivered = Message.objects.filter(
        recipient=agent, kind=Message.Kind.QUERY, query_id=OuterRef("pk")
    )
    return (
        Query.objects.filter(team_id=agent.team_id, status=Query.Status.OPEN)
        .filter(Exists(delivered))
        .select_related("origin", "target", "answered_by")
        .order_by("id")
    )


def team_conversation(*, team: Team, phase: str | None = None) -> QuerySet[Message]:
    """The shared conversation in order (inbox messages excluded)."""
    messages = Message.objects.filter(team=team, recipient__isnull=True)
    if phase is not None:
        messages = messages.filter(phase=phase)
    return messages.select_related("author").order_by("id")


def agent_inbox(*, agent: Agent) -> QuerySet[Message]:
    return Message.objects.filter(recipient=agent).select_related("author").order_by("id")


def team_open_pm_request(*, team: Team) -> PMRequest | None:
    return PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).first()


def team_usage_totals(*, team: Team) -> dict:
    totals = Turn.objects.filter(team=team).aggregate(
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
        cache_creation_tokens=Sum("cache_creation_tokens"),
        cache_read_tokens=Sum("cache_read_tokens"),
        cost_usd=Sum("cost_usd"),
    )
    return {key: value or 0 for key, value in totals.items()}


def teams_visible_to(*, user) -> QuerySet[Team]:
    """Superusers see every team; other staff see the teams they manage; nobody else
    sees any."""
    if user is None or not user.is_authenticated or not user.is_active:
        return Team.objects.none()
    if user.is_superuser:
        return Team.objects.all()
    if not user.is_staff:
        return Team.objects.none()
    return Team.objects.filter(managers=user)


def team_for_user(*, user, slug: str) -> Team | None:
    return teams_visible_to(user=user).filter(slug=slug).first()


def open_pm_requests_in(*, teams: QuerySet[Team]) -> QuerySet[PMRequest]:
    """Open PM requests of these teams, newest first."""
    return (
        PMRequest.objects.filter(status=PMRequest.Status.OPEN, team__in=teams)
        .select_related("team", "agent")
        .order_by("-created_at", "-id")
    )


def open_pm_requests_for(*, user) -> QuerySet[PMRequest]:
    """Open PM requests of the teams this user may see, newest first."""
    return open_pm_requests_in(teams=teams_visible_to(user=user))


TRANSCRIPT_LIMIT = 500


def team_messages_after_bounded(
    *, team: Team, after_id: int, max_messages: int, max_chars: int
) -> tuple[list[Message], int]:
    """What a live page missed, bounded: of the conversation messages newer than
    `after_id`, the newest that fit in `max_messages` and `max_chars` characters of
    content (oldest first), and how many older ones among them were left out.

    Sizes are read first (no content), so a page far behind never loads more than
    the bound."""
    newer = team_conversation(team=team).filter(id__gt=after_id)
    sizes = list(
        newer.order_by("-id")
        .annotate(size=Length("content"))
        .values_list("id", "size")[:max_messages]
    )
    keep, total = [], 0
    for message_id, size in sizes:
        total += size or 0
        if total > max_chars:
            break
        keep.append(message_id)
    messages = list(team_conversation(team=team).filter(id__in=keep)) if keep else []
    if keep:
        omitted = newer.filter(id__lt=keep[-1]).count()
    elif sizes:
        omitted = newer.filter(id__lte=sizes[0][0]).count()
    else:
        omitted = 0
    return messages, omitted


def team_transcript(*, team: Team) -> list[Message]:
    """What the PM sees: the whole conversation, pass notes included, newest last."""
    newest = team_conversation(team=team).order_by("-id")[:TRANSCRIPT_LIMIT]
    return list(reversed(newest))


RECENT_QUERIES = 20


def team_recent_queries(*, team: Team) -> list[Query]:
    """The latest questions between the team's agents, newest first."""
    return list(
        Query.objects.filter(team=team)
        .select_related("origin", "target", "answered_by")
        .order_by("-id")[:RECENT_QUERIES]
    )


RECENT_BATCHES = 5
BATCH_SCAN = 200  # consultations looked at to find the latest batches


def team_recent_consultations(*, team: Team, batches: int = RECENT_BATCHES) -> list[dict]:
    """The team's latest consultations grouped by batch (one ask of one or several
    consultants), newest batch first: each {"batch", "agent", "prompt", "created_at",
    "consultations"}, the consultations of a batch in the order they were opened."""
    latest: list = []
    ids = Consultation.objects.filter(team=team).order_by("-id").values_list("batch", flat=True)
    for batch in ids[:BATCH_SCAN]:
        if batch not in latest:
            latest.append(batch)
            if len(latest) == batches:
                break
    rows = (
        Consultation.objects.filter(team=team, batch__in=latest)
        .select_related("agent", "profile", "turn")
        .order_by("id")
    )
    grouped: dict = {batch: [] for batch in latest}
    for row in rows:
        grouped[row.batch].append(row)
    return [
        {
            "batch": batch,
            "agent": rows[0].agent.name if rows[0].agent_id else "",
            "turn": rows[0].turn.number if rows[0].turn_id else None,
            "prompt": rows[0].prompt,
            "created_at": rows[0].created_at,
            "consultations": rows,
        }
        for batch, rows in grouped.items()
        if rows
    ]
