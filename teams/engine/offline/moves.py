"""What the offline model's agent does next, decided from its request alone: a list of
moves tried in order, the first that applies makes the reply (a tool call or a line).

Each move is a function of the `Reading` of the request that returns a `Move` or
None."""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import teams.engine.offline.lines as said
from teams.engine.offline.transcript import (
    ANSWERED_QUERY,
    ASKED,
    MENTION,
    NOT_AGENTS,
    PHASE_DONE,
    QUERY,
    WROTE,
    entries_of,
    facts_of,
    last_calls,
    neighbours,
    pm_said,
    text_of,
    this_phase,
)
from tools.consult import AskMulti, AskPeer
from tools.context import ContextOffload, ContextRetrieve
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete
from tools.mesh import CheckDrift, DeclareIntent, MapContext, SaveAnchor, ScanHierarchy, ThinkBack
from tools.questions import PeerAnswerQuestion, PeerAskQuestion, PeerForwardQuestion
from tools.workspace import FileList, FileRead, FileWrite

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
TACTIC_EVERY = 4  # an agent maps its tactic on every 4th turn it speaks in a phase
PHASE_LINES = 8  # the coach completes a phase after this many lines of the others ...
OPEN_QUESTION_LINES = 16  # ... or this many while a question asked in it is open


@dataclass(frozen=True)
class Move:
    """A tool call (tool and arguments, with `line` the reason said beside it) or a
    line to say (tool None)."""

    line: str = ""
    tool: type | None = None
    arguments: dict = field(default_factory=dict)


@dataclass
class Reading:
    """What the request says, as the moves need it."""

    name: str
    role: str
    system_text: str
    tool_names: set[str]
    history: list[dict]  # the turn's opening history (plain text)
    rounds: list[dict]  # this turn's tool rounds
    called: list[str]
    transcript: str
    facts: dict
    entries: list[tuple[str, str]]  # this phase's, as (speaker, text)
    phase_text: str
    inbox: dict
    wrote: object
    my_lines: list[str]

    @classmethod
    def of(cls, *, name, role, system_text, tool_names, messages) -> Reading:
        # The history the turn began with (plain text); then this turn's tool rounds.
        start = next(
            (i for i, m in enumerate(messages) if not isinstance(m["content"], str)),
            len(messages),
        )
        history, rounds = messages[:start], messages[start:]
        transcript = "\n".join(text_of(m) for m in history)
        entries = this_phase(entries_of(history, name))
        phase_text = "\n\n".join(text for _, text in entries)
        return cls(
            name=name,
            role=role,
            system_text=system_text,
            tool_names=tool_names,
            history=history,
            rounds=rounds,
            called=[
                b["name"]
                for m in rounds
                if m["role"] == "assistant"
                for b in m["content"]
                if b.get("type") == "tool_use"
            ],
            transcript=transcript,
            facts=facts_of(transcript),
            entries=entries,
            phase_text=phase_text,
            inbox={q["key"]: q for q in QUERY.finditer(phase_text)},
            wrote=WROTE.search(transcript),
            # Lines this agent spoke in the phase (its messages come back as the
            # assistant's; earlier phases' summaries, which a coach wrote, do not count).
            my_lines=[
                m["content"]
                for m in history
                if m["role"] == "assistant" and not m["content"].startswith("[Phase ")
            ],
        )

    def offered(self, tool) -> bool:
        return tool.name in self.tool_names and tool.name not in self.called

    @property
    def spoken(self) -> int:
        return len(self.my_lines)

    @property
    def said_so_far(self) -> str:
        return "\n".join(self.my_lines)

    @property
    def first_phase(self) -> bool:
        return PHASE_DONE.search(self.transcript) is None

    @property
    def phases_done(self) -> int:
        return len(PHASE_DONE.findall(self.transcript))

    @property
    def pm_seen(self) -> bool:
        """The coach asks the PM in the first phase; a later phase had the PM's word."""
        return "[pm" in self.transcript or not self.first_phase

    def call(self, tool, arguments: dict, why: str = "") -> Move:
        return Move(line=why, tool=tool, arguments=arguments)


def after_a_tool(r: Reading) -> Move | None:
    """After a question, keeper, file or consultation tool, the agent says what it did."""
    done = said.after_tool(r.rounds, last_calls(r.rounds), r.facts, r.inbox, r.wrote)
    return Move(line=done) if done is not None else None


def declare(r: Reading) -> Move | None:
    if r.spoken == 0 and r.offered(DeclareIntent):
        trajectory = said.TRAJECTORIES.get(r.role, said.DEFAULT_TRAJECTORY).format(**r.facts)
        # The whole hierarchy at once: a new phase cleared the tactic and the action, and
        # the PM's drift card shows all three levels.
        tactic = said.TACTICS.get(r.role, said.DEFAULT_TACTIC).format(**r.facts)
        action = said.ACTIONS.get(r.role, said.DEFAULT_ACTION).format(**r.facts)
        return r.call(DeclareIntent, {"trajectory": trajectory, "tactic": tactic, "action": action})
    return None


def consult(r: Reading) -> Move | None:
    """The coach asks every consultant once, in the team's second phase."""
    if r.role == "coach" and r.offered(AskMulti) and r.phases_done == 1:
        if said.CONSULTED not in r.transcript:
            request = {
                "prompt": f"A second opinion on our plan for: {r.facts['goal']} What is the "
                "riskiest part, and what should we do first?",
                "task_type": "plan",
                "focus_areas": ["architecture", "correctness"],
            }
            return r.call(AskMulti, request)
    return None


def workspace(r: Reading) -> Move | None:
    """The coder writes the outline once (not again where an earlier phase's summary
    lists the files written: a review after it may write too); the reviewer reads it on
    a later turn."""
    first = "Files written: " not in r.transcript
    if r.offered(FileWrite) and not r.wrote and r.role == "coder" and first:
        content = said.OFFLINE_FILE_TEXT.format(**r.facts)
        return r.call(FileWrite, {"path": said.OFFLINE_FILE, "content": content})
    if r.role == "reviewer" and r.offered(FileRead) and r.wrote:
        if f"read {r.wrote['path']}" not in r.transcript:
            return r.call(FileRead, {"path": r.wrote["path"]})
    return None


@dataclass(frozen=True)
class Offered:
    """A tool known by its offered name only (an MCP server's)."""

    name: str


def mcp_demo(r: Reading) -> Move | None:
    """Once the outline is written, the coder counts its words with the demo MCP
    server's tool, if the team has it: under `ask`, the PM approves the call."""
    if r.role != "coder" or not r.wrote or said.MCP_DEMO_TOOL in r.transcript:
        return None
    name = next((n for n in sorted(r.tool_names) if n.endswith(said.MCP_DEMO_TOOL)), None)
    if name is None or name in r.called:
        return None
    return r.call(
        Offered(name), {"text": said.OFFLINE_FILE_TEXT.format(**r.facts)}, said.MCP_DEMO_WHY
    )


def inbox(r: Reading) -> Move | None:
    """A question in the inbox, once, in the phase it came: forwarded to the agent it
    names, answered otherwise."""
    waiting = [q for key, q in r.inbox.items() if key not in r.said_so_far]
    if not waiting:
        return None
    query = waiting[0]
    sender = query["sender"].strip()
    named = [n for n in MENTION.findall(query["question"]) if n not in (r.name, sender)]
    if named and r.offered(PeerForwardQuestion):
        enrichment = said.ENRICHMENT.format(name=named[0], **r.facts)
        arguments = {"query_id": query["key"], "target": named[0], "enrichment": enrichment}
        return r.call(PeerForwardQuestion, arguments)
    if r.offered(PeerAnswerQuestion):
        answer = said.ANSWERS.get(r.role, said.DEFAULT_ANSWER).format(**r.facts)
        return r.call(PeerAnswerQuestion, {"query_id": query["key"], "answer": answer})
    return None


def ask_a_peer(r: Reading) -> Move | None:
    """The researcher's question in the first phase; the coder's (which names who may
    know best) in the second."""
    if not (r.offered(PeerAskQuestion) and r.spoken >= 1 and not ASKED.search(r.said_so_far)):
        return None
    before, after = neighbours(r.entries, r.name)
    if r.role == "researcher" and r.first_phase and after:
        question = said.FIRST_QUESTION.format(**r.facts)
        return r.call(PeerAskQuestion, {"question": question, "target": after})
    if r.role == "coder" and r.phases_done == 1 and before and after and before != after:
        question = said.SECOND_QUESTION.format(**r.facts) + said.WHO_KNOWS.format(name=after)
        return r.call(PeerAskQuestion, {"question": question, "target": before})
    return None


def keepers(r: Reading) -> Move | None:
    """Once the PM has spoken in the first phase, the reviewer offloads the talk before
    it, and recalls it on its next turn."""
    if (
        r.role == "reviewer"
        and r.first_phase
        and "[pm" in r.transcript
        and said.OFFLOADED not in r.said_so_far
        and r.offered(ContextOffload)
    ):
        return r.call(ContextOffload, {"topic": said.OFFLOAD_TOPIC.format(**r.facts)[:200]})
    if (
        said.OFFLOADED in r.said_so_far
        and said.RECALLED not in r.said_so_far
        and r.offered(ContextRetrieve)
    ):
        return r.call(ContextRetrieve, {"query": said.RECALL_QUESTION.format(**r.facts)})
    return None


def coach(r: Reading) -> Move | None:
    """The coach pins the PM's word, asks the PM once, and closes phases."""
    if r.role != "coach":
        return None
    if r.offered(SaveAnchor):
        word = pm_said(r.history)
        # Pinned already (by the coach, or by the PM with "pin as anchor")?
        if word and f"): {word}\n" not in r.system_text:
            return r.call(SaveAnchor, {"key": said.PM_ANCHOR, "value": word})
    # The coach asks once it has heard the team out twice (its third line).
    if AskPm.name in r.tool_names and not r.pm_seen and r.spoken >= 2:
        return r.call(AskPm, {"question": said.PM_QUESTION.format(**r.facts)})
    if SignalPhaseComplete.name in r.tool_names and r.pm_seen and phase_is_over(r):
        if r.offered(CheckDrift):  # check drift before marking work complete
            return r.call(CheckDrift, {})
        summary = said.phase_summary(r.entries, pm_said(r.history), r.facts)
        return r.call(SignalPhaseComplete, {"summary": summary})
    return None


def phase_is_over(r: Reading) -> bool:
    """Enough lines since the phase began or the PM last spoke, and no question asked
    in it left open (or long enough that the coach stops waiting)."""
    mark = max(r.transcript.rfind("[pm"), r.transcript.rfind("Phase advanced to"))
    since = r.transcript[mark:].count("\n[")
    asked = {m["key"] for m in ASKED.finditer(r.phase_text)}
    open_questions = asked - {m["key"] for m in ANSWERED_QUERY.finditer(r.phase_text)}
    return since >= PHASE_LINES and (not open_questions or since >= OPEN_QUESTION_LINES)


def tactic(r: Reading) -> Move | None:
    """Now and then the agent maps its tactic before its line."""
    if r.spoken % TACTIC_EVERY == TACTIC_EVERY - 1 and r.offered(MapContext):
        content = said.TACTICS.get(r.role, said.DEFAULT_TACTIC).format(**r.facts)
        return r.call(MapContext, {"level": "tactic", "content": content})
    return None


def pass_or_say(r: Reading) -> Move:
    """After a mesh tool the agent says its line: a turn that updated its focus speaks.
    Otherwise it passes now and then, and always right after a peer's answer."""
    lines = r.transcript.count("\n[")
    seed = zlib.crc32(f"{r.name}:{lines}:{len(r.transcript)}".encode())
    answerer = r.entries[-1][0] if r.entries else ""
    if not (answerer not in NOT_AGENTS and ANSWERED_QUERY.search(r.entries[-1][1])):
        answerer = ""
    if r.role != "coach" and PassTurn.name in r.tool_names and not r.called:
        if answerer and answerer != r.name:
            return r.call(PassTurn, {"reason": f"nothing to add to {answerer}'s answer"})
        if seed % 3 == 0:
            return r.call(PassTurn, {"reason": "agree with the current proposal"})
    options = said.LINES.get(r.role, said.DEFAULT_LINES)
    return Move(line=options[seed % len(options)].format(**r.facts))


MOVES: list[Callable[[Reading], Move | None]] = [
    after_a_tool,
    declare,
    consult,
    workspace,
    mcp_demo,
    inbox,
    ask_a_peer,
    keepers,
    coach,
    tactic,
]


def next_move(r: Reading) -> Move | None:
    """The first move that applies; None when the turn is over (a tool that ends it)."""
    last = last_calls(r.rounds)
    if r.rounds and any(tool not in GOES_ON and "__" not in tool for tool in last):
        return None
    for move in MOVES:
        made = move(r)
        if made is not None:
            return made
    return pass_or_say(r)
