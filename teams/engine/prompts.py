"""What an agent sees on its turn: the system prompt and its history.

A request is ordered so that the longest stable prefix comes first and is read from
the prompt cache (teams/lib/catalog.py prices cache reads at a tenth of input):

1. the tools (the loop marks the last definition),
2. the stable system text: identity, the team, role, norms, the phase (its order,
   what it should produce, this role's line, who closes it), the coach's
   facilitation (marked); it changes only when the phase does,
3. the anchors (they change only when one is saved: every agent pays one cache write),
4. the history: each message one content block, the agent's record of its own tool
   calls in the phase among them (append-only lines, so earlier blocks never change
   and the cached prefix holds). Two breakpoints: on the last block the agent's
   previous request already had (read from the cache that request wrote) and on the
   last block of the history (written for the next request),
5. the volatile tail after the last breakpoint: the cue "It is your turn", who passed
   since the coach last spoke, a PM's nudge new to the agent (on its later turns in the
   phase, a short record of it in the history, where the turn that read it began), the
   agent's intent (trajectory → tactic → action) and the @mention note (none for a
   teammate whose open question to the agent its inbox line already shows).

That is at most MAX_CACHE_BREAKPOINTS, Anthropic's limit per request. Providers
without a prompt cache (the offline model) get the same text as plain strings, one
message per run of same-role entries (`Prompt.messages`).

A process keeps what it read and rendered for each agent's last request (`_Kept`) and
reads only the messages written since: an agent's history only grows within a phase,
and what could change a line already read (an offload, an edited message, a renamed
agent, a new phase) changes the key, so the next build reads everything again. The
lines about questions (open, answered, expired) are rendered afresh on every build.
What is kept is an optimisation, never the truth: a build in a process that kept
nothing (another worker) gives the same request, byte for byte.

A turn's claim reads, in its one statement, what else the request is built from
(`claim_annotations`): the previous request's snapshot, the roster, and stamps
(teams.stamps) of the anchors and of what the tool definitions depend on. The process
keeps the anchors block and the tools it built under those stamps, so a steady turn
reads only its history's ids and new rows for its request."""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from django.db import connection
from django.db.models import OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce

from teams.conversation import hierarchy, phase_guide, questions
from teams.engine.reply import DEFAULT_MAX_TOKENS
from teams.integrations import consultations, mcp_servers
from teams.models import Agent, Anchor, Message, Query, Team, Turn
from teams.run import steering
from teams.run.turns import PM_INPUT
from teams.stamps import RowsJson, compiled_once
from tools import questions as question_tools
from tools import registry
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete
from tools.mesh import DeclareIntent, MapContext
from tools.workspace import FileWrite

ROLE_PROMPTS = {
    "coach": (
        "You are the team's coach. You facilitate: keep the discussion on the goal, "
        "summarise agreements, surface disagreements and decide when a phase is done. "
        "You do not write the solution yourself."
    ),
    "researcher": "You are the team's researcher: you find facts, prior art and risks.",
    "coder": "You are the team's coder: you design and write the implementation.",
    "reviewer": "You are the team's reviewer: you check plans and code for problems.",
    "tester": "You are the team's tester: you think about how to prove the work is right.",
    "external": "You are an agent driven by an external program through Loom's API.",
}

NORMS = "\n".join(
    [
        "Conversation norms:",
        "- Be concise: a few sentences, no preamble, no restating what others said.",
        "- Silence means approval. Address others by @name when you need their response.",
        "- If you have nothing new to contribute (you agree with what's been said and have "
        f"no concerns, questions, or additions), use the {PassTurn.name} tool instead of "
        "restating agreement. Only pass when you genuinely have nothing to add; do not pass "
        "if you have any reservations.",
        "- Act through your tools, never by describing a tool call in your text. Your turn "
        "ends when you reply with text and no tool call (that text is your message to the "
        f"team) or when you call {PassTurn.name}; make any tool calls you need before that.",
        "- Lines marked [Your action] are Loom's record of your own tool calls earlier in "
        "this phase (their full results are not kept: call a tool again to see one); "
        "lines marked [Loom] or [system] are notes from Loom, not from a teammate.",
        f"- Your intent: Loom declares a trajectory for you at the start of each phase. "
        f"Refine it with {DeclareIntent.name} when your aim changes, and set your tactic "
        f"and next action with {MapContext.name} when you start a new piece of work. The "
        "PM sees a drift score for every agent (100 is on track; lower means drifting), "
        "computed from these levels and how recently you updated them.",
    ]
)

ASK_PM_LINE = (
    f"If the team is stuck on a question that requires PM authority, use the {AskPm.name} "
    "tool to pause and request input."
)
DONE = SignalPhaseComplete.name

COACH_FACILITATION = {
    "refinement": (
        "Phase: refinement. Help the team agree on what the goal means: scope, users, "
        f"constraints and what is out of scope. When requirements are clear, call {DONE} "
        "with a summary."
    ),
    "planning": (
        "Phase: planning. Help the team break the work into tasks with owners and an "
        f"order. When the plan is agreed, call {DONE} with a summary."
    ),
    "pre-code-review": (
        "Phase: pre-code-review. Have the team review the plan and interfaces before "
        f"code is written. When concerns are resolved, call {DONE}."
    ),
    "implementation": (
        "Phase: implementation. Keep the coder unblocked and the others reviewing "
        f"small steps. When the work is done, call {DONE}."
    ),
    "code-review": (
        "Phase: code-review. Have the team review the result against the goal. When "
        f"the review is complete, call {DONE} with the outcome."
    ),
}
GENERIC_FACILITATION = (
    "Phase: {phase}. Guide the team through this phase; when its work is done, call "
    + DONE
    + " with a summary."
)
CLOSING = (
    f"When every other agent passed since you last spoke, the team agrees: if this "
    f"phase's work is done, call {DONE} rather than asking again."
)
SUMMARY_LINE = (
    "Your summary is all that later phases see of this one: give the decisions, the open "
    "items and the files written."
)
LAST_SUMMARY_LINE = (
    "This is the last phase: your summary is the team's outcome for the PM (what was "
    "delivered, the files, what is left open)."
)
CONVERSATION_KINDS = [Message.Kind.CHAT, Message.Kind.PM, Message.Kind.SYSTEM, Message.Kind.SEAT]
CACHE = {"type": "ephemeral"}  # a cache breakpoint (five-minute ephemeral cache)
MAX_CACHE_BREAKPOINTS = 4  # Anthropic's limit: tools, system, history read, history write


@dataclass
class Prompt:
    system: list[dict]
    messages: list[dict]  # plain text: one string per run of same-role entries
    snapshot: list[Message] = field(default_factory=list)
    mention_note: str = ""
    blocks: list[dict] = field(default_factory=list)  # the same, as cached content blocks


def request_messages(prompt: Prompt, *, cached: bool) -> list[dict]:
    """The messages a request starts with: content blocks with cache breakpoints for
    a provider with a prompt cache, plain strings for one without."""
    return list(prompt.blocks if cached else prompt.messages)


def facilitation(phase: str, last: bool = False) -> str:
    text = COACH_FACILITATION.get(phase) or GENERIC_FACILITATION.format(phase=phase)
    summary = LAST_SUMMARY_LINE if last else SUMMARY_LINE
    return f"{text}\n{CLOSING} {summary}\n{ASK_PM_LINE}"


def roster(team: Team) -> list[tuple[int, str, str]]:
    """The team's agents as (id, name, role), in the rotation's order."""
    return list(team.agents.order_by("position", "id").values_list("id", "name", "role"))


def team_line(agent: Agent, team: Team, agents: list[tuple[int, str, str]] | None = None) -> str:
    """Who else is on the team, by @name and role (`agents`: the roster, when read)."""
    others = [f"@{name} ({role})" for pk, name, role in (agents or roster(team)) if pk != agent.pk]
    return "Your teammates: " + (", ".join(others) if others else "none") + "."


def phase_text(agent: Agent, team: Team, phase: str) -> str:
    """The phase as every role reads it: the order, what it should produce, this
    role's line, who closes it, and who may write files."""
    lines = [
        f"Phases, in order: {phase_guide.phase_order(team, phase)}. This phase: {phase}.",
        f"This phase should produce: {phase_guide.phase_line(team, phase, 'produce')}.",
        f"Your part as {agent.role}: {phase_guide.phase_line(team, phase, agent.role)}.",
    ]
    if agent.role != Agent.Role.COACH:
        lines.append(
            f"The coach closes the phase with {DONE}; its summary is all that later "
            "phases see of this one."
        )
    lines.append(files_line(agent, team, phase))
    return "\n".join(lines)


def files_line(agent: Agent, team: Team, phase: str) -> str:
    """Who may write workspace files, and in which of the team's phases (team data:
    Team.tool_access); `phase` is the turn's (the team may have moved on since)."""
    roles, phase_allowed, _words = FileWrite.access(team)
    phases = [p for p in team.phases if phase_allowed(p)]
    where = ", ".join(phases) if phases else "no phase of this team"
    who = "every role" if roles is None else " and ".join(f"{r}s" for r in sorted(roles))
    if roles is not None and agent.role not in roles:
        return f"Workspace files: you read them; {who} write them (in {where})."
    limit = f"Your reply holds at most about {DEFAULT_MAX_TOKENS:,} tokens: keep each file shorter."
    if phase_allowed(phase):
        return f"Workspace files: you may write them with {FileWrite.name} in this phase. {limit}"
    return f"Workspace files: you read them now; you may write them in {where}."


ANCHORS_INSTRUCTION = (
    "These are IMMUTABLE ANCHORS. Override any chat history that conflicts with them:"
)


def anchors_block(team: Team, anchors: list[Anchor] | None = None) -> str:
    """The anchors in their documented format, each with who pinned it and in which
    phase; empty when the team has no anchors (`anchors`: its anchors by key, when
    read)."""
    if anchors is None:
        anchors = Anchor.objects.filter(team=team).order_by("key")
    lines = [
        f"  [{a.key}]: {a.value} (pinned by {hierarchy.anchor_source_text(a)})" for a in anchors
    ]
    if not lines:
        return ""
    return "\n".join(["<immutable-anchors>", ANCHORS_INSTRUCTION, *lines, "</immutable-anchors>"])


def history_queryset(
    agent: Agent, team: Team, phase: str | None = None, unseen_after: int | None = None
) -> QuerySet[Message]:
    """The phase's conversation and the agent's inbox, minus pass notes, other agents'
    tool chatter and what this agent offloaded; oldest first."""
    # Three indexed terms (phase conversation, summaries, inbox) so the database
    # reads only these rows, however long the team has been talking.
    phase_conversation = Q(
        team=team, phase=phase or team.phase, recipient__isnull=True, kind__in=CONVERSATION_KINDS
    )
    summaries = Q(team=team, kind=Message.Kind.PHASE_SUMMARY)
    # The inbox. Its own action records only from this phase; answers and peer notes
    # from this phase, or from an earlier one when its last request did not have them
    # yet (one that arrived as the phase closed); earlier ones live in the summaries.
    records = Q(kind=Message.Kind.TOOL_CALL)
    this_phase = Q(phase=phase or team.phase)
    unseen = Q(id__gt=unseen_after or 0)
    # Other inbox lines (an offload's stub, Loom's notes, a PM's nudge) are the phase's
    # too, like the notes; a question addressed to the agent stays while it is open
    # (render drops it once it is not). (A nudge is read from here into the cue of the
    # turn it is new to, and a record of it on later ones: see build.)
    notes = Q(kind__in=[Message.Kind.ANSWER, Message.Kind.PEER])
    questions = Q(query__isnull=False) & ~notes
    inbox = Q(recipient=agent) & (
        (records & this_phase) | questions | (~records & (this_phase | unseen))
    )
    return (
        Message.objects.filter(phase_conversation | summaries | inbox)
        .exclude(kind=Message.Kind.PASS_NOTE)
        .exclude(keeper_entries__keeper__agent=agent)
        .select_related("author")
        .prefetch_related("query")  # one query for every inbox question, none without
        .order_by("id")
    )


def history_messages(
    agent: Agent,
    team: Team,
    until_id: int | None = None,
    phase: str | None = None,
    unseen_after: int | None = None,
    after_id: int | None = None,
) -> list[Message]:
    """What the agent sees on a turn whose snapshot ends at `until_id` (only the
    messages after `after_id`, when given)."""
    messages = history_queryset(agent, team, phase, unseen_after)
    if until_id is not None:
        messages = messages.filter(id__lte=until_id)
    if after_id is not None:
        messages = messages.filter(id__gt=after_id)
    return questions.delivered(list(messages))


# --- what a process keeps of each agent's last request --------------------------

KEEP_HISTORY = True  # off: every build reads all it needs (as a worker that kept nothing)
KEPT_AGENTS = 512  # the agents whose last history a process keeps, least recent dropped


@dataclass(frozen=True)
class _Kept:
    """An agent's history as read for its last request (a History), under the key it
    was read with."""

    key: tuple
    history: History


@dataclass
class History:
    """An agent's history for a request: its rows, each row's (role, text) as render
    gives it, and the positions of the rows whose line depends on more than the row
    (`_special`: a question's line, a PM's nudge), so that what looks at them need
    not walk the whole history."""

    rows: list[Message]
    lines: list[tuple[str, str | None]]
    special: list[int]
    ids: list[int]  # the rows' ids


_kept: OrderedDict[tuple[int, int], _Kept] = OrderedDict()
_kept_anchors: OrderedDict[int, tuple[str, str]] = OrderedDict()  # team: (stamp, block)
_kept_lock = threading.Lock()


def forget(team: Team | None = None, agent: Agent | None = None) -> None:
    """Drop what this process keeps (of one agent, of a team, or all)."""
    with _kept_lock:
        for team_id, agent_id in list(_kept):
            if (team is None or team_id == team.id) and (agent is None or agent_id == agent.id):
                del _kept[team_id, agent_id]
        if agent is None:
            for team_id in list(_kept_anchors):
                if team is None or team_id == team.id:
                    del _kept_anchors[team_id]
    if agent is None:
        registry.forget(team)


def _dynamic(message: Message) -> bool:
    """A line about a question: whether and how it shows depends on the query's state
    now (open, answered, forwarded, expired), so it is rendered on every build."""
    return message.query_id is not None


def _special(message: Message) -> bool:
    return message.query_id is not None or message.kind == Message.Kind.NUDGE


def agent_history(
    agent: Agent,
    team: Team,
    until_id: int | None,
    phase: str,
    seen: int | None,
    agents: list[tuple[int, str, str]],
) -> History:
    """The agent's history for a request (as history_messages), rendered.

    With what this process kept of the agent's last request, the database still says
    which rows the history has (their ids: offloaded ones drop out, a late commit
    comes in), and only the rows not read before are read whole; when the history
    only grew (the common case) the kept lines are taken as they are, and only the
    questions' lines rendered again. The key holds what changes a line already
    rendered: the team's context version (an edited message) and the roster (a
    renamed agent), with the team's creation time (ids may come again after a
    rollback)."""
    key = (team.created_at, team.context_version, tuple(agents))
    kept = None
    keep = KEEP_HISTORY and until_id is not None
    if keep:
        with _kept_lock:
            kept = _kept.get((team.id, agent.id))
        if kept is not None and kept.key != key:
            kept = None
    if kept is None:
        rows = history_messages(agent, team, until_id, phase, seen)
        history = _history_of(rows, [render(m, agent) for m in rows])
    else:
        history = _history_since(agent, team, phase, seen, until_id, kept.history)
    if keep:
        with _kept_lock:
            _kept[team.id, agent.id] = _Kept(key, history)
            _kept.move_to_end((team.id, agent.id))
            while len(_kept) > KEPT_AGENTS:
                _kept.popitem(last=False)
    return history


def _history_since(
    agent: Agent, team: Team, phase: str, seen: int | None, until_id: int, kept: History
) -> History:
    """The history from what was kept of the last request and the rows read since."""
    ids = _history_ids(agent, team, phase, seen, until_id)
    kept_ids = kept.ids
    grew = ids[: len(kept_ids)] == kept_ids
    known = set() if grew else set(kept_ids)
    fresh = ids[len(kept_ids) :] if grew else [i for i in ids if i not in known]
    read = {}
    if fresh:  # the rows written since (or committed late): the ids say which
        messages = list(
            Message.objects.filter(id__in=fresh).select_related("author").order_by("id")
        )
        _refresh_queries([m for m in messages if m.query_id is not None])  # as prefetched
        read = {m.id: m for m in questions.delivered(messages)}
    if grew:
        rows, lines, special, row_ids = [*kept.rows], [*kept.lines], [*kept.special], [*kept_ids]
        dynamic = [i for i in special if _dynamic(rows[i])]
        _refresh_queries([rows[i] for i in dynamic])
        for i in dynamic:
            lines[i] = render(rows[i], agent)
        for message in (read[i] for i in fresh if i in read):
            if _special(message):
                special.append(len(rows))
            rows.append(message)
            row_ids.append(message.id)
            lines.append(render(message, agent))
        return History(rows, lines, special, row_ids)
    # Rows dropped out or came in between: the kept ones by id, the rest as read.
    by_id = {m.id: (m, line) for m, line in zip(kept.rows, kept.lines, strict=True)}
    rows = [r for r in (by_id[i][0] if i in by_id else read.get(i) for i in ids) if r]
    _refresh_queries([m for m in rows if _dynamic(m) and m.id in by_id])
    lines = [
        by_id[m.id][1] if m.id in by_id and not _dynamic(m) else render(m, agent) for m in rows
    ]
    return _history_of(rows, lines)


def _history_of(rows: list[Message], lines: list[tuple[str, str | None]]) -> History:
    special = [i for i, m in enumerate(rows) if _special(m)]
    return History(rows, lines, special, [m.id for m in rows])


# Stand-ins for the two numbers of the history's ids statement, put in on each call.
_SEEN, _UNTIL = -1_000_000_007, -1_000_000_009
KEPT_STATEMENTS = 512
_id_statements: OrderedDict[tuple, tuple[str, list] | None] = OrderedDict()


def _history_ids(
    agent: Agent, team: Team, phase: str, seen: int | None, until_id: int
) -> list[int]:
    """The ids of the agent's history up to `until_id` (history_queryset): a
    statement this process builds and compiles once for the agent and the phase."""
    key = (connection.vendor, agent.id, team.id, team.created_at, phase)
    with _kept_lock:
        statement = _id_statements.get(key, ())
    if statement == ():
        query = history_queryset(agent, team, phase, _SEEN).filter(id__lte=_UNTIL)
        sql, params = query.values_list("id", flat=True).query.sql_with_params()
        # Each stand-in a parameter of its own, or no kept statement (the ORM's each time).
        statement = (sql, list(params))
        if params.count(_SEEN) != 1 or params.count(_UNTIL) != 1:
            statement = None
        with _kept_lock:
            _id_statements[key] = statement
            while len(_id_statements) > KEPT_STATEMENTS:
                _id_statements.popitem(last=False)
    if statement is None:
        query = history_queryset(agent, team, phase, seen).filter(id__lte=until_id)
        return list(query.values_list("id", flat=True))
    sql, params = statement
    numbers = {_SEEN: seen or 0, _UNTIL: until_id}
    with connection.cursor() as cursor:
        cursor.execute(sql, [numbers.get(p, p) if type(p) is int else p for p in params])
        return [row[0] for row in cursor.fetchall()]


def _refresh_queries(messages: list[Message]) -> None:
    """The queries of kept rows as they are now (one statement, none without)."""
    if not messages:
        return
    queries = Query.objects.in_bulk({m.query_id for m in messages})
    for message in messages:
        message.query = queries.get(message.query_id)


def mention_note(
    agent: Agent, history: list[Message], asking: set[str] | frozenset[str] = frozenset()
) -> str:
    """A note when a teammate addressed the agent by @name in one of the last messages
    it reads (`history`), unless that teammate is in `asking` (it asked or passed on a
    question the agent's inbox shows open: that line already asks for the answer, and
    how to give it). "@coder's question" speaks of the coder, not to it."""
    named = re.compile(rf"@{re.escape(agent.name)}(?![\w-]|['’]s\b)")
    recent = [m for m in history[-3:] if m.author_id != agent.id]
    mentions = [
        m
        for m in recent
        if named.search(m.content) and (m.author.name if m.author_id else m.speaker) not in asking
    ]
    if not mentions:
        return ""
    mentioner = mentions[-1].speaker
    return (
        f"Note: {mentioner} specifically addressed you with @{agent.name} in a recent "
        "message. They may be waiting for your response on a specific point."
    )


def render(message: Message, agent: Agent) -> tuple[str, str | None]:
    """(role, text) of one history entry as this agent sees it; text None when the
    entry is no longer for it (a question answered, forwarded on or expired)."""
    Kind = Message.Kind
    if message.query_id is not None and message.recipient_id == agent.id:
        return "user", question_tools.inbox_line(message, agent)
    if message.kind == Kind.TOOL_CALL:
        return "user", f"[Your action] {message.content}"
    if message.kind == Kind.NUDGE:  # the cue, then a record where it was read: see build
        return "user", None
    if message.kind == Kind.SYSTEM and message.author_id is not None:
        # What an agent's tool did in the conversation (asking the PM): for its author
        # the record of its own action says it already.
        if message.author_id == agent.id:
            return "user", None
        prefix, _, rest = PM_INPUT.partition("{question}")
        if message.content.startswith(prefix):
            question = message.content.removeprefix(prefix).removesuffix(rest)
            return "user", f"[Loom] {message.speaker} asked the PM: {question}"
        return "user", f"[Loom] {message.speaker}: {message.content}"
    if message.kind == Kind.SEAT:  # the PM wrote this turn in an agent's seat
        if message.author_id == agent.id:
            return "user", f"[The PM, in your seat, wrote this turn for you]: {message.content}"
        return "user", f"[{message.speaker}]: {message.content}"
    if message.kind == Kind.PHASE_SUMMARY:  # Loom's record, even for the coach who wrote it
        return "user", f"[Loom] {message.content}"
    if message.author_id == agent.id and message.recipient_id is None:
        return "assistant", message.content
    if message.recipient_id == agent.id and message.kind == Kind.PEER:
        return "user", f"[Peer message from {message.speaker}]: {message.content}"
    if message.recipient_id == agent.id and message.kind == Kind.SYSTEM:
        return "user", f"[Loom] {message.content}"
    return "user", f"[{message.speaker}]: {message.content}"


def _last_shown(history: History, count: int) -> list[Message]:
    """The last `count` rows of the history the request shows, oldest first."""
    shown: list[Message] = []
    for message, (_, text) in zip(reversed(history.rows), reversed(history.lines), strict=True):
        if len(shown) == count:
            break
        if text:
            shown.append(message)
    return shown[::-1]


def asking(agent: Agent, history: History) -> set[str]:
    """Who asked or passed on a question the agent's request shows open in its inbox."""
    names: set[str] = set()
    for i in history.special:  # every question's row among them
        message, (_, text) = history.rows[i], history.lines[i]
        if text and message.kind == Message.Kind.QUERY and message.recipient_id == agent.id:
            hops = message.query.hops or []
            names.update(h["from"] for h in hops if h.get("kind") in ("ask", "forward"))
    return names


def passes_since_coach_spoke(
    agent: Agent, team: Team, phase: str, until_id: int | None
) -> list[str]:
    """The names of the agents who passed since the coach last spoke, in order (one
    statement: when it last spoke is its subquery)."""
    own = Message.objects.filter(team=team, phase=phase, author=agent, recipient__isnull=True)
    if until_id is not None:
        own = own.filter(id__lte=until_id)
    spoke = Coalesce(Subquery(own.order_by("-id").values("id")[:1]), 0)
    passes = Message.objects.filter(
        team=team, phase=phase, kind=Message.Kind.PASS_NOTE, id__gt=spoke
    )
    if until_id is not None:
        passes = passes.filter(id__lte=until_id)
    names = passes.exclude(author=agent).order_by("id").values_list("author__name", flat=True)
    return list(dict.fromkeys(n for n in names if n))


def coach_cue(
    agent: Agent,
    team: Team,
    phase: str,
    until_id: int | None,
    agents: list[tuple[int, str, str]] | None = None,
    passed: list[str] | None = None,
) -> str:
    """Who passed since the coach last spoke (`agents`: the roster, `passed`: who
    passed, when read)."""
    if passed is None:
        passed = passes_since_coach_spoke(agent, team, phase, until_id)
    if not passed:
        return ""
    if agents is None:
        agents = roster(team)
    members = sum(1 for pk, _, role in agents if pk != agent.pk and role != Agent.Role.EXTERNAL)
    names = ", ".join(passed)
    if len(passed) >= members:
        return (
            f"Since you last spoke, everyone passed ({names}): nobody has anything to add. "
            f"If this phase's work is done, close it with {DONE}."
        )
    return f"Since you last spoke, {names} passed (nothing to add)."


INTENT_LEVEL_CHARS = 200  # each level in the cue; scan_hierarchy shows them whole


def _brief(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= INTENT_LEVEL_CHARS else text[: INTENT_LEVEL_CHARS - 1] + "…"


def intent_line(agent: Agent) -> str:
    """The agent's hierarchy as it stands, so it knows what it declared."""
    levels = [agent.trajectory, agent.tactic, agent.action]
    if not any(levels):
        return ""
    shown = " → ".join(_brief(level) or "(not set)" for level in levels)
    return f"Your intent (trajectory → tactic → action): {shown}"


def anchors_system(team: Team, stamp: str | None = None) -> list[dict]:
    """The system block after the stable, cached one: the anchors as they are now
    (none without anchors), or as `stamp` (their stamp, read by the turn's claim:
    claim_annotations) says they were: the block this process rendered under it."""
    block = anchors_block(team) if stamp is None else _anchors_block_at(team, stamp)
    return [{"type": "text", "text": block}] if block else []


ANCHOR_FIELDS = ("key", "value", "source", "updated_by", "phase")  # what anchors_block shows


def _anchors_block_at(team: Team, stamp: str) -> str:
    if stamp == "[]":
        return ""  # no anchors: nothing to read
    if KEEP_HISTORY:
        with _kept_lock:
            kept = _kept_anchors.get(team.id)
        if kept is not None and kept[0] == stamp:
            return kept[1]
    anchors = list(Anchor.objects.filter(team=team).order_by("key"))
    block = anchors_block(team, anchors)
    # Kept under the stamp only when the rows read are the ones it names (an anchor
    # may have changed since the claim: then this build shows it, and keeps nothing).
    read = sorted([getattr(a, f) for f in ANCHOR_FIELDS] for a in anchors)
    if KEEP_HISTORY and read == sorted(json.loads(stamp)):
        with _kept_lock:
            _kept_anchors[team.id] = (stamp, block)
            _kept_anchors.move_to_end(team.id)
            while len(_kept_anchors) > KEPT_AGENTS:
                _kept_anchors.popitem(last=False)
    return block


def with_current_anchors(prompt: Prompt, team: Team) -> Prompt:
    """The prompt with its anchors re-read: a tool of this turn (save_anchor) may have
    pinned one, and the very next request must carry it."""
    prompt.system = prompt.system[:1] + anchors_system(team)
    return prompt


def previously_seen(agent: Agent, until_id: int | None) -> int | None:
    """The newest message the agent's previous request included (the snapshot of its
    latest turn before this one), or None on its first turn."""
    earlier = Turn.objects.filter(agent=agent, snapshot_message_id__isnull=False)
    if until_id is not None:
        earlier = earlier.filter(snapshot_message_id__lt=until_id)
    return (
        earlier.order_by("-snapshot_message_id")
        .values_list("snapshot_message_id", flat=True)
        .first()
    )


def with_nudge_records(
    agent: Agent,
    entries: list[tuple[str, str, float | None]],
    nudges: list[Message],
    seen: int | None,
) -> list[tuple[str, str, float | None]]:
    """The entries with a record of each nudge an earlier request of the agent's had in
    its cue (steering.nudge_record), placed where the first of them ended: after the
    last message it had, before the turn that read the nudge. Its position counts as
    just after that message (`snapshot + 0.5`), so the request that follows it, whose
    history ends there, still reads its cached prefix whole."""
    if not nudges or seen is None:
        return entries
    snapshots = list(
        Turn.objects.filter(
            agent=agent,
            snapshot_message_id__gte=min(m.id for m in nudges),
            snapshot_message_id__lte=seen,
        )
        .order_by("snapshot_message_id")
        .values_list("snapshot_message_id", flat=True)
        .distinct()
    )
    records = []
    for nudge in nudges:
        shown = next((s for s in snapshots if s >= nudge.id), None)
        if shown is not None:
            records.append(("user", steering.nudge_record(nudge), shown + 0.5))
    if not records:
        return entries
    merged = [*entries]
    for record in records:
        at = next(
            (i for i, e in enumerate(merged) if e[2] is not None and e[2] > record[2]),
            len(merged),
        )
        merged.insert(at, record)
    return merged


def request_history(
    entries: list[tuple[str, str, float | None]], seen: int | None, tail: str
) -> tuple[list[dict], list[dict]]:
    """The history then the volatile tail, both ways a request takes them (one walk
    over the entries, (role, text, position): a message's id, the opening's None, a
    nudge record's between two ids): plain text, one message per run of same-role
    entries; and content blocks, one per entry, with the two history breakpoints."""
    plain: list[list] = []  # [role, texts]
    messages: list[dict] = []
    read = None  # the last block the previous request had: it wrote the cache there
    for role, text, position in entries:
        if plain and plain[-1][0] == role:
            plain[-1][1].append(text)
        else:
            plain.append([role, [text]])
        if not text.strip():
            continue  # the API refuses empty text blocks
        block = {"type": "text", "text": text}
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})
        if seen is not None and (position is None or position <= seen):
            read = block
    written = messages[-1]["content"][-1]  # the history's end: the next request reads it
    written["cache_control"] = dict(CACHE)
    if read is not None and read is not written:
        read["cache_control"] = dict(CACHE)
    tail_block = {"type": "text", "text": tail}
    if messages[-1]["role"] == "user":
        messages[-1]["content"].append(tail_block)
    else:
        messages.append({"role": "user", "content": [tail_block]})
    if plain[-1][0] == "user":
        plain[-1][1].append(tail)
    else:
        plain.append(["user", [tail]])
    text = [{"role": role, "content": "\n\n".join(texts)} for role, texts in plain]
    return text, messages


# --- what a turn's claim reads for its request ---------------------------------


def claim_annotations() -> dict:
    """Subqueries for the statement that reads a claimed turn (turns.turn_claim), on
    the Turn's team, agent and snapshot: what `build` would read itself, and the stamps
    of what a process keeps (teams.stamps). `claimed(turn)` takes them off the turn.
    Compiled once: they hold no value of their own."""
    return compiled_once(Turn, _claim_subqueries)


def _claim_subqueries() -> dict:
    turn_team = OuterRef("team_id")
    earlier = Turn.objects.filter(
        agent_id=OuterRef("agent_id"),
        snapshot_message_id__isnull=False,
        snapshot_message_id__lt=OuterRef("snapshot_message_id"),
    )
    return {
        "prompt_seen": Subquery(  # previously_seen
            earlier.order_by("-snapshot_message_id").values("snapshot_message_id")[:1]
        ),
        "prompt_roster": RowsJson(
            Agent.objects.filter(team_id=turn_team).order_by("position", "id"),
            *ROSTER_FIELDS,
        ),
        "prompt_anchors": RowsJson(
            Anchor.objects.filter(team_id=turn_team).order_by("key"), *ANCHOR_FIELDS
        ),
        "prompt_mcp": mcp_servers.mcp_servers_stamp(team_id=turn_team),
        "prompt_consultants": consultations.profiles_enabled_stamp(team_id=turn_team),
        "prompt_passes": RowsJson(_passes_since_spoke(), "id", "author__name"),
    }


def _passes_since_spoke() -> QuerySet:
    """passes_since_coach_spoke for the claimed turn's agent, phase and snapshot."""
    own = Message.objects.filter(
        team_id=OuterRef(OuterRef("team_id")),
        phase=OuterRef(OuterRef("phase")),
        author_id=OuterRef(OuterRef("agent_id")),
        recipient__isnull=True,
        id__lte=OuterRef(OuterRef("snapshot_message_id")),
    )
    spoke = Coalesce(Subquery(own.order_by("-id").values("id")[:1]), 0)
    return (
        Message.objects.filter(
            team_id=OuterRef("team_id"),
            phase=OuterRef("phase"),
            kind=Message.Kind.PASS_NOTE,
            id__gt=spoke,
            id__lte=OuterRef("snapshot_message_id"),
        )
        .exclude(author_id=OuterRef("agent_id"))
        .order_by("id")
    )


ROSTER_FIELDS = ("id", "name", "role", "position")


@dataclass(frozen=True)
class Claimed:
    """What a turn's claim read for its request (claim_annotations), for the turn's
    snapshot `until_id`."""

    until_id: int | None
    seen: int | None
    roster: list[tuple[int, str, str]]
    anchors: str  # the anchors' stamp
    tools: tuple[str, str]  # the stamps of the team's MCP servers and consultants
    passes: list[str]  # passes_since_coach_spoke


def claimed(turn: Turn) -> Claimed | None:
    """What the claim of `turn` read with claim_annotations (None without them)."""
    if not hasattr(turn, "prompt_roster"):
        return None
    rows = sorted(json.loads(turn.prompt_roster or "[]"), key=lambda r: (r[3], r[0]))
    return Claimed(
        until_id=turn.snapshot_message_id,
        seen=turn.prompt_seen,
        roster=[(pk, name, role) for pk, name, role, _ in rows],
        anchors=turn.prompt_anchors or "[]",
        tools=(turn.prompt_mcp or "[]", turn.prompt_consultants or "[]"),
        passes=list(
            dict.fromkeys(n for _, n in sorted(json.loads(turn.prompt_passes or "[]")) if n)
        ),
    )


def build(
    agent: Agent,
    team: Team,
    until_id: int | None = None,
    phase: str | None = None,
    claimed: Claimed | None = None,
) -> Prompt:
    """The prompt of a turn; `phase` is the turn's own (the team may have moved on
    since a resumed turn began). With `claimed` (what the turn's claim read for this
    snapshot), the roster, the previous snapshot and the anchors' stamp come from it."""
    phase = phase or team.phase
    if claimed is not None and claimed.until_id != until_id:
        claimed = None  # read for another snapshot
    agents = claimed.roster if claimed is not None else roster(team)
    identity = f"Your name is {agent.name} and your role is {agent.role}."
    stable = [
        identity,
        team_line(agent, team, agents),
        agent.role_prompt or ROLE_PROMPTS.get(agent.role, ""),
        NORMS,
        phase_text(agent, team, phase),
    ]
    if agent.role == Agent.Role.COACH:
        stable.append(facilitation(phase, last=bool(team.phases) and phase == team.phases[-1]))
    system = [
        {"type": "text", "text": "\n\n".join(p for p in stable if p), "cache_control": dict(CACHE)}
    ]
    system += anchors_system(team, claimed.anchors if claimed is not None else None)
    if claimed is not None and until_id is not None:
        seen = claimed.seen
    else:
        seen = previously_seen(agent, until_id)
    history = agent_history(agent, team, until_id, phase, seen, agents)
    rows, lines = history.rows, history.lines
    note = mention_note(agent, _last_shown(history, 3), asking(agent, history))

    opening = f"Team goal: {team.goal or '(none given)'}\nCurrent phase: {phase}"
    entries: list[tuple[str, str, float | None]] = [("user", opening, None)]
    entries += [
        (role, text, message_id)
        for message_id, (role, text) in zip(history.ids, lines, strict=True)
        if text
    ]
    # A PM's nudge is in the cue of the turn it is new to, whole; on the later turns of
    # the phase, a short record of it where that turn began.
    nudges = [rows[i] for i in history.special if rows[i].kind == Message.Kind.NUDGE]
    new = [m for m in nudges if seen is None or m.id > seen]
    entries = with_nudge_records(agent, entries, [m for m in nudges if m not in new], seen)
    # The cue first: what follows the history's last line is the turn's, not a speaker's.
    cue = [f"It is your turn, {agent.name}."]
    if agent.role == Agent.Role.COACH:
        passed = claimed.passes if claimed is not None else None
        cue.append(coach_cue(agent, team, phase, until_id, agents, passed))
    cue += [*steering.cue_lines(agent, new, until_id), intent_line(agent), note]
    tail = "\n\n".join(p for p in cue if p)
    messages, blocks = request_history(entries, seen, tail)
    return Prompt(system=system, messages=messages, snapshot=rows, mention_note=note, blocks=blocks)
