"""The query router (seed 000): ask, answer, forward, expire.

A query lands in its recipients' inboxes as "[Query from X | ID: ...]" and the
answer in the origin's inbox as "[Answer from X | Query: ...]"; both are seen on
the recipient's next turn, never in the middle of one (a turn reads a snapshot).
The first answer wins: a conditional update decides it, whoever races."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from teams import conversation, events, keepers
from teams.errors import InvalidInput, NotFound
from teams.models import Agent, Message, Query, Team, Turn

DEFAULT_TTL_SECONDS = 3600
DEFAULT_MAX_HOPS = 5
ENRICHMENT_ENTRIES = 3
ACTIVE_TURN = (Turn.Status.QUEUED, Turn.Status.RUNNING)
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
    lines += [
        "",
        f'You can respond using peer_answer_question with query_id "{query.key}", or '
        "forward the question to another agent if someone else is better suited to answer.",
    ]
    return "\n".join(lines)


def _deliver_query(query: Query, sender: str, recipients: list[Agent]) -> None:
    for agent in recipients:
        conversation.post(
            query.team,
            query_text(query, sender),
            kind=Message.Kind.QUERY,
            author=query.origin,
            author_label=sender if query.origin is None else "",
            recipient=agent,
            query=query,
        )
        wake_for_inbox(agent)


def _recipients(query: Query, target: Agent | None, exclude: set[int]) -> list[Agent]:
    if target is not None:
        return [target]
    # A broadcast never reaches the asker (nor whoever re-broadcasts it).
    return list(query.team.agents.exclude(pk__in=exclude).order_by("position", "id"))


def wake_for_inbox(agent: Agent) -> Turn | None:
    """Give an agent a turn of its own for its inbox when its team is not talking.

    A team in a conversation (running, waiting for the PM) or paused by the PM
    reads inboxes in the rotation; external agents are driven by their program."""
    team = Team.objects.get(pk=agent.team_id)
    if team.status not in (Team.Status.IDLE, Team.Status.DONE):
        return None
    if agent.role == Agent.Role.EXTERNAL:
        return None
    if Turn.objects.filter(agent=agent, status__in=ACTIVE_TURN).exists():
        return None  # the running turn's finish looks at the inbox again
    if Turn.objects.filter(team=team).count() >= team.max_turns * 2:
        return None  # a safety net against agents pinging each other forever
    return conversation.turn_enqueue(
        team=team, agent=agent, number=team.turn_count, purpose=Turn.Purpose.INBOX
    )


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
        conversation.post(
            team,
            "\n".join(lines),
            kind=Message.Kind.ANSWER,
            author=answerer,
            author_label="" if answerer else "pm",
            recipient=query.origin,
            query=query,
        )
    events.publish(team.id, "query.answered", query=query_payload(query))
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
                conversation.post(
                    query.team,
                    "\n".join(lines),
                    kind=Message.Kind.SYSTEM,
                    author_label="system",
                    recipient=query.origin,
                    query=query,
                )
            expired += 1
    return expired


def hop_lines(query: Query) -> list[str]:
    """The hop chain in words, for people."""
    lines = []
    for hop in query.hops:
        kind, sender, to = hop.get("kind"), hop.get("from", "?"), hop.get("to", "")
        target = "everyone" if to == "*" else to
        if kind == "ask":
            lines.append(f"{sender} asked {target}")
        elif kind == "forward":
            lines.append(f"{sender} forwarded to {target}: {hop.get('enrichment', '')}")
        elif kind == "answer":
            lines.append(f"{sender} answered")
        elif kind == "expire":
            lines.append("expired unanswered")
    return lines


def query_payload(query: Query) -> dict:
    return {
        "key": query.key,
        "status": query.status,
        "origin": query.origin.name if query.origin_id else None,
        "target": query.target.name if query.target_id else None,
        "answered_by": query.answered_by.name if query.answered_by_id else None,
        "hops": query.hops,
    }


def pending_inbox(agent: Agent, after_id: int) -> bool:
    """Has the agent been sent queries it has not had a turn to see yet?"""
    return Message.objects.filter(
        Q(kind=Message.Kind.QUERY), recipient=agent, id__gt=after_id
    ).exists()
