"""A deterministic stand-in for Claude: the model id `loom-offline`, the default when
no ANTHROPIC_API_KEY is set.

It speaks the same protocol as the Anthropic provider and exercises every mechanism of a
conversation, so the demo shows the product with no key. Every message it writes says
it comes from the offline model, and its lines are about the team's goal (the subject
it names: "a haiku generator", "the parser").

What it does, all decided from the request alone (the history, the anchors in the
system prompt, the tools offered), so the same request always gets the same reply:

- Conversation: short lines, passes (now and then, and always right after a peer's
  answer), one ask_pm from the coach (its third line in the first phase), and phase
  completion with a summary of what happened in the phase (who spoke, the PM's word
  if the PM spoke in it, the questions, files, keepers and consultations). The coach
  holds a phase open while a peer question asked in it is still unanswered.
- Questions between agents: in the first phase the researcher asks the agent who spoke
  after its first line (the coder) a question, which that agent answers; in the second
  phase the coder asks the agent who spoke before its first line (the researcher) a
  question naming, with @, the agent who spoke after it (the reviewer): a question that
  names another agent is forwarded to it, which answers. An agent handles a question in
  its inbox once (its line names the query's id) and only in the phase it arrived.
- Keepers: in the first phase, once the PM has spoken, the reviewer offloads its older
  context to a keeper, and on its next turn recalls it (smart retrieval: the keeper's
  question comes back here under SMART_SYSTEM and gets the excerpts that share most
  words with it).
- The cognitive mesh (seed 004): each agent declares its intent when it first speaks in
  a phase and maps its tactic every few turns; the coach pins the PM's latest word as an
  anchor and checks its drift before completing a phase.
- The workspace and the consultants: in the implementation phase the coder writes one
  small file (OFFLINE_FILE) and says so, and the reviewer, on a later turn, reads the
  file the coder said it wrote and says so; in the team's second phase the coach asks
  every consultant once for a second opinion on the plan.

A mesh, question, keeper, file or consultation tool does not end the turn: after its
result the agent goes on to write its line, which says what it did (which is how it
knows, on a later turn, not to do it again)."""

from __future__ import annotations

import re
import time
import zlib

from django.conf import settings

from teams.catalog import OFFLINE_MODEL, Usage
from teams.engine.reply import ModelReply
from teams.keepers import SMART_SYSTEM
from tools.consult import AskMulti, AskPeer
from tools.context import ContextOffload, ContextRetrieve
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete
from tools.mesh import CheckDrift, DeclareIntent, MapContext, SaveAnchor, ScanHierarchy, ThinkBack
from tools.questions import PeerAnswerQuestion, PeerAskQuestion, PeerForwardQuestion
from tools.workspace import FileList, FileRead, FileWrite

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
    r"(?=\n\nRelevant context:|\n\nYou can respond using|\Z)",
    re.DOTALL,
)
MENTION = re.compile(r"(?<![\w@])@(?P<name>[\w-]+)")
# Tools after whose result the agent goes on with its turn.
MESH = frozenset(
    t.name for t in (DeclareIntent, MapContext, SaveAnchor, CheckDrift, ScanHierarchy, ThinkBack)
)
GOES_ON = MESH | {
    t.name
    for t in (
        FileList,
        FileRead,
        FileWrite,
        AskMulti,
        AskPeer,
        PeerAskQuestion,
        PeerAnswerQuestion,
        PeerForwardQuestion,
        ContextOffload,
        ContextRetrieve,
    )
}
# The file the coder writes in the implementation phase, and how the team hears of it.
OFFLINE_FILE = "notes/plan.md"
OFFLINE_FILE_TEXT = """# Plan (offline model)

Goal: {goal}

1. The core of {subject}: one function from the input to the result.
2. The checks: refuse bad input early and say which input failed and why.
3. The entry point: one command that runs it end to end.
"""
WROTE = re.compile(r"I wrote (?P<path>\S+) in the workspace")
READ = re.compile(r"I read (?P<path>\S+) in the workspace")
CONSULTED = "I asked the consultants for a second opinion"
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
OFFLOADED = "I offloaded"
RECALLED = "I recalled"
KEEPER = re.compile(r"Offloaded (?P<count>\d+) messages\. Keeper (?P<id>\d+) ")
PM_ANCHOR = "pm-decision"
GOAL_CHARS = 200
SUBJECT_WORDS = 8
PM_WORDS_CHARS = 120
TACTIC_EVERY = 4  # an agent maps its tactic on every 4th turn it speaks in a phase
PHASE_LINES = 8  # the coach completes a phase after this many lines of the others ...
OPEN_QUESTION_LINES = 16  # ... or this many while a question asked in it is open

# The goal's subject: its first clause, without a leading verb or a relative clause.
GOAL_VERBS = frozenset(
    "build create deliver design develop implement make plan produce prototype ship write".split()
)
CLAUSE_END = re.compile(r"[:;!?\n]|\.(?:\s|$)")
RELATIVE = re.compile(r"\s+(?:that|which|who|where)\s+", re.IGNORECASE)

TRAJECTORIES = {
    "coach": "Guide the team through {phase} towards the goal: {goal}",
    "researcher": "Find the facts, prior art and risks the team needs for: {goal}",
    "coder": "Design and build the implementation of: {goal}",
    "reviewer": "Check the team's plans and code against: {goal}",
    "tester": "Work out how to prove the result right for: {goal}",
}
DEFAULT_TRAJECTORY = "Help the team reach its goal: {goal}"
TACTICS = {
    "coach": "Summarise agreements and surface open questions in {phase}.",
    "researcher": "Compare the simplest options for {subject} and list the risky edge cases.",
    "coder": "Split {subject} into small parts behind one entry point.",
    "reviewer": "Ask for tests on the edge cases of {subject} before the phase closes.",
    "tester": "List the cases an end-to-end test of {subject} must cover.",
}
DEFAULT_TACTIC = "Keep my contributions to {subject} small and testable."

LINES = {
    "coach": [
        "For {phase}: what must we settle about {subject} before we move on?",
        "Summary so far: our plan for {subject} is converging. Anything blocking us?",
        "Good points on {subject}. Let's note the decisions and open questions, then go on.",
    ],
    "researcher": [
        "Prior art for {subject}: keep the inputs strict and the results predictable.",
        "I compared the options for {subject}: the simplest one covers what we need.",
        "One risk for {subject}: unusual inputs. We should list them before we build.",
    ],
    "coder": [
        "I can build {subject} as a few small parts behind one entry point.",
        "The core of {subject} could be one function: input in, result out, errors named.",
        "I'd build the core of {subject} first, then the checks, then the entry point.",
    ],
    "reviewer": [
        "The plan for {subject} reads well; I'd ask for tests on its edge cases.",
        "For {subject}, let's keep each error message specific to the input that failed.",
        "I'd like one end-to-end test of {subject} before we call this phase done.",
    ],
}
DEFAULT_LINES = ["A small addition on {subject}: let's keep it simple and testable."]

# The questions agents ask each other, and how each role answers one.
FIRST_QUESTION = "What is the smallest useful version of {subject}, in one sentence?"
SECOND_QUESTION = "Which edge cases of {subject} must we cover before we build it?"
WHO_KNOWS = " @{name} may know best."
ANSWERS = {
    "coach": "For {subject}, let's keep to what the goal says and settle the rest with the PM.",
    "researcher": "From what I found on {subject}: do the common case first, note the rest "
    "as known limits.",
    "coder": "The smallest useful version of {subject}: one input in, one result out, and a "
    "clear error for anything else.",
    "reviewer": "For {subject}: empty input, very long input and unexpected characters; each "
    "needs a test and a clear error.",
}
DEFAULT_ANSWER = "For {subject}, I'd start small and test it end to end."
ENRICHMENT = "I know the plan for {subject}, not its edge cases; {name} reviews those."
PM_QUESTION = "What should the first version of {subject} include: only the core, or more?"
RECALL_QUESTION = "What did we say earlier about {subject}?"
OFFLOAD_TOPIC = "early {phase} discussion of {subject}"


def _text_of(message: dict) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") or str(b.get("content", "")) for b in content)


def _last_calls(rounds: list[dict]) -> list[str]:
    """The tools the model called in its last response of this turn."""
    return [b["name"] for b in _last_uses(rounds)]


def _last_uses(rounds: list[dict]) -> list[dict]:
    """The tool calls of the model's last response in this turn."""
    last = next((m for m in reversed(rounds) if m["role"] == "assistant"), None)
    if last is None:
        return []
    return [b for b in last["content"] if b.get("type") == "tool_use"]


def _input_of(rounds: list[dict], tool) -> dict:
    """The arguments of the last response's call of `tool`."""
    return next((b.get("input") or {} for b in _last_uses(rounds) if b["name"] == tool.name), {})


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


def _facts(transcript: str) -> dict:
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


def _pm_said(history: list[dict]) -> str:
    """What the PM said last in the phase, or ""."""
    said = [
        m["text"].strip()
        for message in history
        if message["role"] == "user"
        for m in PM_SAID.finditer(message["content"])
    ]
    return said[-1] if said else ""


def _result_of(rounds: list[dict]) -> str:
    """The text of the last tool result of this turn."""
    last = next((m for m in reversed(rounds) if m["role"] == "user"), None)
    return _text_of(last).strip() if last else ""


def _entries(history: list[dict], name: str) -> list[tuple[str, str]]:
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


def _this_phase(entries: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The entries after the last phase summary."""
    done = [i for i, (_, text) in enumerate(entries) if PHASE_DONE.search(text)]
    return entries[done[-1] + 1 :] if done else entries


def _neighbours(entries: list[tuple[str, str]], name: str) -> tuple[str | None, str | None]:
    """The agents who spoke just before and just after this agent's first line."""
    mine = next((i for i, (who, _) in enumerate(entries) if who == name), None)
    if mine is None:
        return None, None
    others = [i for i, (who, _) in enumerate(entries) if who not in NOT_AGENTS and who != name]
    before = next((entries[i][0] for i in reversed(others) if i < mine), None)
    after = next((entries[i][0] for i in others if i > mine), None)
    return before, after


def _short(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def phase_summary(entries: list[tuple[str, str]], pm_said: str, facts: dict) -> str:
    """What happened in the phase, from its entries: who spoke, what the PM said (if the
    PM spoke in it), the questions, keepers, consultations and files."""
    spoke = [who for who, _ in entries if who not in NOT_AGENTS]
    speakers = list(dict.fromkeys(spoke))
    parts = [f"Phase {facts['phase']} for {facts['subject']} is done"]
    if speakers:
        parts[0] += f": {_names(speakers)} spoke ({len(spoke)} lines)"
    parts[0] += "."
    if pm_said:
        words = _short(pm_said, PM_WORDS_CHARS)
        parts.append(f'The PM said: "{words}"' + ("" if words[-1] in ".!?…" else "."))
    happened = []
    askers = {m["key"]: who for who, text in entries for m in ASKED.finditer(text)}
    for who, text in entries:
        if who in NOT_AGENTS:
            continue
        happened += [f"{who} asked {m['to']} a question" for m in ASKED.finditer(text)]
        happened += [f"{who} passed it on to {m['to']}" for m in FORWARDED.finditer(text)]
        happened += [  # the asker's question, whoever passed it on
            f"{who} answered {askers.get(m['key'], m['sender'])}'s question"
            for m in ANSWERED_QUERY.finditer(text)
        ]
        if text.startswith(OFFLOADED):
            happened.append(f"{who} offloaded older context to a keeper")
        if text.startswith(RECALLED):
            happened.append(f"{who} recalled it from the keepers")
        if text.startswith(CONSULTED):
            counted = re.search(r": (\S+ of \S+|none) answered", text)
            answered = f" ({counted[1]} answered)" if counted else ""
            happened.append(f"{who} asked the consultants for a second opinion{answered}")
        happened += [f"{who} wrote {m['path']}" for m in WROTE.finditer(text)]
        happened += [f"{who} read {m['path']}" for m in READ.finditer(text)]
    if happened:
        parts.append("What happened: " + "; ".join(happened) + ".")
    return " ".join(parts) + " (offline model)"


class OfflineProvider:
    def respond(self, *, model, system, messages, tools, max_tokens=0, on_text=None):
        system_text = "\n".join(b["text"] for b in system)
        if system_text.startswith(SMART_SYSTEM):
            return self._keeper_answer(messages[-1]["content"])
        match = IDENTITY.search(system_text)
        name, role = (match["name"], match["role"]) if match else ("agent", "agent")
        tool_names = {t["name"] for t in tools}
        input_tokens = (len(system_text) + len("\n".join(_text_of(m) for m in messages))) // 4
        # The history the turn began with (plain text); then this turn's tool rounds.
        start = next(
            (i for i, m in enumerate(messages) if not isinstance(m["content"], str)),
            len(messages),
        )
        history, rounds = messages[:start], messages[start:]
        called = [
            b["name"]
            for m in rounds
            if m["role"] == "assistant"
            for b in m["content"]
            if b.get("type") == "tool_use"
        ]
        last = _last_calls(rounds)
        if rounds and any(tool not in GOES_ON for tool in last):
            return self._reply([], "end_turn", input_tokens)

        def offered(tool) -> bool:
            return tool.name in tool_names and tool.name not in called

        def say(line: str):
            return self._say(line, input_tokens, on_text)

        def call(tool, arguments: dict):
            return self._tool(tool.name, arguments, input_tokens)

        transcript = "\n".join(_text_of(m) for m in history)
        lines = transcript.count("\n[")
        first_phase = PHASE_DONE.search(transcript) is None
        # The coach asks the PM in the first phase; a later phase had the PM's word.
        pm_seen = "[pm" in transcript or not first_phase
        # Lines this agent spoke in the phase (its messages come back as the assistant's;
        # earlier phases' summaries, which a coach wrote, do not count).
        my_lines = [
            m["content"]
            for m in history
            if m["role"] == "assistant" and not m["content"].startswith("[Phase ")
        ]
        spoken, said_so_far = len(my_lines), "\n".join(my_lines)
        facts = _facts(transcript)
        entries = _this_phase(_entries(history, name))
        phase_text = "\n\n".join(text for _, text in entries)
        inbox = {q["key"]: q for q in QUERY.finditer(phase_text)}
        wrote = WROTE.search(transcript)

        # After a question, keeper, file or consultation tool, the agent says what it did.
        done = self._after_tool(rounds, last, facts, inbox, wrote)
        if done is not None:
            return say(done)

        if spoken == 0 and offered(DeclareIntent):
            trajectory = TRAJECTORIES.get(role, DEFAULT_TRAJECTORY).format(**facts)
            return call(DeclareIntent, {"trajectory": trajectory})
        if (
            role == "coach"
            and offered(AskMulti)
            and len(PHASE_DONE.findall(transcript)) == 1  # the team's second phase
            and CONSULTED not in transcript
        ):
            request = {
                "prompt": f"A second opinion on our plan for: {facts['goal']} What is the "
                "riskiest part, and what should we do first?",
                "task_type": "plan",
                "focus_areas": ["architecture", "correctness"],
            }
            return call(AskMulti, request)
        if offered(FileWrite) and not wrote:
            content = OFFLINE_FILE_TEXT.format(**facts)
            return call(FileWrite, {"path": OFFLINE_FILE, "content": content})
        if (
            role == "reviewer"
            and offered(FileRead)
            and wrote
            and f"read {wrote['path']}" not in transcript
        ):
            return call(FileRead, {"path": wrote["path"]})

        # A question in the inbox, once, in the phase it came: forwarded to the agent it
        # names, answered otherwise.
        waiting = [q for key, q in inbox.items() if key not in said_so_far]
        if waiting:
            query = waiting[0]
            named = [
                n
                for n in MENTION.findall(query["question"])
                if n not in (name, query["sender"].strip())
            ]
            if named and offered(PeerForwardQuestion):
                enrichment = ENRICHMENT.format(name=named[0], **facts)
                arguments = {"query_id": query["key"], "target": named[0], "enrichment": enrichment}
                return call(PeerForwardQuestion, arguments)
            if offered(PeerAnswerQuestion):
                answer = ANSWERS.get(role, DEFAULT_ANSWER).format(**facts)
                return call(PeerAnswerQuestion, {"query_id": query["key"], "answer": answer})

        # Questions for a peer: the researcher's in the first phase, the coder's (which
        # names who may know best) in the second.
        if offered(PeerAskQuestion) and spoken >= 1 and not ASKED.search(said_so_far):
            before, after = _neighbours(entries, name)
            if role == "researcher" and first_phase and after:
                question = FIRST_QUESTION.format(**facts)
                return call(PeerAskQuestion, {"question": question, "target": after})
            if (
                role == "coder"
                and len(PHASE_DONE.findall(transcript)) == 1
                and before
                and after
                and before != after
            ):
                question = SECOND_QUESTION.format(**facts) + WHO_KNOWS.format(name=after)
                return call(PeerAskQuestion, {"question": question, "target": before})

        # Keepers: once the PM has spoken in the first phase, the reviewer offloads the
        # talk before it, and recalls it on its next turn.
        if (
            role == "reviewer"
            and first_phase
            and "[pm" in transcript
            and OFFLOADED not in said_so_far
            and offered(ContextOffload)
        ):
            return call(ContextOffload, {"topic": OFFLOAD_TOPIC.format(**facts)[:200]})
        if OFFLOADED in said_so_far and RECALLED not in said_so_far and offered(ContextRetrieve):
            return call(ContextRetrieve, {"query": RECALL_QUESTION.format(**facts)})

        if role == "coach" and offered(SaveAnchor):
            said = _pm_said(history)
            # Pinned already (by the coach, or by the PM with "pin as anchor")?
            if said and f"]: {said} (pinned by" not in system_text:
                return call(SaveAnchor, {"key": PM_ANCHOR, "value": said})
        # The coach asks once it has heard the team out twice (its third line).
        if role == "coach" and AskPm.name in tool_names and not pm_seen and spoken >= 2:
            return call(AskPm, {"question": PM_QUESTION.format(**facts)})
        if role == "coach" and SignalPhaseComplete.name in tool_names and pm_seen:
            # Lines since the phase began or the PM last spoke.
            mark = max(transcript.rfind("[pm"), transcript.rfind("Phase advanced to"))
            since = transcript[mark:].count("\n[")
            asked = {m["key"] for m in ASKED.finditer(phase_text)}
            open_questions = asked - {m["key"] for m in ANSWERED_QUERY.finditer(phase_text)}
            if since >= PHASE_LINES and (not open_questions or since >= OPEN_QUESTION_LINES):
                if offered(CheckDrift):  # seed 004: check drift before marking work complete
                    return call(CheckDrift, {})
                summary = phase_summary(entries, _pm_said(history), facts)
                return call(SignalPhaseComplete, {"summary": summary})
        # Now and then the agent maps its tactic before its line.
        if spoken % TACTIC_EVERY == TACTIC_EVERY - 1 and offered(MapContext):
            tactic = TACTICS.get(role, DEFAULT_TACTIC).format(**facts)
            return call(MapContext, {"level": "tactic", "content": tactic})
        seed = zlib.crc32(f"{name}:{lines}:{len(transcript)}".encode())
        # After a mesh tool the agent says its line: a turn that updated its focus speaks.
        # Otherwise it passes now and then, and always right after a peer's answer.
        answerer = entries[-1][0] if entries else ""
        if not (answerer not in NOT_AGENTS and ANSWERED_QUERY.search(entries[-1][1])):
            answerer = ""
        if role != "coach" and PassTurn.name in tool_names and not called:
            if answerer and answerer != name:
                return call(PassTurn, {"reason": f"nothing to add to {answerer}'s answer"})
            if seed % 3 == 0:
                return call(PassTurn, {"reason": "agree with the current proposal"})
        options = LINES.get(role, DEFAULT_LINES)
        return say(options[seed % len(options)].format(**facts))

    def _after_tool(self, rounds, last, facts, inbox, wrote) -> str | None:
        """The line that says what the tool just called did, or None."""
        result = _result_of(rounds)
        if FileWrite.name in last:
            if result.startswith("Wrote "):
                return (
                    f"I wrote {OFFLINE_FILE} in the workspace: a first outline of "
                    f"{facts['subject']}, for the reviewer."
                )
            return f"I could not write {OFFLINE_FILE}; I will describe the outline here instead."
        if FileRead.name in last and wrote:
            return (
                f"I read {wrote['path']} in the workspace: the outline matches what we agreed "
                f"for {facts['subject']}. Next, tests for its edge cases."
            )
        if AskMulti.name in last:
            answered = ANSWERED.search(result)
            if answered is None or answered["done"] == "0":
                return f"{CONSULTED} on the plan: none answered, so we go on with our own."
            return (
                f"{CONSULTED} on the plan: {answered['done']} of {answered['asked']} answered. "
                "Their points are in the Consultations panel; let's weigh them before we commit."
            )
        if PeerAskQuestion.name in last:
            arguments = _input_of(rounds, PeerAskQuestion)
            key = QUERY_KEY.search(result)
            if key is None:
                return f"I could not ask @{arguments.get('target')} my question: {result}"
            return f"I asked @{arguments.get('target')} ({key[0]}): {arguments.get('question')}"
        if PeerAnswerQuestion.name in last:
            arguments = _input_of(rounds, PeerAnswerQuestion)
            key = arguments.get("query_id", "")
            sender = inbox[key]["sender"].strip() if key in inbox else "pm"
            if not result.startswith("Answer delivered"):
                return f"I could not answer the question {key}: {result}"
            return f"I answered @{sender}'s question ({key}): {arguments.get('answer')}"
        if PeerForwardQuestion.name in last:
            arguments = _input_of(rounds, PeerForwardQuestion)
            key, target = arguments.get("query_id", ""), arguments.get("target")
            sender = inbox[key]["sender"].strip() if key in inbox else "pm"
            if not result.startswith("Question forwarded"):
                return f"I could not pass the question {key} on: {result}"
            return (
                f"I passed @{sender}'s question ({key}) on to @{target}, who knows more: "
                f"{arguments.get('enrichment')}"
            )
        if ContextOffload.name in last:
            offloaded = KEEPER.search(result)
            if offloaded is None:
                return f"My context on {facts['subject']} is small enough to keep as it is."
            return (
                f"{OFFLOADED} {offloaded['count']} older messages to keeper {offloaded['id']} "
                f"to keep my context small; I can recall them about {facts['subject']}."
            )
        if ContextRetrieve.name in last:
            found = [line for line in result.splitlines()[1:] if line.strip()]
            if not result.startswith("From the keepers") or not found:
                return f"{RECALLED} nothing more from the keepers about {facts['subject']}."
            excerpt = re.sub(r"^\(keeper \d+ '[^'\n]*'\) ", "", found[0])
            excerpt = excerpt.removesuffix(" (offline model)")
            return f"{RECALLED} from the keepers: {_short(excerpt, 160)}"
        return None

    def _say(self, line, input_tokens, on_text):
        """The agent's line, marked as the offline model's, streamed in small chunks."""
        text = f"{line} (offline model)"
        words = text.split(" ")
        chunks = [
            " ".join(words[i : i + 4]) + (" " if i + 4 < len(words) else "")
            for i in range(0, len(words), 4)
        ]
        for chunk in chunks:
            # Paced like a real model so people can watch the demo; 0 in tests and bench.
            if settings.LOOM_OFFLINE_DELAY:
                time.sleep(settings.LOOM_OFFLINE_DELAY / len(chunks))
            if on_text is not None:
                on_text(chunk)
        return self._reply([{"type": "text", "text": text}], "end_turn", input_tokens)

    def _keeper_answer(self, prompt: str):
        """Smart retrieval, offline: the excerpts that share most words with the question."""
        excerpts, _, question = prompt.rpartition("\n\nQuestion: ")
        wanted = {w for w in re.findall(r"\w+", question.lower()) if len(w) > 3}
        lines = [line for line in excerpts.splitlines()[1:] if line.strip()]
        scored = sorted(
            lines, key=lambda line: -len(wanted & set(re.findall(r"\w+", line.lower())))
        )
        best = [line for line in scored[:3] if wanted & set(re.findall(r"\w+", line.lower()))]
        text = "NOT_FOUND" if not best else "From the keepers (offline model):\n" + "\n".join(best)
        return self._reply([{"type": "text", "text": text}], "end_turn", len(prompt) // 4)

    def _tool(self, name, arguments, input_tokens):
        if settings.LOOM_OFFLINE_DELAY:
            time.sleep(settings.LOOM_OFFLINE_DELAY / 2)
        call_id = f"toolu_offline_{zlib.crc32(repr((name, arguments)).encode()):08x}"
        block = {"type": "tool_use", "id": call_id, "name": name, "input": arguments}
        return self._reply([block], "tool_use", input_tokens)

    def _reply(self, content, stop_reason, input_tokens):
        output = sum(len(str(b)) for b in content) // 4
        return ModelReply(
            content=content,
            stop_reason=stop_reason,
            model=OFFLINE_MODEL,
            usage=Usage(input_tokens=input_tokens, output_tokens=output),
        )
