"""The query router (seed 000): ask, answer, forward, expire.

A query lands in its recipients' inboxes as "[Query from X | ID: ...]" and the
answer in the origin's inbox as "[Answer from X | Query: ...]"; both are seen on
the recipient's next turn, never in the middle of one (a turn reads a snapshot;
the prompt tells the recipient how to reply). The first answer wins: a conditional
update decides it, whoever races. Live viewers see each ask, forward, answer and
expiry as a query event."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from teams import events, keepers, services, turns
from teams.errors import InvalidInput, NotFound
from teams.event_payloads import QueryOut
from teams.models import Agent, Message, Query, Team

DEFAULT_TTL_SECONDS = 3600
DEFAULT_MAX_HOPS = 5
ENRICHMENT_ENTRIES = 3
MAX_HOPS_TEXT = "Maximum forwarding hops reached. Consider answering with what you know."


class QueryClosed(NotFound):
    """The query exists but is no longer open (answered or expired)."""


class MaxHopsReached(InvalidInput):
    """Forwarding would exceed the query's max hops."""


def _hop(kind: str, sender: str, to: str = "", enrichment: str = "") -> dict:
    hop = {"kind": kind, "from": sender, "at": timezone.now().isoformat()}
    if to:
        hop["to"] = to
    if enrichment:
        hop["enrichment"] = enrichment
    return hop


def _name(agent: Agent | None) -> str:
    return agent.name if agent is not None else "pm"


def resolve_agent(team: Team, name: str) -> Agent:
    agent = team.agents.filter(name=name.strip().lstrip("@")).first()
    if agent is None:
        names = ", ".join(team.agents.values_list("name", flat=True))
        raise NotFound(f"No agent named {name!r} in this team. Agents: {names}.")
    return agent


def keeper_enrichments(team: Team, question: str) -> list[str]:
    """What the team's keepers already hold about the question."""
    entries = keepers.search(team=team, query=question, limit=ENRICHMENT_ENTRIES)
    return [f"From keeper '{e.keeper.topic}': [{e.role}]: {e.content}" for e in entries]


def query_text(query: Query, sender: str) -> str:
    lines = [f"[Query from {sender} | ID: {query.key}]", query.question]
    if query.enrichments:
        lines += ["", "Relevant context:", *query.enrichments]
    return "\n".join(lines)


def _announce(event_type: type[events.Event], query: Query) -> None:
    query = Query.objects.select_related("origin", "target", "answered_by").get(pk=query.pk)
    events.publish(event_type(query=QueryOut.of(query)), team_id=query.team_id)


def _deliver_query(query: Query, sender: str, recipients: list[Agent]) -> None:
    for agent in recipients:
        services.message_add(
            team=query.team,
            content=query_text(query, sender),
            kind=Message.Kind.QUERY,
            author=query.origin,
            author_label=sender if query.origin is None else "",
            recipient=agent,
            query=query,
        )
        turns.inbox_wake(agent)


def _recipients(query: Query, target: Agent | None, exclude: set[int]) -> list[Agent]:
    if target is not None:
        return [target]
    # A broadcast never reaches the asker (nor whoever re-broadcasts it).
    return list(query.team.agents.exclude(pk__in=exclude).order_by("position", "id"))


@transaction.atomic
def ask(
    *,
    team: Team,
    question: str,
    origin: Agent | None = None,
    target: str | None = None,
    context: str | None = None,
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    max_hops: int = DEFAULT_MAX_HOPS,
) -> Query:
    """Route a question to one agent or (no target) to every agent but the asker."""
    question = (question or "").strip()
    if not question:
        raise InvalidInput("A question is needed.", field="question")
    if ttl_seconds < 1 or max_hops < 0:
        raise InvalidInput("The TTL must be positive and max hops not negative.")
    target_agent = resolve_agent(team, target) if target else None
    if target_agent is not None and origin is not None and target_agent.id == origin.id:
        raise InvalidInput("You cannot ask yourself; omit the target to ask everyone.")
    sender = _name(origin)
    if context and context.strip():
        question = f"{question}\n\nContext from {sender}: {context.strip()}"
    query = Query.objects.create(
        team=team,
        origin=origin,
        target=target_agent,
        question=question,
        max_hops=max_hops,
        ttl_seconds=ttl_seconds,
        expires_at=timezone.now() + timedelta(seconds=ttl_seconds),
        enrichments=keeper_enrichments(team, question),
        hops=[_hop("ask", sender, target_agent.name if target_agent else "*")],
    )
    exclude = {origin.id} if origin is not None else set()
    _deliver_query(query, sender, _recipients(query, target_agent, exclude))
    _announce(events.QueryAsked, query)
    return query


def _open_query(team: Team, key: str) -> Query:
    query = Query.objects.select_for_update().filter(team=team, key=key.strip()).first()
    if query is None:
        raise NotFound(f"Query {key} not found (may have expired).")
    if query.status == Query.Status.EXPIRED or query.expires_at < timezone.now():
        raise QueryClosed(f"Query {key} not found (may have expired).")
    return query


@transaction.atomic
def answer(*, team: Team, key: str, answerer: Agent | None, text: str) -> Query:
    """The first answer wins and reaches the origin with every enrichment gathered."""
    text = (text or "").strip()
    if not text:
        raise InvalidInput("The answer is empty.", field="answer")
    now = timezone.now()
    query = Query.objects.filter(team=team, key=key.strip()).first()
    if query is None or query.status == Query.Status.EXPIRED:
        raise NotFound(f"Query {key} not found (may have expired).")
    won = Query.objects.filter(pk=query.pk, status=Query.Status.OPEN, expires_at__gte=now).update(
        status=Query.Status.ANSWERED, answer=text, answered_by=answerer, answered_at=now
    )
    query = (
        Query.objects.select_for_update(of=("self",))
        .select_related("origin", "answered_by")
        .get(pk=query.pk)
    )
    if not won:
        if query.status != Query.Status.ANSWERED:  # expired, or past its TTL
            raise NotFound(f"Query {key} not found (may have expired).")
        by = query.answered_by.name if query.answered_by_id else "the PM"
        raise QueryClosed(f"Query {key} was already answered by {by}.")
    query.hops = [*query.hops, _hop("answer", _name(answerer))]
    query.save(update_fields=["hops"])
    if query.origin is not None:
        lines = [f"[Answer from {_name(answerer)} | Query: {query.key}]", text]
        if query.enrichments:
            lines += ["", "Enrichments gathered during routing:", *query.enrichments]
        services.message_add(
            team=team,
            content="\n".join(lines),
            kind=Message.Kind.ANSWER,
            author=answerer,
            author_label="" if answerer else "pm",
            recipient=query.origin,
            query=query,
        )
    _announce(events.QueryAnswered, query)
    return query


@transaction.atomic
def forward(
    *, team: Team, key: str, forwarder: Agent, enrichment: str, target: str | None = None
) -> Query:
    """Pass the question on with what the forwarder knows; no target re-broadcasts."""
    enrichment = (enrichment or "").strip()
    if not enrichment:
        raise InvalidInput("Say what you know about the question as enrichment.")
    query = _open_query(team, key)
    if query.status == Query.Status.ANSWERED:
        raise QueryClosed(f"Query {key} was already answered.")
    if query.hop_count >= query.max_hops:
        raise MaxHopsReached(MAX_HOPS_TEXT)
    target_agent = resolve_agent(team, target) if target else None
    if target_agent is not None and target_agent.id == forwarder.id:
        raise InvalidInput("You cannot forward a question to yourself.")
    query.enrichments = [*query.enrichments, f"{forwarder.name}: {enrichment}"]
    query.hops = [
        *query.hops,
        _hop("forward", forwarder.name, target_agent.name if target_agent else "*", enrichment),
    ]
    query.save(update_fields=["enrichments", "hops"])
    exclude = {forwarder.id} | ({query.origin_id} if query.origin_id else set())
    _deliver_query(query, forwarder.name, _recipients(query, target_agent, exclude))
    _announce(events.QueryForwarded, query)
    return query


def expire(now=None) -> int:
    """Expire open queries past their TTL and tell each origin what was gathered."""
    now = now or timezone.now()
    expired = 0
    for query in Query.objects.filter(status=Query.Status.OPEN, expires_at__lt=now):
        with transaction.atomic():
            if not Query.objects.filter(pk=query.pk, status=Query.Status.OPEN).update(
                status=Query.Status.EXPIRED
            ):
                continue  # answered at the last moment
            query.hops = [*query.hops, _hop("expire", "system")]
            query.save(update_fields=["hops"])
            if query.origin is not None:
                lines = [f"[Query expired | ID: {query.key}]", f"No answer to: {query.question}"]
                if query.enrichments:
                    lines += ["", "Gathered during routing:", *query.enrichments]
                else:
                    lines += ["", "Nothing was gathered during routing."]
                services.system_note(
                    query.team, "\n".join(lines), recipient=query.origin, query=query
                )
            _announce(events.QueryExpired, query)
            expired += 1
    return expired
