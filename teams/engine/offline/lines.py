"""What the offline model's agents say: their trajectories, tactics and lines, the
questions and answers they trade, the file the coder writes, and the coach's phase
summary. Each line names the team's subject and ends "(offline model)"."""

from __future__ import annotations

import re

from teams.engine.offline.transcript import (
    ANSWERED,
    ANSWERED_QUERY,
    ASKED,
    FORWARDED,
    KEEPER,
    NOT_AGENTS,
    QUERY_KEY,
    READ,
    WROTE,
    input_of,
    joined_names,
    result_of,
    short,
)
from tools.consult import AskMulti, ReadConsultation
from tools.context import ContextOffload, ContextRetrieve
from tools.questions import PeerAnswerQuestion, PeerAskQuestion, PeerForwardQuestion
from tools.workspace import FileRead, FileWrite

# The file the coder writes in the implementation phase, and how the team hears of it.
OFFLINE_FILE = "notes/plan.md"
OFFLINE_FILE_TEXT = """# Plan (offline model)

Goal: {goal}

1. The core of {subject}: one function from the input to the result.
2. The checks: refuse bad input early and say which input failed and why.
3. The entry point: one command that runs it end to end.
"""
CONSULTED = "I asked the consultants for a second opinion"
OFFLOADED = "I offloaded"
RECALLED = "I recalled"
PM_ANCHOR = "pm-decision"
PM_WORDS_CHARS = 120

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
# The step an agent is on when it declares its intent at the start of a phase.
ACTIONS = {
    "coach": "Open {phase} and hear each agent once.",
    "researcher": "Name the first fact about {subject} the team needs in {phase}.",
    "coder": "Propose the first part of {subject} to build in {phase}.",
    "reviewer": "Read the latest proposal for {subject} and note the risks.",
    "tester": "Write down the first case a test of {subject} must cover.",
}
DEFAULT_ACTION = "Say what I will do first for {subject} in {phase}."

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
# Marked as the offline model's, as its lines are: the PM reads it in the inbox and the
# conversation's "(Requesting PM input: …)" line.
PM_QUESTION = (
    "What should the first version of {subject} include: only the core, or more? (offline model)"
)
RECALL_QUESTION = "What did we say earlier about {subject}?"
OFFLOAD_TOPIC = "early {phase} discussion of {subject}"


def phase_summary(entries: list[tuple[str, str]], pm_said: str, facts: dict) -> str:
    """What happened in the phase, from its entries: who spoke, what the PM said (if the
    PM spoke in it), the questions, keepers, consultations and files."""
    spoke = [who for who, _ in entries if who not in NOT_AGENTS]
    speakers = list(dict.fromkeys(spoke))
    parts = [f"Phase {facts['phase']} for {facts['subject']} is done"]
    if speakers:
        parts[0] += f": {joined_names(speakers)} spoke ({len(spoke)} lines)"
    parts[0] += "."
    if pm_said:
        words = short(pm_said, PM_WORDS_CHARS)
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


# The demo MCP server's tool the coder calls once (teams.engine.mcp_demo_server).
MCP_DEMO_TOOL = "__word_count"
# What the coder says beside the call: the reason the PM's approval card shows.
MCP_DEMO_WHY = (
    "Before the reviewer reads the outline, I want its word count from the demo MCP "
    "server, to check it stays short enough to review in one sitting."
)


def after_tool(rounds, last, facts, inbox, wrote) -> str | None:
    """The line that says what the tool just called did, or None."""
    result = result_of(rounds)
    return after_output_tool(result, last, facts, wrote) or after_team_tool(
        rounds, result, last, facts, inbox
    )


def after_output_tool(result, last, facts, wrote) -> str | None:
    """After a file, MCP or consultation tool."""
    if any(name.endswith(MCP_DEMO_TOOL) for name in last):
        if result.startswith("Error:"):
            return f"The word count did not run ({result[7:].strip()[:120]}); no matter."
        return f"The demo MCP server's word count of the outline: {result.strip()[:120]}."
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
            f"Each answer is kept: {ReadConsultation.name}(id) shows one in full. Let's "
            "weigh them before we commit."
        )
    return None


def after_team_tool(rounds, result, last, facts, inbox) -> str | None:
    """After a question or keeper tool."""
    if PeerAskQuestion.name in last:
        arguments = input_of(rounds, PeerAskQuestion)
        key = QUERY_KEY.search(result)
        if key is None:
            return f"I could not ask @{arguments.get('target')} my question: {result}"
        return f"I asked @{arguments.get('target')} ({key[0]}): {arguments.get('question')}"
    if PeerAnswerQuestion.name in last:
        arguments = input_of(rounds, PeerAnswerQuestion)
        key = arguments.get("query_id", "")
        sender = inbox[key]["sender"].strip() if key in inbox else "pm"
        if not result.startswith("Answer delivered"):
            return f"I could not answer the question {key}: {result}"
        return f"I answered @{sender}'s question ({key}): {arguments.get('answer')}"
    if PeerForwardQuestion.name in last:
        arguments = input_of(rounds, PeerForwardQuestion)
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
        return f"{RECALLED} from the keepers: {short(excerpt, 160)}"
    return None
