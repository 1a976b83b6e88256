"""Which messages an agent's history holds and how each reads to it.

The history of a turn is the phase's conversation, the summaries of the phases before
it and the agent's inbox (its own action records, answers, peer notes, Loom's notes),
minus pass notes and what the agent offloaded; `render` gives each row's (role, text)
as this agent reads it, and a PM's nudge a short record where the turn that read it
began (`with_nudge_records`)."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from teams.conversation import keepers, questions
from teams.lib import compiled
from teams.models import Agent, Message, Team, Turn
from teams.run import steering
from teams.run.turns import PM_INPUT
from tools import questions as question_tools
from tools.conversation import replaced_phases

CONVERSATION_KINDS = [Message.Kind.CHAT, Message.Kind.PM, Message.Kind.SYSTEM, Message.Kind.SEAT]


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


# history_queryset's kinds, for its ids' statement written in SQL (teams.lib.compiled).
HISTORY_KINDS = compiled.HistoryKinds(
    conversation=tuple(CONVERSATION_KINDS),
    summary=Message.Kind.PHASE_SUMMARY,
    record=Message.Kind.TOOL_CALL,
    notes=(Message.Kind.ANSWER, Message.Kind.PEER),
    passed=Message.Kind.PASS_NOTE,
)


def history_ids(
    agent: Agent, team: Team, phase: str | None, unseen_after: int | None, until_id: int
) -> list[int]:
    """The ids of history_queryset's rows up to `until_id`, in one statement kept
    written (the ORM would build and compile it anew on every turn)."""
    return compiled.history_ids(
        agent_id=agent.id,
        team_id=team.id,
        phase=phase or team.phase,
        unseen_after=unseen_after or 0,
        until_id=until_id,
        kinds=HISTORY_KINDS,
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


def with_replaced_summaries(
    rows: list[Message], lines: list[tuple[str, str | None]]
) -> list[tuple[str, str | None]]:
    """The lines with each phase summary a later one replaces (its coach named it in
    signal_phase_complete's `replaces`) shortened to a pointer at the newer one, so two
    versions of a decision never stand side by side; the lines unchanged when none is."""
    summaries = [i for i, m in enumerate(rows) if m.kind == Message.Kind.PHASE_SUMMARY]
    newer: dict[str, str] = {}  # a replaced phase: the phase whose summary replaces it
    for i in reversed(summaries):
        phase, replaced = replaced_phases(rows[i].content)
        for earlier in replaced:
            newer.setdefault(earlier, phase)
    if not newer:
        return lines
    shortened = list(lines)
    for i in summaries:
        phase = rows[i].phase
        if phase in newer:
            shortened[i] = ("user", replaced_pointer(phase, newer[phase]))
    return shortened


def replaced_pointer(phase: str, by: str) -> str:
    return (
        f"[Loom] [Phase {phase} complete] Its summary is replaced by the summary of {by}, "
        f'below; the phase\'s conversation is in the keeper "{keepers.phase_topic(phase)}".'
    )
