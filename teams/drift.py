"""Drift (seed 004): how far an agent has wandered from what it said it would do.

The score runs from 100 (on track) down to 0 (lost), as in seed 004's report:
70 and above is healthy, 40 to 69 is some drift, below 40 is significant.

    100
    - 30  when the agent has declared no trajectory
    - 15  for each chain break: a tactic without a trajectory, an action without a tactic
    -  3  for each turn beyond two since the agent last updated its context
          (map_context, declare_intent), at most 30
    - 10  for each recorded violation (a tool call its role or phase does not
          allow; a file write outside the workspace), at most 30
    - 10  when it has touched files with no action declared (work nobody can place)
    clamped to 0..100

An agent that declared its trajectory, keeps its chain whole and updates its focus
every couple of turns stays at 100. Each finished turn records the agent's score on
the turn, so it can be plotted. check_drift's report (tools/mesh.py) words it for
the agent; the admin and the API show the same report.
"""

from __future__ import annotations

from teams.models import Agent

NO_TRAJECTORY = 30
CHAIN_BREAK = 15
STALE_TURN = 3
STALE_GRACE = 2
STALE_MAX = 30
VIOLATION = 10
VIOLATION_MAX = 30
UNPLACED_FILES = 10
# The bands of a score: on track from ON_TRACK, significant drift below SIGNIFICANT.
ON_TRACK = 70
SIGNIFICANT = 40


def chain_breaks(agent: Agent) -> list[str]:
    breaks = []
    if agent.tactic and not agent.trajectory:
        breaks.append("Tactic set without a trajectory.")
    if agent.action and not agent.tactic:
        breaks.append("Action set without a tactic.")
    return breaks


def turns_since_update(agent: Agent) -> int:
    return max(0, agent.turns - agent.last_context_update_turn)


def score(agent: Agent) -> int:
    value = 100
    if not agent.trajectory:
        value -= NO_TRAJECTORY
    value -= CHAIN_BREAK * len(chain_breaks(agent))
    value -= min(STALE_MAX, STALE_TURN * max(0, turns_since_update(agent) - STALE_GRACE))
    value -= min(VIOLATION_MAX, VIOLATION * agent.violations)
    if agent.files_touched and not agent.action:
        value -= UNPLACED_FILES
    return max(0, min(100, value))


def health(value: int) -> str:
    return "healthy" if value >= 70 else "some drift" if value >= 40 else "significant drift"


def meaning(value: int) -> str:
    """What a score means, in the words the PM's pages use: "on track" (70 and
    above), "some drift" (40 to 69), "significant drift" (below 40)."""
    if value >= ON_TRACK:
        return "on track"
    return "some drift" if value >= SIGNIFICANT else "significant drift"


def bands() -> list[tuple[int, str]]:
    """(lowest score, meaning) from the best band down, for the pages' script."""
    return [(ON_TRACK, meaning(ON_TRACK)), (SIGNIFICANT, meaning(SIGNIFICANT)), (0, meaning(0))]
