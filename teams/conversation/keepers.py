"""Keepers: offloading old context and getting it back.

Offloading copies messages into a topic-labelled keeper; from then on they leave
the offloading agent's context (history_rows.history_messages excludes them) and stay
searchable. Retrieval is raw (full-text search, "[role]: content" lines) or smart
(a model answers the question from the matching entries: the caller passes the
function that asks it, since calling a model is the engine's job). Automatic
offload keeps an agent's context under its budget. Either way one stub line stays in
the agent's history: how many messages went to which keeper and topic, and how to
get them back."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Q

from teams import services
from teams.errors import InvalidInput, NotFound
from teams.live import events
from teams.live.event_payloads import KeeperOut
from teams.models import Agent, Keeper, KeeperEntry, Message, Team, Turn

# Asks a model: (system text, user prompt, max tokens) -> the reply's text.
AskModel = Callable[[str, str, int], str]

OFFLOAD_SHARE = 0.3
MIN_MESSAGES_TO_OFFLOAD = 2
SEARCH_LIMIT = 20
SMART_CONTEXT_ENTRIES = 12
QUESTION_WORDS = {
    "who", "what", "when", "where", "why", "how", "which", "whose", "whom",
    "is", "are", "was", "were", "do", "does", "did", "can", "could", "should",
    "would", "will", "has", "have", "had",
}  # fmt: skip
# Words that say nothing about a topic: never search terms (unless a query has only
# these), never evidence that an entry is relevant.
STOP_WORDS = QUESTION_WORDS | {
    "a", "an", "the", "be", "been", "being", "am", "of", "to", "in", "on", "at", "by",
    "for", "with", "about", "from", "into", "onto", "over", "under", "as", "and", "or",
    "but", "nor", "not", "no", "if", "then", "than", "so", "that", "this", "these",
    "those", "it", "its", "we", "us", "our", "you", "your", "he", "she", "him", "her",
    "they", "them", "their", "there", "here", "my", "me", "any", "some", "all", "each",
    "every", "up", "out", "just", "also", "very", "more", "most", "other", "such",
    "only", "own", "same", "too", "may", "might", "must", "shall", "let", "lets", "get",
    "got", "please", "anyone", "someone", "anything", "something", "know", "think",
    "need", "needs", "want", "one", "ok", "yes", "s", "t", "don", "doesn",
    "isn", "ll", "ve", "re", "d", "m",
}  # fmt: skip
MAX_QUERY_CHARS = 2000  # what a search reads of its query; the rest is ignored
MAX_SEARCH_TERMS = 32
BOUNDARY_KINDS = {
    Message.Kind.PM,
    Message.Kind.SYSTEM,
    Message.Kind.PHASE_SUMMARY,
    Message.Kind.QUERY,
}
WORD = re.compile(r"\w+", re.UNICODE)


# --- offload -------------------------------------------------------------------


def _words(text: str) -> set[str]:
    return {w.lower() for w in WORD.findall(text) if len(w) > 3}


def split_at_topic_boundary(
    messages: list[Message], *, at_least: int | None = None
) -> tuple[list[Message], list[Message]]:
    """Split off roughly the oldest 30% (or, given `at_least` characters, the oldest
    messages that free that much, if more), cut where the topic changes; the newest
    message always stays.

    Candidates are the cuts within two messages of the 30% mark; a cut before a PM,
    system, summary or query message is a boundary by nature, otherwise the cut
    between the two least similar neighbours wins."""
    if len(messages) < MIN_MESSAGES_TO_OFFLOAD + 1:
        return [], list(messages)
    target = max(1, math.ceil(len(messages) * OFFLOAD_SHARE))
    lo = max(1, target - 2)
    if at_least is not None:
        # Enough must go: the cut is at the share, or where `at_least` is freed if later.
        freed = itertools.accumulate(len(m.content) for m in messages)
        needed = next((n for n, f in enumerate(freed, start=1) if f >= at_least), len(messages))
        target = lo = min(len(messages) - 1, max(target, needed))
    hi = min(len(messages) - 1, target + 2)

    def score(cut: int) -> tuple:
        before, after = messages[cut - 1], messages[cut]
        natural = after.kind in BOUNDARY_KINDS
        a, b = _words(before.content), _words(after.content)
        overlap = len(a & b) / len(a | b) if a | b else 0.0
        return (not natural, overlap, abs(cut - target))

    cut = min(range(lo, hi + 1), key=score)
    return list(messages[:cut]), list(messages[cut:])


def topic_of(messages: list[Message]) -> str:
    """A label for an automatic offload: its span and most frequent words."""
    counts: dict[str, int] = {}
    for message in messages:
        if message.recipient_id is not None:
            continue  # a label others may see names no word of an inbox line
        for word in WORD.findall(message.content.lower()):
            if len(word) > 4 and not word.isdigit():
                counts[word] = counts.get(word, 0) + 1
    top = sorted(counts, key=lambda w: (-counts[w], w))[:3]
    span = f"messages #{messages[0].id}-#{messages[-1].id}"
    return f"earlier conversation, {span}" + (f": {', '.join(top)}" if top else "")


@dataclass
class Offload:
    keeper: Keeper
    count: int
    stub: Message | None = None  # the one line left in the agent's history


def stub_text(result: Offload, *, retrieve_tool: str = "", why: str = "") -> str:
    """The line that stands in the agent's history for what it offloaded: how many
    messages, which keeper and topic, and how to get them back (`retrieve_tool` is the
    retrieval tool's name, which the tools layer passes in: the domain names no tool)."""
    keeper, count = result.keeper, result.count
    noun = "message" if count == 1 else "messages"
    reason = f" {why.strip()}" if why.strip() else ""
    recall = (
        f"{retrieve_tool}(query, keeper_id={keeper.id})"
        if retrieve_tool
        else f"a retrieval from keeper {keeper.id}"
    )
    return (
        f'[Context offloaded] {count} earlier {noun} went to keeper {keeper.id} "{keeper.topic}"'
        f"{reason}; recall them with {recall}."
    )


@transaction.atomic
def offload(
    *,
    agent: Agent,
    messages: list[Message],
    topic: str,
    retrieve_tool: str = "",
    why: str = "",
    turn: Turn | None = None,
) -> Offload:
    """Move these messages out of the agent's context into a new keeper, and leave one
    stub line (a system note to the agent, stub_text) where they were: how many, which
    keeper and topic, how to retrieve them. `why` adds the reason to the stub."""
    topic = (topic or "").strip()
    if not topic:
        raise InvalidInput("An offload needs a topic label.", field="topic")
    if not messages:
        raise InvalidInput("No messages to offload.")
    keeper = Keeper.objects.create(team_id=agent.team_id, agent=agent, topic=topic[:200])
    KeeperEntry.objects.bulk_create(
        KeeperEntry(keeper=keeper, message=m, position=i, role=m.speaker, content=m.content)
        for i, m in enumerate(messages)
    )
    first, last = messages[0], messages[-1]
    keeper.index_entry = (
        f"Keeper {keeper.id} '{keeper.topic}': {len(messages)} messages "
        f"(#{first.id} to #{last.id})."
    )
    keeper.save(update_fields=["index_entry"])
    result = Offload(keeper=keeper, count=len(messages))
    result.stub = services.system_note(
        agent.team,
        stub_text(result, retrieve_tool=retrieve_tool, why=why),
        recipient=agent,
        turn=turn,
    )
    events.publish(
        events.KeeperCreated(keeper=KeeperOut.of(keeper, len(messages))), team_id=agent.team_id
    )
    return result


# --- a closed phase, filed ------------------------------------------------------

# What a phase's conversation is: what every agent of it read (not inboxes, not passes).
PHASE_FILED_KINDS = [Message.Kind.CHAT, Message.Kind.PM, Message.Kind.SYSTEM, Message.Kind.SEAT]


def phase_topic(phase: str) -> str:
    return f"phase {phase}"


@transaction.atomic
def phase_file(*, team: Team, phase: str) -> Keeper | None:
    """File a closing phase's conversation in a keeper of the team's (no agent's: all
    may read it), its topic "phase <name>", so that a later phase finds with a search
    what its summary refers to (later requests hold only the summary). None when the
    phase said nothing."""
    messages = list(
        Message.objects.filter(
            team=team, phase=phase, recipient__isnull=True, kind__in=PHASE_FILED_KINDS
        )
        .select_related("author")
        .order_by("id")
    )
    if not messages:
        return None
    keeper = Keeper.objects.create(team=team, agent=None, topic=phase_topic(phase)[:200])
    KeeperEntry.objects.bulk_create(
        KeeperEntry(keeper=keeper, message=m, position=i, role=m.speaker, content=m.content)
        for i, m in enumerate(messages)
    )
    keeper.index_entry = (
        f"Keeper {keeper.id} '{keeper.topic}': the phase's conversation, {len(messages)} "
        f"messages (#{messages[0].id} to #{messages[-1].id})."
    )
    keeper.save(update_fields=["index_entry"])
    events.publish(
        events.KeeperCreated(keeper=KeeperOut.of(keeper, len(messages))), team_id=team.id
    )
    return keeper


# --- search --------------------------------------------------------------------


def search_terms(query: str) -> list[str]:
    """The distinct words of a query worth searching for, in order, at most
    MAX_SEARCH_TERMS: stop words ("what", "the", "is") are left out unless the query
    holds nothing else. Only the first MAX_QUERY_CHARS characters are read, and the
    words are deduplicated with a dict, so any query costs linear time."""
    words = dict.fromkeys(w for w in WORD.findall(query[:MAX_QUERY_CHARS].lower()) if len(w) > 1)
    meaningful = [w for w in words if w not in STOP_WORDS]
    return (meaningful or list(words))[:MAX_SEARCH_TERMS]


def meaningful_terms(text: str) -> list[str]:
    """The query's search terms without any stop word (possibly none)."""
    return [t for t in search_terms(text) if t not in STOP_WORDS]


def stem(word: str) -> str:
    """A rough stem, enough to match "tokens" with "token" as the search engine does."""
    for suffix in ("ing", "ed", "es", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)]
    return word


def matched_terms(terms: list[str], text: str) -> int:
    """How many of the distinct terms the text holds (by stem)."""
    words = {stem(w) for w in WORD.findall(text.lower())}
    return len({stem(t) for t in terms} & words)


# Who may read a keeper entry. A keeper holds lines of its agent's context: the team
# conversation (no recipient), which every agent may read, and that agent's own inbox
# (messages to it), which only it may read, as only it reads them in its /context.
PUBLIC_LINE_SQL = "(e.message_id IS NOT NULL AND m.recipient_id IS NULL)"


def _visibility(viewer: Agent | None, public_only: bool) -> tuple[str, list]:
    """The SQL clause (on entry e, its message m and keeper k) and its parameters that
    keep the entries `viewer` may read: every entry for None (a person), the team
    conversation's only with `public_only` (what a question's recipients all read)."""
    if public_only:
        return f"AND {PUBLIC_LINE_SQL}", []
    if viewer is None:
        return "", []
    return f"AND ({PUBLIC_LINE_SQL} OR m.recipient_id = %s OR k.agent_id = %s)", [
        viewer.id,
        viewer.id,
    ]


def readable_by(viewer: Agent | None, prefix: str = "", public_only: bool = False) -> Q:
    """The same rule as a filter on KeeperEntry (`prefix` "entries__" on Keeper): every
    entry for None, else the team conversation's lines and the viewer's own."""
    public = Q(**{f"{prefix}message__isnull": False, f"{prefix}message__recipient__isnull": True})
    if public_only:
        return public
    if viewer is None:
        return Q()
    mine = Q(**{f"{prefix}message__recipient": viewer}) | Q(**{f"{prefix}keeper__agent": viewer})
    return public | mine


def search(
    *,
    team: Team,
    query: str,
    keeper_id: int | None = None,
    limit: int = SEARCH_LIMIT,
    viewer: Agent | None = None,
    public_only: bool = False,
) -> list[KeeperEntry]:
    """Full-text search over the team's keeper entries `viewer` may read (every one for
    None; the team conversation's only with `public_only`), best match first.

    Entries holding every term come first; when they are fewer than the limit,
    entries holding any term fill the rest. Matching all terms first is also what
    keeps common words cheap: the database ranks far fewer rows."""
    terms = search_terms(query)
    if not terms:
        return []
    seen_by = (*_visibility(viewer, public_only), readable_by(viewer, public_only=public_only))
    ids = _search_ids(team, terms, keeper_id, limit, every=True, seen_by=seen_by)
    if len(ids) < limit and len(terms) > 1:
        more = _search_ids(team, terms, keeper_id, limit + len(ids), every=False, seen_by=seen_by)
        seen = set(ids)
        ids += [i for i in more if i not in seen][: limit - len(ids)]
    by_id = KeeperEntry.objects.select_related("keeper").in_bulk(ids)
    return [by_id[i] for i in ids if i in by_id]


def _search_ids(team, terms, keeper_id, limit, every: bool, seen_by=None) -> list[int]:
    """Ids of matching entries; `seen_by` is (SQL clause, its parameters, the same rule
    as a Q) keeping the entries a viewer may read, None for all."""
    keeper_clause = "AND k.id = %s" if keeper_id is not None else ""
    extra = [keeper_id] if keeper_id is not None else []
    visible, visible_params, readable = seen_by or ("", [], Q())
    keeper_clause = f"{keeper_clause} {visible}"
    extra += visible_params
    line = "LEFT JOIN teams_message m ON m.id = e.message_id " if visible else ""
    if connection.vendor == "sqlite":
        match = (" AND " if every else " OR ").join(f'"{t}"' for t in terms)
        # Ranked here, not by FTS5's bm25: bm25 weighs a word by how rare it is in the
        # whole table, every team's entries included, so one team's results would move
        # with another's text (and a replay, whose rows sit beside the original's,
        # would read its excerpts in another order). The newest candidates are ranked.
        sql = (
            "SELECT e.id, e.content FROM teams_keeperentry_fts f "
            "JOIN teams_keeperentry e ON e.id = f.rowid "
            "JOIN teams_keeper k ON k.id = e.keeper_id "
            f"{line}"
            f"WHERE teams_keeperentry_fts MATCH %s AND k.team_id = %s {keeper_clause} "
            "ORDER BY e.id DESC LIMIT %s"
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, [match, team.id, *extra, RANKED_CANDIDATES])
            return rank_by_terms(cursor.fetchall(), terms)[:limit]
    elif connection.vendor == "postgresql":
        tsquery = (" & " if every else " | ").join(terms)
        sql = (
            "SELECT e.id FROM teams_keeperentry e "
            "JOIN teams_keeper k ON k.id = e.keeper_id "
            f"{line}"
            "WHERE e.search_vector @@ to_tsquery('english', %s) "
            f"AND k.team_id = %s {keeper_clause} "
            "ORDER BY ts_rank(e.search_vector, to_tsquery('english', %s)) DESC, e.id LIMIT %s"
        )
        params = [tsquery, team.id, *extra, tsquery, limit]
    else:  # any other database: a plain scan
        entries = KeeperEntry.objects.filter(keeper__team=team, content__icontains=terms[0])
        if keeper_id is not None:
            entries = entries.filter(keeper_id=keeper_id)
        return list(entries.filter(readable).values_list("id", flat=True)[:limit])
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [row[0] for row in cursor.fetchall()]


RANKED_CANDIDATES = 2_000  # the newest matching entries of a team that a search ranks


def rank_by_terms(rows: list[tuple[int, str]], terms: list[str]) -> list[int]:
    """Ids of (id, content) rows, best first, by the text of each alone (as
    PostgreSQL's ts_rank does): more distinct terms, then more occurrences of them for
    the entry's length, then the older entry."""
    wanted = {stem(t) for t in terms}

    def key(row):
        words = [stem(w) for w in WORD.findall(row[1].lower())]
        hits = [w for w in words if w in wanted]
        return (-len(set(hits)), -len(hits) / math.sqrt(len(words) or 1), row[0])

    return [row[0] for row in sorted(rows, key=key)]


def format_entries(entries: list[KeeperEntry]) -> str:
    return "\n".join(f"[{e.role}]: {e.content}" for e in entries)


# --- retrieve ------------------------------------------------------------------


def detect_mode(query: str) -> str:
    """Questions get a focused answer (smart); keywords get the matching lines (raw)."""
    text = query.strip()
    first = (WORD.findall(text.lower()) or [""])[0]
    return "smart" if text.endswith("?") or first in QUESTION_WORDS else "raw"


SEARCHED_KEEPERS_NAMED = 12  # keepers a fruitless search names; the rest are counted


def not_found(query: str, team: Team | None = None, keeper_id: int | None = None) -> str:
    """Nothing matched: said with where the search looked, so the agent knows whether
    to search again elsewhere or differently."""
    found = f"No relevant context found for: {query[:80]}"
    if team is None:
        return found
    if keeper_id is not None:
        return f"{found} (searched keeper {keeper_id} only; omit keeper_id to search all)."
    keepers = list(Keeper.objects.filter(team=team).order_by("id").values_list("id", "topic"))
    if not keepers:
        return (
            f"{found} (the team has no keepers yet: each phase is filed in one when it "
            "closes, and offloads make more; this phase's conversation is in your history)."
        )
    named = [f'{pk} "{topic}"' for pk, topic in keepers[:SEARCHED_KEEPERS_NAMED]]
    more = len(keepers) - len(named)
    listed = "; ".join(named) + (f"; and {more} more" if more > 0 else "")
    noun = "keeper" if len(keepers) == 1 else "keepers"
    return (
        f"{found} (searched {len(keepers)} {noun}: {listed}; this phase's conversation "
        "is in your history, not in a keeper). Try other words, or one keeper by its id."
    )


SMART_SYSTEM = (
    "You are a keeper: you hold excerpts of a team's earlier conversation. Answer the "
    "question using only the excerpts, briefly, citing who said what. If the excerpts "
    "do not contain the answer, reply exactly: NOT_FOUND"
)


def retrieve(
    *,
    team: Team,
    query: str,
    keeper_id: int | None = None,
    mode: str | None = None,
    ask_model: AskModel | None = None,
    viewer: Agent | None = None,
) -> str:
    """What a retrieval returns: matching lines (raw) or an answer from them (smart,
    which needs `ask_model`), from the entries `viewer` may read (search)."""
    query = (query or "").strip()
    if not query:
        raise InvalidInput("Give a question or search terms.", field="query")
    if mode is None:  # questions get an answer, keywords the lines; no model, no answer
        mode = detect_mode(query) if ask_model is not None else "raw"
    if mode not in ("smart", "raw"):
        raise InvalidInput(f"Unknown mode {mode!r}: use 'smart' or 'raw'.", field="mode")
    if mode == "smart" and ask_model is None:
        raise InvalidInput("Smart mode needs a model to answer; use mode 'raw'.", field="mode")
    if keeper_id is not None and not Keeper.objects.filter(team=team, pk=keeper_id).exists():
        raise NotFound(f"Keeper {keeper_id} not found in this team.")
    entries = search(team=team, query=query, keeper_id=keeper_id, viewer=viewer)
    if not entries:
        return not_found(query, team, keeper_id)
    if mode == "raw":
        return format_entries(entries)
    excerpts = "\n".join(
        f"(keeper {e.keeper_id} '{e.keeper.topic}') [{e.role}]: {e.content}"
        for e in entries[:SMART_CONTEXT_ENTRIES]
    )
    answer = ask_model(SMART_SYSTEM, f"Excerpts:\n{excerpts}\n\nQuestion: {query}", 800).strip()
    if not answer or answer == "NOT_FOUND":
        return not_found(query, team, keeper_id)
    return answer


# --- automatic offload ---------------------------------------------------------

AUTO_OFFLOAD_AT = 0.8
# An automatic offload frees the context down to this share of the budget, not just
# under the trigger: each offload changes the start of the history, so the cached
# prompt after it is written again; going lower means the next turns do not offload.
AUTO_OFFLOAD_DOWN_TO = 0.4
AUTO_OFFLOAD_ROUNDS = 3
CHARS_PER_TOKEN = 4


def over_budget(agent: Agent, tokens: int) -> bool:
    """Is a context of `tokens` past the share of the agent's budget that triggers
    an automatic offload?"""
    return tokens > agent.context_budget_tokens * AUTO_OFFLOAD_AT


BUDGET_REASON = "to stay within your context budget"


@transaction.atomic
def offload_for_budget(
    *, turn: Turn, messages: list[Message], tokens: int = 0, retrieve_tool: str = ""
) -> Offload | None:
    """One automatic offload before a turn's first model call: the oldest part of its
    context (of `tokens`, estimated) goes to a keeper at a topic boundary, enough to
    bring it down to AUTO_OFFLOAD_DOWN_TO of the budget; the agent is told in the
    offload's one stub line (which says why) and the turn's snapshot takes the stub
    in. None when there is too little to offload."""
    excess = tokens - int(turn.agent.context_budget_tokens * AUTO_OFFLOAD_DOWN_TO)
    chunk, _rest = split_at_topic_boundary(messages, at_least=max(0, excess) * CHARS_PER_TOKEN)
    if not chunk:
        return None
    result = offload(
        agent=turn.agent,
        messages=chunk,
        topic=topic_of(chunk),
        retrieve_tool=retrieve_tool,
        why=BUDGET_REASON,
        turn=turn,
    )
    Turn.objects.filter(pk=turn.pk).update(snapshot_message_id=result.stub.id)
    turn.snapshot_message_id = result.stub.id
    return result
