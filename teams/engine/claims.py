"""What a turn's claim reads for its request, in the claim's one statement
(teams.run.turns.turn_claim): the previous request's snapshot, the roster, who passed
since the agent last spoke, and the stamps (teams.stamps) of the anchors and of what the
tool definitions depend on. A process keeps the anchors' block and the tools it built
under those stamps, so a steady turn reads only its history's ids and new rows."""

from __future__ import annotations

import json
from dataclasses import dataclass

from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce

from teams.engine.system_text import ANCHOR_FIELDS
from teams.integrations import consultations, mcp_servers
from teams.models import Agent, Anchor, Message, Turn
from teams.stamps import RowsJson


def claim_annotations() -> dict:
    """Subqueries for the statement that reads a claimed turn (turns.turn_claim), on
    the Turn's team, agent and snapshot: what `build` would read itself, and the stamps
    of what a process keeps (teams.stamps). `claimed(turn)` takes them off the turn."""
    turn_team = OuterRef("team_id")
    earlier = Turn.objects.filter(
        agent_id=OuterRef("agent_id"),
        snapshot_message_id__isnull=False,
        snapshot_message_id__lt=OuterRef("snapshot_message_id"),
    )
    return {
        "prompt_seen": Subquery(  # previously_seen
            earlier.order_by("-snapshot_message_id").values("snapshot_message_id")[:1]
        ),
        "prompt_roster": RowsJson(
            Agent.objects.filter(team_id=turn_team).order_by("position", "id"),
            *ROSTER_FIELDS,
        ),
        "prompt_anchors": RowsJson(
            Anchor.objects.filter(team_id=turn_team).order_by("key"), *ANCHOR_FIELDS
        ),
        "prompt_mcp": mcp_servers.mcp_servers_stamp(team_id=turn_team),
        "prompt_consultants": consultations.profiles_enabled_stamp(team_id=turn_team),
        "prompt_passes": RowsJson(_passes_since_spoke(), "id", "author__name"),
    }


def _passes_since_spoke() -> QuerySet:
    """passes_since_coach_spoke for the claimed turn's agent, phase and snapshot."""
    own = Message.objects.filter(
        team_id=OuterRef(OuterRef("team_id")),
        phase=OuterRef(OuterRef("phase")),
        author_id=OuterRef(OuterRef("agent_id")),
        recipient__isnull=True,
        id__lte=OuterRef(OuterRef("snapshot_message_id")),
    )
    spoke = Coalesce(Subquery(own.order_by("-id").values("id")[:1]), 0)
    return (
        Message.objects.filter(
            team_id=OuterRef("team_id"),
            phase=OuterRef("phase"),
            kind=Message.Kind.PASS_NOTE,
            id__gt=spoke,
            id__lte=OuterRef("snapshot_message_id"),
        )
        .exclude(author_id=OuterRef("agent_id"))
        .order_by("id")
    )


ROSTER_FIELDS = ("id", "name", "role", "position")


@dataclass(frozen=True)
class Claimed:
    """What a turn's claim read for its request (claim_annotations), for the turn's
    snapshot `until_id`."""

    until_id: int | None
    seen: int | None
    roster: list[tuple[int, str, str]]
    anchors: str  # the anchors' stamp
    tools: tuple[str, str]  # the stamps of the team's MCP servers and consultants
    passes: list[str]  # passes_since_coach_spoke


def claimed(turn: Turn) -> Claimed | None:
    """What the claim of `turn` read with claim_annotations (None without them)."""
    if not hasattr(turn, "prompt_roster"):
        return None
    rows = sorted(json.loads(turn.prompt_roster or "[]"), key=lambda r: (r[3], r[0]))
    return Claimed(
        until_id=turn.snapshot_message_id,
        seen=turn.prompt_seen,
        roster=[(pk, name, role) for pk, name, role, _ in rows],
        anchors=turn.prompt_anchors or "[]",
        tools=(turn.prompt_mcp or "[]", turn.prompt_consultants or "[]"),
        passes=list(
            dict.fromkeys(n for _, n in sorted(json.loads(turn.prompt_passes or "[]")) if n)
        ),
    )
