"""Mesh tools: the agent's hierarchy (trajectory → tactic → action), the team's
anchors, a context refresh and a drift check. scan_hierarchy, save_anchor, think_back
and check_drift keep the descriptions and result texts of their design, with Loom's
additions; a "session" is one agent in one team (teams/hierarchy.py says how its fields
map). The drift score, its bands and check_drift's report live in teams/run/drift.py.

Each tool's digest is the line the agent's later requests in the phase carry about
the call: the writes say what was written; the reads keep no record (scan_hierarchy,
think_back) or a short one (check_drift's score)."""

from __future__ import annotations

import json
import re
from typing import Literal

from django.utils import timezone
from pydantic import Field

from teams import services
from teams.conversation import hierarchy
from teams.conversation.phase_guide import WORK_PHASES, work_phase
from teams.models import HUMAN_TEXT_LIMIT, Anchor, Team
from teams.run import drift
from teams.run.drift import chain_breaks, drift_report, score
from tools.base import DIGEST_CHARS, Params, Tool, ToolContext, ToolResult, _short
from tools.context import ContextOffload
from tools.registry import register

NO_SESSION = "No active session. Call declare_intent to start."
# Where the mesh's reads and its step-level update help by default (docs/tools.md, "The
# mesh"): the phases where the work itself is built or checked over many tool calls.
# In talk phases every request already carries the intent and the anchors, and
# declare_intent sets the tactic and action too. A team's tool_access changes it.
WORK_RULE = (WORK_PHASES, work_phase)
FILES_SHOWN = 10
VALUE_SHOWN = 160  # characters of a level or an anchor value in a digest line


def _quoted(value: str, limit: int = VALUE_SHOWN) -> str:
    return f'"{_short(value, limit)}"'


class DeclareIntentParams(Params):
    trajectory: str = Field(
        min_length=1,
        max_length=HUMAN_TEXT_LIMIT,
        description="What you are working towards in this phase, in one sentence",
    )
    tactic: str = Field(
        default="",
        max_length=HUMAN_TEXT_LIMIT,
        description="Your approach (optional: omit it to keep your current tactic)",
    )
    action: str = Field(
        default="",
        max_length=HUMAN_TEXT_LIMIT,
        description="The step you are on (optional: omit it to keep your current action)",
    )


@register
class DeclareIntent(Tool):
    name = "declare_intent"
    description = (
        "Declare what you are working on: your trajectory, the goal you will pursue. "
        "Loom declares a trajectory for you when each phase begins, from your role's work "
        "in the phase; call this when you begin your own work in the phase, "
        "or when your goal changes, to say it in your own words. Your tactic and action "
        "stay as they are unless you give new ones here. The PM sees a drift score "
        "computed from these levels and how recently you updated them."
    )
    Params = DeclareIntentParams

    def run(self, params: DeclareIntentParams, ctx: ToolContext) -> str:
        agent = hierarchy.agent_declare_intent(
            agent=ctx.agent,
            trajectory=params.trajectory,
            tactic=params.tactic,
            action=params.action,
            phase=ctx.team.phase,
        )
        levels = [f'Trajectory set: "{agent.trajectory}".']
        for level, given in (("tactic", params.tactic), ("action", params.action)):
            current = getattr(agent, level)
            if given:
                levels.append(f'{level.capitalize()} set: "{current}".')
            elif current:
                levels.append(f'{level.capitalize()} kept: "{current}".')
            else:
                levels.append(f"{level.capitalize()}: (not set).")
        return " ".join(levels) + f" Drift score: {drift.score_text(agent)}."

    @classmethod
    def digest(cls, params: DeclareIntentParams, result: ToolResult) -> str:
        # Each level gets a third of what the labels leave, so the line is never cut.
        shown = (DIGEST_CHARS - 60) // 3
        line = f"You declared your trajectory: {_quoted(params.trajectory, shown)}"
        for level in ("tactic", "action"):
            if getattr(params, level):
                line += f"; {level}: {_quoted(getattr(params, level), shown)}"
        return _short(line, DIGEST_CHARS)


class MapContextParams(Params):
    level: Literal["trajectory", "tactic", "action"] = Field(
        description="Which level to update: trajectory (goal), tactic (approach), action (step)"
    )
    content: str = Field(min_length=1, max_length=HUMAN_TEXT_LIMIT, description="What it is now")


@register
class MapContext(Tool):
    name = "map_context"
    description = (
        "Update your focus at one level of your hierarchy: trajectory (the goal), tactic "
        "(the approach) or action (the step you are on). Call this whenever your focus "
        "changes, so you and the team can see where you are."
    )
    Params = MapContextParams
    phase_rule = WORK_RULE

    def run(self, params: MapContextParams, ctx: ToolContext) -> str:
        agent = hierarchy.agent_map_context(
            agent=ctx.agent, level=params.level, content=params.content
        )
        return (
            f'{params.level.capitalize()} updated: "{params.content}". '
            f"Drift score: {drift.score_text(agent)}."
        )

    @classmethod
    def digest(cls, params: MapContextParams, result: ToolResult) -> str:
        return _short(f"You set your {params.level}: {_quoted(params.content)}", DIGEST_CHARS)


@register
class ScanHierarchy(Tool):
    name = "scan_hierarchy"
    writes = False
    phase_rule = WORK_RULE
    description = (
        "See your current session state — hierarchy, metrics, and anchors. "
        "Call this when you want to know what you're working on."
    )

    def run(self, params, ctx: ToolContext) -> str:
        agent, team = ctx.agent, ctx.team
        agent.refresh_from_db()
        if not hierarchy.has_session(agent):
            return NO_SESSION
        result = {
            "session": {
                "id": f"{team.slug}/{agent.name}",
                "mode": team.phase,
                "status": team.status,
                "date": timezone.localdate().isoformat(),
                "role": agent.role,
            },
            "hierarchy": {
                level: getattr(agent, level) or "(not set)" for level in hierarchy.LEVELS
            },
            "metrics": {
                "turns": agent.turns,
                "drift_score": score(agent),
                "drift_lowered_by": [
                    f"{why} (-{points})" for points, why in drift.deductions(agent)
                ],
                "files_touched": len(agent.files_touched or []),
                "context_updates": agent.context_updates,
            },
            "anchors": [f"[{key}]: {value}" for key, value in drift.anchor_pairs(team.id)],
        }
        return json.dumps(result, indent=2, ensure_ascii=False)

    @classmethod
    def digest(cls, params, result: ToolResult) -> str:
        return ""  # a read: the prompt carries the hierarchy and the anchors


class SaveAnchorParams(Params):
    key: str = Field(
        min_length=1,
        max_length=Anchor._meta.get_field("key").max_length,
        description="Short label for the anchor (e.g., 'DB_SCHEMA', 'API_PORT')",
    )
    value: str = Field(
        min_length=1, max_length=HUMAN_TEXT_LIMIT, description="The immutable fact or constraint"
    )


@register
class SaveAnchor(Tool):
    name = "save_anchor"
    description = (
        "Save a critical constraint or fact that must not be forgotten, "
        "even after session compaction. Use for database schemas, API ports, requirements. "
        "An anchor is shown to every agent of the team in every prompt, with who pinned "
        "it: pin decisions the whole team must respect, never a secret such as a password "
        "or a token. Saving an existing key replaces its value."
    )
    Params = SaveAnchorParams

    @classmethod
    def definition_for(cls, team: Team | None) -> dict:
        """The description with the team's limits, so the model knows them before it
        calls."""
        definition = cls.definition()
        if team is None:
            return definition
        limits = (
            f" This team holds at most {team.max_anchors} anchors, and a value you save "
            f"has at most {team.anchor_value_limit:,} characters."
        )
        return {**definition, "description": definition["description"] + limits}

    def run(self, params: SaveAnchorParams, ctx: ToolContext) -> str:
        # The value is not echoed back: the model just wrote it, and the anchors block
        # of every later prompt shows it whole.
        before = Anchor.objects.filter(team=ctx.team, key=params.key).values_list("value").first()
        anchor = services.anchor_save(
            team=ctx.team,
            key=params.key,
            value=params.value,
            changed_by=ctx.agent.name,
            source=Anchor.Source.AGENT,
            phase=ctx.team.phase,
        )
        total = Anchor.objects.filter(team=ctx.team).count()
        if before is None:
            done = "saved"
        else:
            done = "kept: it already had this value" if before[0] == anchor.value else "replaced"
        return f"Anchor {anchor.key} {done} ({total} of {ctx.team.max_anchors})."

    @classmethod
    def digest(cls, params: SaveAnchorParams, result: ToolResult) -> str:
        return _short(f"You saved anchor {params.key}: {_quoted(params.value)}", DIGEST_CHARS)


@register
class ThinkBack(Tool):
    name = "think_back"
    writes = False
    phase_rule = WORK_RULE
    description = (
        "Pause and refocus. Shows your current trajectory, anchors, "
        "what you've accomplished, and any issues. Use when you feel lost or stuck."
    )

    def run(self, params, ctx: ToolContext) -> str:
        agent, team = ctx.agent, ctx.team
        agent.refresh_from_db()
        if not hierarchy.has_session(agent):
            return NO_SESSION
        lines = ["=== THINK BACK: Context Refresh ===", "", "## Where You Are"]
        lines.append(f"Mode: {team.phase}")
        for level in hierarchy.LEVELS:
            if getattr(agent, level):
                lines.append(f"{level.capitalize()}: {getattr(agent, level)}")
        files = list(agent.files_touched or [])
        lines += ["", "## Session Health"]
        lines.append(f"Turns: {agent.turns} | Drift: {drift.score_text(agent)}")
        lines.append(f"Files touched: {len(files)}")
        lines.append(f"Context updates: {agent.context_updates}")
        breaks = chain_breaks(agent)
        if breaks:
            lines.append("⚠ Chain breaks:")
            lines += [f"  - {b}" for b in breaks]
        lines.append("")
        anchors = drift.anchor_pairs(team.id)
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
        plan = hierarchy.plan_section(team.plan)
        if plan:
            lines += [plan, ""]
        lines.append("=== END THINK BACK ===")
        return "\n".join(lines)

    @classmethod
    def digest(cls, params, result: ToolResult) -> str:
        return ""  # a read: what it shows stays in the prompt


@register
class CheckDrift(Tool):
    name = "check_drift"
    writes = False
    phase_rule = WORK_RULE
    description = (
        "Check if your current work aligns with your declared trajectory. "
        "Returns a drift report with health indicators. Use before marking work complete."
    )

    def run(self, params, ctx: ToolContext) -> str:
        ctx.agent.refresh_from_db()
        if not hierarchy.has_session(ctx.agent):
            return NO_SESSION
        return drift_report(ctx.agent)

    @classmethod
    def digest(cls, params, result: ToolResult) -> str:
        found = re.search(r"Drift Score: (\d+)/100", result.text)
        if found is None:
            return ""
        value = int(found.group(1))
        return f"You checked your drift: {value}/100 ({drift.meaning(value)})."


# The report and the advice (teams/run/drift.py) name these tools.
drift.advice_tools_register(
    declare=DeclareIntent.name, refocus=MapContext.name, reset=ContextOffload.name
)
