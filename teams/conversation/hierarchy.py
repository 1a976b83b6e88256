"""The cognitive mesh as Loom keeps it: each agent's hierarchy (trajectory → tactic →
action), the metrics the tools write (context updates, files touched, violations),
the team's anchors and its plan.

The mesh tools (tools/mesh.py) speak of a "session": Loom's session is one agent in
one team. Its id is `<team>/<agent>`, its mode the team's current phase, its status
the team's status, its role the agent's role.

Invariants:
- Every agent starts each phase with a trajectory: Loom declares one from its role's
  work in the phase (agent_phase_begin) unless the agent already declared its own for
  that phase, and says so once when it replaces the agent's own from an earlier phase;
  `Agent.trajectory_phase` names the phase a trajectory is for.
- A new phase clears tactic and action (they placed the previous phase's work);
  declare_intent and map_context change only the levels they are given.
- Every write of a level, Loom's declaration included, counts as a context update at
  the agent's current turn, so the drift score (teams/run/drift.py) measures real drift.
- Anchors: at most `Team.max_anchors` per team (replacing a key is always allowed), an
  agent's value at most `Team.anchor_value_limit` characters (teams.services.anchor_save);
  each carries its source and phase, which the prompts show (anchor_source_text).
"""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from teams.conversation.phase_guide import phase_line
from teams.errors import InvalidInput
from teams.models import PLAN_LIMIT, Agent, Anchor, Team
from teams.run import drift
from teams.services import agent_intent_publish, human_text_check

LEVELS = ("trajectory", "tactic", "action")
PLAN_HEADING = "## Plan"
# Loom's trajectory is whole in the cue's intent line (teams.engine.cues shows each level
# up to 200 characters): a longer phase line is shortened at a sentence or word end.
TRAJECTORY_SHOWN = 200
REPLACED_SHOWN = 120  # of the agent's own trajectory, quoted when Loom replaces it


def has_session(agent: Agent) -> bool:
    """Has the agent's session begun (a trajectory declared, by Loom or the agent, or
    any context mapped)?"""
    return bool(agent.trajectory or agent.context_updates)


def _level_update(agent: Agent, values: dict) -> Agent:
    """Write hierarchy levels, count a context update at the agent's current turn, and
    re-score it; the caller's copy is refreshed."""
    Agent.objects.filter(pk=agent.pk).update(
        **values,
        context_updates=F("context_updates") + 1,
        last_context_update_turn=F("turns"),
    )
    agent.refresh_from_db()
    agent.drift_score = drift.score(agent)
    Agent.objects.filter(pk=agent.pk).update(drift_score=agent.drift_score)
    agent_intent_publish(agent)
    return agent


def _level_text(value: str | None, level: str) -> str:
    value = (value or "").strip()
    if value:
        human_text_check(value, field=level)
    return value


@transaction.atomic
def agent_declare_intent(
    *,
    agent: Agent,
    trajectory: str,
    tactic: str | None = None,
    action: str | None = None,
    phase: str | None = None,
) -> Agent:
    """Set the trajectory for `phase` (the team's current one by default). The tactic
    and action stay as they are unless given here, except that a trajectory for a
    new phase starts without the previous phase's tactic and action."""
    trajectory = _level_text(trajectory, "trajectory")
    if not trajectory:
        raise InvalidInput("Give the trajectory: what you are working towards.", field="trajectory")
    values = {"trajectory": trajectory}
    phase = agent.team.phase if phase is None else phase
    if agent.trajectory_phase != phase:
        values.update(tactic="", action="", trajectory_phase=phase)
    for level, given in (("tactic", tactic), ("action", action)):
        given = _level_text(given, level)
        if given:
            values[level] = given
    return _level_update(agent, values)


@transaction.atomic
def agent_map_context(*, agent: Agent, level: str, content: str) -> Agent:
    """Set one level of the hierarchy (the levels under it stay as they are); a
    trajectory set here is the agent's own for the team's current phase."""
    if level not in LEVELS:
        raise InvalidInput(f"Unknown level {level!r}: use {', '.join(LEVELS)}.", field="level")
    content = (content or "").strip()
    if not content:
        raise InvalidInput(f"Give the {level}'s content.", field="content")
    human_text_check(content, field="content")
    values = {level: content}
    if level == "trajectory":
        values["trajectory_phase"] = agent.team.phase
    return _level_update(agent, values)


def whole(text: str, limit: int) -> str:
    """`text` on one line, whole when it fits; else cut after its last sentence (or
    clause) that fits, or else after a word, and marked "…": never mid-word."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    for end in (". ", "; "):
        at = cut.rfind(end)
        if at >= limit // 2:  # a sentence ends whole; a clause is marked as cut
            return cut[: at + 1] if end == ". " else cut[:at] + "…"
    space = cut.rfind(" ")
    return (cut[:space] if space > 0 else cut).rstrip(" ,;:") + "…"


def phase_trajectory(*, team: Team, role: str, phase: str) -> str:
    """The trajectory Loom declares for a role in a phase: 'As <role> in <phase>: <the
    role's line for the phase>'. Only the phase's own work: the goal (in every request
    already) would read as this phase's aim in a review ("Write wordfreq.py")."""
    line = phase_line(team, phase, role) or "work towards the team's goal"
    return whole(f"As {role} in {phase}: {line}", TRAJECTORY_SHOWN)


def _was_own(agent: Agent, team: Team) -> bool:
    """Was the agent's trajectory its own (declare_intent, map_context), not Loom's for
    the phase it was for? Loom's earlier wording ("<goal> — as coder in planning: …")
    counts as Loom's."""
    if not agent.trajectory or not agent.trajectory_phase:
        return False
    before = agent.trajectory_phase
    loom = phase_trajectory(team=team, role=agent.role, phase=before)
    return agent.trajectory != loom and f"— as {agent.role} in {before}" not in agent.trajectory


def replaced_line(own: str, before: str, phase: str) -> str:
    """The cue's line when Loom's trajectory for `phase` replaced the agent's own."""
    return (
        f"[Loom] The {phase} phase began, and Loom set your trajectory for it (above). Your "
        f'own, "{whole(own, REPLACED_SHOWN)}", was for {before}: declare it again with '
        f"{drift.ADVICE_TOOLS['declare'] or 'your mesh tools'} if it still fits."
    )


def agent_phase_begin(*, agent: Agent, team: Team, phase: str) -> Agent:
    """Begin `phase` for the agent, at the start of each of its turns before its prompt
    is built. Nothing happens when its trajectory is already for this phase (Loom's or
    its own: declare_intent and map_context record the phase). Otherwise Loom declares
    one from its role and the phase (phase_trajectory), and clears the tactic
    and action: they placed the previous phase's work, and the agent sets new ones
    with map_context or declare_intent. The declaration counts as a context update
    at the agent's current turn, so an agent that only talks is not scored as drifting.

    When the trajectory it replaces was the agent's own, the caller's copy carries
    `replaced_trajectory`, the line that tells the agent so (replaced_line), for this
    turn's cue only. One UPDATE at most, guarded by the phase so a concurrent call
    counts once; the caller's copy is brought up to date."""
    if agent.trajectory_phase == phase:
        return agent
    if _was_own(agent, team):  # said once, in this turn's cue (teams.engine.cues)
        agent.replaced_trajectory = replaced_line(agent.trajectory, agent.trajectory_phase, phase)
    agent.trajectory = phase_trajectory(team=team, role=agent.role, phase=phase)
    agent.tactic = agent.action = ""
    agent.trajectory_phase = phase
    agent.context_updates += 1
    agent.last_context_update_turn = agent.turns
    agent.drift_score = drift.score(agent)
    updated = (
        Agent.objects.filter(pk=agent.pk)
        .exclude(trajectory_phase=phase)
        .update(
            trajectory=agent.trajectory,
            tactic="",
            action="",
            trajectory_phase=phase,
            context_updates=F("context_updates") + 1,
            last_context_update_turn=F("turns"),
            drift_score=agent.drift_score,
        )
    )
    if not updated:  # another call began the phase first: take what it wrote
        agent.refresh_from_db()
    else:
        agent_intent_publish(agent)
    return agent


def agent_record_violation(*, agent: Agent) -> None:
    """Count a violation: a tool call the agent's role or phase does not allow (and,
    with the workspace, a file write outside it)."""
    Agent.objects.filter(pk=agent.pk).update(violations=F("violations") + 1)
    agent.violations += 1


def plan_section(plan: str) -> str:
    """The "## Plan" section of a plan text (to the next "## " heading), or ""."""
    start = plan.find(PLAN_HEADING)
    if start < 0:
        return ""
    end = plan.find("\n## ", start + 1)
    return (plan[start:end] if end > -1 else plan[start:]).strip()


def plan_with_summary(plan: str, phase: str, summary: str) -> str:
    """The plan with a phase's summary added as the last line of its "## Plan"
    section (made at the end when there is none)."""
    line = f"- [{phase} done] {summary.strip()}"
    start = plan.find(PLAN_HEADING)
    if start < 0:
        return f"{plan.rstrip()}\n\n{PLAN_HEADING}\n{line}".lstrip()
    end = plan.find("\n## ", start + 1)
    if end < 0:
        return f"{plan.rstrip()}\n{line}"
    return f"{plan[:end].rstrip()}\n{line}\n{plan[end:]}"


def team_plan_add_summary(*, team: Team, phase: str, summary: str) -> None:
    """The coach's phase summary joins the team's plan (what think_back shows); a
    plan at its size limit keeps what it has."""
    plan = plan_with_summary(team.plan, phase, summary)
    if len(plan) <= PLAN_LIMIT:
        Team.objects.filter(pk=team.pk).update(plan=plan)
        team.plan = plan


def anchor_source_text(anchor: Anchor) -> str:
    """Who pinned an anchor, and in which phase, for the anchors block: "the PM",
    "the PM's answer in refinement", "coder in planning" (the agent's name)."""
    return anchor.source_text()
