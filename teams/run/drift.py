"""Drift: how far an agent has wandered from what it said it would do, as a score
from 100 (on track) down to 0, its report (what check_drift returns, and what the
admin and the API show) and its advice.

The bands have one vocabulary, BANDS, used by the tool's report, the PM's pages, the
admin and the API alike: "on track" from 70, "some drift" from 40 to 69,
"significant drift" below 40.

The score:

    100
    - 30  when the agent has no trajectory
    - 15  for each chain break: a tactic without a trajectory, an action without a tactic
    -  3  for each turn beyond two since the agent's context was last updated
          (declare_intent, map_context, or Loom's declaration at the start of a
          phase), at most 30
    - 10  for each recorded violation (a tool call its role or phase does not allow; a
          file write outside the workspace), at most 60
    - 10  when it has touched files, has no action declared and is past the two-turn
          grace (work nobody can place)
    clamped to 0..100

Invariants:
- Every agent starts each phase with a trajectory Loom declares for it
  (teams.conversation.hierarchy.agent_phase_begin), which counts as a context update: an agent that
  never calls a mesh tool has no trajectory or chain penalty, and staleness alone
  costs at most 30, so it stays "on track" (70 or more) until it really drifts.
- A new phase clears tactic and action, and files touched earlier cost nothing at its
  start: the files term waits for the grace to pass.
- Violations count over the agent's life: an agent whose calls keep being refused
  reaches "significant drift".
- The score needs no database: it reads the agent's fields only. Each finished turn
  records it on the turn, so it can be plotted.
"""

from __future__ import annotations

from teams.models import Agent, Anchor

NO_TRAJECTORY = 30
CHAIN_BREAK = 15
STALE_TURN = 3
STALE_GRACE = 2
STALE_MAX = 30
VIOLATION = 10
VIOLATION_MAX = 60
UNPLACED_FILES = 10

# The bands of a score, best first: (lowest score, what it means). Every face words a
# score with these (meaning(), bands()); check_drift's marks and advice follow them.
ON_TRACK_TEXT = "on track"
SOME_DRIFT_TEXT = "some drift"
SIGNIFICANT_TEXT = "significant drift"
ON_TRACK = 70
SIGNIFICANT = 40
BANDS: tuple[tuple[int, str], ...] = (
    (ON_TRACK, ON_TRACK_TEXT),
    (SIGNIFICANT, SOME_DRIFT_TEXT),
    (0, SIGNIFICANT_TEXT),
)
MARKS = {ON_TRACK_TEXT: "✅", SOME_DRIFT_TEXT: "⚠️", SIGNIFICANT_TEXT: "❌"}

# The tools the report and the advice name: the domain never spells a tool's name,
# tools/mesh.py registers them from its classes when the tools load (django.setup()
# loads them, through the admin).
ADVICE_TOOLS = {"declare": "", "refocus": "", "reset": ""}


def advice_tools_register(*, declare: str, refocus: str, reset: str) -> None:
    ADVICE_TOOLS.update(declare=declare, refocus=refocus, reset=reset)


def _tool(purpose: str) -> str:
    name = ADVICE_TOOLS[purpose]
    if not name:
        raise RuntimeError("The mesh tools are not loaded: import tools.registry first.")
    return name


def anchor_pairs(team_id: int) -> list[tuple[str, str]]:
    """The team's anchors as (key, value), by key: the report's constraints to respect
    (the mesh tools list them too)."""
    return list(Anchor.objects.filter(team_id=team_id).order_by("key").values_list("key", "value"))


def chain_breaks(agent: Agent) -> list[str]:
    breaks = []
    if agent.tactic and not agent.trajectory:
        breaks.append("Tactic set without a trajectory.")
    if agent.action and not agent.tactic:
        breaks.append("Action set without a tactic.")
    return breaks


def turns_since_update(agent: Agent) -> int:
    return max(0, agent.turns - agent.last_context_update_turn)


def deductions(agent: Agent) -> list[tuple[int, str]]:
    """What lowers the agent's score: (points, why, in words to the agent), in the
    formula's order (the module docstring)."""
    found = []
    if not agent.trajectory:
        found.append((NO_TRAJECTORY, "no trajectory is set"))
    if agent.tactic and not agent.trajectory:
        found.append((CHAIN_BREAK, "your tactic has no trajectory above it"))
    if agent.action and not agent.tactic:
        found.append((CHAIN_BREAK, "your tactic is not set in this phase, under your action"))
    since = turns_since_update(agent)
    stale = max(0, since - STALE_GRACE)
    if stale:
        points = min(STALE_MAX, STALE_TURN * stale)
        found.append((points, f"{since} turns since you last updated your intent"))
    if agent.violations:
        points = min(VIOLATION_MAX, VIOLATION * agent.violations)
        calls = "call" if agent.violations == 1 else "calls"
        found.append((points, f"{agent.violations} tool {calls} your role or phase does not allow"))
    if agent.files_touched and not agent.action and stale:
        found.append((UNPLACED_FILES, "files touched with no action set"))
    return found


def score(agent: Agent) -> int:
    """The agent's drift score, 0-100 (the formula is in the module docstring)."""
    return max(0, min(100, 100 - sum(points for points, _ in deductions(agent))))


def score_text(agent: Agent) -> str:
    """The score as a result reports it to the agent, with what lowers it: "85/100: your
    tactic is not set in this phase, under your action (-15)"; a full score is "100/100"."""
    found = deductions(agent)
    reasons = "; ".join(f"{why} (-{points})" for points, why in found)
    return f"{score(agent)}/100" + (f": {reasons}" if reasons else "")


def meaning(value: int) -> str:
    """What a score means: "on track" (70 and above), "some drift" (40 to 69),
    "significant drift" (below 40)."""
    return next(words for lowest, words in BANDS if value >= lowest)


# The API's name for meaning(): the same words.
health = meaning


def bands() -> list[tuple[int, str]]:
    """(lowest score, meaning) from the best band down, for the pages' script."""
    return list(BANDS)


def recommendation(value: int, breaks: list[str], *, marks: bool = True) -> str:
    """check_drift's advice for a score, in the bands' words (any chain break keeps an
    agent off "on track"); context_offload is how Loom compacts a session. The pages
    ask without `marks`: the words say what the seed's emoji say, and a browser without
    an emoji font draws an empty box for them."""
    band = meaning(value)
    if band == ON_TRACK_TEXT and not breaks:
        band, advice = ON_TRACK_TEXT, f"{ON_TRACK_TEXT.capitalize()}. Continue working."
    elif value >= SIGNIFICANT:
        band = SOME_DRIFT_TEXT
        advice = (
            f"{SOME_DRIFT_TEXT.capitalize()} detected. Consider using {_tool('refocus')} "
            "to update your focus."
        )
    else:
        band = SIGNIFICANT_TEXT
        advice = (
            f"{SIGNIFICANT_TEXT.capitalize()}. Use {_tool('refocus')} "
            f"to re-focus, or {_tool('reset')} to reset."
        )
    mark = {SOME_DRIFT_TEXT: "⚠"}.get(band, MARKS[band])  # the seed's own marks
    return f"{mark} {advice}" if marks else advice


def drift_report(agent: Agent) -> str:
    """check_drift's report: the score with its mark, the trajectory, the chain, the
    anchors to respect, the metrics and the advice (the admin and the API show it
    too)."""
    value = score(agent)
    breaks = chain_breaks(agent)
    lines = ["=== DRIFT REPORT ===", "", f"{MARKS[meaning(value)]} Drift Score: {value}/100"]
    found = deductions(agent)
    if found:  # what the agent can act on, the formula's terms in its words
        lines.append("Lowered by: " + "; ".join(f"{why} (-{points})" for points, why in found))
    lines.append("")
    lines.append("## Trajectory Alignment")
    if agent.trajectory:
        lines.append(f"Original: {agent.trajectory}")
        if agent.tactic:
            lines.append(f"Current tactic: {agent.tactic}")
        if agent.action:
            lines.append(f"Current action: {agent.action}")
    else:
        lines.append(f"⚠ No trajectory set. Use {_tool('declare')} to set your focus.")
    lines += ["", "## Chain Integrity"]
    lines += [f"❌ {b}" for b in breaks] or ["✅ Hierarchy chain is intact."]
    lines.append("")
    anchors = anchor_pairs(agent.team_id)
    if anchors:
        lines.append("## Anchor Compliance")
        lines.append("Verify your work respects these immutable constraints:")
        lines += [f"  ☐ [{key}]: {text}" for key, text in anchors]
        lines.append("")
    lines.append("## Metrics")
    lines.append(f"Turns: {agent.turns}")
    lines.append(f"Files: {len(agent.files_touched or [])}")
    lines.append(f"Context updates: {agent.context_updates}")
    if agent.violations:
        lines.append(f"⚠ Violations: {agent.violations}")
    lines += ["", "## Recommendation", recommendation(value, breaks)]
    lines += ["", "=== END DRIFT REPORT ==="]
    return "\n".join(lines)
