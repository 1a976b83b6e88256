"""Reads. Query-building lives here so views, API, admin and the engine agree."""

import re
from bisect import bisect_right
from collections import defaultdict
from decimal import Decimal

from django.db.models import Count, DecimalField, Exists, OuterRef, Q, QuerySet, Sum
from django.db.models.functions import Coalesce, Length

from teams.errors import NotFound
from teams.lib.catalog import MILLION, price_for
from teams.models import (
    AGENT_NAME_PATTERN,
    Agent,
    ConsultantProfile,
    Consultation,
    KeeperEntry,
    Message,
    ModelCall,
    PMRequest,
    Query,
    Team,
    Turn,
    TurnStep,
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


# The messages the PM's pages show: the conversation and the PM's nudges.
SHOWN = Q(recipient__isnull=True) | Q(kind=Message.Kind.NUDGE)


def team_transcript(*, team: Team) -> list[Message]:
    """What the PM sees: the whole conversation, pass notes included, and the PM's
    nudges to single agents (teams.run.steering), newest last. Each message has
    `number`: its place among all the messages the pages show (1 the first), the one
    numbering the live view, a fork and the compare page use."""
    said = Message.objects.filter(team=team).filter(SHOWN)
    newest = said.select_related("author", "recipient", "turn").order_by("-id")[:TRANSCRIPT_LIMIT]
    shown = list(reversed(newest))
    if shown:
        first = said.filter(id__lt=shown[0].id).count() + 1
        for offset, message in enumerate(shown):
            message.number = first + offset
    return shown


def message_number(*, team: Team, message_id: int) -> int:
    """How many messages the pages show up to and including `message_id`: the number
    the PM sees on it (or on the last shown one before it)."""
    return Message.objects.filter(team=team, id__lte=message_id).filter(SHOWN).count()


RECENT_QUERIES = 20


def team_recent_queries(*, team: Team) -> list[Query]:
    """The latest questions between the team's agents, newest first."""
    return list(
        Query.objects.filter(team=team)
        .select_related("origin", "target", "answered_by")
        .order_by("-id")[:RECENT_QUERIES]
    )


RECENT_FILES = 10
RECENT_KEEPERS = 10


def team_recent_files(*, team: Team, limit: int = RECENT_FILES) -> list:
    """The workspace files written last, newest first (the live view's Files panel)."""
    return list(
        team.workspace_files.select_related("agent", "turn").order_by("-updated_at", "-id")[:limit]
    )


def team_recent_keepers(*, team: Team, limit: int = RECENT_KEEPERS) -> list:
    """The keepers made last, newest first, each with `message_count`."""
    return list(
        team.keepers.select_related("agent")
        .annotate(message_count=Count("entries"))
        .order_by("-id")[:limit]
    )


RECENT_BATCHES = 5
BATCH_SCAN = 200  # consultations looked at to find the latest batches


def team_consultation_batch(*, team: Team, batch) -> dict | None:
    """One ask for a second opinion as team_recent_consultations shows it, or None."""
    rows = list(
        Consultation.objects.filter(team=team, batch=batch)
        .select_related("agent", "profile", "turn")
        .order_by("id")
    )
    return _batch_of(batch, rows) if rows else None


def _batch_of(batch, rows: list) -> dict:
    return {
        "batch": batch,
        "agent": rows[0].agent.name if rows[0].agent_id else "",
        "turn": rows[0].turn.number if rows[0].turn_id else None,
        "prompt": rows[0].prompt,
        "created_at": rows[0].created_at,
        "consultations": rows,
    }


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
    return [_batch_of(batch, rows) for batch, rows in grouped.items() if rows]


# --- money -------------------------------------------------------------------------


def budget_warned_teams(*, user) -> QuerySet[Team]:
    """The user's teams told that 80% of a budget is used (teams.run.budgets), theirs or
    an agent's own, not done: the PM inbox lists their warnings."""
    warned = (
        Q(cost_warned_at__isnull=False)
        | Q(turns_warned_at__isnull=False)
        | Q(pk__in=Agent.objects.filter(cost_warned_at__isnull=False).values("team_id"))
    )
    return (
        teams_visible_to(user=user).filter(warned).exclude(status=Team.Status.DONE).order_by("slug")
    )


def models_without_price(*, teams=None) -> list[str]:
    """Models that turns, consultations or tool calls of `teams` (default: all) used
    and the price table does not know: their calls were counted as free (the admin
    flags them)."""
    used: set[str] = set()
    for model in (Turn, Consultation, ModelCall):
        rows = model.objects.exclude(model="")
        if model is Consultation:  # an A2A agent's answers have no token price
            rows = rows.exclude(profile__provider=ConsultantProfile.Provider.A2A)
        if teams is not None:
            rows = rows.filter(team__in=teams)
        used.update(rows.values_list("model", flat=True).distinct())
    return sorted(m for m in used if price_for(m) is None)


def _figures(row: dict) -> dict:
    figures = {f: row[f] or 0 for f in USAGE_FIELDS}
    figures["cost_usd"] = Decimal(figures["cost_usd"]).quantize(Decimal("0.000001"))
    return figures


def _usage(rows) -> dict:
    return _figures(rows.aggregate(**{f: Sum(f) for f in USAGE_FIELDS}))


def _grouped(rows, key: str) -> list[dict]:
    """Usage per `key`; "turns" counts the turns that ran (not queued or cancelled)."""
    ran = Q(status__in=(Turn.Status.DONE, Turn.Status.FAILED, Turn.Status.RUNNING))
    return [
        {key: row[key], "turns": row["turns"], **_figures(row)}
        for row in rows.values(key)
        .annotate(turns=Count("id", filter=ran), **{f: Sum(f) for f in USAGE_FIELDS})
        .order_by(key)
    ]


USAGE_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_creation_tokens",
    "cache_read_tokens",
    "cost_usd",
)
CHARS_PER_TOKEN = 4


def team_spend(*, team: Team) -> dict:
    """Where a team's money goes: tokens and dollars per agent, per phase and per
    tool (consultations, smart retrieval), and what passes, offload and caching cut.

    A turn's figures include the calls its tools made; the cuts are estimates: a
    pass note's text (four characters a token) kept out of every later model call in
    its phase, an offloaded message kept out of every later call of its agent, and
    cache reads priced at the input price less the cache-read price."""
    turns = Turn.objects.filter(team=team)
    agents = _grouped(turns, "agent__name")
    caps = dict(team.agents.values_list("name", "max_cost_usd"))
    for row in agents:
        row["agent"] = row.pop("agent__name")
        row["max_cost_usd"] = caps.get(row["agent"])
    return {
        "team": team.slug,
        "spent_usd": team.spent_usd,
        "max_cost_usd": team.max_cost_usd,
        "totals": _usage(turns),
        "agents": agents,
        "phases": _grouped(turns, "phase"),
        "tools": _tool_spend(team),
        "cuts": _spend_cuts(team, turns),
        "unknown_prices": models_without_price(teams=[team]),
    }


def _tool_spend(team: Team) -> list[dict]:
    """What the calls tools made cost: consultations and smart retrieval."""
    consultations = Consultation.objects.filter(team=team)
    retrieval = ModelCall.objects.filter(team=team, purpose=ModelCall.Purpose.SMART_RETRIEVAL)
    sums = {
        "input_tokens": Coalesce(Sum("input_tokens"), 0),
        "output_tokens": Coalesce(Sum("output_tokens"), 0),
        "cost_usd": Coalesce(Sum("cost_usd"), Decimal(0), output_field=DecimalField()),
    }
    tools = [
        {
            "tool": "consultations",
            "calls": consultations.count(),
            **consultations.aggregate(**sums),
        },
        {"tool": "smart retrieval", "calls": retrieval.count(), **retrieval.aggregate(**sums)},
    ]
    for row in tools:
        row["cost_usd"] = Decimal(row["cost_usd"]).quantize(Decimal("0.000001"))
    return tools


def _spend_cuts(team: Team, turns) -> list[dict]:
    """What passes, offload and caching cut (estimates: see team_spend)."""
    price = price_for(_main_model(team))
    input_price = price.input if price else Decimal(0)
    calls_by_phase, calls_by_agent = defaultdict(list), defaultdict(list)
    for at, phase, agent_id in (
        TurnStep.objects.filter(turn__team=team, kind=TurnStep.Kind.MODEL)
        .order_by("created_at")
        .values_list("created_at", "turn__phase", "turn__agent_id")
    ):
        calls_by_phase[phase].append(at)
        calls_by_agent[agent_id].append(at)
    passes = _passes_cut(team, calls_by_phase)
    offload = _offload_cut(team, calls_by_agent)
    cached = 0
    saved = Decimal(0)
    for row in turns.values("model").annotate(read=Sum("cache_read_tokens")):
        model_price = price_for(row["model"] or "")
        cached += row["read"] or 0
        if model_price is not None:
            saved += (row["read"] or 0) * (model_price.input - model_price.cache_read) / MILLION
    return [
        {
            "mechanism": "passes",
            "count": passes[0],
            "tokens": passes[1],
            "usd": _usd(passes[1], input_price),
        },
        {
            "mechanism": "offload",
            "count": offload[0],
            "tokens": offload[1],
            "usd": _usd(offload[1], input_price),
        },
        {
            "mechanism": "caching",
            "count": cached,
            "tokens": cached,
            "usd": saved.quantize(Decimal("0.000001")),
        },
    ]


def _usd(tokens: int, price: Decimal) -> Decimal:
    return (tokens * price / MILLION).quantize(Decimal("0.000001"))


def _main_model(team: Team) -> str:
    """The model most of the team's turns spoke with (the cuts are priced at it)."""
    top = (
        Turn.objects.filter(team=team)
        .exclude(model="")
        .values("model")
        .annotate(n=Count("id"))
        .order_by("-n", "model")
        .first()
    )
    return top["model"] if top else ""


def _passes_cut(team: Team, calls: dict) -> tuple[int, int]:
    """(passes, tokens kept out): each pass note's text, estimated at four characters
    a token, is not in any later model call of its phase."""
    count = kept = 0
    notes = Message.objects.filter(team=team, kind=Message.Kind.PASS_NOTE).values_list(
        "created_at", "phase", "content"
    )
    for created_at, phase, content in notes:
        count += 1
        later = len(calls[phase]) - bisect_right(calls[phase], created_at)
        kept += len(content) // CHARS_PER_TOKEN * later
    return count, kept


def _offload_cut(team: Team, calls: dict) -> tuple[int, int]:
    """(messages offloaded, tokens kept out): each offloaded message is not in any
    later model call of the agent whose keeper holds it."""
    count = kept = 0
    entries = KeeperEntry.objects.filter(keeper__team=team).values_list(
        "keeper__agent_id", "keeper__created_at", Length("content")
    )
    for agent_id, created_at, length in entries:
        count += 1
        later = len(calls[agent_id]) - bisect_right(calls[agent_id], created_at)
        kept += (length or 0) // CHARS_PER_TOKEN * later
    return count, kept
