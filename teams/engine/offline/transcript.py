"""Reading the offline model's request: who is speaking, the goal and phase, the
history as (speaker, text) entries, and the marks agents' earlier lines left."""

from __future__ import annotations

import re

IDENTITY = re.compile(r"Your name is (?P<name>[\w-]+) and your role is (?P<role>\w+)\.")
GOAL = re.compile(r"^Team goal: (?P<goal>.*)$", re.MULTILINE)
PHASE = re.compile(r"^Current phase: (?P<phase>.*)$", re.MULTILINE)
# A PM's message as the history shows it: "[pm]: ..." or "[pm (alice)]: ...", up to
# the next speaker or the cue.
PM_SAID = re.compile(
    r"(?:^|\n)\[pm(?: \([^)\n]*\))?\]: (?P<text>.*?)(?=\n\n\[[^\]\n]+\]: |\n\nIt is your turn|\Z)",
    re.DOTALL,
)
# Where a speaker's entry begins in the history: "[coder]: " or "[pm (alice)]: ".
SPEAKER = re.compile(r"(?:^|\n\n)\[(?P<who>[\w-]+)(?: \([^)\n]*\))?\]: ")
NOT_AGENTS = frozenset({"", "pm", "system"})  # "": an entry with no speaker
# A question in this agent's inbox, as the prompt shows it (up to its context or the
# hint on how to reply).
QUERY = re.compile(
    r"\[Query from (?P<sender>[^|\]\n]+) \| ID: (?P<key>q-[0-9a-f]+)\]\n(?P<question>.*?)"
    r"(?=\n\nRelevant context|\n\nYou can respond using|\Z)",
    re.DOTALL,
)
MENTION = re.compile(r"(?<![\w@])@(?P<name>[\w-]+)")
WROTE = re.compile(r"I wrote (?P<path>\S+) in the workspace")
READ = re.compile(r"I read (?P<path>\S+) in the workspace")
ANSWERED = re.compile(r"(?P<done>\d+) of (?P<asked>\d+) consultants answered")
PHASE_DONE = re.compile(r"\[Phase [^\]\n]+ complete\]")
# What an agent says after a question or keeper tool: the marks it (and the coach's
# summary) finds later.
QUERY_KEY = re.compile(r"q-[0-9a-f]+")
ASKED = re.compile(r"I asked @(?P<to>[\w-]+) \((?P<key>q-[0-9a-f]+)\)")
FORWARDED = re.compile(
    r"I passed @(?P<sender>[\w-]+)'s question \((?P<key>q-[0-9a-f]+)\) on to @(?P<to>[\w-]+)"
)
ANSWERED_QUERY = re.compile(r"I answered @(?P<sender>[\w-]+)'s question \((?P<key>q-[0-9a-f]+)\)")
KEEPER = re.compile(r"Offloaded (?P<count>\d+) messages\. Keeper (?P<id>\d+) ")
GOAL_CHARS = 200
SUBJECT_WORDS = 8

# The goal's subject: its first clause, without a leading verb or a relative clause.
GOAL_VERBS = frozenset(
    "build create deliver design develop implement make plan produce prototype ship write".split()
)
CLAUSE_END = re.compile(r"[:;!?\n]|\.(?:\s|$)")
RELATIVE = re.compile(r"\s+(?:that|which|who|where)\s+", re.IGNORECASE)


def text_of(message: dict) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") or str(b.get("content", "")) for b in content)


def last_calls(rounds: list[dict]) -> list[str]:
    """The tools the model called in its last response of this turn."""
    return [b["name"] for b in last_uses(rounds)]


def last_uses(rounds: list[dict]) -> list[dict]:
    """The tool calls of the model's last response in this turn."""
    last = next((m for m in reversed(rounds) if m["role"] == "assistant"), None)
    if last is None:
        return []
    return [b for b in last["content"] if b.get("type") == "tool_use"]


def input_of(rounds: list[dict], tool) -> dict:
    """The arguments of the last response's call of `tool`."""
    return next((b.get("input") or {} for b in last_uses(rounds) if b["name"] == tool.name), {})


def subject_of(goal: str) -> str:
    """What the goal is about, as a noun phrase for the agents' lines: "Ship the parser."
    is "the parser", "a haiku generator that writes seasonal poems" is "a haiku
    generator"."""
    text = CLAUSE_END.split(goal.strip(), maxsplit=1)[0].strip()
    if not text or text.startswith("(none given)"):
        return "the goal"
    words = text.split()
    if len(words) > 1 and words[0].lower() in GOAL_VERBS:
        words = words[1:]
    words = RELATIVE.split(" ".join(words), maxsplit=1)[0].split()[:SUBJECT_WORDS]
    if words[0] in ("A", "An", "The"):
        words[0] = words[0].lower()
    return " ".join(words)


def facts_of(transcript: str) -> dict:
    """The team's goal (shortened), its subject and the phase, from the turn's opening."""
    goal, phase = GOAL.search(transcript), PHASE.search(transcript)
    goal_text = goal["goal"].strip() if goal else ""
    subject = subject_of(goal_text)
    if len(goal_text) > GOAL_CHARS:
        goal_text = goal_text[: GOAL_CHARS - 1].rstrip() + "…"
    return {
        "goal": goal_text or "the team's goal",
        "subject": subject,
        "phase": phase["phase"].strip() if phase else "this phase",
    }


def pm_said(history: list[dict]) -> str:
    """What the PM said last in the phase, or ""."""
    said = [
        m["text"].strip()
        for message in history
        if message["role"] == "user"
        for m in PM_SAID.finditer(message["content"])
    ]
    return said[-1] if said else ""


def result_of(rounds: list[dict]) -> str:
    """The text of the last tool result of this turn."""
    last = next((m for m in reversed(rounds) if m["role"] == "user"), None)
    return text_of(last).strip() if last else ""


def entries_of(history: list[dict], name: str) -> list[tuple[str, str]]:
    """The history as (speaker, text), oldest first; this agent's own lines are its, and
    an entry without a speaker (the opening, an inbox item) has ""."""
    entries = []
    for message in history:
        text = message["content"]
        if message["role"] == "assistant":
            entries.append((name, text))
            continue
        marks = list(SPEAKER.finditer(text))
        # What comes before the first speaker: the turn's opening, an inbox item.
        lead = text[: marks[0].start()] if marks else text
        if lead.strip():
            entries.append(("", lead))
        for i, mark in enumerate(marks):
            end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
            entries.append((mark["who"], text[mark.end() : end]))
    return entries


def this_phase(entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The entries after the last phase summary."""
    done = [i for i, (_, text) in enumerate(entries) if PHASE_DONE.search(text)]
    return entries[done[-1] + 1 :] if done else entries


def neighbours(entries: list[tuple[str, str]], name: str) -> tuple[str | None, str | None]:
    """The agents who spoke just before and just after this agent's first line."""
    mine = next((i for i, (who, _) in enumerate(entries) if who == name), None)
    if mine is None:
        return None, None
    others = [i for i, (who, _) in enumerate(entries) if who not in NOT_AGENTS and who != name]
    before = next((entries[i][0] for i in reversed(others) if i < mine), None)
    after = next((entries[i][0] for i in others if i > mine), None)
    return before, after


def short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def joined_names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
