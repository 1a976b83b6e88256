"""Drift alerts: an agent below the "significant drift" band (teams.run.drift.SIGNIFICANT)
on two of its turns in a row is in a drift episode. The turn that begins the episode
sends drift.alert once (the webhook event, a live event to the team's page and the PM
inbox), and the agent's next turn's cue says so (drift_cue). The team is not paused.

The rule reads the turns' recorded scores only (Turn.drift_score), so it needs no
state of its own, and a resumed turn sees what its first attempt saw."""

from __future__ import annotations

from teams.integrations import webhooks
from teams.live import events
from teams.models import Agent, Turn, WebhookEvent
from teams.run import drift

DRIFT_EPISODE_TURNS = 2  # turns in a row below SIGNIFICANT that make an episode


def _episode_begins(scores: list[int]) -> bool:
    """Newest first: do the newest scores make a drift episode that begins now (the
    last DRIFT_EPISODE_TURNS below SIGNIFICANT, the one before them not)?"""
    run = scores[:DRIFT_EPISODE_TURNS]
    if len(run) < DRIFT_EPISODE_TURNS or any(s >= drift.SIGNIFICANT for s in run):
        return False
    before = scores[DRIFT_EPISODE_TURNS : DRIFT_EPISODE_TURNS + 1]
    return not before or before[0] >= drift.SIGNIFICANT


def _scores(turns_qs) -> list[int]:
    return list(
        turns_qs.filter(status=Turn.Status.DONE, drift_score__isnull=False)
        .order_by("-id")
        .values_list("drift_score", flat=True)[: DRIFT_EPISODE_TURNS + 1]
    )


def drift_alert_text(agent: Agent, scores: list[int]) -> str:
    shown = " and ".join(str(s) for s in scores)
    return (
        f"{agent.name} is in {drift.SIGNIFICANT_TEXT} (below {drift.SIGNIFICANT}) for two "
        f"turns in a row (scores {shown}). The team goes on; nudge it or take its seat if "
        "it needs a hand."
    )


def drift_alert_check(turn: Turn) -> bool:
    """After a finished turn: send drift.alert when it begins an episode (True)."""
    if turn.drift_score is None or turn.drift_score >= drift.SIGNIFICANT:
        return False  # no episode begins on a turn out of the band (and no query)
    scores = _scores(Turn.objects.filter(agent_id=turn.agent_id, id__lte=turn.id))
    if not _episode_begins(scores):
        return False
    agent, team = turn.agent, turn.team
    shown = list(reversed(scores[:DRIFT_EPISODE_TURNS]))
    text = drift_alert_text(agent, shown)
    payload = {"agent": agent.name, "score": shown[-1], "scores": shown, "turn_id": turn.id}
    webhooks.webhooks_notify(team=team, event=WebhookEvent.DRIFT_ALERT, payload=payload)
    events.publish(
        events.DriftAlert(
            team=team.slug,
            team_id=team.id,
            agent=agent.name,
            score=shown[-1],
            scores=shown,
            text=text,
        ),
        team_id=team.id,
    )
    return True


def drift_cue(agent: Agent, until_id: int | None) -> str:
    """The cue line of the turn after a drift alert (empty otherwise)."""
    if agent.drift_score >= drift.SIGNIFICANT:
        return ""  # its last turn (whose score the agent keeps) was not in the band
    earlier = Turn.objects.filter(agent=agent)
    if until_id is not None:
        earlier = earlier.filter(snapshot_message_id__lt=until_id)
    scores = _scores(earlier)
    if not _episode_begins(scores):
        return ""
    shown = " and ".join(str(s) for s in reversed(scores[:DRIFT_EPISODE_TURNS]))
    return (
        f"[Loom] Drift alert: your drift score was below {drift.SIGNIFICANT} "
        f"({drift.SIGNIFICANT_TEXT}) on your last two turns ({shown}); the PM has been told. "
        f"Check your trajectory against the goal and the phase, and set your tactic and "
        f"next action with {drift.ADVICE_TOOLS['refocus'] or 'your mesh tools'} before "
        "you go on."
    )


def drifting(teams) -> list[tuple]:
    """(team, agent, text) for each agent of `teams` whose last two turns were in
    significant drift: the PM inbox lists them until the agent recovers."""
    found = []
    agents = Agent.objects.filter(team__in=teams, drift_score__lt=drift.SIGNIFICANT)
    for agent in agents.select_related("team").order_by("team__slug", "position", "id"):
        scores = _scores(Turn.objects.filter(agent=agent))[:DRIFT_EPISODE_TURNS]
        if len(scores) == DRIFT_EPISODE_TURNS and all(s < drift.SIGNIFICANT for s in scores):
            found.append((agent.team, agent, drift_alert_text(agent, list(reversed(scores)))))
    return found
