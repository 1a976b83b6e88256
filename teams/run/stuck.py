"""The team asks the PM for help when it is stuck in a phase.

After every finished turn of a running team (teams.run.turns.turn_finish), three checks,
each a team setting (0 turns it off):

- the same two agents exchanged more than `max_exchanges` queries or forwards in the
  phase (asks and forwards between them, either way; broadcasts do not count);
- `max_pass_rounds` rounds in a row where everyone passed, and the phase still open;
- the phase has taken `max_phase_turns` turns.

The first that holds opens a PM request of the stuck kind (the team waits for the PM)
with three answers: "Close the phase" (the phase ends with the PM's summary and the
team goes on), "Let them go on" (the team resumes; the checks count afresh from
there) and "Pause" (the team is paused). One request per episode: the checks count
only what happened in the phase since the last stuck request, and none is opened
while another request is open. The answer is applied by teams.conversation.pm_requests."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from teams import services
from teams.errors import InvalidInput
from teams.integrations import webhooks
from teams.live import events
from teams.live.event_payloads import PMRequestOut
from teams.models import STUCK_CHOICES, Agent, PMRequest, Query, Team, Turn, WebhookEvent
from teams.run import locks
from teams.run.lifecycle import TeamAction

CLOSE_CHOICE, GO_ON_CHOICE, PAUSE_CHOICE = STUCK_CHOICES


@dataclass(frozen=True)
class Window:
    """What the checks count: the phase's conversation turns after `after_turn`, and
    query hops since `since`."""

    phase: str
    after_turn: int
    since: object  # a datetime, or None: the whole phase


def _window(team: Team) -> Window:
    phase = team.phase
    last = (
        PMRequest.objects.filter(team=team, kind=PMRequest.Kind.STUCK, turn__phase=phase)
        .order_by("-id")
        .first()
    )
    if last is not None:
        return Window(phase, last.turn_id or 0, last.created_at)
    first = (
        Turn.objects.filter(team=team, phase=phase, purpose=Turn.Purpose.CONVERSATION)
        .order_by("id")
        .first()
    )
    return Window(phase, 0, first.queued_at if first else None)


def _turns(team: Team, window: Window):
    return Turn.objects.filter(
        team=team,
        phase=window.phase,
        purpose=Turn.Purpose.CONVERSATION,
        status=Turn.Status.DONE,
        id__gt=window.after_turn,
    )


def _hop_time(hop: dict) -> datetime | None:
    try:
        return datetime.fromisoformat(hop["at"])
    except (KeyError, TypeError, ValueError):
        return None


def exchanges_reason(team: Team, window: Window, turn: Turn | None = None) -> str:
    limit = team.max_exchanges
    if not limit or window.since is None:
        return ""
    pairs: Counter = Counter()
    for hops in Query.objects.filter(team=team, expires_at__gte=window.since).values_list(
        "hops", flat=True
    ):
        for hop in hops:
            to, sender = hop.get("to", ""), hop.get("from", "")
            if hop.get("kind") not in ("ask", "forward") or not to or to == "*" or to == sender:
                continue
            at = _hop_time(hop)
            if at is None or at < window.since:
                continue
            pairs[tuple(sorted((sender, to)))] += 1
    over = [(pair, n) for pair, n in pairs.most_common() if n > limit]
    if not over:
        return ""
    (a, b), count = over[0]
    return (
        f"{a} and {b} have exchanged {count} queries and forwards in this phase (more than {limit})"
    )


def passes_reason(team: Team, window: Window, turn: Turn | None = None) -> str:
    if turn is not None and turn.outcome != Turn.Outcome.PASS:
        return ""  # a streak of passes ends with a pass: no count needed
    rounds = team.max_pass_rounds
    speakers = team.agents.exclude(role=Agent.Role.EXTERNAL).count()
    if not rounds or not speakers:
        return ""
    needed = rounds * speakers
    outcomes = list(_turns(team, window).order_by("-id").values_list("outcome", flat=True)[:needed])
    if len(outcomes) < needed or any(o != Turn.Outcome.PASS for o in outcomes):
        return ""
    return f"everyone has passed for {rounds} rounds in a row and the phase is still open"


def phase_turns_reason(team: Team, window: Window, turn: Turn | None = None) -> str:
    limit = team.max_phase_turns
    if not limit:
        return ""
    if turn is not None and turn.number and turn.number < limit:
        return ""  # fewer turns in the whole run than the phase's budget: no count needed
    taken = _turns(team, window).count()
    if taken < limit:
        return ""
    return f"the phase has taken {taken} turns, its budget of {limit}"


def stuck_reason(team: Team, turn: Turn | None = None) -> str:
    """Why the team looks stuck in its phase now (after `turn`, if given), or ""."""
    window = _window(team)
    for check in (exchanges_reason, passes_reason, phase_turns_reason):
        reason = check(team, window, turn)
        if reason:
            return reason
    return ""


def stuck_check(*, team: Team, turn: Turn) -> PMRequest | None:
    """After a finished turn of the (locked) team: open a stuck request when the team
    is running, has no request open and one of the checks holds."""
    if team.status != Team.Status.RUNNING:
        return None
    if not (team.max_exchanges or team.max_pass_rounds or team.max_phase_turns):
        return None  # every check is off: nothing to read
    if PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).exists():
        return None
    reason = stuck_reason(team, turn=turn)
    if not reason:
        return None
    return stuck_request_open(team=team, turn=turn, reason=reason)


@transaction.atomic
def stuck_request_open(*, team: Team, turn: Turn, reason: str) -> PMRequest:
    caller, team = team, locks.team_lock(team)
    question = (
        f"The team seems stuck in phase {team.phase}: {reason}. Close the phase, let them "
        "go on, or pause?"
    )
    services.system_note(
        team, f"The team asks the PM for help: {reason}. It waits for the PM's answer."
    )
    request = PMRequest.objects.create(
        team=team, kind=PMRequest.Kind.STUCK, question=question, turn=turn
    )
    services.team_transition(team=team, action=TeamAction.AWAIT_PM)
    caller.status = team.status  # the caller hands the floor on only if still running
    payload = PMRequestOut.of(request)
    events.publish(events.PMRequestOpened(request=payload), team_id=team.id)
    webhooks.webhooks_notify(
        team=team, event=WebhookEvent.PM_REQUEST_OPENED, payload=payload.model_dump(mode="json")
    )
    return request


def stuck_choice(answer: str) -> str:
    """The choice an answer names (any case, a final full stop allowed); InvalidInput
    otherwise, and nothing changes."""
    said = " ".join(answer.strip().lower().rstrip(".!").split())
    for choice in STUCK_CHOICES:
        if said == choice.lower():
            return choice
    raise InvalidInput(
        "Answer a stuck request with one of: " + ", ".join(STUCK_CHOICES) + ".", field="answer"
    )
