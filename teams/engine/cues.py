"""The volatile tail of a request, after its last cache breakpoint: the cue "It is your
turn", who passed since the coach last spoke, the agent's intent and the @mention note
(none for a teammate whose open question to the agent its inbox line already shows)."""

from __future__ import annotations

import re

from django.db.models import Subquery
from django.db.models.functions import Coalesce

from teams.engine.history_kept import History
from teams.engine.system_text import DONE, roster
from teams.models import Agent, Message, Team
from teams.run import steering

# What does not address anyone: a quotation ("…" or a "> " line) and a list of three or
# more @names (a roster, an owners' list), whoever is in it.
QUOTED = re.compile(r'"[^"\n]*"|“[^”\n]*”|^>.*$', re.MULTILINE)
NAME_LIST = re.compile(r"@[\w-]+(?:\s*(?:,|\band\b|\bor\b|&)\s*@[\w-]+){2,}")
# What may address an agent: what teammates and the PM say, not Loom's records.
ADDRESSING_KINDS = {Message.Kind.CHAT, Message.Kind.PM, Message.Kind.SEAT, Message.Kind.PEER}


def mention_note(
    agent: Agent, history: list[Message], asking: set[str] | frozenset[str] = frozenset()
) -> str:
    """A note when a teammate addressed the agent by @name in one of the messages it
    reads (`history`: those since it last spoke), unless that teammate is in `asking`
    (it asked or passed on a question the agent's inbox shows open: that line already
    asks for the answer, and how to give it). "@coder's question" speaks of the coder,
    not to it; a quotation, a list of names and a phase summary address nobody."""
    named = re.compile(rf"@{re.escape(agent.name)}(?![\w-]|['’]s\b)")
    mentions = [
        m
        for m in history
        if m.author_id != agent.id
        and m.kind in ADDRESSING_KINDS
        and named.search(NAME_LIST.sub(" ", QUOTED.sub(" ", m.content)))
        and (m.author.name if m.author_id else m.speaker) not in asking
    ]
    if not mentions:
        return ""
    mentioner = mentions[-1].speaker
    return (
        f"Note: {mentioner} specifically addressed you with @{agent.name} in a recent "
        "message. They may be waiting for your response on a specific point."
    )


def since_spoke(agent: Agent, history: History, count: int) -> list[Message]:
    """The last `count` rows the request shows that came after the agent last spoke
    in the conversation (a mention it has had a turn to act on is old), oldest first."""
    shown: list[Message] = []
    for message, (_, text) in zip(reversed(history.rows), reversed(history.lines), strict=True):
        if len(shown) == count or (message.author_id == agent.id and message.recipient_id is None):
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
    line = f"Your intent (trajectory → tactic → action): {shown}"
    # Loom's trajectory for a new phase replaced the agent's own on this turn: say so once.
    replaced = getattr(agent, "replaced_trajectory", "")
    return f"{line}\n{replaced}" if replaced else line


def tail(
    agent: Agent,
    team: Team,
    phase: str,
    until_id: int | None,
    agents: list[tuple[int, str, str]],
    passed: list[str] | None,
    new_nudges: list[Message],
    note: str,
) -> str:
    """The text after the history's last breakpoint. The cue first: what follows the
    history's last line is the turn's, not a speaker's."""
    cue = [f"It is your turn, {agent.name}."]
    if agent.role == Agent.Role.COACH:
        cue.append(coach_cue(agent, team, phase, until_id, agents, passed))
    cue += [*steering.cue_lines(agent, new_nudges, until_id), intent_line(agent), note]
    return "\n\n".join(p for p in cue if p)
