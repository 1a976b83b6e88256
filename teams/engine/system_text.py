"""The stable system text an agent reads: who it is, the team, its role, the norms,
the phase (its order, what it should produce, this role's part, who closes it, who may
write files) and the coach's facilitation; and the anchors' block that follows it.

It changes only when the phase, the roster or a role does, so the prompt cache reads it
whole on every other request (teams.engine.prompts puts it first after the tools)."""

from __future__ import annotations

from teams.conversation import hierarchy, phase_guide
from teams.models import Agent, Anchor, Team
from tools import registry
from tools.context import ContextRetrieve
from tools.conversation import AskPm, PassTurn, SignalPhaseComplete
from tools.mesh import DeclareIntent
from tools.workspace import FileEdit, FileWrite

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
        f"team) or when you call {PassTurn.name}; make any tool calls you need before that. "
        "Text beside a tool call is your working notes: the PM sees them, your teammates "
        "do not, so put what they need in your final reply.",
        "- Earlier phases: your history holds their summaries; each closed phase's whole "
        'conversation is filed in a keeper named after it ("KEEPER_EXAMPLE"), which '
        f"{ContextRetrieve.name} searches: look there before rebuilding what a summary "
        "refers to.",
        "- Lines marked [Your action] are Loom's record of your own tool calls earlier in "
        "this phase (their full results are not kept: call a tool again to see one); "
        "lines marked [Loom] or [system] are notes from Loom, not from a teammate.",
        f"- Your intent: Loom declares a trajectory for you at the start of each phase. "
        f"Refine it with {DeclareIntent.name} when your aim changes or you start a new "
        "piece of work (it sets your tactic and next action too). The PM sees a drift "
        "score for every agent (100 is on track; lower means drifting), computed from "
        "these levels and how recently you updated them.",
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
    "Your summary is what later phases read of this one (its conversation is filed in a "
    "keeper they can search): give the decisions, the open items and the files written; "
    "where it changes an earlier phase's decision, say which and how. When it restates "
    "or corrects an earlier summary whole, name that phase in replaces: later requests "
    "then show the earlier summary as a pointer to yours."
)
LAST_SUMMARY_LINE = (
    "This is the last phase: your summary is the team's outcome for the PM (what was "
    "delivered, the files, what is left open)."
)


def stable_text(
    agent: Agent, team: Team, phase: str, agents: list[tuple[int, str, str]] | None = None
) -> str:
    """The system text before the anchors (`agents`: the roster, when read)."""
    parts = [
        f"Your name is {agent.name} and your role is {agent.role}.",
        team_lines(agent, team, phase, agents),
        agent.role_prompt or ROLE_PROMPTS.get(agent.role, ""),
        # The keeper example names one of this team's own phases (a phase it does not
        # have read as one to look for).
        NORMS.replace("KEEPER_EXAMPLE", f"phase {team.phases[0] if team.phases else phase}"),
        phase_text(agent, team, phase),
    ]
    if agent.role == Agent.Role.COACH:
        last = bool(team.phases) and phase == team.phases[-1]
        parts.append(facilitation(phase, last=last, findings=findings_line(team, phase, agents)))
    return "\n\n".join(p for p in parts if p)


def facilitation(phase: str, last: bool = False, findings: str = "") -> str:
    text = COACH_FACILITATION.get(phase) or GENERIC_FACILITATION.format(phase=phase)
    if findings:
        text += f"\n{findings}"
    summary = LAST_SUMMARY_LINE if last else SUMMARY_LINE
    return f"{text}\n{CLOSING} {summary}\n{ASK_PM_LINE}"


def findings_line(team: Team, phase: str, agents: list[tuple[int, str, str]] | None = None) -> str:
    """How a finding is handled in a review-like phase after an implementation-like one
    (phase_guide.fixes_after_review): fixed in place by who may edit files here (the
    team's tool access), else carried as an open item; "" in other phases."""
    if not phase_guide.fixes_after_review(phase, team.phases):
        return ""
    roles, phase_allowed, _words = FileEdit.access(team)
    if not phase_allowed(phase):
        return (
            "A finding: no one may edit files in this phase, so have it named (the file, "
            "what is wrong) and list it in your summary as an open item."
        )
    who = "a writer" if roles is None else "the " + " or ".join(sorted(roles))
    # A team without a reviewer still reviews: the coach reads, so the line says so
    # rather than asking a reviewer the team does not have.
    reviewed = any(role in REVIEW_ROLES for _, _, role in (agents or roster(team)))
    checker = "the reviewer re-checks" if reviewed else "you re-check"
    name_it = (
        "have the reviewer name it"
        if reviewed
        else "this team has no reviewer, so you review: read the files against the goal "
        "and name each one"
    )
    return (
        f"A finding: {name_it} (the file, what is wrong, what would be "
        f"right); {who} who wrote that part fixes it in place with {FileEdit.name} and "
        f"runs the tests again; {checker} the fix. Close the phase when each "
        "finding is fixed or consciously accepted, and say which in your summary."
    )


REVIEW_ROLES = ("reviewer", "tester")


def roster(team: Team) -> list[tuple[int, str, str]]:
    """The team's agents as (id, name, role), in the rotation's order."""
    return list(team.agents.order_by("position", "id").values_list("id", "name", "role"))


def team_lines(
    agent: Agent, team: Team, phase: str, agents: list[tuple[int, str, str]] | None = None
) -> str:
    """Who is on the team, by @name and role, one line each with what each can do in
    `phase` (`agents`: the roster, when read), so a plan gives work only to who can do
    it."""
    lines = [
        "Your team, and what each of you can do in this phase besides discussing and "
        "reading the workspace:"
    ]
    agents = agents or roster(team)
    can_do = registry.abilities({role for _, _, role in agents}, team, phase)
    for pk, name, role in agents:
        now, later = can_do[role]
        can = ", ".join(now) if now else "discusses only"
        if later:
            can += f" (later: {'; '.join(later)})"
        who = f"you (@{name}, {role})" if pk == agent.pk else f"@{name} ({role})"
        lines.append(f"- {who}: {can}")
    return "\n".join(lines)


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
            f"The coach closes the phase with {DONE}; later phases read its summary, "
            "and can search the phase's conversation in its keeper."
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
    limit = (
        f"Your reply holds at most about {agent.reply_tokens:,} tokens: keep each file "
        f"shorter, or change a file in place with {FileEdit.name}."
    )
    if phase_allowed(phase):
        return f"Workspace files: you may write them with {FileWrite.name} in this phase. {limit}"
    return f"Workspace files: you read them now; you may write them in {where}."


ANCHORS_INSTRUCTION = (
    "These are IMMUTABLE ANCHORS. Override any chat history that conflicts with them:"
)


def anchors_block(team: Team, anchors: list[Anchor] | None = None) -> str:
    """The anchors in their documented format, each with who pinned it and in which
    phase before its value (after it, the words read as the value's own last line);
    empty when the team has no anchors (`anchors`: its anchors by key, when read)."""
    if anchors is None:
        anchors = Anchor.objects.filter(team=team).order_by("key")
    lines = [
        f"  [{a.key}] (pinned by {hierarchy.anchor_source_text(a)}): {a.value}" for a in anchors
    ]
    if not lines:
        return ""
    return "\n".join(["<immutable-anchors>", ANCHORS_INSTRUCTION, *lines, "</immutable-anchors>"])


ANCHOR_FIELDS = ("key", "value", "source", "updated_by", "phase")  # what anchors_block shows
