"""Mesh tools (seed 004): the agent's hierarchy, the team's anchors, a context
refresh and a drift check. Descriptions and result texts are the seed's; its
"session" is one agent in one team (teams/mesh.py says how its fields map)."""

from __future__ import annotations

import json
from typing import Literal

from django.utils import timezone
from pydantic import Field

from teams import mesh, services
from teams.drift import chain_breaks, score
from teams.models import Agent, Anchor
from tools.base import Params, Tool, ToolContext
from tools.context import ContextOffload
from tools.registry import register

NO_SESSION = "No active session. Call declare_intent to start."
FILES_SHOWN = 10


def anchors_of(agent: Agent) -> list[tuple[str, str]]:
    return list(
        Anchor.objects.filter(team_id=agent.team_id).order_by("key").values_list("key", "value")
    )


class DeclareIntentParams(Params):
    trajectory: str = Field(
        min_length=1, description="What you are working towards, in one sentence"
    )


@register
class DeclareIntent(Tool):
    name = "declare_intent"
    description = (
        "Declare what you are working on: your trajectory, the goal you will pursue. "
        "Starts your session and clears your tactic and action. Call this when you "
        "begin, or when your goal changes."
    )
    Params = DeclareIntentParams

    def run(self, params: DeclareIntentParams, ctx: ToolContext) -> str:
        agent = mesh.agent_declare_intent(agent=ctx.agent, trajectory=params.trajectory)
        return (
            f'Trajectory set: "{agent.trajectory}". Tactic and action cleared. '
            f"Drift score: {agent.drift_score}/100."
        )


class MapContextParams(Params):
    level: Literal["trajectory", "tactic", "action"] = Field(
        description="Which level to update: trajectory (goal), tactic (approach), action (step)"
    )
    content: str = Field(min_length=1, description="What it is now")


@register
class MapContext(Tool):
    name = "map_context"
    description = (
        "Update your focus at one level of your hierarchy: trajectory (the goal), tactic "
        "(the approach) or action (the step you are on). Call this whenever your focus "
        "changes, so you and the team can see where you are."
    )
    Params = MapContextParams

    def run(self, params: MapContextParams, ctx: ToolContext) -> str:
        agent = mesh.agent_map_context(agent=ctx.agent, level=params.level, content=params.content)
        return (
            f'{params.level.capitalize()} updated: "{params.content}". '
            f"Drift score: {agent.drift_score}/100."
        )


@register
class ScanHierarchy(Tool):
    name = "scan_hierarchy"
    description = (
        "See your current session state — hierarchy, metrics, and anchors. "
        "Call this when you want to know what you're working on."
    )

    def run(self, params, ctx: ToolContext) -> str:
        agent, team = ctx.agent, ctx.team
        agent.refresh_from_db()
        if not mesh.has_session(agent):
            return NO_SESSION
        result = {
            "session": {
                "id": f"{team.slug}/{agent.name}",
                "mode": team.phase,
                "status": team.status,
                "date": timezone.localdate().isoformat(),
                "role": agent.role,
            },
            "hierarchy": {level: getattr(agent, level) or "(not set)" for level in mesh.LEVELS},
            "metrics": {
                "turns": agent.turns,
                "drift_score": score(agent),
                "files_touched": len(agent.files_touched or []),
                "context_updates": agent.context_updates,
            },
            "anchors": [f"[{key}]: {value}" for key, value in anchors_of(agent)],
        }
        return json.dumps(result, indent=2, ensure_ascii=False)


class SaveAnchorParams(Params):
    key: str = Field(
        min_length=1, description="Short label for the anchor (e.g., 'DB_SCHEMA', 'API_PORT')"
    )
    value: str = Field(min_length=1, description="The immutable fact or constraint")


@register
class SaveAnchor(Tool):
    name = "save_anchor"
    description = (
        "Save a critical constraint or fact that must not be forgotten, "
        "even after session compaction. Use for database schemas, API keys, requirements."
    )
    Params = SaveAnchorParams

    def run(self, params: SaveAnchorParams, ctx: ToolContext) -> str:
        services.anchor_save(
            team=ctx.team, key=params.key, value=params.value, changed_by=ctx.agent.name
        )
        total = Anchor.objects.filter(team=ctx.team).count()
        return f'Anchor saved: [{params.key}] = "{params.value}". {total} total anchors.'


@register
class ThinkBack(Tool):
    name = "think_back"
    description = (
        "Pause and refocus. Shows your current trajectory, anchors, "
        "what you've accomplished, and any issues. Use when you feel lost or stuck."
    )

    def run(self, params, ctx: ToolContext) -> str:
        agent, team = ctx.agent, ctx.team
        agent.refresh_from_db()
        if not mesh.has_session(agent):
            return NO_SESSION
        lines = ["=== THINK BACK: Context Refresh ===", "", "## Where You Are"]
        lines.append(f"Mode: {team.phase}")
        for level in mesh.LEVELS:
            if getattr(agent, level):
                lines.append(f"{level.capitalize()}: {getattr(agent, level)}")
        files = list(agent.files_touched or [])
        lines += ["", "## Session Health"]
        lines.append(f"Turns: {agent.turns} | Drift: {score(agent)}/100")
        lines.append(f"Files touched: {len(files)}")
        lines.append(f"Context updates: {agent.context_updates}")
        breaks = chain_breaks(agent)
        if breaks:
            lines.append("⚠ Chain breaks:")
            lines += [f"  - {b}" for b in breaks]
        lines.append("")
        anchors = anchors_of(agent)
        if anchors:
            lines.append("## Immutable Anchors")
            lines += [f"  [{key}]: {value}" for key, value in anchors]
            lines.append("")
        if files:
            lines.append("## Files Touched")
            lines += [f"  - {f}" for f in files[:FILES_SHOWN]]
            if len(files) > FILES_SHOWN:
                lines.append(f"  ... and {len(files) - FILES_SHOWN} more")
            lines.append("")
        team.refresh_from_db(fields=["plan"])
        plan = mesh.plan_section(team.plan)
        if plan:
            lines += [plan, ""]
        lines.append("=== END THINK BACK ===")
        return "\n".join(lines)


@register
class CheckDrift(Tool):
    name = "check_drift"
    description = (
        "Check if your current work aligns with your declared trajectory. "
        "Returns a drift report with health indicators. Use before marking work complete."
    )

    def run(self, params, ctx: ToolContext) -> str:
        ctx.agent.refresh_from_db()
        if not mesh.has_session(ctx.agent):
            return NO_SESSION
        return drift_report(ctx.agent)


def drift_report(agent: Agent) -> str:
    """The drift report of seed 004's check_drift (the admin and the API show it too)."""
    value = score(agent)
    breaks = chain_breaks(agent)
    mark = "✅" if value >= 70 else "⚠️" if value >= 40 else "❌"
    lines = ["=== DRIFT REPORT ===", "", f"{mark} Drift Score: {value}/100", ""]
    lines.append("## Trajectory Alignment")
    if agent.trajectory:
        lines.append(f"Original: {agent.trajectory}")
        if agent.tactic:
            lines.append(f"Current tactic: {agent.tactic}")
        if agent.action:
            lines.append(f"Current action: {agent.action}")
    else:
        lines.append(f"⚠ No trajectory set. Use {DeclareIntent.name} to set your focus.")
    lines += ["", "## Chain Integrity"]
    lines += [f"❌ {b}" for b in breaks] or ["✅ Hierarchy chain is intact."]
    lines.append("")
    anchors = anchors_of(agent)
    if anchors:
        lines.append("## Anchor Compliance")
        lines.append("Verify your work respects these immutable constraints:")
        lines += [f"  ☐ [{key}]: {value}" for key, value in anchors]
        lines.append("")
    lines.append("## Metrics")
    lines.append(f"Turns: {agent.turns}")
    lines.append(f"Files: {len(agent.files_touched or [])}")
    lines.append(f"Context updates: {agent.context_updates}")
    if agent.violations:
        lines.append(f"⚠ Violations: {agent.violations}")
    lines += ["", "## Recommendation"]
    lines.append(recommendation(value, breaks))
    lines += ["", "=== END DRIFT REPORT ==="]
    return "\n".join(lines)


def recommendation(value: int, breaks: list[str]) -> str:
    """Seed 004's advice for a score; its compact_session is Loom's context_offload."""
    if value >= 70 and not breaks:
        return "✅ On track. Continue working."
    if value >= 40:
        return f"⚠ Some drift detected. Consider using {MapContext.name} to update your focus."
    return (
        f"❌ Significant drift. Use {MapContext.name} to re-focus, or {ContextOffload.name} to "
        "reset."
    )
