"""The cognitive mesh of seed 004, as Loom keeps it: each agent's hierarchy
(trajectory → tactic → action), the metrics the tools write (context updates, files
touched, violations), the team's anchors and its plan.

Seed 004 keeps one "session" per working directory; Loom's session is one agent in
one team: the seed's session id is `<team>/<agent>`, its mode the team's current
phase, its status the team's status, its role the agent's role. An agent's session
begins when it first declares an intent (or maps any context)."""

from __future__ import annotations

from django.db import transaction
from django.db.models import F

from teams import drift
from teams.errors import InvalidInput
from teams.models import PLAN_LIMIT, Agent, Team
from teams.services import human_text_check

LEVELS = ("trajectory", "tactic", "action")
PLAN_HEADING = "## Plan"


def has_session(agent: Agent) -> bool:
    """Has the agent begun a seed-004 session (declared an intent or mapped context)?"""
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
    return agent


@transaction.atomic
def agent_declare_intent(*, agent: Agent, trajectory: str) -> Agent:
    """Set the trajectory; the tactic and action under it are cleared."""
    trajectory = (trajectory or "").strip()
    if not trajectory:
        raise InvalidInput("Give the trajectory: what you are working towards.", field="trajectory")
    human_text_check(trajectory, field="trajectory")
    return _level_update(agent, {"trajectory": trajectory, "tactic": "", "action": ""})


@transaction.atomic
def agent_map_context(*, agent: Agent, level: str, content: str) -> Agent:
    """Set one level of the hierarchy (the levels under it stay as they are)."""
    if level not in LEVELS:
        raise InvalidInput(f"Unknown level {level!r}: use {', '.join(LEVELS)}.", field="level")
    content = (content or "").strip()
    if not content:
        raise InvalidInput(f"Give the {level}'s content.", field="content")
    human_text_check(content, field="content")
    return _level_update(agent, {level: content})


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


def anchor_source_text(anchor) -> str:
    """Who pinned an anchor, and in which phase (placeholder: the PM or the writer)."""
    return anchor.updated_by or "the PM"
