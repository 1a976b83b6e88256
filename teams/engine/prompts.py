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

The parts live beside this module: system_text.py (the stable system text and the
anchors' block), history_rows.py (which messages the history holds and how each reads),
history_kept.py (what a process keeps of each agent's last request, so a steady turn
reads only what is new), cues.py (the volatile tail) and claims.py (what a turn's claim
reads for its request, in its one statement)."""

from __future__ import annotations

from dataclasses import dataclass, field

from teams.engine import cues, history_kept, history_rows, system_text
from teams.engine.claims import Claimed
from teams.models import Agent, Message, Team

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


def anchors_system(team: Team, stamp: str | None = None) -> list[dict]:
    """The system block after the stable, cached one: the anchors as they are now
    (none without anchors), or as `stamp` (their stamp, read by the turn's claim:
    claim_annotations) says they were: the block this process rendered under it."""
    block = (
        system_text.anchors_block(team)
        if stamp is None
        else history_kept.anchors_block_at(team, stamp)
    )
    return [{"type": "text", "text": block}] if block else []


def with_current_anchors(prompt: Prompt, team: Team) -> Prompt:
    """The prompt with its anchors re-read: a tool of this turn (save_anchor) may have
    pinned one, and the very next request must carry it."""
    prompt.system = prompt.system[:1] + anchors_system(team)
    return prompt


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
    agents = claimed.roster if claimed is not None else system_text.roster(team)
    system = [
        {
            "type": "text",
            "text": system_text.stable_text(agent, team, phase, agents),
            "cache_control": dict(CACHE),
        }
    ]
    system += anchors_system(team, claimed.anchors if claimed is not None else None)
    if claimed is not None and until_id is not None:
        seen = claimed.seen
    else:
        seen = history_rows.previously_seen(agent, until_id)
    history = history_kept.agent_history(agent, team, until_id, phase, seen, agents)
    note = cues.mention_note(
        agent, cues.since_spoke(agent, history, 3), cues.asking(agent, history)
    )
    entries, new_nudges = _entries(agent, team, phase, history, seen)
    passed = claimed.passes if claimed is not None else None
    tail = cues.tail(agent, team, phase, until_id, agents, passed, new_nudges, note)
    messages, blocks = request_history(entries, seen, tail)
    return Prompt(
        system=system, messages=messages, snapshot=history.rows, mention_note=note, blocks=blocks
    )


def _entries(
    agent: Agent, team: Team, phase: str, history: history_kept.History, seen: int | None
) -> tuple[list[tuple[str, str, float | None]], list[Message]]:
    """The history's entries, (role, text, position), after the opening line, and the
    PM's nudges new to the agent. A nudge is in the cue of the turn it is new to, whole;
    on the later turns of the phase, a short record of it where that turn began."""
    opening = f"Team goal: {team.goal or '(none given)'}\nCurrent phase: {phase}"
    entries: list[tuple[str, str, float | None]] = [("user", opening, None)]
    lines = history_rows.with_replaced_summaries(history.rows, history.lines)
    entries += [
        (role, text, message_id)
        for message_id, (role, text) in zip(history.ids, lines, strict=True)
        if text
    ]
    rows = history.rows
    nudges = [rows[i] for i in history.special if rows[i].kind == Message.Kind.NUDGE]
    new = [m for m in nudges if seen is None or m.id > seen]
    old = [m for m in nudges if m not in new]
    return history_rows.with_nudge_records(agent, entries, old, seen), new
