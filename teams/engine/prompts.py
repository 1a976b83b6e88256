"""What an agent sees on its turn: the system prompt and its history.

A request is ordered so that the longest stable prefix comes first and is read from
the prompt cache (teams/catalog.py prices cache reads at a tenth of input):

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
   since the coach last spoke, the agent's intent (trajectory → tactic → action) and
   the @mention note.

That is at most MAX_CACHE_BREAKPOINTS, Anthropic's limit per request. Providers
without a prompt cache (the offline model) get the same text as plain strings, one
message per run of same-role entries (`Prompt.messages`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import Q, QuerySet

from teams import mesh, phase_guide
from teams.engine.reply import DEFAULT_MAX_TOKENS
from teams.models import Agent, Anchor, Message, Team, Turn
from teams.turns import PM_INPUT
from tools import questions as question_tools
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
        "PM sees a drift score for every agent, computed from these levels and how "
        "recently you updated them.",
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
CONVERSATION_KINDS = [Message.Kind.CHAT, Message.Kind.PM, Message.Kind.SYSTEM]
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


def team_line(agent: Agent, team: Team) -> str:
    """Who else is on the team, by @name and role."""
    others = [
        f"@{name} ({role})"
        for name, role in team.agents.exclude(pk=agent.pk)
        .order_by("position", "id")
        .values_list("name", "role")
    ]
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
    lines.append(files_line(agent, team))
    return "\n".join(lines)


def files_line(agent: Agent, team: Team) -> str:
    """Who may write workspace files, and in which of the team's phases (team data:
    Team.tool_access)."""
    roles, phase_allowed, _words = FileWrite.access(team)
    phases = [p for p in team.phases if phase_allowed(p)]
    where = ", ".join(phases) if phases else "no phase of this team"
    who = "every role" if roles is None else " and ".join(f"{r}s" for r in sorted(roles))
    if roles is not None and agent.role not in roles:
        return f"Workspace files: you read them; {who} write them (in {where})."
    limit = f"Your reply holds at most about {DEFAULT_MAX_TOKENS:,} tokens: keep each file shorter."
    if phase_allowed(team.phase):
        return f"Workspace files: you may write them with {FileWrite.name} in this phase. {limit}"
    return f"Workspace files: you read them now; you may write them in {where}."


ANCHORS_INSTRUCTION = (
    "These are IMMUTABLE ANCHORS. Override any chat history that conflicts with them:"
)


def anchors_block(team: Team) -> str:
    """The anchors in their documented format, each with who pinned it and in which
    phase; empty when the team has no anchors."""
    anchors = Anchor.objects.filter(team=team).order_by("key")
    lines = [f"  [{a.key}]: {a.value} (pinned by {mesh.anchor_source_text(a)})" for a in anchors]
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
    notes = Q(kind__in=[Message.Kind.ANSWER, Message.Kind.PEER])
    this_phase = Q(phase=phase or team.phase)
    unseen = Q(id__gt=unseen_after or 0)
    inbox = Q(recipient=agent) & (
        (records & this_phase) | (notes & (this_phase | unseen)) | ~(records | notes)
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
) -> list[Message]:
    """What the agent sees on a turn whose snapshot ends at `until_id`."""
    messages = history_queryset(agent, team, phase, unseen_after)
    if until_id is not None:
        messages = messages.filter(id__lte=until_id)
    return list(messages)


def mention_note(agent: Agent, history: list[Message]) -> str:
    recent = [m for m in history[-3:] if m.author_id != agent.id]
    mentions = [m for m in recent if f"@{agent.name}" in m.content]
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
    if message.kind == Kind.PHASE_SUMMARY:  # Loom's record, even for the coach who wrote it
        return "user", f"[Loom] {message.content}"
    if message.author_id == agent.id and message.recipient_id is None:
        return "assistant", message.content
    if message.recipient_id == agent.id and message.kind == Kind.PEER:
        return "user", f"[Peer message from {message.speaker}]: {message.content}"
    if message.recipient_id == agent.id and message.kind == Kind.SYSTEM:
        return "user", f"[Loom] {message.content}"
    return "user", f"[{message.speaker}]: {message.content}"


def passes_since_coach_spoke(
    agent: Agent, team: Team, phase: str, until_id: int | None
) -> list[str]:
    """The names of the agents who passed since the coach last spoke, in order."""
    own = Message.objects.filter(team=team, phase=phase, author=agent, recipient__isnull=True)
    if until_id is not None:
        own = own.filter(id__lte=until_id)
    spoke = own.order_by("-id").values_list("id", flat=True).first() or 0
    passes = Message.objects.filter(
        team=team, phase=phase, kind=Message.Kind.PASS_NOTE, id__gt=spoke
    )
    if until_id is not None:
        passes = passes.filter(id__lte=until_id)
    names = passes.exclude(author=agent).order_by("id").values_list("author__name", flat=True)
    return list(dict.fromkeys(n for n in names if n))


def coach_cue(agent: Agent, team: Team, phase: str, until_id: int | None) -> str:
    passed = passes_since_coach_spoke(agent, team, phase, until_id)
    if not passed:
        return ""
    members = team.agents.exclude(pk=agent.pk).exclude(role=Agent.Role.EXTERNAL).count()
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


def anchors_system(team: Team) -> list[dict]:
    """The system block after the stable, cached one: the anchors as they are now
    (none without anchors)."""
    block = anchors_block(team)
    return [{"type": "text", "text": block}] if block else []


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


def cached_blocks(entries: list[tuple[str, str, int | None]], seen: int | None, tail: str):
    """The history as content blocks, one per entry ((role, text, message id), the
    opening's id None), with the two history breakpoints, then the volatile tail."""
    messages: list[dict] = []
    read = None  # the last block the previous request had: it wrote the cache there
    for role, text, message_id in entries:
        if not text.strip():
            continue  # the API refuses empty text blocks
        block = {"type": "text", "text": text}
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})
        if seen is not None and (message_id is None or message_id <= seen):
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
    return messages


def build(
    agent: Agent, team: Team, until_id: int | None = None, phase: str | None = None
) -> Prompt:
    """The prompt of a turn; `phase` is the turn's own (the team may have moved on
    since a resumed turn began)."""
    phase = phase or team.phase
    identity = f"Your name is {agent.name} and your role is {agent.role}."
    stable = [
        identity,
        team_line(agent, team),
        agent.role_prompt or ROLE_PROMPTS.get(agent.role, ""),
        NORMS,
        phase_text(agent, team, phase),
    ]
    if agent.role == Agent.Role.COACH:
        stable.append(facilitation(phase, last=bool(team.phases) and phase == team.phases[-1]))
    system = [
        {"type": "text", "text": "\n\n".join(p for p in stable if p), "cache_control": dict(CACHE)}
    ]
    system += anchors_system(team)
    seen = previously_seen(agent, until_id)
    history = history_messages(agent, team, until_id, phase, unseen_after=seen)
    note = mention_note(agent, history)

    opening = f"Team goal: {team.goal or '(none given)'}\nCurrent phase: {phase}"
    entries = [("user", opening, None)]
    for message in history:
        role, text = render(message, agent)
        if text:
            entries.append((role, text, message.id))
    # The cue first: what follows the history's last line is the turn's, not a speaker's.
    cue = [f"It is your turn, {agent.name}."]
    if agent.role == Agent.Role.COACH:
        cue.append(coach_cue(agent, team, phase, until_id))
    cue += [intent_line(agent), note]
    tail = "\n\n".join(p for p in cue if p)
    turns: list[list] = []
    for role, text, _ in [*entries, ("user", tail, None)]:
        if turns and turns[-1][0] == role:
            turns[-1][1] += "\n\n" + text
        else:
            turns.append([role, text])
    return Prompt(
        system=system,
        messages=[{"role": role, "content": text} for role, text in turns],
        snapshot=history,
        mention_note=note,
        blocks=cached_blocks(entries, seen, tail),
    )
