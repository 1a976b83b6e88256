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

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.db.models import Count, Exists, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce

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


@functools.lru_cache(maxsize=256)
def checks_read(phase: str) -> Callable[[], dict]:
    """What the checks read in `phase`, as subqueries on the team's row: the turn's
    finish reads them with the team's row it locks (teams.run.locks.team_lock), so a
    turn that asks nothing of the checks costs no statement of their own. One reader
    per phase, kept: the statement is built once per phase and process."""

    def read() -> dict:
        return {
            "stuck_phase": Value(phase),
            "stuck_open_request": Exists(
                PMRequest.objects.filter(team_id=OuterRef("pk"), status=PMRequest.Status.OPEN)
            ),
            "stuck_after_turn": Subquery(_stuck_requests(phase, 1).values("turn_id")[:1]),
            "stuck_since": _since(phase, 1),
            # The phase's conversation turns done in the window, before this one's.
            "stuck_phase_turns": _phase_turns_done(phase),
            # Queries with hops in the window: without one, the exchanges are not read.
            "stuck_queries": Exists(
                Query.objects.filter(team_id=OuterRef("pk"), expires_at__gte=_since(phase, 2))
            ),
        }

    return read


def _team_ref(depth: int):
    """The team's id from a subquery `depth` levels below the team's row."""
    ref = "pk"
    for _ in range(depth):
        ref = OuterRef(ref)
    return ref


def _stuck_requests(phase: str, depth: int):
    stuck = PMRequest.objects.filter(
        team_id=_team_ref(depth), kind=PMRequest.Kind.STUCK, turn__phase=phase
    )
    return stuck.order_by("-id")


def _since(phase: str, depth: int):
    """The window's start, as _window reads it: the phase's last stuck request's time,
    else its first conversation turn's."""
    first = Turn.objects.filter(
        team_id=_team_ref(depth), phase=phase, purpose=Turn.Purpose.CONVERSATION
    )
    return Coalesce(
        Subquery(_stuck_requests(phase, depth).values("created_at")[:1]),
        Subquery(first.order_by("id").values("queued_at")[:1]),
    )


def _phase_turns_done(phase: str):
    after = Coalesce(Subquery(_stuck_requests(phase, 2).values("turn_id")[:1]), Value(0))
    done = Turn.objects.filter(
        team_id=OuterRef("pk"),
        phase=phase,
        purpose=Turn.Purpose.CONVERSATION,
        status=Turn.Status.DONE,
        id__gt=after,
    )
    counted = done.order_by().values("team_id").annotate(n=Count("id")).values("n")
    return Coalesce(Subquery(counted), Value(0))


def _read_with_team(team: Team) -> bool:
    """Did the team's row come with the checks' reads for its phase (checks_read)?"""
    return getattr(team, "stuck_phase", None) == team.phase


def _window(team: Team) -> Window:
    if _read_with_team(team):
        return Window(team.phase, team.stuck_after_turn or 0, team.stuck_since)
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
    if _read_with_team(team) and not team.stuck_queries:
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
    if _read_with_team(team):  # counted with the team's row, before this turn was done
        this_one = turn is not None and turn.purpose == Turn.Purpose.CONVERSATION
        taken = team.stuck_phase_turns + (1 if this_one and turn.id > window.after_turn else 0)
    else:
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
    open_request = getattr(team, "stuck_open_request", None)  # read with the team's row
    if open_request is None:
        open_request = PMRequest.objects.filter(team=team, status=PMRequest.Status.OPEN).exists()
    if open_request:
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
