"""The cognitive mesh of seed 004: the hierarchy, anchors and drift, as agents read
them. The drift report below is check_drift's text (the admin shows it too); the
mesh tools themselves (declare_intent, map_context, scan_hierarchy, save_anchor,
think_back, check_drift) are not built yet."""

from teams.drift import chain_breaks, score
from teams.models import Agent, Anchor


def drift_report(agent: Agent) -> str:
    """The drift report of seed 004's check_drift."""
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
        lines.append("⚠ No trajectory set. Use declare_intent to set your focus.")
    lines += ["", "## Chain Integrity"]
    lines += [f"❌ {b}" for b in breaks] or ["✅ Hierarchy chain is intact."]
    lines.append("")
    anchors = list(Anchor.objects.filter(team_id=agent.team_id).order_by("key"))
    if anchors:
        lines.append("## Anchor Compliance")
        lines.append("Verify your work respects these immutable constraints:")
        lines += [f"  ☐ [{a.key}]: {a.value}" for a in anchors]
        lines.append("")
    lines.append("## Metrics")
    lines.append(f"Turns: {agent.turns}")
    lines.append(f"Files: {len(agent.files_touched or [])}")
    lines.append(f"Context updates: {agent.context_updates}")
    if agent.violations:
        lines.append(f"⚠ Violations: {agent.violations}")
    lines += ["", "## Recommendation"]
    if value >= 70 and not breaks:
        lines.append("✅ On track. Continue working.")
    elif value >= 40:
        lines.append("⚠ Some drift detected. Consider using map_context to update your focus.")
    else:
        lines.append(
            "❌ Significant drift. Use map_context to re-focus, or compact_session to reset."
        )
    lines += ["", "=== END DRIFT REPORT ==="]
    return "\n".join(lines)
