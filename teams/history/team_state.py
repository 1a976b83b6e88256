"""Every piece of a team's state, and what a copy does with it: the one list that both
a fork (teams.history.forking, the team as of a point) and a clone (teams.history.cloning,
"Run again", the team as it is, none of its life) follow.

A piece is a field of the team or of an agent, or a model that points at a team
(directly, or through an agent, a turn, a message or another such model). Each is
copied, reset, or left out with the reason; `tests/teams/history/test_team_state.py`
walks the app's models and fails on a field or a model this list does not name, so a
new piece of state is never silently dropped by a copy.

The faces read `left_out()` to tell the PM what a copy will not hold, and why."""

from __future__ import annotations

from dataclasses import dataclass

from teams import services


@dataclass(frozen=True)
class Part:
    """What a fork and a clone do with one piece: "copy" (as it is now), "then" (as it
    was at the fork's point), "fresh" (made anew: counters at zero, new ids) or "leave"
    (not copied: `why` says why)."""

    fork: str
    clone: str
    why: str = ""


COPY, THEN, FRESH, LEAVE = "copy", "then", "fresh", "leave"

# The team's settings: both copies take them as they are.
TEAM_SETTINGS = (
    "goal",
    "phases",
    "max_turns",
    "max_cost_usd",
    "tool_approvals",
    "phase_guide",
    "tool_access",
    "max_exchanges",
    "max_pass_rounds",
    "max_phase_turns",
    "max_anchors",
    "anchor_value_limit",
)
# What a run changes: a fork holds it as of its point, a clone starts it afresh.
TEAM_RUN = (
    "plan",  # a clone keeps the plan as it is: it is the PM's text as much as the run's
    "phase_index",
    "status",
    "turn_count",
    "spent_usd",
    "cost_warned_at",
    "turns_warned_at",
    "next_speaker",
    "context_version",
)
# Who the copy is: its own.
TEAM_OWN = (
    "id",
    "slug",
    "name",
    "folder",
    "workspace",  # a copy's files live in its own default folder, never a shared one
    "forked_from",
    "forked_at",
    "a2a",  # a copy is a run of its own, not a second template others may hire
    "hired_from",
    "hired_by",
    "hire_canceled_at",
    "copied_turns",
    "copied_spent_usd",
    "event_seq",
    "created_at",
    "updated_at",
)
TEAM_RELATIONS = ("managers", "consultants")  # both copies take them as they are

# An agent's settings (who it is), its mesh hierarchy (what it intends, for one
# phase) and its counters.
AGENT_SETTINGS = services.AGENT_SETTINGS
AGENT_HIERARCHY = ("trajectory", "tactic", "action", "trajectory_phase")
AGENT_COUNTERS = (
    "turns",
    "context_updates",
    "last_context_update_turn",
    "files_touched",
    "violations",
    "drift_score",
    "cost_warned_at",
)
AGENT_OWN = ("id", "team", "created_at")

NOT_LIVED = "a clone runs the team again from the start: nothing of its life comes along"

# Every model that points at a team, by its label.
MODELS: dict[str, Part] = {
    "teams.Agent": Part(THEN, COPY),
    "teams.McpServer": Part(
        COPY,
        COPY,
        "the tools they listed come along; a PM's copy leaves out the host's variables",
    ),
    "teams.Anchor": Part(THEN, COPY),
    "teams.AnchorRevision": Part(
        FRESH, FRESH, "each anchor gets one revision saying where it came from"
    ),
    "teams.WorkspaceFile": Part(THEN, COPY),
    "teams.FileRevision": Part(THEN, LEAVE, NOT_LIVED),
    "teams.Message": Part(THEN, LEAVE, NOT_LIVED),
    "teams.Query": Part(THEN, LEAVE, NOT_LIVED),
    "teams.PMRequest": Part(THEN, LEAVE, NOT_LIVED),
    "teams.Keeper": Part(THEN, LEAVE, NOT_LIVED),
    "teams.KeeperEntry": Part(THEN, LEAVE, NOT_LIVED),
    "teams.Turn": Part(THEN, LEAVE, NOT_LIVED),
    "teams.TurnStep": Part(THEN, LEAVE, NOT_LIVED),
    "teams.Consultation": Part(THEN, LEAVE, NOT_LIVED),
    "teams.ModelCall": Part(
        LEAVE,
        LEAVE,
        "model calls are the spend's record: the copied turns keep their tokens and cost",
    ),
    "teams.LiveEvent": Part(
        LEAVE, LEAVE, "live events are what browsers were told; a copy starts its own"
    ),
    "teams.ApiToken": Part(
        LEAVE, LEAVE, "a token opens one team: make one for the copy if it needs one"
    ),
    "teams.Webhook": Part(
        LEAVE,
        LEAVE,
        "a webhook calls someone's address about one team: add it to the copy to be told",
    ),
    "teams.WebhookDelivery": Part(LEAVE, LEAVE, "deliveries belong to their webhook"),
    "teams.Replay": Part(LEAVE, LEAVE, "a replay's record belongs to the team it made"),
    "teams.EvalCase": Part(LEAVE, LEAVE, "an eval's record of a case belongs to the team it ran"),
}

WORDS = {
    "teams.ApiToken": "API tokens",
    "teams.Webhook": "webhooks",
    "teams.ModelCall": "model calls",
}


def left_out(kind: str) -> list[str]:
    """What a "fork" or a "clone" leaves out that a PM set up, worded for the PM:
    ["API tokens (a token opens one team: ...)", ...]."""
    return [
        f"{WORDS[label]} ({part.why})"
        for label, part in MODELS.items()
        if label in WORDS and getattr(part, kind) == LEAVE
    ]


__all__ = [
    "AGENT_COUNTERS",
    "AGENT_HIERARCHY",
    "AGENT_OWN",
    "AGENT_SETTINGS",
    "COPY",
    "FRESH",
    "LEAVE",
    "MODELS",
    "Part",
    "TEAM_OWN",
    "TEAM_RELATIONS",
    "TEAM_RUN",
    "TEAM_SETTINGS",
    "THEN",
    "left_out",
]
