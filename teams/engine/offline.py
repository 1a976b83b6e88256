"""A deterministic stand-in for Claude: the model id `loom-offline`, the default when
no ANTHROPIC_API_KEY is set.

It speaks the same protocol as the Anthropic provider and exercises every mechanism of a
conversation: short messages, passes, one ask_pm from the coach, and phase
completion, so the demo shows the product with no key. Every message it writes
says it comes from the offline model.

It keeps the cognitive mesh (seed 004) too: each agent declares its intent when it
first speaks in a phase and maps its tactic every few turns, the coach pins the
PM's latest word as an anchor and checks its drift before completing a phase.

It uses the workspace and the consultants too: in the implementation phase the coder
writes one small file (OFFLINE_FILE) and says so, and the reviewer, on a later turn,
reads the file the coder said it wrote and says so; in the team's second phase the
coach asks every consultant once for a second opinion on the plan (its line after it
says so, which is how it knows not to ask again).

A mesh, file or consultation tool does not end the turn: after its result the agent
goes on to write its line. It knows all this from the request alone (the history,
the anchors in the system prompt, the tools offered), so the same request always
gets the same reply."""

from __future__ import annotations

import re
import time
import zlib

from django.conf import settings

from teams.catalog import OFFLINE_MODEL, Usage
from teams.engine.reply import ModelReply
from teams.keepers import SMART_SYSTEM
from tools.consult import AskMulti, AskPeer
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete
from tools.mesh import CheckDrift, DeclareIntent, MapContext, SaveAnchor, ScanHierarchy, ThinkBack
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
# Tools after whose result the agent goes on with its turn.
MESH = frozenset(
    t.name for t in (DeclareIntent, MapContext, SaveAnchor, CheckDrift, ScanHierarchy, ThinkBack)
)
GOES_ON = MESH | {t.name for t in (FileList, FileRead, FileWrite, AskMulti, AskPeer)}
# The file the coder writes in the implementation phase, and how the team hears of it.
OFFLINE_FILE = "notes/plan.md"
OFFLINE_FILE_TEXT = """# Plan (offline model)

Goal: {goal}

1. The parser: read the input strictly; say which input failed and why.
2. The renderer: one function from the parsed input to the output.
3. The command-line wrapper: one entry point, taking a path.
"""
WROTE = re.compile(r"I wrote (?P<path>\S+) in the workspace")
CONSULTED = "I asked the consultants for a second opinion"
ANSWERED = re.compile(r"(?P<done>\d+) of (?P<asked>\d+) consultants answered")
PHASE_DONE = re.compile(r"\[Phase [^\]\n]+ complete\]")
PM_ANCHOR = "pm-decision"
GOAL_CHARS = 200
TACTIC_EVERY = 4  # an agent maps its tactic on every 4th turn it speaks in a phase

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
    "researcher": "Compare the simplest options and list the risky edge cases.",
    "coder": "Split the work into small modules behind one entry point.",
    "reviewer": "Ask for tests on the edge cases before the phase closes.",
    "tester": "List the cases an end-to-end test must cover.",
}
DEFAULT_TACTIC = "Keep my contributions small and testable."

LINES = {
    "coach": [
        "Let's agree on scope first: what is the smallest version that meets the goal?",
        "Summary so far: the plan is converging. Anything blocking before we move on?",
        "Good points. Let's capture decisions and open questions before we continue.",
    ],
    "researcher": [
        "Prior art suggests keeping the input format strict and the output predictable.",
        "I checked the options: the simplest library covers our needs without extras.",
        "One risk: edge cases in the input. We should list them before building.",
    ],
    "coder": [
        "I can structure this as three small modules with one entry point.",
        "The interface could be a single function taking a path and returning a report.",
        "I'd start with the parser, then the renderer, then the command-line wrapper.",
    ],
    "reviewer": [
        "The plan reads well; I'd ask for tests on the edge cases the researcher raised.",
        "Naming is clear. Let's keep error messages specific to the input that failed.",
        "I'd like one end-to-end test before we call this phase done.",
    ],
}
DEFAULT_LINES = ["I have a small addition: let's keep this simple and testable."]


def _text_of(message: dict) -> str:
    content = message["content"]
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") or str(b.get("content", "")) for b in content)


def _last_calls(rounds: list[dict]) -> list[str]:
    """The tools the model called in its last response of this turn."""
    last = next((m for m in reversed(rounds) if m["role"] == "assistant"), None)
    if last is None:
        return []
    return [b["name"] for b in last["content"] if b.get("type") == "tool_use"]


def _facts(transcript: str) -> dict:
    """The team's goal (shortened) and the phase, from the turn's opening line."""
    goal, phase = GOAL.search(transcript), PHASE.search(transcript)
    goal_text = goal["goal"].strip() if goal else ""
    if len(goal_text) > GOAL_CHARS:
        goal_text = goal_text[: GOAL_CHARS - 1].rstrip() + "…"
    return {
        "goal": goal_text or "the team's goal",
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

        transcript = "\n".join(_text_of(m) for m in history)
        lines = transcript.count("\n[")
        pm_seen = "[pm" in transcript or "PM input received" in transcript
        # Lines this agent spoke in the phase (its messages come back as the assistant's;
        # earlier phases' summaries, which a coach wrote, do not count).
        spoken = sum(
            1
            for m in history
            if m["role"] == "assistant" and not m["content"].startswith("[Phase ")
        )
        facts = _facts(transcript)
        wrote = WROTE.search(transcript)

        # After a file or consultation tool, the agent says what it did.
        if FileWrite.name in last:
            ok = _result_of(rounds).startswith("Wrote ")
            line = (
                f"I wrote {OFFLINE_FILE} in the workspace: a first outline of the modules, "
                "for the reviewer."
                if ok
                else f"I could not write {OFFLINE_FILE}; I will describe the outline here instead."
            )
            return self._say(line, input_tokens, on_text)
        if FileRead.name in last and wrote:
            return self._say(
                f"I read {wrote['path']} in the workspace: the outline matches what we agreed. "
                "Next, tests for its edge cases.",
                input_tokens,
                on_text,
            )
        if AskMulti.name in last:
            answered = ANSWERED.search(_result_of(rounds))
            count = f"{answered['done']} of {answered['asked']}" if answered else "none"
            return self._say(
                f"{CONSULTED} on the plan: {count} answered. Their points are in the "
                "Consultations panel; let's weigh them before we commit.",
                input_tokens,
                on_text,
            )

        if spoken == 0 and offered(DeclareIntent):
            trajectory = TRAJECTORIES.get(role, DEFAULT_TRAJECTORY).format(**facts)
            return self._tool(DeclareIntent.name, {"trajectory": trajectory}, input_tokens)
        if spoken % TACTIC_EVERY == TACTIC_EVERY - 1 and offered(MapContext):
            tactic = TACTICS.get(role, DEFAULT_TACTIC).format(**facts)
            return self._tool(MapContext.name, {"level": "tactic", "content": tactic}, input_tokens)
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
            return self._tool(AskMulti.name, request, input_tokens)
        if offered(FileWrite) and not wrote:
            content = OFFLINE_FILE_TEXT.format(**facts)
            return self._tool(
                FileWrite.name, {"path": OFFLINE_FILE, "content": content}, input_tokens
            )
        if (
            role == "reviewer"
            and offered(FileRead)
            and wrote
            and f"read {wrote['path']}" not in transcript
        ):
            return self._tool(FileRead.name, {"path": wrote["path"]}, input_tokens)
        if role == "coach" and offered(SaveAnchor):
            said = _pm_said(history)
            # Pinned already (by the coach, or by the PM with "pin as anchor")?
            if said and f"]: {said}\n" not in system_text:
                return self._tool(SaveAnchor.name, {"key": PM_ANCHOR, "value": said}, input_tokens)
        # The coach asks once it has heard the team out twice (its third line).
        if role == "coach" and AskPm.name in tool_names and not pm_seen and spoken >= 2:
            return self._tool(
                AskPm.name,
                {"question": "Which output format should we prioritise: HTML only, or also PDF?"},
                input_tokens,
            )
        if role == "coach" and SignalPhaseComplete.name in tool_names and pm_seen:
            # Lines since the phase began or the PM last spoke.
            mark = max(transcript.rfind("[pm"), transcript.rfind("Phase advanced to"))
            if transcript[mark:].count("\n[") >= 8:
                if offered(CheckDrift):  # seed 004: check drift before marking work complete
                    return self._tool(CheckDrift.name, {}, input_tokens)
                summary = "PM input received. The team agreed on scope and next steps."
                return self._tool(SignalPhaseComplete.name, {"summary": summary}, input_tokens)
        seed = zlib.crc32(f"{name}:{lines}:{len(transcript)}".encode())
        # After a mesh tool the agent says its line: a turn that updated its focus speaks.
        if role != "coach" and PassTurn.name in tool_names and seed % 3 == 0 and not called:
            return self._tool(
                PassTurn.name, {"reason": "agree with the current proposal"}, input_tokens
            )
        options = LINES.get(role, DEFAULT_LINES)
        return self._say(options[seed % len(options)], input_tokens, on_text)

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
