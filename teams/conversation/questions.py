"""The query router: agents ask, answer and forward questions; unanswered ones expire.

A question lands in each recipient's inbox as "[Query from <asker> | ID: q-…]",
naming the original asker however often it was forwarded, with the forwarding chain
(who passed it to whom, adding what) and, labelled as Loom's addition, a bounded
excerpt of what the team's keepers hold about it. The answer lands once in the
asker's inbox as "[Answer from X | Query: q-…]" with the question it answers and the
chain. Both are seen on the recipient's next turn, never in the middle of one (a
turn reads a snapshot). A delivered question invites an answer only while
`open_for` says so: not once it is answered or expired, nor after the recipient
forwarded it on, nor when a newer delivery of it replaced it. The first answer wins:
a conditional update decides it, whoever races. Live viewers see each ask, forward,
answer and expiry as a query event."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from teams import services
from teams.conversation import keepers
from teams.errors import InvalidInput, NotFound, PermissionDenied
from teams.live import events
from teams.live.event_payloads import MessageOut, QueryOut
from teams.models import Agent, Message, Query, Team
from teams.run import turns

DEFAULT_TTL_SECONDS = 3600
DEFAULT_MAX_HOPS = 5
MAX_HOPS_TEXT = "Maximum forwarding hops reached. Consider answering with what you know."

# Keeper context added to a question before it is routed: a few entries that match at
# least ENRICHMENT_MIN_TERMS distinct meaningful words of it (all of them when it has
# fewer), each shortened, all of them within ENRICHMENT_CHARS.
ENRICHMENT_ENTRIES = 3
ENRICHMENT_CANDIDATES = 12
ENRICHMENT_MIN_TERMS = 2
ENRICHMENT_CHARS = 1500
ENRICHMENT_ENTRY_CHARS = 400
KEEPER_LABEL = "Relevant context from keepers (added by Loom, may be incomplete):"
KEEPER_ITEM = "From keeper "  # how a keeper's enrichment starts (a forwarder's: "name, ")
QUESTION_CHARS = 600  # of the question repeated with its answer


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


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def keeper_enrichments(team: Team, question: str) -> list[str]:
    """What the team's keepers hold about the question, bounded and filtered: searched
    by its meaningful words only (no "what", "the", "is"), an entry kept only when it
    matches ENRICHMENT_MIN_TERMS of them, the same message once, each entry shortened
    and all of them within ENRICHMENT_CHARS."""
    terms = keepers.meaningful_terms(question)
    if not terms:
        return []
    floor = min(ENRICHMENT_MIN_TERMS, len(terms))
    found: list[str] = []
    seen: set[str] = set()
    used = 0
    # Lines of the team conversation only: the question's recipients, and whoever
    # reads the query, may not read another agent's inbox lines.
    found_entries = keepers.search(
        team=team, query=" ".join(terms), limit=ENRICHMENT_CANDIDATES, public_only=True
    )
    for entry in found_entries:
        content = " ".join(entry.content.split())
        if content in seen or keepers.matched_terms(terms, content) < floor:
            continue
        seen.add(content)
        line = (
            f'{KEEPER_ITEM}{entry.keeper_id} "{_short(entry.keeper.topic, 60)}", '
            f"[{entry.role}]: {_short(content, ENRICHMENT_ENTRY_CHARS)}"
        )
        if used + len(line) > ENRICHMENT_CHARS:
            break
        found.append(line)
        used += len(line) + 1
        if len(found) == ENRICHMENT_ENTRIES:
            break
    return found


def asker(query: Query) -> str:
    """The original asker's name ("pm" for a question from the PM or a program)."""
    return _name(query.origin)


def chain_lines(query: Query, as_of: datetime | None = None) -> list[str]:
    """The forwarding chain, one line per forward: who passed it to whom, adding what
    (those made by `as_of` when given)."""
    lines = []
    for hop in query.hops:
        at = _hop_time(hop) if as_of is not None else None
        if at is not None and at > as_of:
            continue
        if hop.get("kind") == "forward":
            to = "everyone" if hop.get("to", "*") == "*" else hop["to"]
            lines.append(f"{hop['from']}, forwarding it to {to}: {hop.get('enrichment', '')}")
    return lines


def keeper_lines(query: Query) -> list[str]:
    return [e for e in query.enrichments if e.startswith(KEEPER_ITEM)]


def query_head(query: Query) -> str:
    """The first line of a delivered question, which is all its inbox message stores."""
    return f"[Query from {asker(query)} | ID: {query.key}]"


def query_text(query: Query, as_of: datetime | None = None) -> str:
    """A question as its recipients read it: the original asker, the question, the
    forwarding chain (as it stood at `as_of`, the delivery), and the keepers' context
    labelled as Loom's."""
    return f"{query_head(query)}\n{_query_body(query, as_of)}"


def _query_body(query: Query, as_of: datetime | None) -> str:
    lines = [query.question]
    chain = chain_lines(query, as_of)
    if chain:
        lines += ["", "Relevant context:", *chain]
    keeper = keeper_lines(query)
    if keeper:
        lines += ["", KEEPER_LABEL, *keeper]
    return "\n".join(lines)


def answer_text(query: Query, answerer: str, text: str) -> str:
    """An answer as its asker reads it: next to the question it answers and whom the
    asker asked, with the forwarding chain."""
    to = query.target.name if query.target_id else "everyone"
    lines = [
        f"[Answer from {answerer} | Query: {query.key}]",
        text,
        "",
        f"It answers the question {asker(query)} (you) asked {to}: "
        + _short(query.question, QUESTION_CHARS),
    ]
    chain = chain_lines(query)
    if chain:
        lines += ["", "Enrichments gathered during routing:", *chain]
    return "\n".join(lines)


def expiry_text(query: Query) -> str:
    lines = [f"[Query expired | ID: {query.key}]", f"No answer to: {query.question}"]
    chain = chain_lines(query)
    if chain:
        lines += ["", "Gathered during routing:", *chain]
    else:
        lines += ["", "Nothing was gathered during routing."]
    return "\n".join(lines)


def delivered(messages):
    """The messages, each question delivery with its whole text: a broadcast stores
    the question once, on its Query, and each recipient's inbox message only its head
    line (query_head); this renders the rest as it stood when it was delivered. Call
    it on every list of messages read for display or for a prompt (the query
    prefetched). A row from before this stored the whole text, and keeps it."""
    for message in messages:
        if is_stored_head(message):
            message.content = f"{message.content}\n{_query_body(message.query, message.created_at)}"
    return messages


def is_stored_head(message: Message) -> bool:
    return (
        message.kind == Message.Kind.QUERY
        and message.query_id is not None
        and "\n" not in message.content
    )


def _hop_time(hop: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(hop["at"])
    except (KeyError, TypeError, ValueError):
        return None


def open_for(message: Message, agent: Agent) -> bool:
    """May `agent` still answer the question this inbox message delivered? Only while
    the query is open and within its TTL, the message is the newest delivery of it to
    the agent, and the agent has not forwarded it on since."""
    query = message.query
    if query.status != Query.Status.OPEN or query.expires_at < timezone.now():
        return False
    for hop in query.hops:
        at = _hop_time(hop)
        if hop.get("kind") == "forward" and hop.get("from") == agent.name:
            if at is None or at >= message.created_at:
                return False
    newer = Message.objects.filter(
        query=query, recipient=agent, kind=Message.Kind.QUERY, id__gt=message.id
    )
    return not newer.exists()


def first_answer(message: Message) -> bool:
    """Is this the first answer message of its query to its recipient (any other is a
    repeat the agent must not read twice)?"""
    return not Message.objects.filter(
        query_id=message.query_id,
        recipient_id=message.recipient_id,
        kind=Message.Kind.ANSWER,
        id__lt=message.id,
    ).exists()


def _announce(event_type: type[events.Event], query: Query) -> None:
    query = Query.objects.select_related("origin", "target", "answered_by").get(pk=query.pk)
    events.publish(event_type(query=QueryOut.of(query)), team_id=query.team_id)


def addressed_to(query: Query, agent: Agent) -> bool:
    """Was the question put to `agent`: a question for everyone, or one asked of it,
    forwarded to it, or re-broadcast (a forward with no target)? Only then may it
    answer or forward it."""
    if query.target_id is None or query.target_id == agent.id:
        return True
    return any(
        hop.get("kind") == "forward" and hop.get("to", "*") in ("*", agent.name)
        for hop in query.hops
    )


def _require_addressed(query: Query, agent: Agent | None, doing: str) -> None:
    if agent is not None and not addressed_to(query, agent):
        raise PermissionDenied(
            f"Query {query.key} was asked of {_name(query.target)}, not of you "
            f"({agent.name}): only an agent it was put to may {doing} it."
        )


def _deliver_query(query: Query, recipients: list[Agent]) -> None:
    """One inbox message per recipient, each storing only the question's head line:
    the question itself is stored once, on the Query (see `delivered`). Live viewers
    are told the whole text, as the recipient reads it."""
    head = query_head(query)
    text = query_text(query)
    for agent in recipients:
        message = Message.objects.create(
            team=query.team,
            content=head,
            kind=Message.Kind.QUERY,
            author=query.origin,
            author_label="pm" if query.origin is None else "",
            recipient=agent,
            query=query,
            phase=query.team.phase,
        )
        message.content = text
        events.publish(events.MessageCreated(message=MessageOut.of(message)), team_id=query.team_id)
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
    services.text_check(question + (context or ""), field="question")
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
    _deliver_query(query, _recipients(query, target_agent, exclude))
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
    if answerer is not None and query.origin_id == answerer.id:
        raise InvalidInput(
            f"You asked {query.key} yourself; its answer will come to you. To add to it, "
            "tell the team or ask again."
        )
    _require_addressed(query, answerer, "answer")
    won = Query.objects.filter(pk=query.pk, status=Query.Status.OPEN, expires_at__gte=now).update(
        status=Query.Status.ANSWERED, answer=text, answered_by=answerer, answered_at=now
    )
    query = (
        Query.objects.select_for_update(of=("self",))
        .select_related("origin", "target", "answered_by")
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
        services.message_add(
            team=team,
            content=answer_text(query, _name(answerer), text),
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
    services.text_check(enrichment, field="enrichment")
    query = _open_query(team, key)
    if query.status == Query.Status.ANSWERED:
        raise QueryClosed(f"Query {key} was already answered.")
    if query.hop_count >= query.max_hops:
        raise MaxHopsReached(MAX_HOPS_TEXT)
    if query.origin_id == forwarder.id:
        raise InvalidInput(f"You asked {query.key} yourself; only its recipients forward it.")
    _require_addressed(query, forwarder, "forward")
    target_agent = resolve_agent(team, target) if target else None
    if target_agent is not None and target_agent.id == forwarder.id:
        raise InvalidInput("You cannot forward a question to yourself.")
    if target_agent is not None and target_agent.id == query.origin_id:
        raise InvalidInput(
            f"{target_agent.name} asked {query.key}: forward it to someone who may know, "
            "or answer with what you know."
        )
    query.enrichments = [*query.enrichments, f"{forwarder.name}: {enrichment}"]
    query.hops = [
        *query.hops,
        _hop("forward", forwarder.name, target_agent.name if target_agent else "*", enrichment),
    ]
    query.save(update_fields=["enrichments", "hops"])
    exclude = {forwarder.id} | ({query.origin_id} if query.origin_id else set())
    _deliver_query(query, _recipients(query, target_agent, exclude))
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
                services.system_note(
                    query.team, expiry_text(query), recipient=query.origin, query=query
                )
            _announce(events.QueryExpired, query)
            expired += 1
    return expired
